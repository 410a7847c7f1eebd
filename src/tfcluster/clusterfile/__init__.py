"""The cluster file: its schema and model, the loader that keeps line numbers, hosts, secrets,
and the scheduler sections (Slurm, Kubernetes). Plain data; no TensorFlow, no processes."""
