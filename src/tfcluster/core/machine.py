"""The run machine: the one place where a run's rules act.

A driver -- the supervisor (:mod:`tfcluster.drivers.supervisor`: the local, ssh and Ray
backends, and per-host agents) or the Slurm node driver (:mod:`tfcluster.backends.agent.node`)
-- turns processes, output, clocks and signals into **events** and hands them to
:meth:`RunMachine.handle`, which returns **actions** for the driver to carry out. The machine
owns what a run decides: task states (:class:`TaskState`) and the run's phase (:class:`Phase`),
restarts (budgets, backoff, ``min_uptime``), the success rule and the grace period, the
watchdogs, the stop order (chief, workers and evaluators first, ps last) with SIGTERM then
SIGKILL, a regroup when a node is lost, and the run's result and exit code. It has no threads,
files, clocks or signals inside: time comes in with the events, so a table of events tests it
(tests/unit/test_machine.py), in the manner of dask's ``handle_stimulus(*events) ->
instructions``.

The machine is written down once; the drivers differ only in how they learn what happened:

* the supervisor: ``Exited`` from the process, ``PortOpen`` from a connect probe,
  ``Progressed`` / ``Waiting`` / ``PortConflict`` from the task's output, ``Interrupt`` from a
  signal, ``ChiefGone`` (per-host agents) and ``Regrouped`` (Ray: a lost node);
* the Slurm node driver: the same for its own task, plus what the other nodes' drivers tell it
  through the shared run folder (``PeerEnded``, ``KillRequest``, ``RunOver``, ``RestartClaim``).
"""
from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union, get_args

from tfcluster.core import rules
from tfcluster.core.rules import describe_exit, exit_fields
from tfcluster.core.rules import format_duration as _duration
from tfcluster.core.task_output import still_waiting_on

# ---------------------------------------------------------------------------- states


#: how many times a run chooses its chosen ports again after one was taken (then it fails)
MAX_PORT_RECHOICES = 3


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
    FAILED -> RESTARTING -> RUNNING | STOPPED | FAILED (the run's shared restart budget refused
    the restart: it never was);  STOPPING -> STOPPED | RESTARTING (the cluster regroups: a task's
    node was lost, every task is stopped and started again elsewhere).
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


TASK_TRANSITIONS = {
    TaskState.PENDING: {TaskState.RUNNING, TaskState.STOPPED},
    TaskState.RUNNING: {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPING},
    TaskState.FAILED: {TaskState.RESTARTING},
    TaskState.RESTARTING: {TaskState.RUNNING, TaskState.STOPPED, TaskState.FAILED},
    TaskState.STOPPING: {TaskState.STOPPED, TaskState.RESTARTING},   # stopped to move (regroup)
    TaskState.SUCCEEDED: set(),
    TaskState.STOPPED: set(),
    TaskState.SKIPPED: set(),
}


class TransitionError(RuntimeError):
    """A state change the task's life does not allow: a bug in tfcluster, not bad input."""


def check_transition(old: TaskState, new: TaskState, task: str = "") -> TaskState:
    """``new`` if ``old -> new`` is allowed, else TransitionError."""
    if new not in TASK_TRANSITIONS[old]:
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


class Phase(str, enum.Enum):
    """Where the run stands as a whole (:attr:`RunMachine.phase`).

    START    before :meth:`RunMachine.begin`
    RUN      tasks start, run and restart; the watchdogs look
    GRACE    the run has succeeded: the tasks that may end by themselves get ``grace`` seconds
    STOP     every task is stopped, in waves: chief, workers and evaluators first, ps last
    DONE     every task here has ended (:class:`Finished`)
    REGROUP  a task's node was lost: every task is stopped in the same waves, to start again
    REPLACE  the driver places the tasks again (:class:`Regroup`; :class:`Regrouped` answers)

    START -> RUN;  RUN -> GRACE | STOP | REGROUP;  GRACE -> STOP;  STOP -> DONE;
    REGROUP -> REPLACE;  REPLACE -> RUN; and a regroup the run's verdict overtakes (an
    interrupt, the chief elsewhere ending) goes where the verdict goes: REGROUP | REPLACE ->
    GRACE | STOP.
    """

    START = "start"
    RUN = "run"
    GRACE = "grace"
    STOP = "stop"
    DONE = "done"
    REGROUP = "regroup"
    REPLACE = "replace"

    @property
    def stopping(self) -> bool:
        """Tasks are being stopped, wave after wave (the run's end, or a regroup)."""
        return self in (Phase.STOP, Phase.REGROUP)

    @property
    def holds_starts(self) -> bool:
        """A start the machine asked for earlier is not carried out now: the tasks are being
        stopped, or placed again."""
        return self in (Phase.STOP, Phase.REGROUP, Phase.REPLACE)


PHASE_TRANSITIONS = {
    Phase.START: {Phase.RUN},
    Phase.RUN: {Phase.GRACE, Phase.STOP, Phase.REGROUP},
    Phase.GRACE: {Phase.STOP},
    Phase.STOP: {Phase.DONE},
    Phase.REGROUP: {Phase.REPLACE, Phase.GRACE, Phase.STOP},
    Phase.REPLACE: {Phase.RUN, Phase.GRACE, Phase.STOP},
    Phase.DONE: set(),
}


def check_phase_change(old: Phase, new: Phase) -> Phase:
    """``new`` if the run may go from phase ``old`` to ``new``, else TransitionError."""
    if new not in PHASE_TRANSITIONS[old]:
        raise TransitionError(f"the run's phase {old.value} -> {new.value} is not a change of a run")
    return new


# ---------------------------------------------------------------------------- events
# What a driver reports. ``now`` is the driver's clock (seconds).


@dataclass(frozen=True)
class Tick:
    """Time has passed: deadlines (restart backoff, watchdog, grace, stop timeout) are due.
    ``watch``: whether the watchdogs look now; None (a driver) -- every WATCH_EVERY seconds.
    The machine's input log (:attr:`RunMachine.inputs`) records it, so a replay looks when the
    run looked."""
    now: float
    watch: Optional[bool] = None


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
    cause: str = ""               # what the driver learnt of the death (tfcluster.backends.oom,
                                  # the exception in its output: tfcluster.runs.failure)
    lost_node: str = ""           # the task's node was lost: it can only come back elsewhere
    hint: str = ""                # "hint: ..." naming the fix, said with the failure


@dataclass(frozen=True)
class Progressed:
    """The task reported its step (``step``; life when it moved), or showed another sign of
    life (``step`` None: a Keras bar or a TF1 hook line that moved, a protocol report).
    ``total``: the step it trains to, when it says; a task at its final step is ending."""
    task: str
    step: Optional[int]
    now: float
    total: Optional[int] = None


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
    """The run was decided elsewhere (another node's driver ended it)."""
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


