"""The run machine: the one place where a run's rules act.

A driver -- the supervisor (:mod:`tfcluster.drivers.supervisor`: the local, ssh and Ray
backends, and per-host agents) or the Slurm node agent (:mod:`tfcluster.backends.agent.node`)
-- turns processes, output, clocks and signals into **events** and hands them to
:meth:`RunMachine.handle`, which returns **actions** for the driver to carry out (both are
:mod:`tfcluster.core.events`'; the states are :mod:`tfcluster.core.states`'; this module gives
their names too, the core's one import path). It has no threads, files, clocks or signals
inside: time comes in with the events, so a table of events tests it (tests/unit/test_machine.py),
in the manner of dask's ``handle_stimulus(*events) -> instructions``.

The machine keeps the state -- task states (:class:`TaskState`), the run's phase
(:class:`Phase`), result and exit code, the counters -- and the input log (:attr:`RunMachine.inputs`,
which :func:`replay` hands to a new machine for the same actions). Each event has one handler,
registered in :data:`HANDLERS` (checked when this module loads: one handler for every event
class). The rules are policies of their own (:mod:`tfcluster.core.policies`), which the machine
consults and which ask for changes through its verbs (``restart``, ``claim_restart``, ``fail``,
``leave``, ``start_at``, ``start_all``, ``hold_restarts``, ``stop_waves``, ``enter``):

* restarts and their budgets -- :class:`tfcluster.core.policies.restarts.RestartPolicy`;
* elastic changes, one class per ``elastic.on_change`` mode --
  :mod:`tfcluster.core.policies.on_change`;
* the success rule and the grace period -- :class:`tfcluster.core.policies.success.SuccessRule`;
* the watchdogs, one class each -- :mod:`tfcluster.core.policies.watchdog` (the extension point
  for a policy that looks at the running run: a new class there, carried out by :attr:`RunMachine.ASKS`);
* the stop order (chief, workers and evaluators first, ps last; SIGTERM then SIGKILL) --
  :class:`tfcluster.core.policies.stop.StopOrder`;
* the regroup (every task stopped to be placed again) --
  :class:`tfcluster.core.policies.regroup.Regrouping`.

The drivers differ only in how they learn what happened:

* the supervisor: ``Exited`` from the process, ``PortOpen`` from a connect probe,
  ``Progressed`` / ``Waiting`` / ``PortConflict`` from the task's output, ``Interrupt`` from a
  signal, ``ChiefGone`` (per-host agents) and ``Regrouped`` (Ray: a lost node);
* the Slurm node agent: the same for its own task, plus what the other nodes' agents tell it
  through the shared run folder (``PeerEnded``, ``KillRequest``, ``RunOver``, ``RestartClaim``).
"""
from __future__ import annotations

import signal
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tfcluster.core import from_plan, rules
from tfcluster.core.events import (
    ACTIONS,
    EVENTS,
    Action,
    AskKill,
    ChiefGone,
    ClaimRestart,
    EndRun,
    Event,
    Exited,
    Finished,
    HostBack,
    Interrupt,
    Kill,
    KillRequest,
    LogEvent,
    PeerEnded,
    PeerLost,
    PortConflict,
    PortOpen,
    Progressed,
    Regroup,
    Regrouped,
    RestartClaim,
    RunOver,
    Say,
    SparePlaced,
    Start,
    Started,
    StartFailed,
    Tick,
    Waiting,
    check_table,
    input_fields,
    input_from_fields,
    line_events,
    log_event,
)
from tfcluster.core.policies import on_change, sizing, watchdog
from tfcluster.core.policies.regroup import Regrouping
from tfcluster.core.policies.restarts import MAX_PORT_RECHOICES, RestartPolicy
from tfcluster.core.policies.stop import StopOrder
from tfcluster.core.policies.success import SuccessRule
from tfcluster.core.rules import describe_exit, exit_fields
from tfcluster.core.rules import format_duration as _duration
from tfcluster.core.run_view import RunView
from tfcluster.core.states import (
    KILL_WAIT,
    PHASE_TRANSITIONS,
    TASK_TRANSITIONS,
    WATCH_EVERY,
    Phase,
    RunState,
    Settings,
    TaskState,
    TaskTrack,
    TransitionError,
    check_phase_change,
    check_transition,
)

