"""The run machine: the one place where a run's rules act.

A driver -- the local supervisor (:mod:`tfcluster.launch`, also for ssh hosts and per-host
agents) or the Slurm node wrapper (:mod:`tfcluster.backends.slurm_task`) -- turns processes,
output, clocks and signals into **events** and hands them to :meth:`RunMachine.handle`, which
returns **actions** for the driver to carry out. The machine owns what a run decides: task
states, restarts (budgets, backoff, ``min_uptime``), the success rule and the grace period, the
watchdogs, the stop order (chief, workers and evaluators first, ps last) with SIGTERM then
SIGKILL, and the run's result and exit code. It has no threads, files, clocks or signals
inside: time comes in with the events, so a table of events tests it (tests/unit/test_machine.py),
in the manner of dask's ``handle_stimulus(*events) -> instructions``.

The machine is written down once; the drivers differ only in how they learn what happened:

* local: ``Exited`` from the process, ``PortOpen`` from a connect probe, ``Progressed`` /
  ``Waiting`` / ``PortConflict`` from the task's output;
* Slurm node: the same for its own task, plus what the other nodes' wrappers tell it through
  the shared run folder (``PeerEnded``, ``KillRequest``, ``RunOver``, ``RestartClaim``).
"""
from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import rules
from .events import exit_fields
from .rules import describe_exit
from .runrecord import format_duration as _duration

# ---------------------------------------------------------------------------- states


class TaskState(str, enum.Enum):
    """State of one task in a run.

    PENDING     not started yet
    RUNNING     its process is alive
    SUCCEEDED   it exited 0 by itself
    FAILED      it exited non-zero or died by a signal that tfcluster did not send
    RESTARTING  it failed and will be started again (restart policy), after a backoff
    STOPPING    tfcluster sent it SIGTERM (or SIGKILL) and waits for it to exit
    STOPPED     tfcluster ended it, or the run ended before it (re)started
    SKIPPED     it runs on another host; this launcher does not start it

    PENDING -> RUNNING | STOPPED;  RUNNING -> SUCCEEDED | FAILED | STOPPING;
    FAILED -> RESTARTING -> RUNNING | STOPPED;  STOPPING -> STOPPED.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SKIPPED = "skipped"

    @property
    def alive(self) -> bool:
        """A process exists for the task."""
        return self in (TaskState.RUNNING, TaskState.STOPPING)


ALLOWED = {
    TaskState.PENDING: {TaskState.RUNNING, TaskState.STOPPED},
    TaskState.RUNNING: {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPING},
    TaskState.FAILED: {TaskState.RESTARTING},
    TaskState.RESTARTING: {TaskState.RUNNING, TaskState.STOPPED},
    TaskState.STOPPING: {TaskState.STOPPED},
    TaskState.SUCCEEDED: set(),
    TaskState.STOPPED: set(),
    TaskState.SKIPPED: set(),
}


class TransitionError(RuntimeError):
    """A state change the task's life does not allow: a bug in tfcluster, not bad input."""


def check_transition(old: TaskState, new: TaskState, task: str = "") -> TaskState:
    """``new`` if ``old -> new`` is allowed, else TransitionError."""
    if new not in ALLOWED[old]:
        raise TransitionError(f"{task}: {old.value} -> {new.value} is not a transition of a task")
    return new


class RunState(str, enum.Enum):
    """The result of a run as run.json records it. ``lost`` is not written by a launcher: it is
    what ``tfcluster status`` calls a ``running`` record whose launcher is gone."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    LOST = "lost"


# ---------------------------------------------------------------------------- events
# What a driver reports. ``now`` is the driver's clock (seconds).


@dataclass(frozen=True)
class Tick:
    """Time has passed: deadlines (restart backoff, watchdog, grace, stop timeout) are due."""
    now: float


@dataclass(frozen=True)
class Started:
    task: str
    pid: Optional[int]
    now: float


@dataclass(frozen=True)
class StartFailed:
    """The driver could not start the task (no such program, no such folder): bad input."""
    task: str
    message: str
    now: float
    code: int = rules.EXIT_BAD_INPUT


@dataclass(frozen=True)
class Exited:
    """The task's process ended (its output has been read to the end)."""
    task: str
    returncode: int               # negative: killed by signal -returncode
    now: float
    cause: str = ""               # what the driver learnt of the death (tfcluster.oom)


