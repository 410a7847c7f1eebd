"""The Slurm scheduler flags of ``launch`` and ``render slurm`` (``--partition``, ``--time``, ...),
read once from the command line into typed values (:class:`SlurmFlags`) and laid over the
cluster file's ``slurm:`` section. Their argparse group: :func:`tfcluster.cli.parser.add_slurm_flags`."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, List, Optional, Tuple

if TYPE_CHECKING:
    from tfcluster.clusterfile.slurm import SlurmSpec

#: the group's name, as a launcher names the groups of scheduler flags it reads from the plan
#: (:attr:`tfcluster.backends.base.Launcher.scheduler_flags`)
GROUP = "slurm"


@dataclass(frozen=True)
class SlurmFlags:
    """The Slurm flags as given; None (``sbatch``: empty) where a flag was not given."""

    partition: Optional[str] = None
    time: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    gpus_per_task: Optional[int] = None
    gres: Optional[str] = None
    sbatch: Tuple[str, ...] = ()
    signal_lead: Optional[int] = None
    requeue: Optional[bool] = None
    max_segments: Optional[int] = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "SlurmFlags":
        """The flags of :func:`~tfcluster.cli.parser.add_slurm_flags` in a parsed command line."""
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        values["sbatch"] = tuple(values["sbatch"] or ())
        return cls(**values)

    def given(self) -> List[str]:
        """The flags given, as they are spelled (``--gpus-per-task``), in the parser's order
        (``--no-requeue`` and a count of 0 are given too)."""
        return ["--" + f.name.replace("_", "-") for f in fields(self)
                if getattr(self, f.name) not in (None, ())]

    def over(self, base: Optional["SlurmSpec"]) -> "SlurmSpec":
        """The run's :class:`~tfcluster.clusterfile.slurm.SlurmSpec`: ``base`` (the file's
        ``slurm:``) with these flags over it. Raises UserError naming the flag (exit 2)."""
        from tfcluster.clusterfile.slurm import from_flags
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["sbatch"] = list(self.sbatch)
        return from_flags(base, **values)
