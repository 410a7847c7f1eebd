"""The tasks as the supervisor (:mod:`tfcluster.drivers.supervisor`) holds them, and the parts
of its loop that deal with their processes:

- :class:`TaskRun`: one task's process, output and log; what the run's rules know of it is the
  machine's :class:`tfcluster.core.machine.TaskTrack`, read through;
- :class:`StepRate`: steps per second over the last reports (a task's own, and the run's);
- :class:`ExitWatch`: the tasks' exit descriptors in one poll set, which the loop's nap waits on;
- :class:`Starter`: processes started through the backend, a big wave of them side by side;
- :class:`SecretMasks`: the run's secrets masked in task output and in the record;
- :class:`PortProbes`: which tasks' ports the loop probes, and when;
- :class:`ChiefElsewhere`: per-host mode's view of a chief that runs on another host.
"""
from __future__ import annotations

import os
import select
import signal
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, Iterable, List, Optional, Tuple

from tfcluster.backends.base import Backend, Handle, ProcessSpec
from tfcluster.clusterfile import secrets
from tfcluster.core.machine import TaskTrack
from tfcluster.core.task_output import Seen
from tfcluster.drivers.display import TracebackFold
from tfcluster.errors import UserError
from tfcluster.plan.progress import Progress
from tfcluster.plan.runplan import RunPlan, TaskPlan

PARALLEL_STARTS = 4            # threads that start a big wave of tasks (Starter.many)
RATE_WINDOW = 30.0             # seconds of reports a rate is taken over
STEADY_REPORTS = 4             # reports (the run's first left out) an ETA's rate needs at least
STEADY_SPREAD = 0.2            # ... whose two halves' rates differ by at most this fraction
STALE_GAPS = 3.0               # a rate is stale once no report came for this many usual gaps
STALE_MIN = 2.0                # ... and at least this many seconds
PROBE_EVERY = 0.5              # seconds between rounds of port probes
PROBES_PER_ROUND = 64          # ... of at most this many tasks (PortProbes)


def _slope(a: Tuple[float, int], b: Tuple[float, int]) -> Optional[float]:
    return (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else None


class StepRate:
    """Steps per second over the reports of the last RATE_WINDOW seconds (at most 20 of them);
    the last rate while there are too few (``value``: None until there are two).

    An ETA takes its rate from :meth:`steady` only: the reports of the window but the run's
    first (the time up to its second report holds the first steps, which build the graph, open
    the session and warm up: one report of step 1 after 6 s said ETA 22m40s of a 25 s run), at
    least STEADY_REPORTS of them, the rate of their first half and of their second half within
    STEADY_SPREAD of each other, and not stale (:meth:`stale`)."""

    def __init__(self, monotonic: bool = False) -> None:
        self.points: Deque[Tuple[float, int]] = deque(maxlen=20)
        self.value: Optional[float] = None
        self.first_at: Optional[float] = None      # the run's first report: start-up, not rate
        # the global step, which every worker reports: a report behind one already seen (a
        # worker that read it earlier) is old news, not a step back
        self.monotonic = monotonic

    def add(self, now: float, step: int) -> None:
        if self.first_at is None:
            self.first_at = now
        if self.monotonic and self.points and step < self.points[-1][1]:
            step = self.points[-1][1]
        self.points.append((now, step))
        pts = [x for x in self.points if now - x[0] <= RATE_WINDOW]
        if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
            self.value = max(0.0, (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]))

    def stale(self, now: float) -> bool:
        """No report for STALE_GAPS times the usual gap between reports (at least STALE_MIN
        seconds): the rate says how fast it went, not how fast it goes."""
        pts = [x[0] for x in self.points if x[0] > (self.first_at or 0.0)] or [x[0] for x in self.points]
        if len(pts) < 2:
            return False
        gap = statistics.median(b - a for a, b in zip(pts, pts[1:]))
        return now - pts[-1] > max(STALE_MIN, STALE_GAPS * gap)

    def current(self, now: float) -> Optional[float]:
        """``value`` unless it is stale."""
        return None if self.stale(now) else self.value

    def steady(self, now: float) -> Optional[float]:
        """The rate an ETA may be taken from (see the class), or None."""
        pts = [x for x in self.points if x[0] > (self.first_at or 0.0)
               and self.points[-1][0] - x[0] <= RATE_WINDOW]
        if len(pts) < STEADY_REPORTS or self.stale(now):
            return None
        mid = len(pts) // 2
        a, b, whole = _slope(pts[0], pts[mid]), _slope(pts[mid], pts[-1]), _slope(pts[0], pts[-1])
        if not a or not b or not whole or a <= 0 or b <= 0:
            return None
        if abs(a - b) > STEADY_SPREAD * max(a, b):
            return None
        return whole