@dataclass(frozen=True)
class Progressed:
    """The task reported its step (``step``; life when it moved), or showed another sign of
    life (``step`` None: a Keras bar or a TF1 hook line that moved, a protocol report)."""
    task: str
    step: Optional[int]
    now: float


@dataclass(frozen=True)
class PortOpen:
    """The task's server accepts connections."""
    task: str
    now: float


@dataclass(frozen=True)
class PortConflict:
    """The task's output said its port is taken (Could not start gRPC server)."""
    task: str
    now: float


@dataclass(frozen=True)
class Waiting:
    """``task`` printed "CreateSession still waiting for response from" ``on``."""
    task: str
    on: str
    now: float


@dataclass(frozen=True)
class Interrupt:
    """A stop signal reached the driver (Ctrl-C, SIGTERM, SIGHUP, ``tfcluster stop``, Slurm's
    time-limit or preemption signal). A second SIGINT stops at once (SIGKILL)."""
    signum: int
    now: float


@dataclass(frozen=True)
class KillRequest:
    """Another node's watchdog asks to kill ``task`` (which runs here)."""
    task: str
    reason: str
    now: float


@dataclass(frozen=True)
class PeerEnded:
    """A task that runs elsewhere has ended; ``ok``: it exited 0 by itself."""
    task: str
    ok: bool
    now: float


@dataclass(frozen=True)
class RunOver:
    """The run was decided elsewhere (another node's wrapper ended it)."""
    words: str
    now: float


@dataclass(frozen=True)
class ChiefGone:
    """Per-host mode: the chief, which runs elsewhere, has ended (its server closed)."""
    words: str
    now: float


@dataclass(frozen=True)
class RestartClaim:
    """The driver's answer to :class:`ClaimRestart`: one restart of the run's shared budget
    was (or was not) taken."""
    task: str
    granted: bool
    now: float
    reason: str = ""


Event = Union[Tick, Started, StartFailed, Exited, Progressed, PortOpen, PortConflict, Waiting,
              Interrupt, KillRequest, PeerEnded, RunOver, ChiefGone, RestartClaim]


# ---------------------------------------------------------------------------- actions
# What the driver carries out.


@dataclass(frozen=True)
class Start:
    task: str
    attempt: int                  # 0: first start; N: the N-th restart


@dataclass(frozen=True)
class Kill:
    """Deliver ``sig`` to the task's whole process group."""
    task: str
    sig: int


@dataclass(frozen=True)
class Note:
    """A record for the run's event log (events.jsonl, launcher.log)."""
    event: str
    task: Optional[str] = None
    fields: Tuple[Tuple[str, object], ...] = ()

    def as_dict(self) -> Dict[str, object]:
        return dict(self.fields)


@dataclass(frozen=True)
class Say:
    """A line for the person watching (stderr)."""
    text: str
    error: bool = False


@dataclass(frozen=True)
class ClaimRestart:
    """Take one restart of the run's budget, shared with other nodes; answer RestartClaim."""
    task: str


@dataclass(frozen=True)
class AskKill:
    """``task`` runs elsewhere: ask the driver that runs it to kill it."""
    task: str
    reason: str


@dataclass(frozen=True)
class EndRun:
    """The run was decided here: tell the drivers elsewhere (Slurm: the other nodes)."""
    result: RunState
    words: str


@dataclass(frozen=True)
class Finished:
    """Every task here has ended; the driver closes its records and exits with ``exit_code``."""
    result: RunState
    exit_code: int


Action = Union[Start, Kill, Note, Say, ClaimRestart, AskKill, EndRun, Finished]


def note(event: str, task: Optional[str] = None, **fields) -> Note:
    return Note(event, task, tuple(fields.items()))


# ---------------------------------------------------------------------------- the machine


