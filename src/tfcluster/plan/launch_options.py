"""The options of a launch: what the command line (or a program calling
:func:`tfcluster.launch`) says about a run, over its cluster file. Public (``tfcluster.LaunchOptions``,
docs/API.md). Plain data, no TensorFlow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple


@dataclass(frozen=True)
class LaunchOptions:
    """What the command line says about a run, over the cluster file: the options of
    :func:`tfcluster.launch`, public as ``tfcluster.LaunchOptions`` (docs/API.md). None (or
    empty) means "the file's value". Frozen: make a changed copy with ``dataclasses.replace``.

    Args:
        command: the program and its arguments, replacing the file's (``launch ... -- CMD``).
        command_cwd: the folder ``command`` runs in (default: the current folder).
        args: ``--arg`` edits of the program's flags (``"--lr=0.1"``, ``"--no-eval"``).
        task_flags: append ``--job_name/--task_index/--<job>_hosts`` to every task.
        success: ``chief`` or ``all-workers``.
        grace: seconds the other workers get to exit after the chief succeeded.
        restart: the restart policy (``never``, ``on-failure``, ``exit-code``).
        max_restarts: restarts per task.
        logdir: where the run folder is made.
        run_id: the run folder's name (default: the start time).
        stop_timeout: seconds between SIGTERM and SIGKILL when a task is stopped.
        backend: ``local``, ``ssh``, ``slurm`` or ``ray``.
        hosts: per-host mode: start only the tasks on these hosts.
        slurm: the command line's Slurm options over the file's ``slurm:`` (programs leave it
            None: the file's apply).
        network: ``private`` or ``host``.
        profiler: start a profiler server in every task.

    Raises:
        UserError: a bad value, naming its flag, when the run is planned
            (:func:`tfcluster.launch`), not when the options are made.
    """

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
