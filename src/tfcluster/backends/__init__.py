"""Backends beyond this machine: several hosts over ssh (:mod:`.ssh`) and Slurm (:mod:`.slurm`).

The local backend and the Backend/Handle/ProcessSpec interface live in
:mod:`tfcluster.drivers`; Kubernetes is rendered, not launched (:mod:`tfcluster.k8s.render`).
Nothing here imports TensorFlow.
"""
