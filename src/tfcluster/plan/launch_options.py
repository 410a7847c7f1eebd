"""The options of a launch: what the command line (or a program calling
:func:`tfcluster.launch`) says about a run, over its cluster file. Plain data, no TensorFlow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple


@dataclass(frozen=True)
class LaunchOptions:
    """What the command line says about a run, over the cluster file: the options of
    :func:`tfcluster.launch`. None (or empty) means "the file's value". Each field is the
    ``launch`` flag of its name; the values are checked when the run
    is planned (:func:`tfcluster.plan.runplan.build_plan`), where a bad one is a
    :class:`tfcluster.errors.UserError` naming the flag."""

    command: Tuple[str, ...] = ()            # replaces the file's program (after '--')
    command_cwd: Optional[str] = None        # the folder a '--' command runs in
    args: Tuple[str, ...] = ()               # --arg edits of the program's flags (program_args)
    task_flags: Optional[bool] = None
    success: Optional[str] = None
    grace: Optional[float] = None
    restart: Optional[str] = None
    max_restarts: Optional[int] = None
    logdir: Optional[str] = None
    run_id: Optional[str] = None
    stop_timeout: float = 5.0                # SIGTERM -> SIGKILL
    backend: Optional[str] = None            # local | ssh | slurm | ray (None: the file's, else local/ssh)
    hosts: Tuple[str, ...] = ()              # per-host mode: start only the tasks on these hosts
    slurm: Any = None                        # SlurmSpec: the file's slurm: with the flags over it
    network: Optional[str] = None            # private | host (None: the file's, else private where it can be)
    profiler: Optional[bool] = None          # --profiler (None: the file's profiler:)
