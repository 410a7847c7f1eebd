"""The supervisor: start the plan's tasks, watch them, decide success or failure, stop them.

One loop (:meth:`Supervisor._loop`) acts; everything else reports. Output readers note what
the tasks print (:mod:`.output`), the watchdog checks and the restart and success rules
(:mod:`tfcluster.core.rules`) return decisions, and task states change only through
:meth:`Supervisor._set` (:mod:`.state`). How a process is started is the backend's business
(:mod:`tfcluster.backends.base`); what a task is given is the plan's (:mod:`tfcluster.plan.runplan`).
The clock and the nap are injectable, so a fake backend can drive this loop in unit tests.
"""
from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, List, Optional, Tuple

from tfcluster.plan import contract
from tfcluster.core import rules
from tfcluster.runs import index as runindex
from tfcluster.clusterfile import secrets
from tfcluster.runs.control import prepared_run_dir
from tfcluster.runs.control import summaries_line
from tfcluster.core.messages import security_note
from tfcluster.backends.base import Backend, Handle, ProcessSpec
from tfcluster.errors import UserError
from tfcluster.runs.eventlog import EventLog
from tfcluster.backends.oom import OomWatch
from tfcluster.net.addresses import is_local, reachable_beyond_loopback
from tfcluster.net.ports import describe_port_holder, port_in_use
from tfcluster.core.machine import (ChiefGone, Exited, Interrupt, Kill, LogEvent, PortOpen,
                                    Progressed, Regroup, Regrouped, RunMachine, Say, Start,
                                    Started, StartFailed, TaskTrack, Tick, input_fields,
                                    line_events)
from tfcluster.plan.runplan import RunPlan, TaskPlan
from tfcluster.plan.progress import PIPED_PROGRESS_EVERY, Progress
from tfcluster import safe_files
from tfcluster.runs.record import run_record, task_row, write_record
from tfcluster.runs.status import HEADER, ago, format_duration, format_table, shlex_quote, task_rows
from tfcluster.drivers.display import Display
from tfcluster.core.output_patterns import failure_hint, failure_tail
from tfcluster.core.task_output import NoiseFold, OutputReader, Seen
from tfcluster.drivers.pump import OutputPump, join_readers
from tfcluster.core.machine import TaskState
from tfcluster.core.rules import describe_exit

PARALLEL_FROM = 16             # a start wave of this many tasks of one job starts side by side
PARALLEL_STARTS = 4            # ... from this many threads (Supervisor._start_many)
LIFE_EVERY = 0.25              # seconds between looks at every task's signs of life (dated)
PROBES_PER_ROUND = 64          # port probes every half second (Supervisor._probes)
PROGRESS_EVERY = PIPED_PROGRESS_EVERY   # seconds between progress lines without a live table


@dataclass
class View:
    """How a run is shown: the launcher's own presentation settings."""

    quiet: bool = False
    live: Optional[bool] = None
    stream: object = None              # task output (default stdout)
    err_stream: object = None          # tfcluster's own lines (default stderr)
    progress_every: float = PROGRESS_EVERY
    echo_progress: bool = False        # also print progress-protocol lines (tools parse them)
    show_tf_noise: bool = False        # show TensorFlow's start-up noise on the console
    output: object = None              # display.OutputOptions: --tasks, --timestamps, host prefixes


class NullEvents:
    """Where events go before the run has a folder."""

    error = None

    def emit(self, event: str, task: Optional[str] = None, **fields) -> None:
        pass

    def progress(self, *args, **kwargs) -> None:
        pass

    def flush_progress(self, task: str) -> None:
        pass

    def flush_due(self) -> None:
        pass

    def log(self, line: str) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class TaskRun:
    """One task as the driver holds it: its process, output and log. What the run's rules know
    of it (state, restarts, exit, why it ended) is the machine's :class:`TaskTrack`, read through."""

    plan: TaskPlan
    spec: ProcessSpec
    track: TaskTrack
    handle: Optional[Handle] = None
    log_path: str = ""
    seen: Seen = field(default_factory=Seen)
    reader: Optional[threading.Thread] = None
    exit_fed: bool = True                 # its exit has been handed to the machine
    life_fed: Optional[float] = None      # the last sign of life handed to the machine
    # (time, local_step) reports: the steps this task itself ran (the global step moves with
    # every worker's steps, so its rate is the run's, never one task's)
    steps: Deque = field(default_factory=lambda: deque(maxlen=20))
    rate: Optional[float] = None          # this task's own steps per second (None: not reported)

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


