"""The run's states, written down once: a task's (:class:`TaskState`, and what the machine
keeps of it, :class:`TaskTrack`), the run's result (:class:`RunState`) and phase
(:class:`Phase`), each with the changes it allows; and the plan's settings the run machine and its
policies read (:class:`Settings`). Plain data: no I/O, no clock.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Dict, Optional

from tfcluster.core import rules

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
    LEFT        elastic: a worker that failed (or was lost with its host or node) and left the
                run, which goes on without it: not a failure of the run (``TaskTrack.left``
                says why; a worker the sizing policy removes is LEFT too, STOPPING -> LEFT)

    PENDING -> RUNNING | STOPPED | RESTARTING (a spare worker that the sizing policy adds waits
    for its start as a worker coming back does);  RUNNING -> SUCCEEDED | FAILED | STOPPING;
    FAILED -> RESTARTING -> RUNNING | STOPPED | FAILED (the run's shared restart budget refused
    the restart: it never was);  STOPPING -> STOPPED | RESTARTING (the cluster regroups: a task's
    node was lost, every task is stopped and started again elsewhere) | LEFT (the sizing policy
    removed it: ``elastic.scale``);  FAILED -> LEFT (the
    elastic policy lets the worker go instead of failing the run) -> RESTARTING (its host or
    node is back: it starts again as a new attempt).
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SKIPPED = "skipped"
    LEFT = "left"

    @property
    def alive(self) -> bool:
        """A process exists for the task."""
        return self in (TaskState.RUNNING, TaskState.STOPPING)


TASK_TRANSITIONS = {
    TaskState.PENDING: {TaskState.RUNNING, TaskState.STOPPED, TaskState.RESTARTING},
    TaskState.RUNNING: {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPING},
    TaskState.FAILED: {TaskState.RESTARTING, TaskState.LEFT},
    TaskState.RESTARTING: {TaskState.RUNNING, TaskState.STOPPED, TaskState.FAILED},
    TaskState.STOPPING: {TaskState.STOPPED, TaskState.RESTARTING,   # stopped to move (regroup)
                         TaskState.LEFT},                           # removed by the sizing policy
    TaskState.SUCCEEDED: set(),
    TaskState.STOPPED: set(),
    TaskState.SKIPPED: set(),
    TaskState.LEFT: {TaskState.RESTARTING},
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
    """Where the run stands as a whole (:attr:`tfcluster.core.machine.RunMachine.phase`).

    START    before :meth:`tfcluster.core.machine.RunMachine.begin`
    RUN      tasks start, run and restart; the watchdogs look
    GRACE    the run has succeeded: the tasks that may end by themselves get ``grace`` seconds
    STOP     every task is stopped, in waves: chief, workers and evaluators first, ps last
    DONE     every task here has ended (:class:`tfcluster.core.events.Finished`)
    REGROUP  a task's node was lost: every task is stopped in the same waves, to start again
    REPLACE  the driver places the tasks again (:class:`tfcluster.core.events.Regroup`;
             :class:`tfcluster.core.events.Regrouped` answers)

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



# ---------------------------------------------------------------------------- what the machine keeps


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
                                           # field ``note`` of run.json and of the end record
                                           # (the name programs that read them know)
    port_conflict: bool = False
    waiting_on: Dict[str, float] = field(default_factory=dict)   # task -> first "still waiting"
    step: Optional[int] = None             # the last step it reported
    alive_at: Optional[float] = None       # the last sign of progress
    step_at: Optional[float] = None        # when its step (this attempt's) last moved
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
    spare: bool = False                    # sized runs: a worker out of the run that the sizing
                                           # policy may add (never started, or removed by it)
    placed: bool = True                    # ... False: its backend has not placed it yet (Ray:
                                           # no room so far), so it has no endpoint to start at

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
    """What the machine needs of the plan (:meth:`tfcluster.core.machine.RunMachine.from_plan`
    takes it from there)."""

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
    max_workers: Optional[int] = None   # elastic.max_workers (sized runs: spare workers up to it)
    scale: str = ""                     # elastic.scale: "throughput" (the sizing policy), or off
    scale_gain: float = 0.5             # an added worker is kept when it adds this share of one
                                        # worker's rate
    scale_window: float = 20.0          # seconds of steady rate measured after a change
    scale_every: float = 30.0           # the least seconds between two changes by the policy
    moves_nodes: bool = True            # a lost node regroups the cluster elsewhere (Ray);
                                        # False (ssh: a task stays on its host): a lost host
                                        # is an ordinary failure, unless elastic


WATCH_EVERY = 0.5                   # seconds between watchdog checks
KILL_WAIT = 10.0                    # seconds to wait for a SIGKILLed group