__all__ = [  # the core's names, from here as before they had modules of their own
    "ACTIONS", "EVENTS", "HANDLERS", "KILL_WAIT", "MAX_PORT_RECHOICES", "PHASE_TRANSITIONS",
    "TASK_TRANSITIONS", "WATCH_EVERY", "Action", "AskKill", "ChiefGone", "ClaimRestart", "EndRun",
    "Event", "Exited", "Finished", "HostBack", "Interrupt", "Kill", "KillRequest", "LogEvent",
    "PeerEnded", "PeerLost", "Phase", "PortConflict", "PortOpen", "Progressed", "Regroup",
    "Regrouped", "RestartClaim", "RunMachine", "RunOver", "RunState", "Say", "Settings", "SparePlaced", "Start",
    "StartFailed", "Started", "TaskState", "TaskTrack", "Tick", "TransitionError", "Waiting",
    "check_phase_change", "check_transition", "input_fields", "input_from_fields", "line_events",
    "log_event", "replay"]


class RunMachine(RunView):
    """The run's state and its rules at work: ``handle(event) -> [actions]``.

    ``tasks``: the tasks this driver runs, as (name, job, restart rule, port); ``others``: the
    other tasks of the cluster (name -> job) and ``where`` their endpoints (for messages);
    ``watchdogs``: the watchdogs and other looks at the running run (default: every one of
    :mod:`tfcluster.core.policies.watchdog`).
    """

    def __init__(self, tasks: Sequence[Tuple[str, str, rules.RestartRule, Optional[int]]],
                 settings: Settings, others: Optional[Mapping[str, str]] = None,
                 where: Optional[Mapping[str, str]] = None,
                 watchdogs: Optional[watchdog.Watchdogs] = None):
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
        self.now = 0.0                               # the clock of the last event
        # the policies (tfcluster.core.policies): each rule in a room of its own
        self.restart_policy = RestartPolicy()
        self.elastic = on_change.mode(settings.on_change)
        self.success = SuccessRule()
        self.watchdogs = watchdogs if watchdogs is not None else watchdog.Watchdogs()
        self.stop_order = StopOrder()
        self.regrouping = Regrouping()
        #: tasks whose port is chosen where they run when the run starts (``port_chosen``): a
        #: port taken before the task's server bound it is chosen again, at most
        #: MAX_PORT_RECHOICES times a run, not a failed run
        self.movable_ports: set = set()
        self._last_watch: Optional[float] = None
        self._claims: Dict[str, float] = {}          # task -> delay, waiting for RestartClaim
        self._watched = False                        # the watchdogs looked in this event
        self._keep_tick = False                      # a policy's look changed its state
        self._next_start_at = float("inf")   # the earliest start_at of a task to start again
        #: what came in (every event but Ticks that changed nothing), when ``log_inputs``:
        #: :func:`replay` of it on a new machine gives the same actions
        self.log_inputs = False
        self.inputs: List[Event] = []
        self.run_ref = ""                    # how a person names this run (tfcluster stack)

    @classmethod
    def from_plan(cls, plan, names: Optional[Iterable[str]] = None, *, shared: bool = False,
                  peer_stop_wait: Optional[float] = None) -> "RunMachine":
        """A machine for ``names`` (default: the plan's selected tasks). ``shared``: a Slurm
        node agent, which shares the restart budget, hears of the other tasks' ends and asks
        other nodes to kill a task through the run folder. (:func:`tfcluster.core.from_plan.build`)"""
        return from_plan.build(cls, plan, names, shared=shared, peer_stop_wait=peer_stop_wait)

    # ------------------------------------------------------------------ entry points
    def begin(self, now: float) -> List[Action]:
        """The first actions: start every task, ps first (workers dial them)."""
        by_job: Dict[str, List[str]] = {}
        for t in self.tasks.values():
            if not t.spare:
                by_job.setdefault(t.job, []).append(t.name)
        self.enter(Phase.RUN)
        self._last_watch = now
        return [Start(name, 0) for job in rules.start_order(by_job) for name in by_job[job]]

    def handle(self, *events: Event) -> List[Action]:
        """The actions for ``events``, each given to its handler (:data:`HANDLERS`) and followed
        by the success rule, the grace period and the stop waves."""
        out: List[Action] = []
        for ev in events:
            if self.finished:
                break
            self.now = getattr(ev, "now", self.now)
            before, self._watched = len(out), False
            HANDLERS[type(ev)](self, ev, out)
            self._advance(getattr(ev, "now", 0.0), out)
            if self.log_inputs:
                if not isinstance(ev, Tick):
                    self.inputs.append(ev)
                elif len(out) > before or self._keep_tick:   # a Tick that did nothing changed
                    self.inputs.append(Tick(ev.now, self._watched))  # nothing: not kept
            self._keep_tick = False
        return out

    def take_inputs(self) -> List[Event]:
        """The inputs logged since the last call (a driver writes them to events.jsonl)."""
        got, self.inputs = self.inputs, []
        return got

    # ------------------------------------------------------------------ events (HANDLERS)
    def _on_tick(self, ev: Tick, out: List[Action]) -> None:
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
                self._carry_out(self.watchdogs.look(self, ev.now, out), out)

    def _on_started(self, ev: Started, out: List[Action]) -> None:
        t = self.tasks[ev.task]
        t.state = check_transition(t.state, TaskState.RUNNING, t.name)
        t.pid, t.returncode, t.ended = ev.pid, None, None
        t.started = ev.now
        if t.first_started is None:
            t.first_started = ev.now
        t.up, t.forced, t.port_conflict = False, "", False
        t.waiting_on.clear()
        t.alive_at, t.longest_gap, t.cadence = None, 0.0, 0.0
        t.step = t.step_at = t.ending_at = t.stalled_at = t.stalled_step = None   # (this attempt's)
        t.killed = ""
        if self.phase.stopping:    # started while the run was being stopped
            self.stop_order.late_start(self, t, out)

    def _on_start_failed(self, ev: StartFailed, out: List[Action]) -> None:
        self.root_cause_words = ev.message
        if not self.decided:
            self._decide(RunState.FAILED, ev.code, ev.message, out, announce=False)

    def _on_exited(self, ev: Exited, out: List[Action]) -> None:
        """A task's process ended: stopped to move (a regroup), stopped by the stop order, or
        ended by itself -- then, a failure while the run runs goes to the restart policy."""
        t = self.tasks[ev.task]
        t.returncode, t.ended = ev.returncode, ev.now
        if self.phase == Phase.REGROUP and not self.decided:   # stopped (or lost) to start again
            self._exited_to_move(t, out)
        elif t.spare and t.state == TaskState.STOPPING and self.phase == Phase.RUN and not self.decided:
            sizing.removed_exited(self, t, out)       # removed by the sizing policy
        elif t.state == TaskState.STOPPING or self.phase == Phase.STOP:
            self._exited_stopped(t, ev.cause, out)
        elif self._exited_by_itself(t, ev, out):
            self._say_failed(t, ev, out)
            self.restart_policy.after_failure(self, t, ev, out)

    def _exited_to_move(self, t: TaskTrack, out: List[Action]) -> None:
        if t.state == TaskState.RUNNING:
            t.state = check_transition(t.state, TaskState.FAILED, t.name)
        t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
        t.start_at = float("inf")
        out.append(self._exit_event(t, TaskState.STOPPED))

    def _exited_stopped(self, t: TaskTrack, cause: str, out: List[Action]) -> None:
        if rules.is_sigkill(t.returncode) and not t.why:     # (a stalled task's why says more)
            t.why = self._sigkill_words(t, cause)
        if t.state == TaskState.RUNNING:
            t.state = check_transition(t.state, TaskState.STOPPING, t.name)
        t.state = check_transition(t.state, TaskState.STOPPED, t.name)
        out.append(self._exit_event(t, TaskState.STOPPED))

    def _exited_by_itself(self, t: TaskTrack, ev: Exited, out: List[Action]) -> bool:
        """Record the task's own end (SUCCEEDED or FAILED); True: a failure the run must decide
        on (not after the run's verdict, not in its grace)."""
        rc = ev.returncode
        new = TaskState.SUCCEEDED if rc == 0 else TaskState.FAILED
        t.state = check_transition(t.state, new, t.name)
        if rules.is_sigkill(rc):
            t.why = self._sigkill_words(t, ev.cause)
        if new == TaskState.SUCCEEDED:
            self.success.exited_ok(self, t)
        out.append(self._exit_event(t, new))
        if self.phase == Phase.GRACE:
            if rc != 0:
                out.append(Say(f"{t.name} ended with {describe_exit(rc)} after the run had succeeded"))
            return False
        if self.decided:                         # the run is over: no restart, no verdict
            return False
        if rc == 0:
            ran = ev.now - (ev.now if t.started is None else t.started)
            out.append(Say(f"{t.name} exited 0 after {_duration(ran)}"))
            return False
        return True

    def _say_failed(self, t: TaskTrack, ev: Exited, out: List[Action]) -> None:
        """Why the task failed (its ``why``: a SIGKILL's sender said already, a watchdog's kill,
        a port conflict, what the driver learnt), said with the driver's hint."""
        if rules.is_sigkill(ev.returncode):
            pass                      # _sigkill_words said who sent it (and tfcluster, why)
        elif t.forced:
            t.why = t.forced
        elif t.port_conflict:
            t.why = f"port conflict: {self.where.get(t.name) or t.port} is in use (Could not start gRPC server)"
        elif ev.cause:
            t.why = ev.cause
        out.append(Say(f"{t.name} failed ({describe_exit(ev.returncode)})" + (f": {t.why}" if t.why else "")
                       + (f"; {ev.hint}" if ev.hint else ""), error=True))

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

    def _on_restart_claim(self, ev: RestartClaim, out: List[Action]) -> None:
        t = self.tasks[ev.task]
        delay = self._claims.pop(ev.task, 0.0)
        if t.state == TaskState.RESTARTING and not self.decided:
            self.restart_policy.claim_answered(self, t, ev, delay, out)

    def _on_progressed(self, ev: Progressed, out: List[Action]) -> None:
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
            t.step, t.step_at = ev.step, ev.now if ev.step != t.step else t.step_at   # when it moved
            if self.best_step is None or ev.step > self.best_step:
                self.best_step, self.best_step_at = ev.step, ev.now
            self.watchdogs.progressed(self)
            if rules.at_final_step(ev.step, ev.total) and t.ending_at is None:
                t.ending_at = ev.now
                out.append(log_event("task_ending", t.name, step=ev.step, total=ev.total))

    def _on_port_open(self, ev: PortOpen, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None and t.state == TaskState.RUNNING:
            t.up = True

    def _on_port_conflict(self, ev: PortConflict, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None:
            t.port_conflict = True

    def _on_waiting(self, ev: Waiting, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None and t.state == TaskState.RUNNING:
            t.waiting_on.setdefault(ev.on, ev.now)

    def _on_interrupt(self, ev: Interrupt, out: List[Action]) -> None:
        if self.interrupted is not None:
            if ev.signum == signal.SIGINT and not self.kill_now:
                self.kill_now = True
                out.append(Say("second Ctrl-C: killing every task now (SIGKILL)"))
                if self.phase == Phase.STOP:
                    self.stop_order.kill_wave(self, ev.now, out)
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

    def _on_kill_request(self, ev: KillRequest, out: List[Action]) -> None:
        t = self.tasks.get(ev.task)
        if t is not None and t.state == TaskState.RUNNING and not t.forced:
            self._force(t, ev.reason, out)

    def _on_peer_ended(self, ev: PeerEnded, out: List[Action]) -> None:
        self.peer_ok[ev.task] = ev.ok

    def _on_peer_lost(self, ev: PeerLost, out: List[Action]) -> None:
        job = self.others.get(ev.task)
        if job is None or ev.task in self.peers_left or ev.task in self.peer_ok or self.decided:
            return
        reason = (f"its node {ev.node} was lost" + (f" ({ev.reason})" if ev.reason else "")
                  if ev.node else ev.reason or "its driver said it left")
        if self.elastic.may_leave(self, ev.task, job):
            self.peers_left[ev.task] = (reason, ev.node)
            self._went(ev.task, reason, ev.node, "", out)
            return
        self.root_cause_words = f"{ev.task} lost: {reason}"
        self._decide(RunState.FAILED, rules.EXIT_FAILED, f"{ev.task} was lost ({reason})", out)

    def _on_run_over(self, ev: RunOver, out: List[Action]) -> None:
        if not self.decided:
            self._decide(RunState.SUCCEEDED, rules.EXIT_OK, ev.words, out, origin_here=False)

    def _on_chief_gone(self, ev: ChiefGone, out: List[Action]) -> None:
        if not self.decided:
            self._decide(RunState.SUCCEEDED, rules.EXIT_OK, ev.words, out)

    def _on_regrouped(self, ev: Regrouped, out: List[Action]) -> None:
        if not self.decided and self.phase == Phase.REPLACE and self.regrouping.moving is not None:
            self.regrouping.placed(self, ev, out)

    def _on_host_back(self, ev: HostBack, out: List[Action]) -> None:
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
        self.success.recount(self)
        came = (f"{ev.node} answers again" if not self.s.moves_nodes
                else f"room again for the workers lost with {ev.node}")
        out.append(Say(f"{came}: starting {', '.join(t.name for t in back)}; {self.workers_line()}"))
        for t in back:
            out.append(log_event("run_grew", t.name, node=ev.node, workers=len(self.workers_in()),
                                 min_workers=self.s.min_workers, attempt=t.restarts))
        self.elastic.back(self, back, out)

    def _on_spare_placed(self, ev: SparePlaced, out: List[Action]) -> None:
        sizing.spare_placed(self, ev, out)

    # ------------------------------------------------------------------ verbs (the policies ask)
    def enter(self, phase: Phase) -> None:
        """The run goes to ``phase`` (TransitionError if it may not)."""
        self.phase = check_phase_change(self.phase, phase)

    def keep_tick(self) -> None:
        """This Tick changed what a policy knows (the sizing policy's measurement): log it."""
        self._keep_tick = True

    def start_at(self, t: TaskTrack, at: float) -> None:
        """Start ``t`` again at ``at`` (a Tick then looks; no look at every task every Tick)."""
        t.start_at = at
        self._next_start_at = min(self._next_start_at, at)

    def restart(self, t: TaskTrack, d: rules.Decision, now: float, out: List[Action]) -> None:
        """``t`` restarts after the decision's backoff."""
        t.restarts += 1
        self.total_restarts += 1
        t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
        self.start_at(t, now + d.delay)
        out.append(Say(f"{t.name}: {d.reason} in {d.delay:.1f}s"))
        out.append(log_event("task_restarting", t.name, reason=d.reason, attempt=t.restarts, delay=d.delay))

    def claim_restart(self, t: TaskTrack, delay: float, now: float) -> None:
        """``t`` waits for a restart of the run's shared budget (the driver's RestartClaim)."""
        self._claims[t.name] = delay
        t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
        self.start_at(t, now + delay)

    def fail(self, t: TaskTrack, reason: str, out: List[Action]) -> None:
        """``t`` is not restarted (``reason``): an elastic worker leaves, else the run fails."""
        if self.may_shrink(t):
            self.leave(t, f"not restarted: {reason}", "", out)
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

    def hold_restarts(self) -> None:
        """A restart already due waits for the regroup (or the restart of every task)."""
        for other in self.tasks.values():
            if other.state == TaskState.RESTARTING:
                other.start_at = float("inf")
                self._claims.pop(other.name, None)
        self._next_start_at = float("inf")

    def start_all(self, now: float) -> List[Action]:
        """After a regroup: start every task waiting to (ps first), each as a new attempt."""
        self._last_watch = now
        by_job: Dict[str, List[str]] = {}
        for x in self.tasks.values():
            if x.state in (TaskState.RESTARTING, TaskState.PENDING) and not x.spare:
                if x.state == TaskState.RESTARTING:
                    x.restarts += 1     # every process is a new attempt (TFCLUSTER_RESTART_COUNT)
                x.start_at = float("inf")
                by_job.setdefault(x.job, []).append(x.name)
        return [Start(n, self.tasks[n].restarts) for job in rules.start_order(by_job) for n in by_job[job]]

    def may_shrink(self, t: TaskTrack) -> bool:
        """``t``, a task here still in the run, may leave it (the elastic policy's rule)."""
        return not t.left and self.elastic.may_leave(self, t.name, t.job)

    def leave(self, t: TaskTrack, reason: str, node: str, out: List[Action]) -> None:
        """``t`` leaves the run, which goes on with the workers left (at least min_workers):
        LEFT, not FAILED (the run did not fail)."""
        if t.state != TaskState.FAILED:
            t.state = check_transition(t.state, TaskState.FAILED, t.name)
        t.state = check_transition(t.state, TaskState.LEFT, t.name)
        t.left, t.left_node = reason, node
        t.why = (t.why + "; " if t.why else "") + f"left the run: {reason}"
        self.success.recount(self)
        back = ("" if not node else f"; it starts again when {node} answers" if not self.s.moves_nodes
                else "; it starts again when its place can be found again (a node that joins)")
        self._went(t.name, reason, node, back, out)

    def _went(self, name: str, reason: str, node: str, back: str, out: List[Action]) -> None:
        """A worker (here or elsewhere) has left: say so, log it, and ask the elastic mode."""
        out.append(Say(f"{name} left the run ({reason}): going on with {self.workers_line()}{back}",
                       error=True))
        where = {"node": node} if node else {}     # left here (no node lost): no node field
        out.append(log_event("run_shrunk", name, **where, reason=reason, workers=len(self.workers_in()),
                             min_workers=self.s.min_workers))
        self.elastic.left(self, name, out)

    #: what the machine does with a watchdog's request (rules.WatchdogAction.action): the one
    #: table a new kind of request from a policy is added to (tfcluster.core.policies.watchdog)
    ASKS: Dict[str, Callable[["RunMachine", rules.WatchdogAction, List[Action]], bool]] = {}

    def _carry_out(self, asks: List[rules.WatchdogAction], out: List[Action]) -> None:
        for a in asks:
            if a.action not in sizing.ASKS:       # the sizing policy logged its decision
                out.append(log_event("watchdog", a.task, reason=a.reason, action=a.action))
            if a.action == "kill" and a.task in self.others:
                out.append(AskKill(a.task, a.reason))
            elif self.ASKS[a.action](self, a, out):
                return                      # the run is decided: nothing more to do

    def _ask_kill(self, a: rules.WatchdogAction, out: List[Action]) -> bool:
        t = self.tasks[a.task]
        if t.state == TaskState.RUNNING and not t.forced:
            self._force(t, a.reason, out)
        return False

    def _ask_fail_run(self, a: rules.WatchdogAction, out: List[Action]) -> bool:
        self.root_cause_words = a.reason
        out.append(Say(a.reason, error=True))
        self._decide(RunState.FAILED, rules.EXIT_FAILED, a.reason, out)
        return True

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
            if self.success.begin_grace(self, self.now, out):
                self.enter(Phase.GRACE)
            else:
                self._begin_stop(self.now, out)
            return
        if announce:
            if result == RunState.FAILED and self.root_cause is not None:
                t = self.tasks[self.root_cause]
                out.append(Say(f"run failed: {t.name} ({describe_exit(t.returncode)}); "
                               f"stopping the others", error=True))
            elif result == RunState.INTERRUPTED:
                out.append(Say(f"{words}; stopping the cluster"))
        self._begin_stop(self.now, out)

    def _begin_stop(self, now: float, out: List[Action]) -> None:
        """Stop what still runs, in the stop order; a task waiting to start never will."""
        self.enter(Phase.STOP)
        for t in self.tasks.values():
            if t.state in (TaskState.RESTARTING, TaskState.PENDING):
                t.state = check_transition(t.state, TaskState.STOPPED, t.name)
                self._claims.pop(t.name, None)
        self.stop_waves(now, out, fresh=False)

    def stop_waves(self, now: float, out: List[Action], only: Optional[List[str]] = None,
                    fresh: bool = True) -> None:
        """Stop the live tasks (``only``: these) in the stop order; the end when none is left."""
        if self.stop_order.begin(self, now, out, only=only, fresh=fresh):
            self._stopped(out)

    def _stopped(self, out: List[Action]) -> None:
        """Every wave is done: the driver places the tasks again (a regroup), or the run ends."""
        regroup = self.regrouping.stopped() if self.phase == Phase.REGROUP else None
        if regroup is not None:
            self.enter(Phase.REPLACE)            # the driver places the tasks again: Regrouped
            out.append(regroup)
            return
        self.enter(Phase.DONE)
        self.finished = True
        if self.result == RunState.RUNNING:
            self.result, self.exit_code = RunState.FAILED, rules.EXIT_FAILED
        out.append(Finished(self.result, self.exit_code if self.exit_code is not None
                            else rules.EXIT_FAILED))

    def _advance(self, now: float, out: List[Action]) -> None:
        """After each event: the success rule, the grace period, the stop waves."""
        self.now = now
        if self.phase == Phase.RUN and not self.decided:
            words = self.success.reached(self)
            if words is not None:
                self._decide(RunState.SUCCEEDED, rules.EXIT_OK, words, out)
        if self.phase == Phase.GRACE and self.success.grace_over(self, now):
            self._begin_stop(now, out)
        if self.phase.stopping and self.stop_order.advance(self, now, out):
            self._stopped(out)

    def _exit_event(self, t: TaskTrack, state: TaskState) -> LogEvent:
        return log_event("task_exited", t.name, state=state.value, **exit_fields(t.returncode))


RunMachine.ASKS.update({"kill": RunMachine._ask_kill, "fail_run": RunMachine._ask_fail_run, **sizing.ASKS})


#: the handler of each event: one for every event class (checked now, when the module loads)
HANDLERS: Dict[type, Callable[[RunMachine, Event, List[Action]], None]] = {
    Tick: RunMachine._on_tick, Started: RunMachine._on_started,
    StartFailed: RunMachine._on_start_failed, Exited: RunMachine._on_exited,
    Progressed: RunMachine._on_progressed, PortOpen: RunMachine._on_port_open,
    PortConflict: RunMachine._on_port_conflict, Waiting: RunMachine._on_waiting,
    Interrupt: RunMachine._on_interrupt, KillRequest: RunMachine._on_kill_request,
    PeerEnded: RunMachine._on_peer_ended, RunOver: RunMachine._on_run_over,
    ChiefGone: RunMachine._on_chief_gone, RestartClaim: RunMachine._on_restart_claim,
    Regrouped: RunMachine._on_regrouped, HostBack: RunMachine._on_host_back,
    SparePlaced: RunMachine._on_spare_placed, PeerLost: RunMachine._on_peer_lost,
}
check_table(HANDLERS, EVENTS, "the run machine's event handlers (tfcluster.core.machine.HANDLERS)")


def replay(machine: RunMachine, began: float, inputs: Iterable[Event]) -> List[Action]:
    """Begin a new machine built like the run's at ``began`` and hand it the run's logged
    inputs; the actions it returns are the run's (the machine is pure: same inputs, same
    decisions)."""
    out = machine.begin(began)
    for ev in inputs:
        out += machine.handle(ev)
    return out
