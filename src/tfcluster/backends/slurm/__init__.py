"""Slurm, the submitting side: the launcher (:mod:`.launcher`) that writes the batch script
(:mod:`.batch`, its secrets held back: :mod:`.held_secrets`) and follows the job
(:mod:`.follower`); which task runs where (:mod:`.layout`, :mod:`.nodes`). Each Slurm task runs
the node agent, :mod:`tfcluster.backends.agent.node`."""
