"""The resolved run (one plan from the file and the command line) and the task contract
(TF_CONFIG, task flags, TFCLUSTER_* variables, the progress protocol)."""
