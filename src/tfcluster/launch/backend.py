"""Backends start processes; they know argv, env and host, never TensorFlow.

The launcher (what to run, when a run has succeeded, restarts) talks to a backend through
:class:`Backend` and :class:`Handle`. The local backend runs each task as a child process in
its own process group, with a parent-death signal so that no task outlives a launcher that is
killed with SIGKILL.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import IO, Dict, List, Optional


@dataclass
class ProcessSpec:
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
    name = "base"

    def start(self, spec: ProcessSpec) -> Handle:
        raise NotImplementedError

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1


def child_setup() -> None:
    """Runs in each task between fork and exec: die with the launcher (PR_SET_PDEATHSIG),
    default signal dispositions."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
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


class LocalHandle(Handle):
    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.pid = proc.pid
        self.stdout = proc.stdout
        self._pidfd: Optional[int] = None
        try:
            self._pidfd = os.pidfd_open(proc.pid)  # Linux 5.3+, Python 3.9+
        except (AttributeError, OSError):
            pass

    def exit_fd(self) -> Optional[int]:
        return self._pidfd

    def __del__(self):
        if self._pidfd is not None:
            try:
                os.close(self._pidfd)
            except OSError:
                pass

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)  # the task's own process group (start_new_session)
        except ProcessLookupError:
            pass
        except PermissionError:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class LocalBackend(Backend):
    """Child processes on this machine, each in its own session and process group."""

    name = "local"

    def start(self, spec: ProcessSpec) -> Handle:
        env = dict(os.environ)
        env.update(spec.env)
        proc = subprocess.Popen(
            spec.argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=child_setup, close_fds=True)
        return LocalHandle(proc)
