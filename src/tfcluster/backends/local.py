"""The local backend: each task a child process of the launcher, in its own session and process
group.

Nothing a task starts outlives the launcher, however the launcher ends:

* each task's leader has a parent-death signal (SIGKILL when the launcher dies; set by
  ``backends.base.start_child``);
* a reaper -- a small process of its own session, started with the first task -- knows every
  task's process group through a pipe from the launcher. When the launcher dies (SIGKILL, the
  OOM killer), the pipe's end closes and the reaper kills those whole groups: a task's forked
  children and the program behind a ``bash -c`` wrapper die too, and so does a task the
  launcher did not live to report (found by ``TFCLUSTER_LAUNCHER_PID`` in its environment). A
  clean end tells the reaper to quit instead;
* when a task's leader exits, what is left of its group is killed before the leader is reaped
  (so its group id cannot have been reused).

Not covered: a process that deliberately leaves its task's process group (``setsid``, a
daemon's double fork). docs/SECURITY.md says so.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from tfcluster.backends.base import Backend, Handle, ProcessSpec, signal_group, start_child
from tfcluster.plan import contract

# The reaper: reads "+PGID" / "-PGID" lines; "quit" ends it quietly; end of input (the launcher
# is gone) kills every group it knows: SIGTERM, 2 s, SIGKILL. Standard library only, and quick.
# It also kills the group of every process whose environment names the launcher
# (TFCLUSTER_LAUNCHER_PID): a task whose start the launcher did not live to report (or not yet
# tell the reaper of: new groups are told in batches), killed before setpriv set the task's death
# signal (backends.base.start_child), or a task's child left behind by a leader that the death
# signal killed.
REAPER = r"""
import os, signal, sys, time
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
mark = ("\0%s=%s\0" % (sys.argv[1], sys.argv[2])).encode()     # TFCLUSTER_LAUNCHER_PID=<launcher>
def orphans():
    found = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            pid = int(d)
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = b"\0" + f.read()
            if mark in env:
                found.add(os.getpgid(pid))
        except OSError:
            pass
    return found
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line == "quit":
        sys.exit(0)
    if line[:1] in "+-" and line[1:].isdigit():
        (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
def alive(g):
    try:
        os.killpg(g, 0)
        return True
    except OSError:
        return False
def kill(gs, sig):
    for g in list(gs):
        try:
            os.killpg(g, sig)
        except OSError:
            gs.discard(g)
    return gs
late = set()     # a task made while the launcher died has exec'd by now (its start is ms)
for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 0)):
    groups = kill(groups, sig)
    start = time.time()
    while True:
        late |= kill(orphans() - late - groups, signal.SIGKILL)
        now = time.time()
        if now >= start + wait or (not groups and now >= start + min(wait, 0.5)):
            break
        groups = {g for g in groups if alive(g)}
        time.sleep(0.05)