@dataclass
class TaskRun:
    """One task as the driver holds it: its process, output and log. What the run's rules know
    of it (state, restarts, exit, why it ended) is the machine's :class:`TaskTrack`, read
    through."""

    plan: TaskPlan
    spec: ProcessSpec
    track: TaskTrack
    handle: Optional[Handle] = None
    log_path: str = ""
    seen: Seen = field(default_factory=Seen)
    reader: Optional[threading.Thread] = None
    exit_fed: bool = True                 # its exit has been handed to the machine
    life_fed: Optional[float] = None      # the last sign of life handed to the machine
    # from its local_step reports: the steps this task itself ran (the global step moves with
    # every worker's steps, so its rate is the run's, never one task's)
    own_rate: StepRate = field(default_factory=StepRate)
    fold: TracebackFold = field(default_factory=TracebackFold)   # its traceback on the console

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def progress(self) -> Optional[Progress]:
        return self.seen.progress

    state = property(lambda self: self.track.state)
    pid = property(lambda self: self.track.pid)
    returncode = property(lambda self: self.track.returncode)
    restarts = property(lambda self: self.track.restarts)
    started = property(lambda self: self.track.started)
    first_started = property(lambda self: self.track.first_started)
    ended = property(lambda self: self.track.ended)
    why = property(lambda self: self.track.why)
    up = property(lambda self: self.track.up)
    forced = property(lambda self: self.track.forced)


class ExitWatch:
    """The exit descriptors (pidfds) of the tasks whose exit the machine has not yet heard,
    each registered once in one poll set: the loop's nap wakes as soon as a task exits, and a
    turn looks only at the tasks whose descriptor was ready and those without one -- at 512
    tasks, 1,000 system calls a turn otherwise -- and at every task once a second whatever the
    descriptors say."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._by_fd: Dict[int, TaskRun] = {}
        self._no_fd: Dict[str, TaskRun] = {}      # running tasks without one: looked at every turn
        self._ready: Optional[set] = None         # what the last nap saw ready; None: every task
        self._swept = 0.0                         # when every task was last looked at

    def add(self, tr: TaskRun, handle: Handle) -> None:
        fd = handle.exit_fd()
        if fd is not None:
            self._poll.register(fd, select.POLLIN)
            self._by_fd[fd] = tr
        else:
            self._no_fd[tr.name] = tr

    def remove(self, tr: TaskRun) -> None:
        """``tr``'s exit has been handed to the machine."""
        self._no_fd.pop(tr.name, None)
        fd = tr.handle.exit_fd()
        if fd is not None and self._by_fd.get(fd) is tr:
            del self._by_fd[fd]
            self._poll.unregister(fd)

    def to_look_at(self, runs: Dict[str, TaskRun], now: float) -> Iterable[TaskRun]:
        if now - self._swept >= 1.0 or self._ready is None:
            self._swept = now
            return runs.values()
        look = [self._by_fd[fd] for fd in self._ready if fd in self._by_fd]
        return look + list(self._no_fd.values())

    def nap(self, seconds: float) -> None:
        """Sleep up to ``seconds``, waking as soon as a task exits; the ready descriptors are
        kept for the next turn."""
        self._ready = None
        if not self._by_fd:
            time.sleep(seconds)
            return
        # poll, not select: select cannot wait on descriptors >= 1024 (~340 tasks)
        try:
            self._ready = {fd for fd, _ in self._poll.poll(seconds * 1000.0)}
        except OSError:
            time.sleep(seconds)


class Starter:
    """Starts processes through the backend: one at a time, or a wave side by side from
    PARALLEL_STARTS threads. CPython waits for each child to exec before it goes on, so one
    thread starts tasks one after the other at the kernel's exec latency; a few threads overlap
    those waits (scripts/bench_programs/spawn_latency.py)."""

    def __init__(self, backend: Backend, clock) -> None:
        self.backend = backend
        self.clock = clock
        self._threads = None        # a ThreadPoolExecutor, once a wave has needed one

    def one(self, spec: ProcessSpec) -> Tuple[Optional[Handle], Optional[Exception], Optional[float]]:
        """(handle, None, when it started), or (None, the error, None) for bad input (a missing
        program, an unreachable host)."""
        try:
            handle = self.backend.start(spec)
            return handle, None, self.clock()    # dated when it started, not at hand-off
        except (OSError, UserError) as e:
            return None, e, None

    def many(self, specs: List[ProcessSpec]) -> list:
        """:meth:`one` for each spec, side by side; the answers in the order of ``specs``."""
        got = self.backend.start_many(specs)
        if got is not None:      # the backend's own wave (the ssh agents)
            now = self.clock()
            return [(None, a, None) if isinstance(a, Exception) else (a, None, now) for a in got]
        if self._threads is None:
            # Kept until the run's end: a child's death signal (PR_SET_PDEATHSIG) follows the
            # *thread* that started it, so these threads must outlive the tasks they started.
            from concurrent.futures import ThreadPoolExecutor
            self._threads = ThreadPoolExecutor(PARALLEL_STARTS, thread_name_prefix="start")
        return list(self._threads.map(self.one, specs))

    def close(self) -> None:
        """Every task has ended: the threads may go."""
        if self._threads is not None:
            self._threads.shutdown(wait=True)


