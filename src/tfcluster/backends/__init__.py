"""Backends: where a run's tasks are started, as processes on hosts (I/O only; the run's rules
are the run core's, :mod:`tfcluster.core`).

The interface every backend implements, and the launcher seam, are :mod:`.base`; the backends
are this machine (:mod:`.local`), several hosts over ssh (:mod:`.ssh`), Ray (:mod:`.ray`) and
Slurm (:mod:`.slurm`, the submitting side; each Slurm task runs the node agent,
:mod:`.agent`). :mod:`.oom` tells an out-of-memory kill from another SIGKILL. Kubernetes is
rendered, not launched (:mod:`tfcluster.k8s.render`). Nothing here imports TensorFlow.
"""