kill(late, signal.SIGKILL)
"""


WATCH_BATCH = 0.05     # seconds: new groups are told to the reaper at least this often


class Reaper:
    """The launcher's side of the reaper process (see the module's docstring)."""

    def __init__(self):
        self.proc: Optional[subprocess.Popen] = None
        self.lock = threading.Lock()
        self._flushed = 0.0

    def start(self) -> None:
        """Started before the first task (so that it knows the launcher before any task runs)."""
        with self.lock:
            if self.proc is None:
                self.proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", REAPER, contract.LAUNCHER_PID, str(os.getpid())],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                    close_fds=True)

    def _tell(self, line: str, flush: bool = True) -> None:
        self.start()
        with self.lock:
            if self.proc is None:
                return
            try:
                self.proc.stdin.write(f"{line}\n".encode())
                now = time.monotonic()
                if flush or now - self._flushed >= WATCH_BATCH:
                    self.proc.stdin.flush()
                    self._flushed = now
            except (OSError, ValueError):   # the reaper is gone: the tasks' env still names us
                pass

    def watch(self, pgid: int) -> None:
        """A new task's group. Told in batches (a start wave of 512 tasks would wake the reaper
        512 times): a group not yet told when the launcher dies is still found, since every
        task's environment names this launcher (the reaper's orphan scan)."""
        self._tell(f"+{pgid}", flush=False)

    def forget(self, pgid: int) -> None:
        """A group whose leader was reaped (its id may be reused): told at once."""
        if self.proc is not None:
            self._tell(f"-{pgid}")

    def close(self) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.write(b"quit\n")
            proc.stdin.close()
        except (OSError, ValueError):   # the reaper has ended already: waited for below
            pass
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class LocalHandle(Handle):
    def __init__(self, proc: subprocess.Popen, reaper: Optional[Reaper] = None):
        self.proc = proc
        self.reaper = reaper
        self.pid = proc.pid
        self.stdout = proc.stdout
        self.progress: Optional[object] = None    # the progress pipe's read end (LocalBackend)
        self._pidfd: Optional[int] = None
        try:
            self._pidfd = os.pidfd_open(proc.pid)  # Linux 5.3+, Python 3.9+
        except (AttributeError, OSError):   # no pidfds here: its exit is polled instead
            pass

    def exit_fd(self) -> Optional[int]:
        return self._pidfd

    def __del__(self):
        if self._pidfd is not None:
            try:
                os.close(self._pidfd)
            except OSError:   # closed already: nothing held
                pass

    def _exited(self) -> bool:
        """The leader has exited (it may not be reaped yet)."""
        if self.proc.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def _end_group(self) -> None:
        """The leader has exited but is not reaped: kill what is left of its group (the group id
        cannot have been reused yet), then let the reaper forget it."""
        if self.proc.returncode is None:
            signal_group(self.pid, signal.SIGKILL)
        if self.reaper is not None:
            self.reaper.forget(self.pid)
            self.reaper = None

    def poll(self) -> Optional[int]:
        if self.proc.returncode is None and self._exited():
            self._end_group()
        return self.proc.poll()

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rc = self.poll()
            if rc is not None:
                return rc
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                return None
            if self._pidfd is not None:
                select.select([self._pidfd], [], [], left)
            else:
                time.sleep(left)

    def signal(self, sig: int) -> None:
        if self.proc.returncode is not None:
            return     # reaped: its group id may belong to another process now
        try:
            os.killpg(self.pid, sig)  # the task's own process group (start_new_session)
        except ProcessLookupError:   # the group has ended
            pass
        except PermissionError:   # a member changed user: the leader at least
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:   # it has ended meanwhile
                pass


class LocalBackend(Backend):
    """Child processes on this machine, each in its own session and process group."""

    name = "local"
    checks_local_ports = True
    parallel_starts = True        # a big start wave uses a few threads (Supervisor._start_many)

    def __init__(self):
        self.reaper = Reaper()
        self._environ: Optional[dict] = None   # the launcher's environment, read at the first start

    def close(self) -> None:
        self.reaper.close()

    def start(self, spec: ProcessSpec) -> Handle:
        """Start the task with stdout and stderr on one pipe, and a second pipe for progress
        reports (``TFCLUSTER_PROGRESS_FD``, the handle's ``progress``); the task is told that
        this launcher supervises it and will stop its ps tasks (``TFCLUSTER_LAUNCHER_PID``)."""
        if self._environ is None:      # once a launch, not once a task (40 variables each)
            self._environ = dict(os.environ)
        env = dict(self._environ)
        env.update(spec.env)
        self.reaper.start()
        r, w = os.pipe()
        try:
            env[contract.PROGRESS_FD] = f"{w}:{os.fstat(w).st_ino}"
            env[contract.LAUNCHER_PID] = str(os.getpid())
            proc = start_child(
                spec.argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                close_fds=True, pass_fds=(w,))
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        self.reaper.watch(proc.pid)
        handle = LocalHandle(proc, self.reaper)
        handle.progress = os.fdopen(r, "rb", buffering=0)
        return handle
