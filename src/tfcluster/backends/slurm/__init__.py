"""Slurm: the submitting side (:mod:`.launcher`). The node agent that runs each Slurm task is
:mod:`tfcluster.backends.agent.node`."""