@dataclass
class TaskStatus:
    """What the machine knows of one task it runs."""

    name: str
    job: str
    rule: rules.RestartRule
    port: Optional[int] = None
    state: TaskState = TaskState.PENDING
    pid: Optional[int] = None
    returncode: Optional[int] = None
    restarts: int = 0
    first_started: Optional[float] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    start_at: float = 0.0
    up: bool = False                       # its port accepts connections
    forced: str = ""                       # why tfcluster killed it (watchdog)
    note: str = ""
    port_conflict: bool = False
    waiting_on: Dict[str, float] = field(default_factory=dict)   # task -> first "still waiting"
    step: Optional[int] = None             # the last step it reported
    alive_at: Optional[float] = None       # the last sign of progress
    longest_gap: float = 0.0               # the longest wait for a sign of life (its cadence)

    def mark_life(self, now: float) -> None:
        since = self.alive_at if self.alive_at is not None else self.started
        if since is not None:
            self.longest_gap = max(self.longest_gap, now - since)
        self.alive_at = now

    @property
    def serves(self) -> bool:
        """A task whose TensorFlow server the startup watchdog expects on its port."""
        return self.job in ("ps", "worker") and self.port is not None


@dataclass(frozen=True)
class Settings:
    """What the machine needs of the plan (:meth:`RunMachine.from_plan` takes it from there)."""

    chief: str
    success: str = "chief"
    grace: float = 5.0
    stop_timeout: float = 5.0
    startup_timeout: float = 120.0
    waiting_timeout: float = 120.0
    stall_timeout: float = 300.0
    max_total_restarts: Optional[int] = None
    shared_budget: bool = False      # the run's restart budget is claimed through the driver
    peers_report: bool = False       # the driver reports the end of tasks run elsewhere
    remote_kill: bool = False        # a task elsewhere that others wait on is killed through
                                     # the driver (AskKill) instead of failing the run
    peer_stop_wait: Optional[float] = None   # ps wave: how long to wait for non-ps tasks
                                             # elsewhere to end (default: stop_timeout)


WATCH_EVERY = 0.5                   # seconds between watchdog checks
KILL_WAIT = 10.0                    # seconds to wait for a SIGKILLed group