@dataclass(frozen=True)
class Regrouped:
    """The driver's answer to :class:`Regroup`: the tasks were placed again (``ok``; the new
    endpoints are the driver's), or could not be (``message`` says why)."""
    ok: bool
    now: float
    message: str = ""


@dataclass(frozen=True)
class HostBack:
    """Elastic runs: ``node``, where workers were lost, takes tasks again (the driver's backend
    reached it); the workers that left with it start again."""
    node: str
    now: float


@dataclass(frozen=True)
class PeerLost:
    """A task run elsewhere was lost with its node, which the driver heard of while the run
    goes on (Slurm with ``--no-kill``: the launcher saw the node down while the job still
    runs), or (``node`` "") it left the run there, out of its restarts (``reason``). An elastic
    worker leaves the run while min_workers allows, as a worker here lost with its host does;
    any other task lost fails the run, as a lost node always did."""
    task: str
    node: str
    now: float
    reason: str = ""


Event = Union[Tick, Started, StartFailed, Exited, Progressed, PortOpen, PortConflict, Waiting,
              Interrupt, KillRequest, PeerEnded, RunOver, ChiefGone, RestartClaim, Regrouped,
              HostBack, PeerLost]


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
class LogEvent:
    """A row for the run's event log (events.jsonl, and its line in launcher.log): ``event`` is
    the row's name (``task_exited``), ``fields`` its other keys."""
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


@dataclass(frozen=True)
class Regroup:
    """Every task has stopped because ``task``'s node (``node``) was lost, or (``node`` "") the
    port chosen for it was taken before its server bound it: place the tasks again (the lost
    node excluded; ports chosen again), give them new endpoints, and answer
    :class:`Regrouped`; the machine then starts every task (a new TF_CONFIG, the next restart
    count)."""
    task: str
    node: str
    place: bool = True       # False: nothing moves (an elastic run's workers changed): answer at once


Action = Union[Start, Kill, LogEvent, Say, ClaimRestart, AskKill, EndRun, Finished, Regroup]


def log_event(event: str, task: Optional[str] = None, **fields) -> LogEvent:
    """A :class:`LogEvent` with its fields as keywords."""
    return LogEvent(event, task, tuple(fields.items()))


# ---------------------------------------------------------------------------- the machine


