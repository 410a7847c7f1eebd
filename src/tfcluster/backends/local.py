"""The local backend: each task a child process of the launcher, in its own session and process
group, with a parent-death signal so that no task outlives a launcher killed with SIGKILL."""
from __future__ import annotations

import os
import subprocess
from typing import Optional

from .base import Backend, Handle, ProcessSpec, child_setup


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
    checks_local_ports = True

    def start(self, spec: ProcessSpec) -> Handle:
        env = dict(os.environ)
        env.update(spec.env)
        proc = subprocess.Popen(
            spec.argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=child_setup, close_fds=True)
        return LocalHandle(proc)