class RunMachine:
    """The run's rules as one state machine: ``handle(event) -> [actions]``.

    ``tasks``: the tasks this driver runs, as (name, job, restart rule, port); ``others``: the
    other tasks of the cluster (name -> job) and ``where`` their endpoints (for messages).
    """

    def __init__(self, tasks: Sequence[Tuple[str, str, rules.RestartRule, Optional[int]]],
                 settings: Settings, others: Optional[Mapping[str, str]] = None,
                 where: Optional[Mapping[str, str]] = None):
        self.s = settings
        self.tasks: Dict[str, TaskStatus] = {
            name: TaskStatus(name=name, job=job, rule=rule, port=port)
            for name, job, rule, port in tasks}
        self.others: Dict[str, str] = dict(others or {})
        self.where: Dict[str, str] = dict(where or {})
        self.peer_ok: Dict[str, bool] = {}           # tasks elsewhere that have ended -> ok
        self.result = RunState.RUNNING
        self.exit_code: Optional[int] = None
        self.words = ""
        self.root_cause: Optional[str] = None        # the task that failed first
        self.root_note: Optional[str] = None         # or why the run failed without one
        self.total_restarts = 0
        self.best_step: Optional[int] = None
        self.best_step_at = 0.0
        self.interrupted: Optional[int] = None
        self.kill_now = False
        self.finished = False
        self.phase = "start"                         # start, run, grace, stop, done
        self._last_watch: Optional[float] = None
        self._grace_until = 0.0
        self._grace_tasks: List[str] = []
        self._waves: List[List[str]] = []
        self._wave: List[str] = []
        self._wave_all: List[str] = []
        self._stopped_any: List[str] = []
        self._wave_deadline = 0.0
        self._wave_killed = False
        self._peer_wait_until: Optional[float] = None
        self._claims: Dict[str, float] = {}          # task -> delay, waiting for RestartClaim
        self._now = 0.0
        # without reports from elsewhere the tasks the success rule needs are fixed: count them
        self._next_start_at = float("inf")   # the earliest start_at of a task to start again
        self._needs: Optional[set] = None    # rules.success_needs, asked on the first exit 0
        self._needs_left = 0                 # ... of them not yet exited 0 (SUCCEEDED is final)

    @classmethod
    def from_plan(cls, plan, names: Optional[Iterable[str]] = None, *, shared: bool = False,
                  peer_stop_wait: Optional[float] = None) -> "RunMachine":
        """A machine for ``names`` (default: the plan's selected tasks). ``shared``: a Slurm
        node wrapper, which shares the restart budget, hears of the other tasks' ends and asks
        other nodes to kill a task through the run folder."""
        here = list(names) if names is not None else list(plan.selected)
        rule = plan.task(here[0]).restart if here else rules.RestartRule()
        wd = plan.watchdog
        settings = Settings(
            chief=plan.chief, success=plan.success, grace=plan.grace,
            stop_timeout=plan.stop_timeout, startup_timeout=wd.startup_timeout,
            waiting_timeout=wd.waiting_timeout, stall_timeout=wd.stall_timeout,
            max_total_restarts=rule.max_total_restarts, shared_budget=shared,
            peers_report=shared, remote_kill=shared, peer_stop_wait=peer_stop_wait)
        by_name = {t.name: t for t in plan.tasks}       # (plan.task(n) is a scan: 512^2 at 512)
        tasks = [(n, by_name[n].job, by_name[n].restart, by_name[n].port) for n in here]
        mine = set(here)
        others = {t.name: t.job for t in plan.tasks if t.name not in mine}
        where = {t.name: t.endpoint for t in plan.tasks}
        return cls(tasks, settings, others, where)

    # ------------------------------------------------------------------ entry points
    def begin(self, now: float) -> List[Action]:
        """The first actions: start every task, ps first (workers dial them)."""
        by_job: Dict[str, List[str]] = {}
        for t in self.tasks.values():
            by_job.setdefault(t.job, []).append(t.name)
        self.phase = "run"
        self._last_watch = now
        return [Start(name, 0) for job in rules.start_order(by_job) for name in by_job[job]]

    def handle(self, *events: Event) -> List[Action]:
        out: List[Action] = []
        for ev in events:
            if self.finished:
                break
            self._now = getattr(ev, "now", self._now)
            getattr(self, "_on_" + type(ev).__name__)(ev, out)
            self._advance(getattr(ev, "now", 0.0), out)
        return out

    # ------------------------------------------------------------------ queries
    def unopened(self) -> List[str]:
        """Running tasks whose server port the driver should probe (PortOpen): every task with
        a port (the startup watchdog holds only ps and worker tasks to it; for the others it
        tells :meth:`shown` when the task stops starting)."""
        return [t.name for t in self.tasks.values()
                if t.state == TaskState.RUNNING and t.port is not None and not t.up
                and not t.forced]

    def alive(self) -> List[str]:
        return [t.name for t in self.tasks.values() if t.state.alive]

    def shown(self, name: str) -> str:
        """The task's state as the live table shows it. A running task is ``starting`` until
        its server port accepts connections or it reports a step (TensorFlow takes seconds to
        load), ``serving`` once its port is open (a ps never reports steps), ``running`` once
        it reports progress, and ``stopping`` while the run stops (it waits for its wave or
        for its SIGTERM to end it)."""
        t = self.tasks[name]
        if t.state != TaskState.RUNNING:
            return t.state.value
        if self.phase == "stop" or t.forced:
            return TaskState.STOPPING.value
        if t.step is not None:
            return TaskState.RUNNING.value
        if t.up:
            return "serving"
        if t.port is not None:
            return "starting"
        return TaskState.RUNNING.value       # nothing to watch for: no port, no steps yet

    @property
    def decided(self) -> bool:
        return self.result != RunState.RUNNING

    # ------------------------------------------------------------------ events
    def _on_Tick(self, ev: Tick, out: List[Action]) -> None:
        if self.phase == "run" and ev.now >= self._next_start_at:   # a look at every task
            later = float("inf")
            for t in self.tasks.values():
                if t.state != TaskState.RESTARTING or t.start_at == float("inf"):
                    continue
                if t.name not in self._claims and ev.now >= t.start_at:
                    t.start_at = float("inf")        # once: Started or StartFailed follows
                    out.append(Start(t.name, t.restarts))
                else:
                    later = min(later, t.start_at)
            self._next_start_at = later
        if self.phase == "run":
            if self._last_watch is None or ev.now - self._last_watch >= WATCH_EVERY:
                self._last_watch = ev.now
                self._watch(ev.now, out)

    def _on_Started(self, ev: Started, out: List[Action]) -> None:
        t = self.tasks[ev.task]
        t.state = check_transition(t.state, TaskState.RUNNING, t.name)
        t.pid, t.returncode, t.ended = ev.pid, None, None
        t.started = ev.now
        if t.first_started is None:
            t.first_started = ev.now
        t.up, t.forced, t.port_conflict = False, "", False
        t.waiting_on.clear()
        t.alive_at, t.longest_gap = None, 0.0
        if self.phase == "stop":                 # started while the run was being stopped
            self._wave.append(t.name)
            self._wave_all.append(t.name)
            self._stop_one(t, out, signal.SIGKILL if self.kill_now else signal.SIGTERM)

    def _on_StartFailed(self, ev: StartFailed, out: List[Action]) -> None:
        self.root_note = ev.message
        if not self.decided:
            self._decide(RunState.FAILED, ev.code, ev.message, out, announce=False)

    def _on_Exited(self, ev: Exited, out: List[Action]) -> None:
        t = self.tasks[ev.task]
        rc = ev.returncode
        t.returncode, t.ended = rc, ev.now
        if t.state == TaskState.STOPPING or self.phase == "stop":
            if t.state == TaskState.RUNNING:
                t.state = check_transition(t.state, TaskState.STOPPING, t.name)
            t.state = check_transition(t.state, TaskState.STOPPED, t.name)
            out.append(self._exit_note(t, TaskState.STOPPED))
            return
        new = TaskState.SUCCEEDED if rc == 0 else TaskState.FAILED
        t.state = check_transition(t.state, new, t.name)
        if new == TaskState.SUCCEEDED and not self.s.peers_report:
            if self._needs is None:
                self._needs = rules.success_needs(self.s.success, self.s.chief, self.tasks,
                                                  self.s.chief in self.tasks)
                self._needs_left = len(self._needs)
            if t.name in self._needs:
                self._needs_left -= 1
        out.append(self._exit_note(t, new))
        if self.phase == "grace":
            if rc != 0:
                out.append(Say(f"{t.name} ended with {describe_exit(rc)} after the run had succeeded"))
            return
        if self.decided:                         # the run is over: no restart, no verdict
            return
        if rc == 0:
            out.append(Say(f"{t.name} exited 0 after {_duration(ev.now - (ev.now if t.started is None else t.started))}"))
            return
        if t.forced:
            t.note = t.forced
        elif t.port_conflict:
            t.note = f"port conflict: {self.where.get(t.name) or t.port} is in use (Could not start gRPC server)"
        elif ev.cause:
            t.note = ev.cause
        out.append(Say(f"{t.name} failed ({describe_exit(rc)})" + (f": {t.note}" if t.note else ""),
                       error=True))
        early = (not t.restarts and t.first_started is not None
                 and ev.now - t.first_started < t.rule.min_uptime)
        total = 0 if self.s.shared_budget else self.total_restarts
        d = rules.decide_restart(t.rule, rc, t.restarts, total, port_conflict=t.port_conflict,
                                 early=early)
        if d.restart and self.s.shared_budget and t.rule.max_total_restarts is not None:
            self._claims[t.name] = d.delay
            t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
            self._start_at(t, ev.now + d.delay)
            out.append(ClaimRestart(t.name))
            return
        if d.restart:
            self._restart(t, d, ev.now, out)
            return
        self._fail(t, d.reason, out)

    def _on_RestartClaim(self, ev: RestartClaim, out: List[Action]) -> None:
        t = self.tasks[ev.task]
        delay = self._claims.pop(ev.task, 0.0)
        if t.state != TaskState.RESTARTING or self.decided:
            return
        if ev.granted:
            t.restarts += 1
            self.total_restarts += 1
            self._start_at(t, ev.now + delay)
            why = f"restart {t.restarts} of {t.rule.max_restarts}"
            out.append(Say(f"{t.name}: {why} in {delay:.1f}s"))
            out.append(note("task_restarting", t.name, reason=why, attempt=t.restarts, delay=delay))
            return
        reason = ev.reason or (f"the run's restart budget is spent ({t.rule.max_total_restarts} "
                               f"of {t.rule.max_total_restarts})")
        t.state = TaskState.FAILED                 # the claim failed: the restart never was
        self._fail(t, reason, out)

    def _on_Progressed(self, ev: Progressed, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is None:
            return
        if ev.step is None or ev.step != t.step:     # a step that stands still is no life
            t.mark_life(ev.now)
        if ev.step is not None:
            t.step = ev.step
            if self.best_step is None or ev.step > self.best_step:
                self.best_step, self.best_step_at = ev.step, ev.now

    def _on_PortOpen(self, ev: PortOpen, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None and t.state == TaskState.RUNNING:
            t.up = True

    def _on_PortConflict(self, ev: PortConflict, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None:
            t.port_conflict = True

    def _on_Waiting(self, ev: Waiting, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None and t.state == TaskState.RUNNING:
            t.waiting_on.setdefault(ev.on, ev.now)

    def _on_Interrupt(self, ev: Interrupt, out: List[Action]) -> None:
        if self.interrupted is not None:
            if ev.signum == signal.SIGINT and not self.kill_now:
                self.kill_now = True
                out.append(Say("second Ctrl-C: killing every task now (SIGKILL)"))
                if self.phase == "stop":
                    for name in self._wave:
                        out.append(Kill(name, signal.SIGKILL))
                        out.append(note("stop_sent", name, signal="SIGKILL"))
                    self._wave_killed = True
                    self._wave_deadline = ev.now + KILL_WAIT
            return
        self.interrupted = ev.signum
        if self.phase == "grace":                # the run has succeeded already
            self._begin_stop(ev.now, out)
            return
        if not self.decided:
            words = f"interrupted by {_signame(ev.signum)}"
            self._decide(RunState.INTERRUPTED, rules.signal_exit_code(ev.signum), words, out)
            if ev.signum == signal.SIGINT:
                out.append(Say("press Ctrl-C again to kill every task at once"))

    def _on_KillRequest(self, ev: KillRequest, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None and t.state == TaskState.RUNNING and not t.forced:
            self._force(t, ev.reason, out)

    def _on_PeerEnded(self, ev: PeerEnded, out: List[Action]) -> None:
        self.peer_ok[ev.task] = ev.ok

    def _on_RunOver(self, ev: RunOver, out: List[Action]) -> None:
        if not self.decided:
            self._decide(RunState.SUCCEEDED, rules.EXIT_OK, ev.words, out, origin_here=False)

    def _on_ChiefGone(self, ev: ChiefGone, out: List[Action]) -> None:
        if not self.decided:
            self._decide(RunState.SUCCEEDED, rules.EXIT_OK, ev.words, out)

    # ------------------------------------------------------------------ the rules at work
    def _start_at(self, t: TaskStatus, at: float) -> None:
        """Start ``t`` again at ``at`` (a Tick then looks; no look at every task every Tick)."""
        t.start_at = at
        self._next_start_at = min(self._next_start_at, at)

    def _restart(self, t: TaskStatus, d: rules.Decision, now: float, out: List[Action]) -> None:
        t.restarts += 1
        self.total_restarts += 1
        t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
        self._start_at(t, now + d.delay)
        out.append(Say(f"{t.name}: {d.reason} in {d.delay:.1f}s"))
        out.append(note("task_restarting", t.name, reason=d.reason, attempt=t.restarts, delay=d.delay))

    def _fail(self, t: TaskStatus, reason: str, out: List[Action]) -> None:
        if self.root_cause is None:
            self.root_cause = t.name
        if t.restarts or t.rule.policy != "never":
            t.note = (t.note + "; " if t.note else "") + f"not restarted: {reason}"
        code = rules.EXIT_BAD_INPUT if t.port_conflict else rules.EXIT_FAILED
        self._decide(RunState.FAILED, code, f"{t.name} failed ({describe_exit(t.returncode)})", out)

    def _force(self, t: TaskStatus, reason: str, out: List[Action]) -> None:
        t.forced = reason
        out.append(Say(f"{t.name}: {reason}; killing it", error=True))
        out.append(Kill(t.name, signal.SIGKILL))

    def _succeeded_map(self) -> Dict[str, bool]:
        out = {name: t.state == TaskState.SUCCEEDED for name, t in self.tasks.items()}
        if self.s.peers_report:
            for name in self.others:
                out[name] = self.peer_ok.get(name, False)
        return out

    def _check_success(self, out: List[Action]) -> None:
        # This runs after every event; a look at every task costs O(tasks). Without reports
        # from other nodes the rule can hold only once every task it needs has exited 0.
        if not self.s.peers_report and (self._needs is None or self._needs_left):
            return
        chief_here = self.s.chief in self.tasks or (self.s.peers_report and self.s.chief in self.others)
        words = rules.success_reached(self.s.success, self.s.chief, self._succeeded_map(), chief_here)
        if words is not None:
            self._decide(RunState.SUCCEEDED, rules.EXIT_OK, words, out)

    def _watch(self, now: float, out: List[Action]) -> None:
        """No silent hangs: servers that never come up, sessions waiting on a task, a stalled step."""
        s = self.s
        actions: List[rules.WatchdogAction] = []
        here = {n: t.state == TaskState.RUNNING and not t.forced for n, t in self.tasks.items()}
        if s.remote_kill:      # tasks elsewhere: their own driver kills them (AskKill)
            here.update({n: n not in self.peer_ok for n in self.others})
        life = {n: t.alive_at for n, t in self.tasks.items()}
        for t in self.tasks.values():
            if t.state != TaskState.RUNNING or t.forced:
                continue
            if t.serves and not t.up:
                a = rules.check_startup(t.name, now if t.started is None else t.started, False, now,
                                        s.startup_timeout, t.port, last_progress_at=t.alive_at)
                if a is not None:
                    actions.append(a)
                    continue
            for a in rules.check_waiting(t.name, dict(t.waiting_on), now, s.waiting_timeout,
                                         here, self.where, life):
                t.waiting_on.pop(a.task, None)
                actions.append(a)
        gone = [f"{t.name} ({t.state.value}{', ' + describe_exit(t.returncode) if t.returncode is not None else ''})"
                for t in self.tasks.values() if t.state != TaskState.RUNNING]
        lives = [t.alive_at for t in self.tasks.values() if t.alive_at is not None]
        stall = rules.check_stall(self.best_step, self.best_step_at, now, s.stall_timeout, gone,
                                  last_life_at=max(lives) if lives else None,
                                  cadence=max((t.longest_gap for t in self.tasks.values()), default=0.0))
        if stall is not None:
            actions.append(stall)
        for a in actions:
            out.append(note("watchdog", a.task, reason=a.reason, action=a.action))
            if a.action == "kill" and a.task in self.others:
                out.append(AskKill(a.task, a.reason))
                continue
            if a.action == "fail_run":
                self.root_note = a.reason
                out.append(Say(a.reason, error=True))
                self._decide(RunState.FAILED, rules.EXIT_FAILED, a.reason, out)
                return
            t = self.tasks[a.task]
            if t.state == TaskState.RUNNING and not t.forced:
                self._force(t, a.reason, out)

    def _decide(self, result: RunState, code: int, words: str, out: List[Action],
                announce: bool = True, origin_here: bool = True) -> None:
        self.result, self.exit_code, self.words = result, code, words
        rule = self.s.success if result == RunState.SUCCEEDED else (
            "restart" if result == RunState.FAILED else "signal")
        out.append(note("decision", result=result.value, rule=rule, exit_code=code, reason=words))
        if origin_here and result in (RunState.SUCCEEDED, RunState.FAILED):
            out.append(EndRun(result, words))
        if result == RunState.SUCCEEDED:
            out.append(Say(f"run succeeded ({words})"))
            self._begin_grace(self._now, out)
            return
        if announce:
            if result == RunState.FAILED and self.root_cause is not None:
                t = self.tasks[self.root_cause]
                out.append(Say(f"run failed: {t.name} ({describe_exit(t.returncode)}); "
                               f"stopping the others", error=True))
            elif result == RunState.INTERRUPTED:
                out.append(Say(f"{words}; stopping the cluster"))
        self._begin_stop(self._now, out)

    def _begin_grace(self, now: float, out: List[Action]) -> None:
        waiting = [t.name for t in self.tasks.values()
                   if t.state in (TaskState.RUNNING, TaskState.RESTARTING)
                   and rules.waits_for_grace(t.job)]
        if not waiting or self.s.grace <= 0:
            self._begin_stop(now, out)
            return
        self.phase = "grace"
        self._grace_tasks = waiting
        self._grace_until = now + self.s.grace
        out.append(Say(f"giving {', '.join(waiting)} {self.s.grace:g}s to finish"))

    def _begin_stop(self, now: float, out: List[Action]) -> None:
        """Stop what still runs, in the rulebook's waves: chief, workers and evaluators (a chief
        that saves a last checkpoint on SIGTERM needs its ps), then ps tasks."""
        self.phase = "stop"
        for t in self.tasks.values():
            if t.state in (TaskState.RESTARTING, TaskState.PENDING):
                t.state = check_transition(t.state, TaskState.STOPPED, t.name)
                self._claims.pop(t.name, None)
        live = [t for t in self.tasks.values() if t.state.alive]
        first, then = rules.stop_waves({t.job for t in live} | {"ps"})   # "ps": the second wave always exists
        self._waves = [[t.name for t in live if t.job in first],
                       [t.name for t in live if t.job in then]]
        self._wave = []
        self._next_wave(now, out)

    def _next_wave(self, now: float, out: List[Action]) -> None:
        while self._waves:
            wave = self._waves[0]
            is_ps_wave = len(self._waves) == 1
            if is_ps_wave and wave and self._peers_still_running():
                if self._peer_wait_until is None:
                    wait = self.s.peer_stop_wait if self.s.peer_stop_wait is not None \
                        else self.s.stop_timeout
                    self._peer_wait_until = now + wait
                    out.append(Say(f"waiting up to {wait:g}s for "
                                   f"{', '.join(self._peers_still_running())} to stop before the ps"))
                if now < self._peer_wait_until:
                    return
            self._waves.pop(0)
            live = [n for n in wave if self.tasks[n].state.alive]
            if not live:
                continue
            self._wave = list(live)
            self._wave_all.extend(live)
            sig = signal.SIGKILL if self.kill_now else signal.SIGTERM
            for name in live:
                t = self.tasks[name]
                self._stop_one(t, out, sig)
            self._wave_deadline = now + self.s.stop_timeout
            self._wave_killed = sig == signal.SIGKILL
            if self._wave_killed:
                self._wave_deadline = now + KILL_WAIT
            return
        # every wave done: SIGKILL to whatever is left of each group after its leader
        for name in self._wave_all:
            out.append(Kill(name, signal.SIGKILL))
        self.phase = "done"
        self.finished = True
        if self.result == RunState.RUNNING:
            self.result, self.exit_code = RunState.FAILED, rules.EXIT_FAILED
        out.append(Finished(self.result, self.exit_code if self.exit_code is not None
                            else rules.EXIT_FAILED))

    def _stop_one(self, t: TaskStatus, out: List[Action], sig: int = signal.SIGTERM) -> None:
        out.append(Say(f"stopping {t.name} (pid {t.pid}): {signal.Signals(sig).name} to its "
                       f"process group"))
        if t.state == TaskState.RUNNING:
            t.state = check_transition(t.state, TaskState.STOPPING, t.name)
        out.append(Kill(t.name, sig))
        out.append(note("stop_sent", t.name, signal=signal.Signals(sig).name))

    def _peers_still_running(self) -> List[str]:
        """Non-ps tasks elsewhere (Slurm: other nodes) not yet known to have ended."""
        if not self.s.peers_report:
            return []
        return [n for n, job in self.others.items()
                if job not in rules.SERVICE_JOBS and n not in self.peer_ok]

    def _advance(self, now: float, out: List[Action]) -> None:
        """After each event: the success rule, the grace period, the stop waves."""
        self._now = now
        if self.phase == "run" and not self.decided:
            self._check_success(out)
        if self.phase == "grace":
            running = [n for n in self._grace_tasks if self.tasks[n].state == TaskState.RUNNING]
            if not running or now >= self._grace_until:
                self._begin_stop(now, out)
        if self.phase == "stop":
            self._wave = [n for n in self._wave if self.tasks[n].state.alive]
            if not self._wave:
                self._next_wave(now, out)
                return
            if not self._wave_killed and (now >= self._wave_deadline or self.kill_now):
                for name in self._wave:
                    t = self.tasks[name]
                    out.append(Say(f"{t.name} (pid {t.pid}) still running "
                                   f"{self.s.stop_timeout:g}s after SIGTERM: SIGKILL"))
                    out.append(Kill(name, signal.SIGKILL))
                    out.append(note("stop_sent", name, signal="SIGKILL"))
                self._wave_killed = True
                self._wave_deadline = now + KILL_WAIT
            elif self._wave_killed and now >= self._wave_deadline:
                for name in self._wave:
                    t = self.tasks[name]
                    out.append(Say(f"{t.name} (pid {t.pid}) did not die after SIGKILL", error=True))
                self._wave = []
                self._next_wave(now, out)

    def _exit_note(self, t: TaskStatus, state: TaskState) -> Note:
        return note("task_exited", t.name, state=state.value, **exit_fields(t.returncode))


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
