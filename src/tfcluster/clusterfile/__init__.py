"""The cluster file: its rules (the pydantic models, and the quick reader made from them), how
it is loaded (YAML with line numbers, hand checks, messages that name the field) and what it
becomes (the resolved Cluster, TensorFlow's ClusterSpec and TF_CONFIG shapes); its words,
secrets, and the scheduler sections (Slurm, Kubernetes, Ray). :mod:`tfcluster.clusterfile.config`
is the way in (``load``, ``loads``, ``from_dict``). Nothing here imports TensorFlow (except
``Cluster.cluster_spec()``, on request), Ray or a scheduler's client, nor starts a process."""