class SecretMasks:
    """The run's secrets masked: ``line`` masks task output (its log and the console); ``argv_env``
    a task's argv and env for the record, kept while its spec is the same (the record is
    rewritten every second while tasks change: 512 tasks' environments)."""

    def __init__(self, plan: RunPlan) -> None:
        self._declared = plan.secret_names
        self._values = plan.secret_values()
        self.line = secrets.Masker(self._values)
        self._kept: Dict[str, tuple] = {}

    def argv_env(self, tr: TaskRun) -> Tuple[List[str], Dict[str, str]]:
        got = self._kept.get(tr.name)
        if got is None or got[0] is not tr.spec:
            got = (tr.spec, secrets.mask_argv(tr.spec.argv, self._declared, self._values),
                   secrets.mask_env(tr.spec.env, self._declared, self._values))
            self._kept[tr.name] = got
        return got[1], got[2]


def start_failure(task: str, spec: ProcessSpec, e: OSError) -> str:
    """One line for a task that could not be started (bad input: exit 2)."""
    if isinstance(e, FileNotFoundError):
        if not os.path.isdir(spec.cwd):
            return f"{task}: working folder does not exist: {spec.cwd}"
        return f"{task}: program not found: {spec.argv[0]} (program.command)"
    if isinstance(e, PermissionError):
        return f"{task}: program cannot be run (permission denied): {spec.argv[0]}"
    if isinstance(e, NotADirectoryError) or not os.path.isdir(spec.cwd):
        return f"{task}: working folder does not exist: {spec.cwd}"
    return f"{task}: cannot start {spec.argv[0]}: {e.strerror or e}"


def discard(handle: Handle) -> None:
    """End a task the machine never heard of (started side by side with one that could not
    start, after the run had already ended): SIGKILL to its group, reaped, pipes closed."""
    handle.signal(signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while handle.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    for stream in (handle.stdout, getattr(handle, "progress", None)):
        try:
            if stream is not None:
                stream.close()
        except OSError:   # a pipe of a killed task: closing it frees it, an error loses nothing
            pass


class PortProbes:
    """Which tasks' ports to probe, and when: every PROBE_EVERY seconds, each task not yet seen
    up, at most PROBES_PER_ROUND of them a round, in turn (512 connects every half second would
    be a launcher busy probing; a task's state shows ``serving`` a few seconds later at most)."""

    def __init__(self) -> None:
        self.last = 0.0           # when the last round was
        self._at = 0              # where the next round starts

    def due(self, now: float) -> bool:
        if now - self.last >= PROBE_EVERY:
            self.last = now
            return True
        return False

    def pick(self, names: List[str]) -> List[str]:
        if len(names) <= PROBES_PER_ROUND:
            return names
        at = self._at % len(names)
        self._at = at + PROBES_PER_ROUND
        return (names[at:] + names[:at])[:PROBES_PER_ROUND]


class ChiefElsewhere:
    """Per-host mode: the chief runs on another host. Its end is visible through the cluster
    itself: its server's port, once open, stays closed for ``grace`` seconds."""

    def __init__(self, backend: Backend, grace: float, say: Callable[[str], None]) -> None:
        self.backend, self.grace, self.say = backend, grace, say
        self.seen = False                      # its port has been open
        self.gone_at: Optional[float] = None   # since when it has been closed again

    def ended(self, chief: TaskPlan, now: float) -> str:
        """The words of its end, once it has ended; else ""."""
        if self.backend.accepts(chief.host, chief.port):
            if not self.seen:
                self.say(f"{chief.name} on {chief.endpoint} is up (runs elsewhere; its end "
                         f"ends this host's tasks)")
            self.seen, self.gone_at = True, None
            return ""
        if not self.seen:
            return ""
        if self.gone_at is None:
            self.gone_at = now
        if now - self.gone_at >= max(self.grace, 1.0):
            return f"{chief.name} on {chief.endpoint}, which runs elsewhere, has ended"
        return ""
