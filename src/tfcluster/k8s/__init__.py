"""Renders: the cluster file as a TFJob, JobSet or Trainer v2 TrainJob, and the pods' entry point."""
