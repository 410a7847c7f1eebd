"""Backends beyond this machine: several hosts over ssh (:mod:`.ssh`) and Slurm (:mod:`.slurm`).

The local backend and the Backend/Handle/ProcessSpec interface live in
:mod:`tfcluster.launch.backend`; Kubernetes is rendered, not launched (:mod:`tfcluster.render`).
Nothing here imports TensorFlow.
"""
