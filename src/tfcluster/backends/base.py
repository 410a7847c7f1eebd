"""The backend interface: backends start processes; they know argv, env and host, never
TensorFlow, never the run's rules.

The supervisor (:mod:`tfcluster.launch`: what to run, when a run has succeeded, restarts)
talks to a backend through :class:`Backend` and :class:`Handle`; the CLI picks the backend
(:mod:`.local`, :mod:`.ssh`). This module sits below both: it imports neither.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import IO, Dict, List, Optional

from ..hosts import accepts


@dataclass
class ProcessSpec:
    """One process to start: a task's argv (its interpreter resolved for where it runs), its
    environment additions (the task contract), its folder and its host."""

    name: str                     # "worker:1"
    argv: List[str]
    env: Dict[str, str]           # additions over the launcher's environment
    cwd: str
    host: str = "localhost"


class Handle:
    """A started task. ``stdout`` is its stdout and stderr merged (binary, EOF at the end)."""

    pid: int
    stdout: IO[bytes]

    def poll(self) -> Optional[int]:
        raise NotImplementedError

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        raise NotImplementedError

    def signal(self, sig: int) -> None:
        """Deliver ``sig`` to the whole task (its process group)."""
        raise NotImplementedError

    def exit_fd(self) -> Optional[int]:
        """A file descriptor that becomes readable when the task exits (a pidfd), or None;
        lets the launcher wake at once instead of polling."""
        return None


class Backend:
    """Starts tasks. ``python`` is the interpreter that replaces a plan's symbolic ``{python}``
    on ``host``. A backend resolves only what is truly its own: the interpreter (here) and, when
    it starts a task elsewhere, the remote folder (in :meth:`start` and :meth:`describe`)."""

    name = "base"
    checks_local_ports = False    # the supervisor checks this machine's ports before starting

    def python(self, host: str) -> List[str]:
        return [sys.executable]

    def accepts(self, host: str, port: int) -> bool:
        """Whether ``host:port`` accepts connections (a task's server is up)."""
        return accepts(host, port)

    def describe(self, spec: ProcessSpec) -> Dict[str, object]:
        """How ``spec`` will run, for dry runs: at least argv, cwd and where."""
        return {"where": "this machine", "argv": spec.argv, "cwd": spec.cwd}

    def start(self, spec: ProcessSpec) -> Handle:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Launcher:
    """How a whole run plan is run: the one seam between the CLI (and the Python API) and a
    kind of backend. The local and ssh backends run under tfcluster's supervisor
    (:class:`tfcluster.launch.SupervisedLauncher`); Slurm submits one job whose node wrappers
    drive the same run machine (:class:`tfcluster.backends.slurm.SlurmLauncher`). The CLI picks
    one by the plan's backend and asks it nothing else."""

    #: why ``launch --detach`` does not apply ("" when it does)
    no_detach = ""
    #: the scheduler flags (``--partition``, ``--time``, ...) apply to this launcher
    takes_slurm_options = False

    def describe(self) -> str:
        """What a run would do, for ``--dry-run``: starts nothing, writes nothing."""
        raise NotImplementedError

    def warnings(self) -> List[str]:
        """What the launcher should say before it starts (preflight)."""
        return []

    def run(self, view) -> int:
        """Run the plan to its end; the launch's exit code."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1


def child_setup(death_signal: int = signal.SIGKILL) -> None:
    """Runs in each task between fork and exec: ``death_signal`` when the launcher dies
    (PR_SET_PDEATHSIG), default signal dispositions."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
    except Exception:
        pass
    # The launcher may have died between fork and prctl: then our parent is init already.
    if os.getppid() == 1:
        os._exit(137)
    # Default dispositions for signals the launcher handles itself.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)


def stop_group(proc: subprocess.Popen, timeout: float = 5.0, kill_wait: float = 10.0) -> None:
    """Stop a child started in its own process group: SIGTERM to the group, up to ``timeout``
    seconds, then SIGKILL; and SIGKILL to whatever is left of the group after its leader."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, kill_wait)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
