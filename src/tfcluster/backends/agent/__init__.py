"""The node agent: the process on a node that starts and supervises tasks through the run core
and talks to the launcher. Today it runs on Slurm, one per Slurm task, each for its one
TensorFlow task (:mod:`.node`); the agents and the launcher talk through the run folder they
share (:mod:`.folder`, the folder channel)."""
