"""The supervisor: the run machine's driver for the local, ssh and Ray backends and per-host
agents. It starts the plan's tasks through a backend and runs them to the run's end.

One loop (:meth:`Supervisor._loop`) hands the machine (:mod:`tfcluster.core.machine`) what
happened -- exits, what the tasks' output says, port probes, signals -- and carries out the
actions it returns (:meth:`Supervisor._act`); the machine decides, and task states change in it
alone. Each task's output is read by an :class:`tfcluster.core.task_output.OutputReader`, fed by
one thread (:class:`tfcluster.drivers.pump.OutputPump`); the tasks as the loop holds them are
:mod:`tfcluster.drivers.tasks`'s, what the person sees :mod:`tfcluster.drivers.display`'s. How a
process is started is the backend's business (:mod:`tfcluster.backends.base`); what a task is
given is the plan's (:mod:`tfcluster.plan.runplan`). The clock and the nap are injectable, so a
fake backend can drive this loop in unit tests.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from tfcluster import safe_files
from tfcluster.backends.base import Backend, Handle, ProcessSpec
from tfcluster.backends.oom import OomWatch
from tfcluster.core import rules
from tfcluster.core.events import ACTIONS, NotHere, check_table
from tfcluster.core.machine import (
    AskKill,
    ChiefGone,
    ClaimRestart,
    EndRun,
    Exited,
    Finished,
    HostBack,
    Interrupt,
    Kill,
    LogEvent,
    PortOpen,
    Progressed,
    Regroup,
    Regrouped,
    RunMachine,
    Say,
    SparePlaced,
    Start,
    Started,
    StartFailed,
    TaskState,
    Tick,
    input_fields,
    line_events,
)
from tfcluster.core.messages import elastic_line
from tfcluster.core.output_patterns import keras_sums_over
from tfcluster.core.rules import describe_exit
from tfcluster.core.task_output import NoiseFold, OutputReader
from tfcluster.drivers.display import Display, ProgressLines, ProgressPace, View, live_table, summary
from tfcluster.drivers.pump import Inbox, OutputPump, join_readers
from tfcluster.drivers.tasks import (
    ChiefElsewhere,
    ExitWatch,
    PortProbes,
    SecretMasks,
    Starter,
    StepRate,
    TaskRun,
    discard,
    start_failure,
)
from tfcluster.errors import UserError
from tfcluster.net.addresses import is_local
from tfcluster.plan import contract
from tfcluster.plan.progress import Progress
from tfcluster.plan.runplan import RunPlan, TaskPlan
from tfcluster.runs import index
from tfcluster.runs.control import prepared_run_dir, summaries_line
from tfcluster.runs.eventlog import EventLog, NullEventLog
from tfcluster.runs.failure import Failure, read_failure
from tfcluster.runs.find import shown_here
from tfcluster.runs.record import network_fields, run_record, task_row, workers_fields, write_record
from tfcluster.runs.table import shlex_quote

PARALLEL_FROM = 16             # a start wave of this many tasks of one job starts side by side
HOSTS_EVERY = 1.0              # elastic: seconds between asks whether lost hosts are back
LIFE_EVERY = 0.25              # seconds between looks at every task's signs of life (dated)


class Supervisor:
    """The local driver of the run machine (:mod:`tfcluster.core.machine`): it starts processes
    through a backend, turns their exits, output, ports and the launcher's signals into the
    machine's events, and carries out the actions the machine returns."""

    def __init__(self, plan: RunPlan, backend: Backend, view: Optional[View] = None,
                 clock: Callable[[], float] = time.time,
                 nap: Optional[Callable[[List[TaskRun], float], None]] = None,
                 network_note: str = ""):
        self.plan = plan
        self.network_note = network_note   # said at start (tfcluster.drivers.network)
        self.backend = backend
        self.view = view or View()
        self.clock = clock
        self.nap_fn = nap              # (tasks alive, seconds): a test's nap, moving a fake clock
        self.machine = RunMachine.from_plan(plan)
        self.runs: Dict[str, TaskRun] = {
            t.name: TaskRun(plan=t, spec=self._spec(t, 0), track=self.machine.tasks[t.name])
            for t in plan.selected_tasks}
        self._specs_for = plan         # the first attempts' specs hold while the plan does
        self.started = self.clock()
        self.ended: Optional[float] = None
        self.lock = threading.RLock()  # the task views, shared with the output readers' thread
        self.interrupted: Optional[int] = None   # the first signal the launcher got
        self.start_error: Optional[UserError] = None   # a task could not start: bad input
        self.moves: List[dict] = []    # the cluster placed again (a lost node): old, new endpoints
        self.run_folder = None         # the run's folder, held open once made (_make_run_dir)
        # what the person sees, and what the run leaves behind
        self.display = Display(quiet=self.view.quiet, live=self.view.live, table=self._live_table,
                               stream=self.view.stream, err_stream=self.view.err_stream,
                               options=self.view.output)
        self.pace = ProgressPace(self.view.progress_every)   # progress lines without a table
        self.progress_lines = ProgressLines(self.view.progress_every)   # ... and what they say
        # the line that says noise is hidden is the launcher's, not a task's
        self.noise = NoiseFold(show=self.view.show_tf_noise,
                               say=lambda line: self.display.info(line.replace("tfcluster: ", "", 1)))
        self.events = NullEventLog()   # the run's EventLog once it has its folder
        self.masks = SecretMasks(plan)
        self.dirty = True              # run.json is behind what the loop knows
        self.last_record = 0.0         # when it was last written
        # the loop's own parts
        self.inbox = Inbox()
        self.pump = OutputPump()       # one thread reads every task's pipes (started on first use)
        self.exits = ExitWatch()
        self.starter = Starter(backend, clock)
        self.probes = PortProbes()
        self.chief_elsewhere = ChiefElsewhere(backend, plan.grace, self.display.info)
        self.life_looked = 0.0         # when the loop last looked at every task's signs of life
        self.rate = StepRate(monotonic=True)   # the run's steps/s: the global step's
        self.oom = OomWatch()          # the kernel's and the cgroup's OOM-kill counters at start
        self.hosts_looked = 0.0        # elastic: when the loop last asked for hosts back
        self.folds_due: List[TaskRun] = []   # failed tasks whose traceback is yet to be shown folded

    # ---- the machine's verdicts, read through
    result = property(lambda self: self.machine.result)
    exit_code = property(lambda self: self.machine.exit_code)
    decision_words = property(lambda self: self.machine.words)
    total_restarts = property(lambda self: self.machine.total_restarts)
    root_cause_words = property(lambda self: self.machine.root_cause_words)

    @property
    def root_cause(self) -> Optional[TaskRun]:
        name = self.machine.root_cause
        return None if name is None else self.runs[name]

    # ------------------------------------------------------------------ setup
    def _spec(self, t: TaskPlan, restart_count: int) -> ProcessSpec:
        """The process for attempt ``restart_count`` of task ``t``: the plan's argv with the
        interpreter resolved by the backend, the contract's environment."""
        live = self.machine.workers_in() if self.plan.min_workers is not None else None
        argv = contract.resolve_argv(self.plan.argv(t, live=live), self.backend.python(t.host))
        return ProcessSpec(name=t.name, argv=argv, env=self.plan.env(t, restart_count, live=live),
                           cwd=t.cwd, host=t.host)

    @property
    def skipped(self) -> List[TaskPlan]:
        return self.plan.skipped_tasks

    def check_ports(self) -> None:
        """Every local port must be free before anything starts (exit 2 otherwise). In a
        private network every port is the run's own: the host's do not matter."""
        if not self.backend.checks_local_ports:
            return
        from tfcluster.drivers.preflight import port_problems
        problems = port_problems(self.plan)
        if problems:
            raise UserError("\n".join(f"{p}; nothing was started" for p in problems))

    # ------------------------------------------------------------------ main
    def run(self) -> int:
        self.check_ports()
        self._make_run_dir()
        self._write_record()   # at once: a launcher killed in its start wave leaves a record
        old = self._install_signals()
        try:
            self.display.start()
            self._announce()
            began = self.clock()
            self.events.emit("input", input="begin", now=began)   # the machine's input log
            self._act(self.machine.begin(began))
            self._loop()
        finally:
            try:
                if not self.machine.finished:    # a bug: stop what runs, then let it show
                    self._emergency_stop()
                self._drain_readers()
                self.pump.close()
                for tr in self.runs.values():     # what a reader held to the end
                    for text in tr.fold.release():
                        self.display.task_line(tr.name, text)
            finally:
                self.starter.close()           # every task has ended: its threads may go
                self.ended = self.clock()
                self.display.stop()
                self._restore_signals(old)
                self.events.emit("run_ended", result=self.result.value, exit_code=self.exit_code)
                with self.lock:
                    final = self.record()     # written, summed up and named once
                self._write_record(force=True, data=final)
                self.backend.close()
        if self.start_error is not None:   # a task that cannot start: bad input, exit 2
            self.events.close()
            self.run_folder.close()
            raise self.start_error
        self.display.block(summary(final, self.runs, self.machine, self.plan.run_id,
                                   self.started, self.ended))
        if self.events.error:
            self.display.error(f"the event log could not be written: {self.events.error}")
        for tr in self.runs.values():
            if tr.seen.log_error:
                self.display.error(f"{tr.name}: its log could not be written: {tr.seen.log_error}")
            if tr.seen.read_error:
                self.display.error(f"{tr.name}: {tr.seen.read_error}")
        self.events.close()
        line = summaries_line(final)     # the record in hand, not read back
        if line:
            self.display.info(line)
        self.run_folder.close()
        # the run by its folder, and the commands that show it (the latest run of this
        # folder for a bare status/report, with or without a file: runs.find.runs_here)
        shown = shown_here(self.plan.run_dir)
        self.display.info(f"this run: tfcluster status {shown}; a picture of it: "
                          f"tfcluster report {shown}")
        return self.exit_code if self.exit_code is not None else rules.EXIT_FAILED

    def _make_run_dir(self) -> None:
        folder = safe_files.make_run_folder(self.plan.logdir, self.plan.run_id,
                                            self.plan.run_id_given,
                                            adopt=prepared_run_dir)   # launch --detach made it
        if folder.path != self.plan.run_dir:   # a default run id taken meanwhile: the next free one
            self.plan = self.plan.with_run_dir(folder.path)
        self.run_folder = folder
        run_dir = self.plan.run_dir
        self.machine.run_ref = shlex_quote(run_dir)   # the stall warnings' `tfcluster stack` hint
        for tr in self.runs.values():
            tr.log_path = os.path.join(run_dir, f"{tr.plan.file_stem}.log")
        self.events = EventLog(run_dir, clock=self.clock, buffered=True)   # flushed every turn
        self.machine.log_inputs = True   # what came in, for a replay (tfcluster.core.machine.replay)
        self.display.echo = self.events.log
        why = index.register(run_dir, self.plan.run_id, self.plan.source)
        if why:
            self.display.info(f"warning: {why}; tfcluster logs/stop find this run by its folder only")

    def _announce(self) -> None:
        d = self.display
        names = ", ".join(f"{tr.name}@{tr.plan.endpoint}" if tr.track.placed else
                          f"{tr.name} (spare, not placed yet)" for tr in self.runs.values())
        d.info(f"run {self.plan.run_id}: {len(self.runs)} task(s): {names}; logs in {self.plan.run_dir}")
        if self.network_note:
            d.info(self.network_note)
        if self.plan.min_workers is not None:
            d.info(elastic_line(self.plan.min_workers, sum(1 for t in self.plan.tasks if t.job == "worker"),
                                self.plan.on_change,
                                self.plan.kind.name if self.plan.kind.rejoins_at_new_address else "",
                                {t.job for t in self.plan.tasks},
                                self.plan.sizing.start_workers if self.plan.sizing else None))
        if self.skipped:
            why = ("not on --host " + ", ".join(self.plan.only_hosts)) if self.plan.only_hosts \
                else "not this machine"
            d.info(f"skipped ({why}): " + ", ".join(f"{t.name}@{t.endpoint}" for t in self.skipped))
        self.events.emit("run_started", run_id=self.plan.run_id, file=self.plan.source,
                         backend=self.backend.name, tasks=list(self.runs), chief=self.plan.chief)

    # ------------------------------------------------------------------ carrying out actions
    def _feed(self, *events) -> None:
        self._act(self.machine.handle(*events))

    def _act(self, actions) -> None:
        """Carry out the machine's actions, each by its entry in :data:`CARRY`."""
        for ev in self.machine.take_inputs():
            self.events.emit("input", **input_fields(ev))
        actions = list(actions)
        i = 0
        while i < len(actions):
            a = actions[i]
            i += 1
            carry = CARRY[type(a)]
            if isinstance(a, Start):     # a wave of one job's tasks starts side by side
                job = self.machine.tasks[a.task].job
                end = i
                while end < len(actions) and isinstance(actions[end], Start) \
                        and self.machine.tasks[actions[end].task].job == job:
                    end += 1
                if end - i + 1 >= PARALLEL_FROM and self.backend.parallel_starts:
                    self._feed_signals()
                    self._start_many([a] + actions[i:end])
                    i = end
                    continue
            if not isinstance(carry, NotHere):
                carry(self, a)
        self._show_folds()
        self.dirty = True

    def _do_start(self, a: Start) -> None:
        self._feed_signals()
        if self._may_start(a):
            self._start(self.runs[a.task])

    def _do_kill(self, a: Kill) -> None:
        tr = self.runs[a.task]
        if tr.handle is not None:
            tr.handle.signal(a.sig)

    def _do_log(self, a: LogEvent) -> None:
        if a.event == "task_exited":
            self.events.flush_progress(a.task)
        self.events.emit(a.event, task=a.task, **a.as_dict())

    def _do_say(self, a: Say) -> None:
        (self.display.error if a.error else self.display.info)(a.text)
        self._show_folds()     # a failure's traceback after its cause and hint

    def _show_folds(self) -> None:
        """The tracebacks of the tasks that failed, folded
        (:meth:`tfcluster.drivers.display.TracebackFold.fold`)."""
        while self.folds_due:
            tr = self.folds_due.pop(0)
            logs = f"tfcluster logs {shlex_quote(self.plan.run_id)} {tr.name}"
            for text in tr.fold.fold(logs):
                self.display.task_line(tr.name, text)

    def _failure(self, tr: TaskRun) -> Failure:
        """What ``tr``'s output says of its failure (:func:`tfcluster.runs.failure.read_failure`):
        its one-line cause and a hint whose command names the run's file."""
        rows = []
        for other in (tr, self.runs.get(self.plan.chief)):
            if other is not None:
                rows.append({"task": other.name, "chief": other.name == self.plan.chief,
                             "argv": self.masks.argv_env(other)[0], "cwd": other.plan.cwd})
        with self.lock:
            lines = list(tr.seen.tail)
        source = os.path.abspath(self.plan.source) if self.plan.source else ""
        return read_failure(lines, {"file": source, "run_dir": self.plan.run_dir, "tasks": rows},
                            tr.name, os.getcwd())

    def _waiting_to_start(self, name: str) -> bool:
        return not self.machine.finished and \
            self.machine.tasks[name].state in (TaskState.PENDING, TaskState.RESTARTING)

    def _may_start(self, a: Start) -> bool:
        return self._waiting_to_start(a.task) and not self.machine.phase.holds_starts

    def _regroup(self, a: Regroup) -> None:
        """Every task has stopped because ``a.task``'s node was lost: the backend places the
        tasks again (:meth:`Backend.place_again`); the plan takes the new endpoints (a new
        TF_CONFIG for every task), the events record the old and the new, and the machine,
        told, starts every task."""
        if not a.place:        # elastic: the workers in the run changed; nothing moves
            self._feed(Regrouped(True, self.clock()))
            return
        old = {name: tr.plan.endpoint for name, tr in self.runs.items()}
        try:
            got = self.backend.place_again(list(self.runs))
        except UserError as e:
            self._feed(Regrouped(False, self.clock(), e.message))
            return
        if got is None:
            self._feed(Regrouped(False, self.clock(),
                                 f"the {self.backend.name} backend cannot move a task"))
            return
        endpoints = {t.name: got.get(t.name, (t.host, t.port)) for t in self.plan.tasks}
        self.plan = self.plan.with_endpoints(endpoints)
        by_name = {t.name: t for t in self.plan.tasks}
        for name, tr in self.runs.items():
            tr.plan = by_name[name]
            self.machine.tasks[name].port = tr.plan.port
        self.machine.where.update({t.name: t.endpoint for t in self.plan.tasks})
        new = {name: tr.plan.endpoint for name, tr in self.runs.items()}
        self.moves.append({"task": a.task, "node": a.node, "at": self.clock(),
                           "old": old, "new": new})
        self.events.emit("cluster_moved", task=a.task, node=a.node, old=old, new=new)
        moved = ", ".join(f"{n} {old[n]} -> {new[n]}" for n in new if old[n] != new[n])
        self.display.info(f"placed again: {moved or 'the same endpoints'}")
        self._feed(Regrouped(True, self.clock()))

    def _spec_now(self, tr: TaskRun) -> ProcessSpec:
        if tr.restarts or self._specs_for is not self.plan:   # else the one made up front
            tr.spec = self._spec(tr.plan, tr.restarts)
        return tr.spec

    def _start(self, tr: TaskRun) -> None:
        spec = self._spec_now(tr)
        handle, error, at = self.starter.one(spec)
        if handle is None:
            self._start_failed(tr, spec, error)
            return
        self._started(tr, handle, at)

    def _start_many(self, starts: List[Start]) -> None:
        """Start many tasks of one job side by side (:meth:`Starter.many`), then hand each start
        to the machine in order. A task that cannot start fails the run as in :meth:`_start`;
        the others of the wave have started by then, and the machine stops them."""
        trs = [self.runs[a.task] for a in starts if self._may_start(a)]
        specs = [self._spec_now(tr) for tr in trs]
        for tr, spec, (handle, error, at) in zip(trs, specs, self.starter.many(specs)):
            if handle is None:
                if self.start_error is None:
                    self._start_failed(tr, spec, error)
            elif not self._waiting_to_start(tr.name):
                discard(handle)    # the run is stopping (a task could not start): not this one
            else:
                self._started(tr, handle, at)

    def _start_failed(self, tr: TaskRun, spec: ProcessSpec, e: Exception) -> None:
        self.start_error = e if isinstance(e, UserError) else UserError(start_failure(tr.name, spec, e))
        self._feed(StartFailed(tr.name, self.start_error.message, self.clock(),
                               self.start_error.exit_code))

    def _started(self, tr: TaskRun, handle: Handle, at: Optional[float] = None) -> None:
        at = self.clock() if at is None else at
        for text in tr.fold.release():        # (held lines of an attempt that ended unseen)
            self.display.task_line(tr.name, text)
        with self.lock:
            tr.handle = handle
            tr.seen.reset()
            tr.exit_fed = False
        self.exits.add(tr, handle)
        self._feed(Started(tr.name, handle.pid, at))
        verb = "restarted" if tr.restarts else "started"
        self.display.info(f"{verb} {tr.name} (pid {tr.pid})"
                          + (f", restart {tr.restarts}" if tr.restarts else ""),
                          log=False)     # the task_started event's line says it in launcher.log
        self.events.emit("task_started", task=tr.name, pid=tr.pid, attempt=tr.restarts,
                         host=tr.plan.host, time=at)
        banner = f"----- tfcluster: restart {tr.restarts} -----" if tr.restarts else ""
        tr.reader = OutputReader(tr.name, handle.stdout, tr.log_path or None, tr.seen, self.lock,
                                 self.masks.line, self.clock,
                                 lambda line, p, tr=tr: self._on_line(tr, line, p),
                                 banner=banner, side=getattr(handle, "progress", None),
                                 noise=self.noise, open_log=safe_files.open_append_fd,
                                 summed_over=keras_sums_over(tr.spec.env.get(contract.TF_CONFIG, "")))
        if not self.pump.add(tr.reader):
            tr.reader.start()         # a stream without a descriptor: a thread of its own

    def _on_line(self, tr: TaskRun, line: str, p: Optional[Progress]) -> None:
        """Called by a task's reader for each line (reader thread): show it (a traceback is held
        back: :class:`tfcluster.drivers.display.TracebackFold`), and pass what it says to the
        loop (the machine is the loop's alone)."""
        now = self.clock()
        shown = tr.fold.feed(line, now) if p is None else tr.fold.release()   # a report: it goes on
        for text in shown:
            self.display.task_line(tr.name, text)
        if p is not None and self.view.echo_progress:
            self.display.task_line(tr.name, line)
        self.inbox.events.extend(line_events(tr.name, line, p, now))
        if p is None:
            return
        with self.lock:
            self.rate.add(now, p.step)
            if p.local_step is not None:
                tr.own_rate.add(now, p.local_step)
            self.dirty = True
        self.events.progress(tr.name, p.step, p.total, p.metrics, local_step=p.local_step)

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while not self.machine.finished:
            self._feed_signals()
            now = self.clock()
            exits = []
            for tr in self.exits.to_look_at(self.runs, now):
                if tr.handle is not None and not tr.exit_fed and tr.state.alive:
                    rc = tr.handle.poll()
                    if rc is not None:
                        if tr.reader is not None:   # its output read to the end first
                            tr.reader.join(timeout=2.0)
                        tr.exit_fed = True
                        self.exits.remove(tr)
                        cause = tr.handle.cause(rc) or (   # a lost host or Ray node
                            self.oom.words(rc) if is_local(tr.plan.host) else "")
                        hint = ""
                        if rc != 0 and not cause and not rules.is_sigkill(rc):
                            failure = self._failure(tr)   # its exception, and the fix if known
                            cause, hint = failure.cause or "", failure.hint or ""
                        if rc == 0:
                            for text in tr.fold.release():
                                self.display.task_line(tr.name, text)
                        else:
                            self.folds_due.append(tr)    # folded after the machine's failure line
                        exits.append(Exited(tr.name, rc, self.clock(), cause,
                                            tr.handle.lost_node(), hint=hint))
            events = self.inbox.take_events()
            if now - self.life_looked >= LIFE_EVERY:   # dated signs: a late look changes nothing
                self.life_looked = now
                events += self._life()
            events += exits
            if self.probes.due(now):
                events += [PortOpen(name, now) for name in self.probes.pick(self.machine.unopened())
                           if self.backend.accepts(self.runs[name].plan.host, self.runs[name].plan.port)]
                if self.plan.chief not in self.runs and not self.machine.decided:
                    words = self.chief_elsewhere.ended(self.plan.task(self.plan.chief), now)
                    if words:
                        events.append(ChiefGone(words, now))
            events += self._hosts_back(now)
            events.append(Tick(self.clock()))
            self._feed(*events)
            self._tick()
            if not self.machine.finished:
                self._nap()

    def _hosts_back(self, now: float) -> list:
        """Elastic runs: every second, whether the backend reaches again a node that workers
        left the run with; for each that it does, those workers' ports are chosen there again
        (the plan takes the new endpoints) and the machine is told (HostBack)."""
        if self.plan.min_workers is None or now - self.hosts_looked < HOSTS_EVERY:
            return []
        self.hosts_looked = now
        out = self._spares_placed() if self.plan.sizing and self.plan.kind.places_spares_late else []
        for node in self.machine.left_nodes():
            names = [n for n, t in self.machine.tasks.items() if t.left and t.left_node == node]
            if not self.backend.host_back(node, names):
                continue
            try:
                got = self.backend.place_tasks(self.plan, names)
            except UserError as e:
                self.display.info(f"{node} answers again, but {', '.join(names)} cannot be placed "
                                  f"there yet: {e.message}")
                continue
            if got:
                self._take_endpoints(got)
            out.append(HostBack(node, self.clock()))
        return out

    def _spares_placed(self) -> list:
        """Sized runs on a backend that places the spare workers late (Ray), at the hosts'
        pace: the spares it placed since the last look (a node with room joined); the plan takes
        their endpoints, and the machine is told (SparePlaced)."""
        for name, why in self.backend.spares_given_up().items():
            self.display.info(f"{name} cannot be placed: {why}; elastic.scale will not add it")
        got = self.backend.spares_placed()
        if not got:
            return []
        self._take_endpoints({name: where[:3] for name, where in got.items()})
        return [SparePlaced(name, where[3], self.clock()) for name, where in got.items()]

    def _take_endpoints(self, got: Dict[str, Tuple[str, int, Optional[int]]]) -> None:
        """The plan with new endpoints (and profiler ports) for the tasks in ``got``."""
        endpoints = {t.name: (got[t.name][0], got[t.name][1]) if t.name in got else (t.host, t.port)
                     for t in self.plan.tasks}
        profilers = {t.name: (got[t.name][2] if t.name in got else t.profiler_port)
                     for t in self.plan.tasks}
        self.plan = self.plan.with_endpoints(endpoints, {k: v for k, v in profilers.items() if v})
        by_name = {t.name: t for t in self.plan.tasks}
        for name, tr in self.runs.items():
            tr.plan = by_name[name]
            self.machine.tasks[name].port = tr.plan.port
        self.machine.where.update({t.name: t.endpoint for t in self.plan.tasks})

    def _life(self) -> list:
        """Signs of life the readers saw since the last look (a Keras bar that moved, a TF1 hook
        line, a report that moved): the machine's watchdogs count them."""
        out = []
        with self.lock:
            for tr in self.runs.values():
                at = tr.seen.life_at
                if at is not None and at != tr.life_fed and tr.state.alive:
                    tr.life_fed = at
                    out.append(Progressed(tr.name, None, at))
        return out

    def _feed_signals(self) -> None:
        while self.inbox.signals:
            self._feed(Interrupt(self.inbox.signals.popleft(), self.clock()))

    def _nap(self, seconds: float = 0.05) -> None:
        """Sleep up to ``seconds``, waking as soon as a task exits (:meth:`ExitWatch.nap`); a
        test's nap moves its fake clock instead."""
        if self.nap_fn is not None:
            self.nap_fn([tr for tr in self.runs.values() if tr.state.alive], seconds)
        else:
            self.exits.nap(seconds)

    def _tick(self) -> None:
        now = self.clock()
        if self.dirty and now - self.last_record > 1.0:
            self._write_record()
        self.events.flush_due()
        self.events.flush()
        for tr in self.runs.values():    # a traceback held while its task runs on (or lines
            if tr.fold.due(now) or (tr.exit_fed and tr.fold.held):   # after its fold): shown
                for text in tr.fold.release():
                    self.display.task_line(tr.name, text)
        if self.display.shows_table:
            self.display.refresh()
        elif self.machine.best_step is not None and self.pace.due(self.machine.best_step, now):
            for line in self.progress_lines.lines(self.runs.values(), self.rate.steady(now),
                                                  self.clock()):
                self.display.info(line, log=False)    # progress events are in launcher.log

    def _live_table(self):
        now = self.clock()
        return live_table(self.runs.values(), self.machine, self.plan.chief, self.rate.current(now),
                          now, eta_rate=self.rate.steady(now))

    def _emergency_stop(self) -> None:
        """The loop broke (a bug): SIGTERM, a bounded wait, SIGKILL to every task's group."""
        live = [tr for tr in self.runs.values() if tr.handle is not None and tr.handle.poll() is None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for tr in live:
                tr.handle.signal(sig)
            deadline = time.time() + self.plan.stop_timeout
            while live and time.time() < deadline:
                live = [tr for tr in live if tr.handle.poll() is None]
                time.sleep(0.05)

    def _drain_readers(self, limit: float = 30.0) -> None:
        """Every reader reads its task's output to the end before the launcher goes on: the
        last line of a task is always in its log (each group was SIGKILLed, so pipes close)."""
        join_readers([tr.reader for tr in self.runs.values() if tr.reader is not None], timeout=limit)

    # ------------------------------------------------------------------ signals
    def interrupt(self, signum: int) -> None:
        """What a signal to the launcher does (from the signal handler): the loop hands it to
        the machine, which stops the run; a second Ctrl-C kills at once."""
        if not self.interrupted:
            self.interrupted = signum
        self.inbox.signals.append(signum)

    def _install_signals(self):
        old = {}
        if threading.current_thread() is not threading.main_thread():
            return old
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, lambda signum, frame: self.interrupt(signum))
        return old

    def _restore_signals(self, old) -> None:
        for sig, h in old.items():
            signal.signal(sig, h)

    # ------------------------------------------------------------------ records
    def record(self) -> dict:
        """run.json as the loop knows the run now (:func:`tfcluster.runs.record.run_record`)."""
        tasks = []
        for tr in list(self.runs.values()):
            p = tr.progress
            argv, env = self.masks.argv_env(tr)
            tasks.append(task_row(
                tr.name, host=tr.plan.host, endpoint=tr.plan.endpoint,
                chief=tr.name == self.plan.chief, pid=tr.pid,   # a sized run's spare: spare / left
                state=self.machine.shown(tr.name) if tr.track.spare and not tr.state.alive else tr.state.value,
                exit_code=tr.returncode, exit=describe_exit(tr.returncode), restarts=tr.restarts,
                started=tr.started, first_started=tr.first_started, ended=tr.ended,
                log=tr.log_path, profiler_port=tr.plan.profiler_port,
                argv=argv, env=env,                       # note: run.json's field for the task's reason
                note=tr.why or ("" if tr.track.placed else "not placed yet: no room for it in the cluster so far"),
                life_at=tr.track.alive_at, output_at=tr.seen.output_at,
                progress=None if p is None else {
                    "step": p.step, "total": p.total, **p.metrics, "at": tr.seen.progress_at}))
        for t in self.skipped:
            tasks.append(task_row(t.name, host=t.host, endpoint=t.endpoint,
                                  chief=t.name == self.plan.chief, state=TaskState.SKIPPED.value))
        rc = self.root_cause
        root_cause = self.root_cause_words if rc is None else (
            f"{rc.name} {describe_exit(rc.returncode)}" + (f" ({rc.why})" if rc.why else ""))
        return run_record(
            self.plan, backend=self.backend.name, network=network_fields(self.plan),
            started=self.started, ended=self.ended,
            result=self.result.value, exit_code=self.exit_code, decision=self.decision_words,
            root_cause=root_cause, total_restarts=self.total_restarts, tasks=tasks, stalled=self.machine.stalled(),
            **({"moves": list(self.moves)} if self.moves else {}),
            **({"workers": self._workers_fields()} if self.plan.min_workers is not None else {}))

    def _workers_fields(self) -> dict:
        m = self.machine
        return workers_fields(len(m.workers_in()), m.workers_total(), self.plan.min_workers, m.workers_left(),
                              m.s.max_workers, m.sizing_fields())

    def _write_record(self, force: bool = False, data: Optional[dict] = None) -> None:
        if not os.path.isdir(self.plan.run_dir):
            return
        with self.lock:
            data = self.record() if data is None else data
            self.dirty = False
        self.last_record = self.clock()
        try:
            write_record(self.plan.run_dir, data)
        except OSError as e:
            if force:
                self.display.error(f"cannot write run.json: {e}")


#: what the supervisor does with each action: one entry per action class (checked at import)
CARRY = {
    Start: Supervisor._do_start, Kill: Supervisor._do_kill, LogEvent: Supervisor._do_log,
    Say: Supervisor._do_say, Regroup: Supervisor._regroup,
    ClaimRestart: NotHere("one launcher runs every task: the machine counts the restart budget"),
    AskKill: NotHere("every task of the run is this launcher's: the machine kills a task here"),
    EndRun: NotHere("no other driver to tell: the decision ends this launcher's run"),
    Finished: NotHere("the loop (Supervisor.run) ends on machine.finished, which Finished reports"),
}
check_table(CARRY, ACTIONS, "the supervisor's actions (tfcluster.drivers.supervisor.CARRY)")