@dataclass
class TaskTrack:
    """What the machine knows of one task it runs, and keeps up to date: its :class:`TaskState`
    (``state``) and everything else the rules read (pid, exits, restarts, signs of life)."""

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
    why: str = ""                          # why it ended as it did (a watchdog kill, a port
                                           # conflict, an OOM kill, a refused restart): the
                                           # ``note`` of run.json and of the end record
    port_conflict: bool = False
    waiting_on: Dict[str, float] = field(default_factory=dict)   # task -> first "still waiting"
    step: Optional[int] = None             # the last step it reported
    alive_at: Optional[float] = None       # the last sign of progress
    longest_gap: float = 0.0               # the longest wait for a sign of life (its cadence)
    cadence: float = 0.0                   # the longest gap between two signs of life (not
                                           # counting the wait for the first: start-up)
    ending_at: Optional[float] = None      # when it reported its final step (step = total)
    stalled_at: Optional[float] = None     # its last life, once the watchdog saw it stop
                                           # while the run went on (None: not stalled)
    stalled_step: Optional[int] = None     # ... and the step it stood at
    killed: str = ""                       # why tfcluster sent this attempt SIGKILL ('' : it did not)
    left: str = ""                         # elastic: why it left the run ("" while in it)
    left_node: str = ""                    # ... the node lost with it (it may come back there)

    def mark_life(self, now: float) -> None:
        self.longest_gap = rules.longest_gap(self.longest_gap, self.alive_at, self.started, now)
        if self.alive_at is not None:
            self.cadence = max(self.cadence, now - self.alive_at)
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
    stall_warning: float = 0.4       # a task silent this fraction of stall_timeout while the
                                     # run goes on is named (0: off)
    end_timeout: float = 60.0        # a task at its final step gets this long to exit (0: off)
    max_total_restarts: Optional[int] = None
    shared_budget: bool = False      # the run's restart budget is claimed through the driver
    peers_report: bool = False       # the driver reports the end of tasks run elsewhere
    remote_kill: bool = False        # a task elsewhere that others wait on is killed through
                                     # the driver (AskKill) instead of failing the run
    peer_stop_wait: Optional[float] = None   # ps wave: how long to wait for non-ps tasks
                                             # elsewhere to end (default: stop_timeout)
    min_workers: Optional[int] = None   # elastic: the fewest workers the run goes on with
    on_change: str = "go-on"            # elastic.on_change: go-on; restart (a change restarts
                                        # every task); restart-chief (a worker back restarts the
                                        # chief); restart-on-join (a worker back restarts every task)
    moves_nodes: bool = True            # a lost node regroups the cluster elsewhere (Ray);
                                        # False (ssh: a task stays on its host): a lost host
                                        # is an ordinary failure, unless elastic


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
        self.tasks: Dict[str, TaskTrack] = {
            name: TaskTrack(name=name, job=job, rule=rule, port=port)
            for name, job, rule, port in tasks}
        self.others: Dict[str, str] = dict(others or {})
        self.where: Dict[str, str] = dict(where or {})
        self.peer_ok: Dict[str, bool] = {}           # tasks elsewhere that have ended -> ok
        self.peers_left: Dict[str, Tuple[str, str]] = {}   # elastic: workers elsewhere that left
                                                           # the run -> (why, their node)
        self.result = RunState.RUNNING
        self.exit_code: Optional[int] = None
        self.words = ""
        self.root_cause: Optional[str] = None        # the task that failed first
        self.root_cause_words: Optional[str] = None  # or, without one, why the run failed
        self.decided_here = False                    # the verdict was reached here (not RunOver)
        self.total_restarts = 0
        self.best_step: Optional[int] = None
        self.best_step_at = 0.0
        self.interrupted: Optional[int] = None
        self.kill_now = False
        self.finished = False
        self.phase = Phase.START                     # changed by _enter alone
        self._moving: Optional[Tuple[str, str]] = None   # (task, node) whose loss regroups
        self._restart_for = ""                # elastic.on_change restart: why every task restarts
        #: tasks whose port is chosen where they run when the run starts (``port_chosen``): a
        #: port taken before the task's server bound it is chosen again, at most
        #: MAX_PORT_RECHOICES times a run, not a failed run
        self.movable_ports: set = set()
        self._rechoices = 0
        self._last_watch: Optional[float] = None
        self._grace_until = 0.0
        self._grace_tasks: List[str] = []
        self._waves: List[List[str]] = []
        self._wave: List[str] = []
        self._wave_all: List[str] = []
        self._wave_deadline = 0.0
        self._wave_killed = False
        self._peer_wait_until: Optional[float] = None
        self._claims: Dict[str, float] = {}          # task -> delay, waiting for RestartClaim
        self._watched = False                        # the watchdogs looked in this event
        self._now = 0.0
        # without reports from elsewhere the tasks the success rule needs are fixed: count them
        self._next_start_at = float("inf")   # the earliest start_at of a task to start again
        self._needs: Optional[set] = None    # rules.success_needs, asked on the first exit 0
        self._needs_left = 0                 # ... of them not yet exited 0 (SUCCEEDED is final)
        #: what came in (every event but Ticks that changed nothing), when ``log_inputs``:
        #: :func:`replay` of it on a new machine gives the same actions
        self.log_inputs = False
        self.inputs: List[Event] = []
        self._run_warned = False             # the run-wide "no progress" warning was given
        self.run_ref = ""                    # how a person names this run (tfcluster stack)

    @classmethod
    def from_plan(cls, plan, names: Optional[Iterable[str]] = None, *, shared: bool = False,
                  peer_stop_wait: Optional[float] = None) -> "RunMachine":
        """A machine for ``names`` (default: the plan's selected tasks). ``shared``: a Slurm
        node driver, which shares the restart budget, hears of the other tasks' ends and asks
        other nodes to kill a task through the run folder."""
        here = list(names) if names is not None else list(plan.selected)
        if shared and peer_stop_wait is None:
            peer_stop_wait = rules.peer_stop_wait(plan.grace, plan.stop_timeout)
        rule = plan.task(here[0]).restart if here else rules.RestartRule()
        wd = plan.watchdog
        settings = Settings(
            chief=plan.chief, success=plan.success, grace=plan.grace,
            stop_timeout=plan.stop_timeout, startup_timeout=wd.startup_timeout,
            waiting_timeout=wd.waiting_timeout, stall_timeout=wd.stall_timeout,
            stall_warning=wd.stall_warning, end_timeout=wd.end_timeout,
            max_total_restarts=rule.max_total_restarts, shared_budget=shared,
            peers_report=shared, remote_kill=shared, peer_stop_wait=peer_stop_wait,
            min_workers=getattr(plan, "min_workers", None), moves_nodes=plan.backend != "ssh",
            on_change=getattr(plan, "on_change", "go-on"))
        by_name = {t.name: t for t in plan.tasks}       # (plan.task(n) is a scan: 512^2 at 512)
        tasks = [(n, by_name[n].job, by_name[n].restart, by_name[n].port) for n in here]
        mine = set(here)
        others = {t.name: t.job for t in plan.tasks if t.name not in mine}
        where = {t.name: t.endpoint for t in plan.tasks}
        m = cls(tasks, settings, others, where)
        m.movable_ports = {n for n in here if getattr(by_name[n], "port_chosen", False)}
        return m

    # ------------------------------------------------------------------ entry points
    def begin(self, now: float) -> List[Action]:
        """The first actions: start every task, ps first (workers dial them)."""
        by_job: Dict[str, List[str]] = {}
        for t in self.tasks.values():
            by_job.setdefault(t.job, []).append(t.name)
        self._enter(Phase.RUN)
        self._last_watch = now
        return [Start(name, 0) for job in rules.start_order(by_job) for name in by_job[job]]

    def handle(self, *events: Event) -> List[Action]:
        out: List[Action] = []
        for ev in events:
            if self.finished:
                break
            self._now = getattr(ev, "now", self._now)
            before, self._watched = len(out), False
            getattr(self, "_on_" + type(ev).__name__)(ev, out)
            self._advance(getattr(ev, "now", 0.0), out)
            if self.log_inputs:
                if not isinstance(ev, Tick):
                    self.inputs.append(ev)
                elif len(out) > before:   # a Tick that did nothing changed nothing: not kept
                    self.inputs.append(Tick(ev.now, self._watched))
        return out

    def take_inputs(self) -> List[Event]:
        """The inputs logged since the last call (a driver writes them to events.jsonl)."""
        got, self.inputs = self.inputs, []
        return got

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
        if self.phase == Phase.STOP or t.forced:
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

    def exit_code_of(self, name: str) -> int:
        """The exit code of a driver that runs ``name`` alone (a Slurm node driver): the
        task's own (128+N for a signal) when it caused the run's failure -- so Slurm's
        accounting names the task that failed -- else the run's."""
        t = self.tasks[name]
        if self.result == RunState.FAILED and self.root_cause == name and t.returncode is not None:
            return rules.task_exit_code(t.returncode)
        return self.exit_code if self.exit_code is not None else rules.EXIT_FAILED

    def end_row(self, name: str, final: bool) -> Dict[str, object]:
        """What a task's driver tells the others of the task's end (a Slurm node's exit record
        in the run folder; the Slurm launcher builds run.json's task row from it): its state and
        exit, whether it failed the run, and the reason -- the task's own ``why`` (a watchdog
        kill, a port conflict, an OOM kill, a refused restart) wins, then the run's verdict
        (``final``), then the wording of its exit. Not ``final``: it exited 0 while the run goes
        on (others may wait for it: all-workers)."""
        t = self.tasks[name]
        failed = final and self.result == RunState.FAILED and self.root_cause in (name, None)
        return {
            "exit_code": self.exit_code_of(name) if final else rules.EXIT_OK,
            "returncode": t.returncode, "state": t.state.value,
            "exit": describe_exit(t.returncode), "note": t.why,
            "ok": t.state == TaskState.SUCCEEDED, "failed": bool(failed),
            "reason": t.why or (self.words if final else "") or describe_exit(t.returncode),
            "restarts": t.restarts, "pid": t.pid, "started": t.started,
            "first_started": t.first_started, "ended": t.ended, "final": final, "left": t.left,
            "decision": self.words if final and self.decided_here else None}

    # ------------------------------------------------------------------ events
    def _on_Tick(self, ev: Tick, out: List[Action]) -> None:
        if self.phase == Phase.RUN and ev.now >= self._next_start_at:   # a look at every task
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
        if self.phase == Phase.RUN:
            due = self._last_watch is None or ev.now - self._last_watch >= WATCH_EVERY
            if ev.watch if ev.watch is not None else due:
                self._last_watch = ev.now
                self._watched = True
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
        t.alive_at, t.longest_gap, t.cadence = None, 0.0, 0.0
        t.ending_at = t.stalled_at = t.stalled_step = None
        t.killed = ""
        if self.phase.stopping:    # started while the run was being stopped
            self._wave.append(t.name)
            self._wave_all.append(t.name)
            self._stop_one(t, out, signal.SIGKILL if self.kill_now else signal.SIGTERM)

    def _on_StartFailed(self, ev: StartFailed, out: List[Action]) -> None:
        self.root_cause_words = ev.message
        if not self.decided:
            self._decide(RunState.FAILED, ev.code, ev.message, out, announce=False)

    def _on_Exited(self, ev: Exited, out: List[Action]) -> None:
        t = self.tasks[ev.task]
        rc = ev.returncode
        t.returncode, t.ended = rc, ev.now
        if self.phase == Phase.REGROUP and not self.decided:   # stopped (or lost) to start again
            if t.state == TaskState.RUNNING:
                t.state = check_transition(t.state, TaskState.FAILED, t.name)
            t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
            t.start_at = float("inf")
            out.append(self._exit_event(t, TaskState.STOPPED))
            return
        if t.state == TaskState.STOPPING or self.phase == Phase.STOP:
            if rules.is_sigkill(rc) and not t.why:     # (a stalled task's why says more)
                t.why = self._sigkill_words(t, ev.cause)
            if t.state == TaskState.RUNNING:
                t.state = check_transition(t.state, TaskState.STOPPING, t.name)
            t.state = check_transition(t.state, TaskState.STOPPED, t.name)
            out.append(self._exit_event(t, TaskState.STOPPED))
            return
        new = TaskState.SUCCEEDED if rc == 0 else TaskState.FAILED
        t.state = check_transition(t.state, new, t.name)
        if rules.is_sigkill(rc):
            t.why = self._sigkill_words(t, ev.cause)
        if new == TaskState.SUCCEEDED and not self.s.peers_report:
            if self._needs is None:
                self._needs = rules.success_needs(self.s.success, self.s.chief,
                                                  [n for n, x in self.tasks.items() if not x.left],
                                                  self.s.chief in self.tasks)
                self._needs_left = len(self._needs)
            if t.name in self._needs:
                self._needs_left -= 1
        out.append(self._exit_event(t, new))
        if self.phase == Phase.GRACE:
            if rc != 0:
                out.append(Say(f"{t.name} ended with {describe_exit(rc)} after the run had succeeded"))
            return
        if self.decided:                         # the run is over: no restart, no verdict
            return
        if rc == 0:
            ran = ev.now - (ev.now if t.started is None else t.started)
            out.append(Say(f"{t.name} exited 0 after {_duration(ran)}"))
            return
        if rules.is_sigkill(rc):
            pass                      # _sigkill_words said who sent it (and tfcluster, why)
        elif t.forced:
            t.why = t.forced
        elif t.port_conflict:
            t.why = f"port conflict: {self.where.get(t.name) or t.port} is in use (Could not start gRPC server)"
        elif ev.cause:
            t.why = ev.cause
        out.append(Say(f"{t.name} failed ({describe_exit(rc)})" + (f": {t.why}" if t.why else "")
                       + (f"; {ev.hint}" if ev.hint else ""), error=True))
        if t.port_conflict and t.name in self.movable_ports and not self.s.shared_budget \
                and self._rechoices < MAX_PORT_RECHOICES:
            self._rechoices += 1
            self._begin_regroup(t, "", rules.Decision(
                True, f"its port {t.port} was taken before its server bound it: ports are chosen "
                      f"again ({self._rechoices} of {MAX_PORT_RECHOICES})"), ev.now, out, counted=False)
            return
        if ev.lost_node and self._may_shrink(t):
            self._shrink(t, f"its host {ev.lost_node} was lost", ev.lost_node, out)
            return
        if ev.lost_node and self.s.moves_nodes:
            total = 0 if self.s.shared_budget else self.total_restarts
            d = rules.decide_move(t.rule, t.restarts, total, ev.lost_node)
            if d.restart and not self.s.shared_budget:
                self._begin_regroup(t, ev.lost_node, d, ev.now, out)
            else:
                self._fail(t, d.reason if not d.restart else
                           f"its node {ev.lost_node} was lost (this backend cannot move it)", out)
            return
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

    @staticmethod
    def _sigkill_words(t: TaskTrack, cause: str) -> str:
        """Who sent a task its SIGKILL, as far as anyone can tell (Linux does not tell a parent
        who sent a signal): tfcluster, which knows its own kills (the watchdog: its reason; a
        stop that timed out, a second Ctrl-C: "killed by tfcluster: ..."); else what the
        driver learnt (the OOM killer's counters, :mod:`tfcluster.backends.oom`: "out of
        memory", or "not tfcluster, not the OOM killer"; a lost host or node); else not
        tfcluster, the OOM killer not asked."""
        if t.forced:                  # the watchdog's reason names it (tfcluster's watchdog)
            return t.forced
        if t.killed:
            return f"killed by tfcluster: {t.killed}"
        return cause or ("not tfcluster (SIGKILL from elsewhere; whether the OOM killer sent it "
                         "could not be read here)")

    def _on_RestartClaim(self, ev: RestartClaim, out: List[Action]) -> None:
        t = self.tasks[ev.task]
        delay = self._claims.pop(ev.task, 0.0)
        if t.state != TaskState.RESTARTING or self.decided:
            return
        if ev.granted:
            t.restarts += 1
            self.total_restarts += 1
            self._start_at(t, ev.now + delay)
            restart = f"restart {t.restarts} of {t.rule.max_restarts}"
            out.append(Say(f"{t.name}: {restart} in {delay:.1f}s"))
            out.append(log_event("task_restarting", t.name, reason=restart, attempt=t.restarts,
                                 delay=delay))
            return
        reason = ev.reason or (f"the run's restart budget is spent ({t.rule.max_total_restarts} "
                               f"of {t.rule.max_total_restarts})")
        # the claim failed: the restart never was
        t.state = check_transition(t.state, TaskState.FAILED, t.name)
        self._fail(t, reason, out)

    def _on_Progressed(self, ev: Progressed, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is None:
            return
        if ev.step is None or ev.step != t.step:     # a step that stands still is no life
            t.mark_life(ev.now)
            if t.waiting_on:       # it went on: what it waited for answered
                t.waiting_on.clear()
            if t.stalled_at is not None:
                out.append(Say(f"{t.name} makes progress again"))
                out.append(log_event("task_resumed", t.name, step=ev.step if ev.step is not None else t.step))
                t.stalled_at = t.stalled_step = None
        if ev.step is not None:
            t.step = ev.step
            if self.best_step is None or ev.step > self.best_step:
                self.best_step, self.best_step_at = ev.step, ev.now
            if rules.at_final_step(ev.step, ev.total) and t.ending_at is None:
                t.ending_at = ev.now
                out.append(log_event("task_ending", t.name, step=ev.step, total=ev.total))

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
                if self.phase == Phase.STOP:
                    for name in self._wave:
                        self.tasks[name].killed = "a second Ctrl-C killed every task at once"
                        out.append(Kill(name, signal.SIGKILL))
                        out.append(log_event("stop_sent", name, signal="SIGKILL"))
                    self._wave_killed = True
                    self._wave_deadline = ev.now + KILL_WAIT
            return
        self.interrupted = ev.signum
        if self.phase == Phase.GRACE:                # the run has succeeded already
            self._begin_stop(ev.now, out)
            return
        if not self.decided:
            words = f"interrupted by {rules.signal_name(ev.signum)}"
            self._decide(RunState.INTERRUPTED, rules.signal_exit_code(ev.signum), words, out)
            if ev.signum == signal.SIGINT:
                out.append(Say("press Ctrl-C again to kill every task at once"))

    def _on_KillRequest(self, ev: KillRequest, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None and t.state == TaskState.RUNNING and not t.forced:
            self._force(t, ev.reason, out)

    def _on_PeerEnded(self, ev: PeerEnded, out: List[Action]) -> None:
        self.peer_ok[ev.task] = ev.ok

    def _on_PeerLost(self, ev: PeerLost, out: List[Action]) -> None:
        job = self.others.get(ev.task)
        if job is None or ev.task in self.peers_left or ev.task in self.peer_ok or self.decided:
            return
        reason = (f"its node {ev.node} was lost" + (f" ({ev.reason})" if ev.reason else "")
                  if ev.node else ev.reason or "its driver said it left")
        if self._may_leave(ev.task, job):
            self.peers_left[ev.task] = (reason, ev.node)
            self._went(ev.task, reason, ev.node, "", out)
            return
        self.root_cause_words = f"{ev.task} lost: {reason}"
        self._decide(RunState.FAILED, rules.EXIT_FAILED, f"{ev.task} was lost ({reason})", out)

    def _on_RunOver(self, ev: RunOver, out: List[Action]) -> None:
        if not self.decided:
            self._decide(RunState.SUCCEEDED, rules.EXIT_OK, ev.words, out, origin_here=False)

    def _on_ChiefGone(self, ev: ChiefGone, out: List[Action]) -> None:
        if not self.decided:
            self._decide(RunState.SUCCEEDED, rules.EXIT_OK, ev.words, out)

    # ------------------------------------------------------------------ the rules at work
    def _enter(self, phase: Phase) -> None:
        self.phase = check_phase_change(self.phase, phase)

    def _begin_regroup(self, t: TaskTrack, node: str, d: rules.Decision, now: float,
                       out: List[Action], counted: bool = True) -> None:
        """``t``'s node is lost (rules.decide_move allowed it to move), or (``node`` "") its
        chosen port was taken: stop every task in the stop order (chief and workers first, so
        the chief can save, ps last), then ask the driver to place the cluster again
        (:class:`Regroup`). ``counted``: a restart of the run (a port chosen again is not)."""
        self._enter(Phase.REGROUP)
        self._moving = (t.name, node)
        if counted:
            self.total_restarts += 1
        t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
        t.start_at = float("inf")
        for other in self.tasks.values():       # a restart already due waits for the regroup
            if other.state == TaskState.RESTARTING:
                other.start_at = float("inf")
                self._claims.pop(other.name, None)
        self._next_start_at = float("inf")
        out.append(Say(f"{t.name}: {d.reason}; stopping every task", error=True))
        out.append(log_event("cluster_restarting", t.name, node=node, reason=d.reason,
                             attempt=t.restarts + 1))
        self._waves = self._stop_waves()
        self._wave, self._wave_all = [], []
        self._next_wave(now, out)

    def _on_Regrouped(self, ev: Regrouped, out: List[Action]) -> None:
        if self.decided or self.phase != Phase.REPLACE or self._moving is None:
            return
        name, node = self._moving
        self._moving = None
        t = self.tasks[name]
        self._enter(Phase.RUN)
        why, self._restart_for = self._restart_for, ""
        if why:                                   # elastic: every task again, the workers in the run
            starts = self._start_all(ev.now, [])
            which = "every task" if self.s.on_change == "restart" else ", ".join(a.task for a in starts)
            out.extend(starts)
            out.append(Say(f"{why}: starting {which} with {self.workers_line()}"))
            out.append(log_event("cluster_restarted", name, node="", attempt=0))
            return
        if not ev.ok:
            t.state = check_transition(t.state, TaskState.FAILED, t.name)
            what = f"its node {node} was lost" if node else "its port was taken"
            self._fail(t, f"{what} and the cluster could not be placed again"
                          + (f": {ev.message}" if ev.message else ""), out)
            return
        starts = self._start_all(ev.now, [])
        how = f"without node {node}" if node else "with ports chosen again"
        out.append(Say(f"the cluster was placed again {how}: starting every task "
                       f"with the new TF_CONFIG (restart {t.restarts})"))
        out.append(log_event("cluster_restarted", name, node=node, attempt=t.restarts))
        out.extend(starts)

    def _start_all(self, now: float, out: List[Action]) -> List[Action]:
        """After a regroup: start every task waiting to (ps first), each as a new attempt."""
        self._last_watch = now
        by_job: Dict[str, List[str]] = {}
        for x in self.tasks.values():
            if x.state in (TaskState.RESTARTING, TaskState.PENDING):
                if x.state == TaskState.RESTARTING:
                    x.restarts += 1     # every process is a new attempt (TFCLUSTER_RESTART_COUNT)
                x.start_at = float("inf")
                by_job.setdefault(x.job, []).append(x.name)
        out.extend(Start(n, self.tasks[n].restarts)
                   for job in rules.start_order(by_job) for n in by_job[job])
        return out

    def _start_at(self, t: TaskTrack, at: float) -> None:
        """Start ``t`` again at ``at`` (a Tick then looks; no look at every task every Tick)."""
        t.start_at = at
        self._next_start_at = min(self._next_start_at, at)

    def _restart(self, t: TaskTrack, d: rules.Decision, now: float, out: List[Action]) -> None:
        t.restarts += 1
        self.total_restarts += 1
        t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
        self._start_at(t, now + d.delay)
        out.append(Say(f"{t.name}: {d.reason} in {d.delay:.1f}s"))
        out.append(log_event("task_restarting", t.name, reason=d.reason, attempt=t.restarts, delay=d.delay))

    def _fail(self, t: TaskTrack, reason: str, out: List[Action]) -> None:
        if self._may_shrink(t):
            self._shrink(t, f"not restarted: {reason}", "", out)
            return
        if self.root_cause is None:
            self.root_cause = t.name
        if t.restarts or t.rule.policy != "never":
            t.why = (t.why + "; " if t.why else "") + f"not restarted: {reason}"
        code = rules.EXIT_BAD_INPUT if t.port_conflict else rules.EXIT_FAILED
        self._decide(RunState.FAILED, code, f"{t.name} failed ({describe_exit(t.returncode)})", out)

    def _force(self, t: TaskTrack, reason: str, out: List[Action]) -> None:
        t.forced = t.killed = reason
        out.append(Say(f"{t.name}: {reason}; killing it", error=True))
        out.append(Kill(t.name, signal.SIGKILL))

    # ---- elastic workers
    def _elastic(self, name: str, job: str) -> bool:
        """Whether task ``name`` of ``job`` may leave the run: a worker (not the chief, nor
        worker:0 where it is the chief) of an elastic run."""
        return self.s.min_workers is not None and job == "worker" and name != self.s.chief

    def workers_in(self) -> List[str]:
        """The workers still in the run: not left, not failed (running, starting, restarting,
        or done); with reports from elsewhere (Slurm), the workers run elsewhere too."""
        here = [x.name for x in self.tasks.values()
                if x.job == "worker" and not x.left and x.state != TaskState.FAILED]
        if self.s.peers_report:
            here += [n for n, job in self.others.items()
                     if job == "worker" and n not in self.peers_left and self.peer_ok.get(n, True)]
        return here

    def workers_total(self) -> int:
        """The run's workers (the file's), here and elsewhere."""
        return (sum(1 for x in self.tasks.values() if x.job == "worker")
                + (sum(1 for j in self.others.values() if j == "worker") if self.s.peers_report else 0))

    def workers_line(self) -> str:
        """"3 of 4 workers, min 2" (elastic runs; "" otherwise)."""
        if self.s.min_workers is None:
            return ""
        return f"{len(self.workers_in())} of {self.workers_total()} workers, min {self.s.min_workers}"

    def workers_left(self) -> Dict[str, str]:
        """Elastic runs: the workers that left the run, here and elsewhere -> why."""
        out = {n: t.left for n, t in self.tasks.items() if t.left}
        out.update({n: why for n, (why, _node) in self.peers_left.items()})
        return out

    def _may_leave(self, name: str, job: str) -> bool:
        """The one rule of a shrink: an elastic worker leaves (rather than fail the run) while
        the run is running and at least min_workers workers stay in it without it."""
        if not self._elastic(name, job) or self.decided or self.phase != Phase.RUN:
            return False
        return len([n for n in self.workers_in() if n != name]) >= self.s.min_workers

    def _may_shrink(self, t: TaskTrack) -> bool:
        return not t.left and self._may_leave(t.name, t.job)

    def _shrink(self, t: TaskTrack, reason: str, node: str, out: List[Action]) -> None:
        """``t`` leaves the run, which goes on with the workers left (at least min_workers)."""
        if t.state != TaskState.FAILED:
            t.state = check_transition(t.state, TaskState.FAILED, t.name)
        t.left, t.left_node = reason, node
        t.why = (t.why + "; " if t.why else "") + f"left the run: {reason}"
        self._recount_needs()
        back = ("" if not node else f"; it starts again when {node} answers" if not self.s.moves_nodes
                else "; it starts again when its place can be found again (a node that joins)")
        self._went(t.name, reason, node, back, out)

    def _went(self, name: str, reason: str, node: str, back: str, out: List[Action]) -> None:
        """A worker (here or elsewhere) has left: say so, log it, and with on_change restart
        restart every task."""
        out.append(Say(f"{name} left the run ({reason}): going on with {self.workers_line()}{back}",
                       error=True))
        out.append(log_event("run_shrunk", name, node=node, reason=reason, workers=len(self.workers_in()),
                             min_workers=self.s.min_workers))
        if self.s.on_change == "restart":
            self._restart_all(name, f"{name} left", out)

    def left_nodes(self) -> List[str]:
        """The nodes that workers left the run with (a driver asks its backend for them)."""
        return sorted({t.left_node for t in self.tasks.values() if t.left and t.left_node})

    def _on_HostBack(self, ev: HostBack, out: List[Action]) -> None:
        if self.decided or self.phase != Phase.RUN:
            return
        back = [t for t in self.tasks.values() if t.left and t.left_node == ev.node]
        for t in back:
            t.left, t.left_node, t.why = "", "", ""
            t.restarts += 1          # a new attempt (TFCLUSTER_RESTART_COUNT), not from its budget
            t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
            t.start_at = float("inf")
        if not back:
            return
        self._recount_needs()
        names = ", ".join(t.name for t in back)
        came = (f"{ev.node} answers again" if not self.s.moves_nodes
                else f"room again for the workers lost with {ev.node}")
        out.append(Say(f"{came}: starting {names}; {self.workers_line()}"))
        for t in back:
            out.append(log_event("run_grew", t.name, node=ev.node, workers=len(self.workers_in()),
                                 min_workers=self.s.min_workers, attempt=t.restarts))
        chief = self.tasks.get(self.s.chief)
        chief_alone = self.s.on_change == "restart-chief" and chief is not None and chief.state == TaskState.RUNNING
        if self.s.on_change in ("restart", "restart-on-join") or chief_alone:
            for t in back:
                t.restarts -= 1      # the start after the regroup counts them once
            self._restart_all(back[0].name, f"{names} came back", out,
                              only=[chief.name] if self.s.on_change == "restart-chief" else None)
            return
        for t in back:
            out.append(Start(t.name, t.restarts))

    def _restart_all(self, name: str, why: str, out: List[Action], only: Optional[List[str]] = None) -> None:
        """elastic.on_change restart: every task is stopped in order (the chief saves), then
        started again with TF_CONFIG listing the workers in the run alone; resumed from the
        last checkpoint. Not counted as a restart of the run. ``only`` (restart-chief): those
        tasks alone are stopped and started again, with the workers waiting to start."""
        self._enter(Phase.REGROUP)
        self._moving = (name, "")
        self._restart_for = why
        for other in self.tasks.values():       # a restart already due waits for this one
            if other.state == TaskState.RESTARTING:
                other.start_at = float("inf")
                self._claims.pop(other.name, None)
        self._next_start_at = float("inf")
        which = "every task" if only is None else ", ".join(only)
        out.append(Say(f"{why}: restarting {which} with {self.workers_line()} "
                       f"(elastic.on_change: {self.s.on_change})"))
        out.append(log_event("cluster_restarting", name, node="", reason=why, attempt=0))
        self._waves = self._stop_waves() if only is None else \
            [[n for n in only if self.tasks[n].state.alive], []]
        self._wave, self._wave_all = [], []
        self._next_wave(self._now, out)

    def _recount_needs(self) -> None:
        """The success rule's tasks again, without the workers that left the run."""
        if self._needs is None:
            return
        self._needs = rules.success_needs(self.s.success, self.s.chief,
                                          [n for n, x in self.tasks.items() if not x.left],
                                          self.s.chief in self.tasks)
        self._needs_left = sum(1 for n in self._needs if self.tasks[n].state != TaskState.SUCCEEDED)

    def _succeeded_map(self) -> Dict[str, bool]:
        out = {name: t.state == TaskState.SUCCEEDED for name, t in self.tasks.items() if not t.left}
        if self.s.peers_report:
            for name in self.others:
                if name not in self.peers_left:
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
            here.update({n: n not in self.peer_ok and n not in self.peers_left for n in self.others})
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
            if t.ending_at is not None:
                a = rules.check_ending(t.name, t.ending_at, now, s.end_timeout, t.step)
                if a is not None:
                    actions.append(a)
        watched = self._watched_tasks()
        self._warn_stuck(watched, now, out)
        ending = any(t.ending_at is not None and t.state == TaskState.RUNNING
                     for t in self.tasks.values())
        others = any(t.state == TaskState.RUNNING and not t.forced and t.ending_at is None
                     and t.job != "ps" for t in self.tasks.values())
        if others or not ending:      # tasks at their final step: the end deadline, not this
            gone = [f"{t.name} ({t.state.value}"
                    f"{', ' + describe_exit(t.returncode) if t.returncode is not None else ''})"
                    for t in self.tasks.values() if t.state != TaskState.RUNNING]
            lives = [t.alive_at for t in self.tasks.values() if t.alive_at is not None]
            stall = rules.check_stall(self.best_step, self.best_step_at, now, s.stall_timeout, gone,
                                      last_life_at=max(lives) if lives else None,
                                      cadence=max((t.longest_gap for t in self.tasks.values()), default=0.0),
                                      suspects=self._suspects(watched, now))
            if stall is not None:
                actions.append(stall)
        for a in actions:
            out.append(log_event("watchdog", a.task, reason=a.reason, action=a.action))
            if a.action == "kill" and a.task in self.others:
                out.append(AskKill(a.task, a.reason))
                continue
            if a.action == "fail_run":
                self.root_cause_words = a.reason
                out.append(Say(a.reason, error=True))
                self._decide(RunState.FAILED, rules.EXIT_FAILED, a.reason, out)
                return
            t = self.tasks[a.task]
            if t.state == TaskState.RUNNING and not t.forced:
                self._force(t, a.reason, out)

    def _watched_tasks(self) -> List[TaskTrack]:
        """The running tasks whose progress the stall checks read: they have shown life, are
        not at their final step, are not being killed."""
        return [t for t in self.tasks.values()
                if t.state == TaskState.RUNNING and not t.forced and t.ending_at is None
                and t.alive_at is not None]

    def _suspects(self, watched: List[TaskTrack], now: float) -> List[str]:
        """The tasks a stall message names, the longest silent first: those already seen to
        stop while others went on, else every watched task."""
        pick = [t for t in watched if t.stalled_at is not None] or watched
        pick = sorted(pick, key=lambda t: t.alive_at)
        return [rules.describe_silence(t.name, now - t.alive_at, t.step) for t in pick]

    def _stack_hint(self, names: Sequence[str] = ()) -> str:
        run = self.run_ref or "RUN"
        where = "where it is" if names else "where each task is"
        return f"{where}: tfcluster stack {run}" + "".join(f" {n}" for n in names)

    def _warn_stuck(self, watched: List[TaskTrack], now: float, out: List[Action]) -> None:
        """Name a task whose own progress stopped while others go on, at a fraction of the
        stall deadline (watchdog.stall_warning); and once, the whole run standing still."""
        s = self.s
        if self.best_step is None or not s.stall_timeout or not s.stall_warning:
            return
        # a task with one sign of life has no rhythm yet (Keras verbose=2: one per epoch)
        lives = {t.name: (t.alive_at, t.cadence) for t in watched if t.cadence > 0}
        stuck, going = rules.stuck_tasks(lives, now, s.stall_timeout, s.stall_warning)
        for name in stuck:
            t = self.tasks[name]
            if t.stalled_at is not None:
                continue
            t.stalled_at, t.stalled_step = t.alive_at, t.step
            silent = now - t.alive_at
            verb = "goes on" if len(going) == 1 else "go on"
            out.append(Say(f"{rules.describe_silence(name, silent, t.step)} while "
                           f"{', '.join(going)} {verb}: it may be stuck; {self._stack_hint([name])}",
                           error=True))
            out.append(log_event("task_stalled", name, step=t.step, silent=round(silent, 1)))
        if not watched:
            return
        last = max(max(t.alive_at for t in watched), self.best_step_at)
        after = rules.stall_warning_after(s.stall_timeout, s.stall_warning)
        if now - last < after:
            self._run_warned = False
        elif not self._run_warned:
            self._run_warned = True
            out.append(Say(f"no task has made progress for {now - last:.0f}s (global step "
                           f"{self.best_step}); {self._stall_deadline_words(now)}; suspects: "
                           f"{', '.join(self._suspects(watched, now))}; {self._stack_hint()}",
                           error=True))
            out.append(log_event("run_stalling", step=self.best_step, silent=round(now - last, 1)))

    def _stall_clock(self) -> Tuple[float, float]:
        """(the last sign of progress, the stall deadline) as the stall watchdog reads them
        (:func:`rules.check_stall`): the run fails at their sum if nothing moves before."""
        lives = [t.alive_at for t in self.tasks.values() if t.alive_at is not None]
        since = max([self.best_step_at] + lives)
        cadence = max((t.longest_gap for t in self.tasks.values()), default=0.0)
        return since, rules.stall_deadline(self.s.stall_timeout, cadence)

    def _stall_deadline_words(self, now: float) -> str:
        """When the stall watchdog will fail the run if nothing moves, and by which rule: the
        deadline it will really apply (the timeout, or twice the slowest report so far)."""
        since, deadline = self._stall_clock()
        timeout = self.s.stall_timeout
        rule = f"watchdog.stall_timeout: {timeout:g}"
        if deadline > timeout:
            rule = f"twice its slowest report so far; {rule}"
        return (f"the run fails in {max(0.0, since + deadline - now):.0f}s if nothing moves, "
                f"{deadline:.0f}s after the last progress ({rule})")

    def stalled(self) -> List[str]:
        """Lines for the end summary: every task seen to stop making progress while the run
        went on, and did not resume (the run may well have succeeded)."""
        lines = []
        for t in self.tasks.values():
            if t.stalled_at is None:
                continue
            at = f" at step {t.stalled_step}" if t.stalled_step is not None else ""
            if t.ended is None:
                lines.append(f"{t.name} stopped making progress{at} "
                             f"{_duration(self._now - t.stalled_at)} ago (still {t.state.value})")
                continue
            lines.append(f"{t.name} stopped making progress{at} {_duration(t.ended - t.stalled_at)} "
                         f"before it ended ({t.state.value})")
        return lines

    def _decide(self, result: RunState, code: int, words: str, out: List[Action],
                announce: bool = True, origin_here: bool = True) -> None:
        self.result, self.exit_code, self.words = result, code, words
        self.decided_here = origin_here
        rule = self.s.success if result == RunState.SUCCEEDED else (
            "restart" if result == RunState.FAILED else "signal")
        out.append(log_event("decision", result=result.value, rule=rule, exit_code=code, reason=words))
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
        self._enter(Phase.GRACE)
        self._grace_tasks = waiting
        self._grace_until = now + self.s.grace
        # one deadline, the one _advance applies: the grace, or later while a task at its
        # final step may still exit by itself (watchdog.end_timeout)
        ending = [n for n in waiting if self._ending_until(self.tasks[n]) > self._grace_until]
        if not ending:
            out.append(Say(f"giving {', '.join(waiting)} {self.s.grace:g}s to finish"))
            return
        until = max(self._ending_until(self.tasks[n]) for n in ending)
        out.append(Say(f"giving {', '.join(waiting)} up to {round(until - now):g}s to finish: "
                       f"{', '.join(ending)} reached the final step, and may take "
                       f"{self.s.end_timeout:g}s from there to exit by itself "
                       f"(watchdog.end_timeout)"))

    def _ending_until(self, t: TaskTrack) -> float:
        """A task at its final step may take until then to exit by itself (0: no such task)."""
        if t.ending_at is None or not self.s.end_timeout:
            return 0.0
        return t.ending_at + self.s.end_timeout

    def _begin_stop(self, now: float, out: List[Action]) -> None:
        """Stop what still runs, in the rulebook's waves: chief, workers and evaluators (a chief
        that saves a last checkpoint on SIGTERM needs its ps), then ps tasks."""
        self._enter(Phase.STOP)
        for t in self.tasks.values():
            if t.state in (TaskState.RESTARTING, TaskState.PENDING):
                t.state = check_transition(t.state, TaskState.STOPPED, t.name)
                self._claims.pop(t.name, None)
        self._waves = self._stop_waves()
        self._wave = []
        self._next_wave(now, out)

    def _stop_waves(self) -> List[List[str]]:
        """The live tasks in the rulebook's two stop waves: chief, workers and evaluators, then
        ps. The second wave is there even when empty: :meth:`_next_wave` knows the ps wave as
        the last one."""
        live = [t for t in self.tasks.values() if t.state.alive]
        first, then = rules.stop_waves({t.job for t in live} | {"ps"})
        return [[t.name for t in live if t.job in first], [t.name for t in live if t.job in then]]

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
        if self.phase == Phase.REGROUP and self._moving is not None:
            self._wave_all = []
            self._enter(Phase.REPLACE)            # the driver places the tasks again: Regrouped
            out.append(Regroup(*self._moving, place=not self._restart_for))
            return
        self._enter(Phase.DONE)
        self.finished = True
        if self.result == RunState.RUNNING:
            self.result, self.exit_code = RunState.FAILED, rules.EXIT_FAILED
        out.append(Finished(self.result, self.exit_code if self.exit_code is not None
                            else rules.EXIT_FAILED))

    def _stop_one(self, t: TaskTrack, out: List[Action], sig: int = signal.SIGTERM) -> None:
        out.append(Say(f"stopping {t.name} (pid {t.pid}): {signal.Signals(sig).name} to its "
                       f"process group"))
        if t.state == TaskState.RUNNING:
            t.state = check_transition(t.state, TaskState.STOPPING, t.name)
        if t.stalled_at is not None and not t.why:
            at = f" at step {t.stalled_step}" if t.stalled_step is not None else ""
            t.why = f"stopped making progress{at} {_duration(self._now - t.stalled_at)} before it was stopped"
        if sig == signal.SIGKILL:
            t.killed = "a second Ctrl-C killed every task at once"
        out.append(Kill(t.name, sig))
        out.append(log_event("stop_sent", t.name, signal=signal.Signals(sig).name))

    def _peers_still_running(self) -> List[str]:
        """Non-ps tasks elsewhere (Slurm: other nodes) not yet known to have ended."""
        if not self.s.peers_report:
            return []
        return [n for n, job in self.others.items()
                if job not in rules.SERVICE_JOBS and n not in self.peer_ok and n not in self.peers_left]

    def _advance(self, now: float, out: List[Action]) -> None:
        """After each event: the success rule, the grace period, the stop waves."""
        self._now = now
        if self.phase == Phase.RUN and not self.decided:
            self._check_success(out)
        if self.phase == Phase.GRACE:
            running = [n for n in self._grace_tasks if self.tasks[n].state == TaskState.RUNNING]
            if not running or now >= max([self._grace_until] + [
                    self._ending_until(self.tasks[n]) for n in running]):
                self._begin_stop(now, out)
        if self.phase.stopping:
            self._wave = [n for n in self._wave if self.tasks[n].state.alive]
            if not self._wave:
                self._next_wave(now, out)
                return
            if not self._wave_killed and (now >= self._wave_deadline or self.kill_now):
                for name in self._wave:
                    t = self.tasks[name]
                    out.append(Say(f"{t.name} (pid {t.pid}) still running "
                                   f"{self.s.stop_timeout:g}s after SIGTERM: SIGKILL"))
                    t.killed = f"still running {self.s.stop_timeout:g}s after SIGTERM"
                    out.append(Kill(name, signal.SIGKILL))
                    out.append(log_event("stop_sent", name, signal="SIGKILL"))
                self._wave_killed = True
                self._wave_deadline = now + KILL_WAIT
            elif self._wave_killed and now >= self._wave_deadline:
                for name in self._wave:
                    t = self.tasks[name]
                    out.append(Say(f"{t.name} (pid {t.pid}) did not die after SIGKILL", error=True))
                self._wave = []
                self._next_wave(now, out)

    def _exit_event(self, t: TaskTrack, state: TaskState) -> LogEvent:
        return log_event("task_exited", t.name, state=state.value, **exit_fields(t.returncode))


# ---------------------------------------------------------------------------- task output
def line_events(task: str, line: str, progress, now: float) -> List[Event]:
    """What one line of a task's output tells the machine, for every driver (the output reader,
    :class:`tfcluster.core.task_output.OutputReader`, finds the line and its progress report): a report
    (``progress``, its step) is progress; else TensorFlow's "CreateSession still waiting" line
    names the task waited on, and "Could not start gRPC server" a taken port."""
    out: List[Event] = []
    if rules.PORT_CONFLICT.search(line):
        out.append(PortConflict(task, now))
    waiting = still_waiting_on(line)
    if waiting:
        out.append(Waiting(task, waiting, now))
    if progress is not None:
        out.append(Progressed(task, progress.step, now, progress.total))
    return out


# ---------------------------------------------------------------------------- the input log
_INPUTS = {cls.__name__: cls for cls in get_args(Event)}


def input_fields(ev: Event) -> Dict[str, object]:
    """An input as plain fields -- ``input`` (its kind) and ``data`` (its fields) -- for an
    ``input`` row of events.jsonl."""
    return {"input": type(ev).__name__, "data": dict(ev.__dict__)}


def input_from_fields(fields: Mapping[str, object]) -> Event:
    """The input that :func:`input_fields` wrote (ValueError for anything else)."""
    cls = _INPUTS.get(str(fields.get("input")))
    data = fields.get("data")
    if cls is None or not isinstance(data, dict):
        raise ValueError(f"not a machine input: {fields.get('input')!r}")
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in data.items() if k in names})


def replay(machine: RunMachine, began: float, inputs: Iterable[Event]) -> List[Action]:
    """Begin a new machine built like the run's at ``began`` and hand it the run's logged
    inputs; the actions it returns are the run's (the machine is pure: same inputs, same
    decisions)."""
    out = machine.begin(began)
    for ev in inputs:
        out += machine.handle(ev)
    return out