class Supervisor:
    """The local driver of the run machine (:mod:`tfcluster.core.machine`): it starts processes
    through a backend, turns their exits, output, ports and the launcher's signals into the
    machine's events, and carries out the actions the machine returns."""

    def __init__(self, plan: RunPlan, backend: Backend, view: Optional[View] = None,
                 clock: Callable[[], float] = time.time,
                 nap: Optional[Callable[[List[TaskRun], float], None]] = None):
        self.plan = plan
        self.backend = backend
        self.view = view or View()
        self.clock = clock
        self._nap_fn = nap
        self.machine = RunMachine.from_plan(plan)
        self.runs: Dict[str, TaskRun] = {}
        self.interrupted: Optional[int] = None
        self._signals: Deque[int] = deque()
        self._inbox: Deque = deque()       # events from the readers (the output pump's thread)
        self.started = self.clock()
        self.ended: Optional[float] = None
        self.lock = threading.RLock()
        self.dirty = True
        self.last_record = 0.0
        self.rate: Optional[float] = None
        self.last_probe = 0.0
        # exit descriptors (pidfds) the last nap saw ready; None: look at every task
        self._ready: Optional[set] = None
        self.last_sweep = 0.0
        # the pidfds of the tasks whose exit is not yet fed, registered once (not every turn)
        self._exit_poll = select.poll()
        self._exit_fds: Dict[int, "TaskRun"] = {}
        self._no_fd: Dict[str, "TaskRun"] = {}      # running tasks without one: looked at every turn
        self._life_looked = 0.0     # when _life last looked at every task
        self._starters = None       # the threads of _start_many (a ThreadPoolExecutor), till the end
        self._probe_at = 0          # where the next round of port probes starts (see _probes)
        self.last_progress_line = 0.0
        self._first_step: Optional[tuple] = None    # (the first step reported, when)
        self._start_error: Optional[UserError] = None
        self._chief_checked = 0.0
        self._chief_seen = False
        self._chief_gone_at: Optional[float] = None
        self._rate_points: Deque = deque(maxlen=20)
        self.events = NullEvents()
        self.oom = OomWatch()       # the kernel's and the cgroup's OOM-kill counters at start
        self.display = Display(quiet=self.view.quiet, live=self.view.live, table=self._live_table,
                               stream=self.view.stream, err_stream=self.view.err_stream,
                               options=self.view.output)
        self.secret_values = plan.secret_values()
        self._masked_specs: Dict[str, tuple] = {}
        self.mask = secrets.Masker(self.secret_values)
        # the note that noise is hidden is the launcher's line, not a task's
        self.noise = NoiseFold(show=self.view.show_tf_noise,
                               say=lambda note: self.display.info(note.replace("tfcluster: ", "", 1)))
        self.pump = OutputPump()      # one thread reads every task's pipes (started on first use)
        for t in plan.selected_tasks:
            self.runs[t.name] = TaskRun(plan=t, spec=self._spec(t, 0),
                                        track=self.machine.tasks[t.name])
        self._specs_for = plan     # the first attempts' specs hold while the plan does
        self.moves: List[dict] = []     # the cluster placed again (a lost node): old, new endpoints

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
        argv = contract.resolve_argv(self.plan.argv(t), self.backend.python(t.host))
        return ProcessSpec(name=t.name, argv=argv, env=self.plan.env(t, restart_count),
                           cwd=t.cwd, host=t.host)

    @property
    def skipped(self) -> List[TaskPlan]:
        return self.plan.skipped_tasks

    def check_ports(self) -> None:
        """Every local port must be free before anything starts (exit 2 otherwise)."""
        if not self.backend.checks_local_ports:
            return
        problems = []
        for tr in self.runs.values():
            t = tr.plan
            if is_local(t.host) and port_in_use(t.port):
                problems.append(f"{t.where}: port {t.port} ({t.name}) is already in use"
                                f"{describe_port_holder(t.port)}; nothing was started")
        if problems:
            raise UserError("\n".join(problems))

    # ------------------------------------------------------------------ main
    def run(self) -> int:
        self.check_ports()
        self._make_run_dir()
        self._write_record()   # at once: a launcher killed in its start wave leaves a record (issue 30)
        old = self._install_signals()
        try:
            self.display.start()
            self._announce()
            began = self.clock()
            self.events.emit("input", input="begin", now=began)   # the machine's input log
            self._act(self.machine.begin(began))
            if self._start_error is None:
                self._security_note()
            self._loop()
        finally:
            try:
                if not self.machine.finished:    # a bug: stop what runs, then let it show
                    self._emergency_stop()
                self._drain_readers()
                self.pump.close()
            finally:
                if self._starters is not None:   # every task has ended: their threads may go
                    self._starters.shutdown(wait=True)
                self.ended = self.clock()
                self.display.stop()
                self._restore_signals(old)
                self.events.emit("run_ended", result=self.result.value, exit_code=self.exit_code)
                with self.lock:
                    final = self.record()     # written, summed up and named once
                self._write_record(force=True, data=final)
                self.backend.close()
        if self._start_error is not None:   # a task that cannot start: bad input, exit 2
            self.events.close()
            self.run_folder.close()
            raise self._start_error
        self._summary(final)
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
        self.display.info(f"a picture of this run: tfcluster report {self.plan.run_dir}")
        return self.exit_code if self.exit_code is not None else rules.EXIT_FAILED

    def _make_run_dir(self) -> None:
        folder = safe_files.make_run_folder(self.plan.logdir, self.plan.run_id, self.plan.run_id_given,
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
        why = runindex.register(run_dir, self.plan.run_id, self.plan.source)
        if why:
            self.display.info(f"warning: {why}; tfcluster logs/stop find this run by its folder only")

    def _announce(self) -> None:
        d = self.display
        names = ", ".join(f"{tr.name}@{tr.plan.endpoint}" for tr in self.runs.values())
        d.info(f"run {self.plan.run_id}: {len(self.runs)} task(s): {names}; logs in {self.plan.run_dir}")
        if self.skipped:
            why = ("not on --host " + ", ".join(self.plan.only_hosts)) if self.plan.only_hosts \
                else "not this machine"
            d.info(f"skipped ({why}): " + ", ".join(f"{t.name}@{t.endpoint}" for t in self.skipped))
        self.events.emit("run_started", run_id=self.plan.run_id, file=self.plan.source,
                         backend=self.backend.name, tasks=list(self.runs), chief=self.plan.chief)

    def _security_note(self) -> None:
        """Said once the tasks have started (it looks at the machine's interfaces)."""
        d = self.display
        if self.backend.name == "local" and reachable_beyond_loopback():
            note = security_note(self.plan.source, [tr.plan.port for tr in self.runs.values()],
                                 silenced=not self.display.options.security_note,
                                 first_time=runindex.first_time)
            if note:
                d.info(note)

    # ------------------------------------------------------------------ carrying out actions
    def _feed(self, *events) -> None:
        self._act(self.machine.handle(*events))

    def _act(self, actions) -> None:
        for ev in self.machine.take_inputs():
            self.events.emit("input", **input_fields(ev))
        actions = list(actions)
        i = 0
        while i < len(actions):
            a = actions[i]
            i += 1
            if isinstance(a, Start):
                self._feed_signals()
                job = self.machine.tasks[a.task].job
                end = i
                while end < len(actions) and isinstance(actions[end], Start) \
                        and self.machine.tasks[actions[end].task].job == job:
                    end += 1
                if end - i + 1 >= PARALLEL_FROM and self.backend.parallel_starts:
                    self._start_many([a] + actions[i:end])    # one job's tasks, side by side
                    i = end
                elif self._may_start(a):
                    self._start(self.runs[a.task])
            elif isinstance(a, Kill):
                tr = self.runs[a.task]
                if tr.handle is not None:
                    tr.handle.signal(a.sig)
            elif isinstance(a, LogEvent):
                if a.event == "task_exited":
                    self.events.flush_progress(a.task)
                self.events.emit(a.event, task=a.task, **a.as_dict())
            elif isinstance(a, Say):
                (self.display.error if a.error else self.display.info)(a.text)
            elif isinstance(a, Regroup):
                self._regroup(a)
            # ClaimRestart, AskKill, EndRun: the Slurm node's business (one machine, one
            # launcher here: the budget is counted by the machine, every task is ours)
        self.dirty = True

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
        try:
            handle = self.backend.start(spec)
        except (OSError, UserError) as e:   # bad input (a missing program, an unreachable host)
            self._start_failed(tr, spec, e)
            return
        self._started(tr, handle)

    def _start_many(self, starts: List[Start]) -> None:
        """Start many tasks of one job side by side (PARALLEL_STARTS threads), then hand each
        start to the machine in order. CPython waits for each child to exec before it goes on,
        so one thread starts tasks one after the other at the kernel's exec latency; a few
        threads overlap those waits (scripts/bench_programs/spawn_latency.py). A task that
        cannot start fails the run as in :meth:`_start`; the others of the wave have started by
        then, and the machine stops them."""
        trs = [self.runs[a.task] for a in starts if self._may_start(a)]
        specs = [self._spec_now(tr) for tr in trs]

        def one(spec: ProcessSpec):
            try:
                handle = self.backend.start(spec)
                return handle, None, self.clock()    # dated when it started, not at hand-off
            except (OSError, UserError) as e:
                return None, e, None

        if self._starters is None:
            # Kept until the run's end: a child's death signal (PR_SET_PDEATHSIG) follows the
            # *thread* that started it, so these threads must outlive the tasks they started.
            from concurrent.futures import ThreadPoolExecutor
            self._starters = ThreadPoolExecutor(PARALLEL_STARTS, thread_name_prefix="start")
        got = list(self._starters.map(one, specs))
        for tr, spec, (handle, error, at) in zip(trs, specs, got):
            if handle is None:
                if self._start_error is None:
                    self._start_failed(tr, spec, error)
            elif not self._waiting_to_start(tr.name):
                _discard(handle)    # the run is stopping (a task could not start): not this one
            else:
                self._started(tr, handle, at)

    def _start_failed(self, tr: TaskRun, spec: ProcessSpec, e: Exception) -> None:
        self._start_error = e if isinstance(e, UserError) else UserError(_start_failure(tr.name, spec, e))
        self._feed(StartFailed(tr.name, self._start_error.message, self.clock(),
                               self._start_error.exit_code))

    def _started(self, tr: TaskRun, handle: Handle, at: Optional[float] = None) -> None:
        at = self.clock() if at is None else at
        with self.lock:
            tr.handle = handle
            tr.seen.reset()
            tr.exit_fed = False
        fd = handle.exit_fd()
        if fd is not None:
            self._exit_poll.register(fd, select.POLLIN)
            self._exit_fds[fd] = tr
        else:
            self._no_fd[tr.name] = tr
        self._feed(Started(tr.name, handle.pid, at))
        verb = "restarted" if tr.restarts else "started"
        self.display.info(f"{verb} {tr.name} (pid {tr.pid})"
                          + (f", restart {tr.restarts}" if tr.restarts else ""),
                          log=False)     # the task_started event's line says it in launcher.log
        self.events.emit("task_started", task=tr.name, pid=tr.pid, attempt=tr.restarts, host=tr.plan.host,
                         time=at)
        banner = f"----- tfcluster: restart {tr.restarts} -----" if tr.restarts else ""
        tr.reader = OutputReader(tr.name, handle.stdout, tr.log_path or None, tr.seen, self.lock,
                                 self.mask, self.clock, lambda line, p, tr=tr: self._on_line(tr, line, p),
                                 banner=banner, side=getattr(handle, "progress", None),
                                 noise=self.noise, open_log=safe_files.open_append_fd)
        if not self.pump.add(tr.reader):
            tr.reader.start()         # a stream without a descriptor: a thread of its own

    def _on_line(self, tr: TaskRun, line: str, p: Optional[Progress]) -> None:
        """Called by a task's reader for each line (reader thread): show it, and pass what it
        says to the loop (the machine is the loop's alone)."""
        if p is None or self.view.echo_progress:
            self.display.task_line(tr.name, line)
        now = self.clock()
        self._inbox.extend(line_events(tr.name, line, p, now))
        if p is None:
            return
        with self.lock:
            self._rate_points.append((now, p.step))
            self.rate = _rate(self._rate_points, now, self.rate)
            if p.local_step is not None:
                tr.steps.append((now, p.local_step))
                tr.rate = _rate(tr.steps, now, tr.rate)
            self.dirty = True
        self.events.progress(tr.name, p.step, p.total, p.metrics, local_step=p.local_step)

    def _drain_inbox(self) -> list:
        out = []
        while self._inbox:
            out.append(self._inbox.popleft())
        return out

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while not self.machine.finished:
            self._feed_signals()
            now = self.clock()
            exits = []
            # a task with a pidfd is looked at when it is ready (at 512 tasks, 1,000 system calls
            # a turn otherwise), and every task once a second whatever the descriptors say
            ready = self._ready
            if now - self.last_sweep >= 1.0 or ready is None:
                look = self.runs.values()
                self.last_sweep = now
            else:      # the tasks whose pidfd woke the nap, and those without one
                look = [self._exit_fds[fd] for fd in ready if fd in self._exit_fds]
                look += list(self._no_fd.values())
            for tr in look:
                if tr.handle is not None and not tr.exit_fed and tr.state.alive:
                    rc = tr.handle.poll()
                    if rc is not None:
                        if tr.reader is not None:   # its output read to the end first
                            tr.reader.join(timeout=2.0)
                        self._exit_fed(tr)
                        cause = tr.handle.cause(rc) or (   # a lost host or Ray node
                            self.oom.words(rc) if is_local(tr.plan.host) else "")
                        exits.append(Exited(tr.name, rc, self.clock(), cause,
                                            tr.handle.lost_node()))
            events = self._drain_inbox()
            if now - self._life_looked >= LIFE_EVERY:   # dated signs: a late look changes nothing
                self._life_looked = now
                events += self._life()
            events += exits
            if now - self.last_probe >= 0.5:
                self.last_probe = now
                events += [PortOpen(name, now) for name in self._probes()
                           if self.backend.accepts(self.runs[name].plan.host, self.runs[name].plan.port)]
                words = self._remote_chief_ended(now)
                if words:
                    events.append(ChiefGone(words, now))
            events.append(Tick(self.clock()))
            self._feed(*events)
            self._tick()
            if not self.machine.finished:
                self._nap()

    def _exit_fed(self, tr: "TaskRun") -> None:
        tr.exit_fed = True
        self._no_fd.pop(tr.name, None)
        fd = tr.handle.exit_fd()
        if fd is not None and self._exit_fds.get(fd) is tr:
            del self._exit_fds[fd]
            self._exit_poll.unregister(fd)

    def _probes(self) -> List[str]:
        """The tasks whose port to probe this round: every task not yet seen up, at most
        PROBES_PER_ROUND of them a round, in turn (512 connects every half second would be a
        launcher busy probing; a task's state shows ``serving`` a few seconds later at most)."""
        names = self.machine.unopened()
        if len(names) <= PROBES_PER_ROUND:
            return names
        at = self._probe_at % len(names)
        self._probe_at = at + PROBES_PER_ROUND
        return (names[at:] + names[:at])[:PROBES_PER_ROUND]

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
        while self._signals:
            self._feed(Interrupt(self._signals.popleft(), self.clock()))

    def _nap(self, seconds: float = 0.05) -> None:
        """Sleep up to ``seconds``, waking as soon as a task exits (its pidfd, registered when
        it started); the ready descriptors are kept for the next turn (``_ready``)."""
        self._ready = None
        if self._nap_fn is not None:
            self._nap_fn([tr for tr in self.runs.values() if tr.state.alive], seconds)
            return
        if not self._exit_fds:
            time.sleep(seconds)
            return
        # poll, not select: select cannot wait on descriptors >= 1024 (~340 tasks)
        try:
            self._ready = {fd for fd, _ in self._exit_poll.poll(seconds * 1000.0)}
        except OSError:
            time.sleep(seconds)

    def _tick(self) -> None:
        now = self.clock()
        if self.dirty and now - self.last_record > 1.0:
            self._write_record()
        self.events.flush_due()
        self.events.flush()
        if self.display.shows_table:
            self.display.refresh()
        elif self.machine.best_step is not None and self._progress_line_due(now):
            self.last_progress_line = now
            self._progress_lines()

    def _progress_line_due(self, now: float) -> bool:
        """Without a live table: a progress line every ``progress_every`` seconds, the first as
        soon as the step has moved past the first one reported (a line at step 0 alone says
        nothing), or ``progress_every`` after that first report."""
        step = self.machine.best_step
        if self._first_step is None:
            self._first_step = (step, now)
        if self.last_progress_line == 0.0:
            first, at = self._first_step
            return step != first or now - at >= self.view.progress_every
        return now - self.last_progress_line >= self.view.progress_every

    def _remote_chief_ended(self, now: float) -> str:
        """Per-host mode: the chief runs on another host. Its end is visible through the
        cluster itself: its server's port, once open, stays closed for ``grace`` seconds."""
        if self.plan.chief in self.runs or self.machine.decided:
            return ""
        chief = self.plan.task(self.plan.chief)
        if self.backend.accepts(chief.host, chief.port):
            if not self._chief_seen:
                self.display.info(f"{chief.name} on {chief.endpoint} is up (runs elsewhere; its end "
                                  f"ends this host's tasks)")
            self._chief_seen, self._chief_gone_at = True, None
            return ""
        if not self._chief_seen:
            return ""
        if self._chief_gone_at is None:
            self._chief_gone_at = now
        if now - self._chief_gone_at >= max(self.plan.grace, 1.0):
            return f"{chief.name} on {chief.endpoint}, which runs elsewhere, has ended"
        return ""

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
        self._signals.append(signum)

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
    def _masked(self, tr: TaskRun):
        """The task's argv and env with secrets masked, kept while its spec is the same (the
        record is rewritten every second while tasks change: 512 tasks' environments)."""
        got = self._masked_specs.get(tr.name)
        if got is None or got[0] is not tr.spec:
            declared = self.plan.secret_names
            got = (tr.spec, secrets.mask_argv(tr.spec.argv, declared, self.secret_values),
                   secrets.mask_env(tr.spec.env, declared))
            self._masked_specs[tr.name] = got
        return got[1], got[2]

    def record(self) -> dict:
        tasks = []
        for tr in list(self.runs.values()):
            p = tr.progress
            argv, env = self._masked(tr)
            tasks.append(task_row(
                tr.name, host=tr.plan.host, endpoint=tr.plan.endpoint,
                chief=tr.name == self.plan.chief, pid=tr.pid, state=tr.state.value,
                exit_code=tr.returncode, exit=describe_exit(tr.returncode), restarts=tr.restarts,
                started=tr.started, first_started=tr.first_started, ended=tr.ended,
                log=tr.log_path, profiler_port=contract.profiler_port(tr.plan.port, tr.plan.job),
                argv=argv, env=env, note=tr.why,
                life_at=tr.track.alive_at, output_at=tr.seen.output_at,
                progress=None if p is None else {
                    "step": p.step, "total": p.total, **p.metrics, "at": tr.seen.progress_at}))
        for t in self.skipped:
            tasks.append(task_row(t.name, host=t.host, endpoint=t.endpoint,
                                  chief=t.name == self.plan.chief, state=TaskState.SKIPPED.value))
        rc = self.root_cause
        return run_record(
            self.plan, backend=self.backend.name, started=self.started, ended=self.ended,
            result=self.result.value, exit_code=self.exit_code, decision=self.decision_words,
            root_cause=self.root_cause_words if rc is None else f"{rc.name} {describe_exit(rc.returncode)}"
            + (f" ({rc.why})" if rc.why else ""),
            total_restarts=self.total_restarts, tasks=tasks, stalled=self.machine.stalled(),
            **({"moves": list(self.moves)} if self.moves else {}))

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

    # ------------------------------------------------------------------ showing
    def _progress_lines(self) -> None:
        """Without a live table: one human line per task that reports progress."""
        now = self.clock()
        for tr in self.runs.values():
            p = tr.progress
            if p is None or tr.state != TaskState.RUNNING:
                continue
            line = f"{tr.name}: step {p.step}" + (f"/{p.total}" if p.total else "")
            if tr.rate:           # its own rate (local_step); the ETA is the global step's
                line += f", {tr.rate:.1f} steps/s"
            if self.rate and p.total and p.total > p.step:
                line += f", ETA {format_duration((p.total - p.step) / self.rate)}"
            if p.metrics:
                line += ", " + ", ".join(f"{k} {_num(v)}" for k, v in p.metrics.items())
            age = now - (tr.seen.progress_at or now)
            if age > 2 * self.view.progress_every:
                line += f" (last report {format_duration(age)} ago)"
            self.display.info(line, log=False)    # progress events are in launcher.log

    def _live_table(self):
        from rich.table import Table
        table = Table(box=None, header_style="bold", pad_edge=False)
        metric_names: List[str] = []
        for tr in self.runs.values():
            for k in (tr.progress.metrics if tr.progress else {}):
                if k not in metric_names and len(metric_names) < 4:
                    metric_names.append(k)
        for h in ["task", "state", "pid", "uptime", "restarts", "step", "steps/s", "progress",
                  "output"] + metric_names:
            table.add_column(h)
        now = self.clock()
        best = None
        for tr in self.runs.values():
            up = format_duration((tr.ended or now) - tr.started) if tr.started else ""
            p = tr.progress
            step = "" if p is None else str(p.step)
            if p is not None and (best is None or p.step > best.step):
                best = p
            name = tr.name + (" (chief)" if tr.name == self.plan.chief else "")
            running = tr.state == TaskState.RUNNING
            table.add_row(name, self.machine.shown(tr.name), str(tr.pid or ""), up, str(tr.restarts), step,
                          _own_rate(tr),
                          ago(tr.track.alive_at, now) if running else "",
                          ago(tr.seen.output_at, now) if running else "",
                          *[_num(p.metrics[k]) if p is not None and k in p.metrics else ""
                            for k in metric_names])
        if best is not None:
            line = f"global step {best.step}" + (f"/{best.total}" if best.total else "")
            if self.rate:
                line += f"  {self.rate:.1f} steps/s"
                if best.total and best.total > best.step:
                    line += f"  ETA {format_duration((best.total - best.step) / self.rate)}"
            table.caption = line
        return table

    def _summary(self, record: dict) -> None:
        """The end of the run for the person: the decision, the first failure, every task.
        ``record``: the final run record (written once, not built again)."""
        order = list(self.runs.values())
        if self.root_cause is not None:
            order.remove(self.root_cause)
            order.insert(0, self.root_cause)
        by_name = {t["task"]: t for t in record["tasks"]}
        rows = task_rows({"tasks": [by_name[tr.name] for tr in order]}, now=self.ended)
        words = {"succeeded": "succeeded", "failed": "FAILED", "interrupted": "interrupted"}
        head = f"run {self.plan.run_id} {words.get(self.result.value, self.result.value)} in " \
               f"{format_duration(self.ended - self.started)} (exit code {self.exit_code})"
        text = [head]
        if self.root_cause is None and self.root_cause_words:
            text.append(f"cause: {self.root_cause_words}")
        text.extend(f"warning: {line}" for line in self.machine.stalled())
        if self.root_cause is not None:
            rc = self.root_cause
            text.append(f"first failure: {rc.name} ({describe_exit(rc.returncode)})"
                        + (f" — {rc.why}" if rc.why else "") + f"; log: {rc.log_path}")
        text.append(format_table(HEADER, rows))
        if self.root_cause is not None:
            tail = failure_tail(list(self.root_cause.seen.tail), 10)
            if tail:
                text.append(f"last lines of {self.root_cause.name}:")
                text.extend("  " + line for line in tail)
            lines = list(self.root_cause.seen.tail)
            hint = failure_hint(lines, *_checkpoint_dir(record, self.root_cause.name))
            if hint:
                text.append(hint)     # "hint: ..." naming the fix
        self.display.block("\n".join(text))


def _checkpoint_dir(record: dict, task: str) -> Tuple[Optional[str], str]:
    """The checkpoint folder a failed task restores from, as its argv names it
    (``--checkpoint_dir``, ``--model_dir``, ...; control.summaries_dir's reading, that task
    first) when it holds a checkpoint (else None), and the flag."""
    from tfcluster.runs.control import SUMMARY_FLAGS, summaries_dir
    rows = [t for t in record.get("tasks") or [] if t.get("task") == task]
    folder = summaries_dir(dict(record, tasks=rows)) or summaries_dir(record)
    if folder is not None and not os.path.isfile(os.path.join(folder, "checkpoint")):
        folder = None
    argv = [w for t in rows for w in t.get("argv") or [] if isinstance(w, str)]
    flag = next((f for f in SUMMARY_FLAGS for w in argv if w == f or w.startswith(f + "=")),
                "--checkpoint_dir")
    return folder, flag


def _discard(handle: Handle) -> None:
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


def _own_rate(tr: TaskRun) -> str:
    """The live table's steps/s of a task: its own rate (from ``local_step`` reports); ``global``
    for a task that reports only the global step (the run's rate is the caption's)."""
    if tr.rate is not None:
        return f"{tr.rate:.1f}"
    return "global" if tr.progress is not None and not tr.steps else ""


def _rate(points, now: float, old: Optional[float]) -> Optional[float]:
    """Steps per second over the reports of the last 30 s (the old rate while too few)."""
    pts = [x for x in points if now - x[0] <= 30]
    if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
        return max(0.0, (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]))
    return old


def _num(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e9:
        return str(int(v))
    return f"{v:.4g}"


def _start_failure(task: str, spec: ProcessSpec, e: OSError) -> str:
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
