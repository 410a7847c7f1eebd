"""The supervisor: start the plan's tasks, watch them, decide success or failure, stop them.

One loop (:meth:`Supervisor._loop`) acts; everything else reports. Output readers note what
the tasks print (:mod:`.output`), the watchdog checks and the restart and success rules
(:mod:`tfcluster.rules`) return decisions, and task states change only through
:meth:`Supervisor._set` (:mod:`.state`). How a process is started is the backend's business
(:mod:`tfcluster.backends.base`); what a task is given is the plan's (:mod:`tfcluster.plan`).
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
from typing import Callable, Deque, Dict, List, Optional

from .. import contract, rules, runindex, secrets
from ..control import prepared_run_dir
from ..notes import security_note, summaries_lines
from ..backends.base import Backend, Handle, ProcessSpec
from ..errors import UserError
from ..events import EventLog, exit_fields
from ..keras_support import failure_hint
from ..hosts import describe_port_holder, is_local, port_in_use, reachable_beyond_loopback
from ..plan import RunPlan, TaskPlan
from ..progress import Progress
from ..runrecord import HEADER, format_duration, format_table, task_rows, write_json_private
from .display import Display
from .output import OutputReader, Seen
from .state import RunState, TaskState, check_transition, describe_exit

PROGRESS_EVERY = 15.0          # seconds between progress lines when there is no live table


@dataclass
class View:
    """How a run is shown: the launcher's own presentation settings."""

    quiet: bool = False
    live: Optional[bool] = None
    stream: object = None              # task output (default stdout)
    err_stream: object = None          # tfcluster's own lines (default stderr)
    progress_every: float = PROGRESS_EVERY
    echo_progress: bool = False        # also print progress-protocol lines (tools parse them)
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
    """One task's run-time record."""

    plan: TaskPlan
    spec: ProcessSpec
    state: TaskState = TaskState.PENDING
    handle: Optional[Handle] = None
    pid: Optional[int] = None
    returncode: Optional[int] = None
    restarts: int = 0
    first_started: Optional[float] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    start_at: float = 0.0
    log_path: str = ""
    seen: Seen = field(default_factory=Seen)
    reader: Optional[threading.Thread] = None
    note: str = ""
    up: bool = False                      # its port accepts connections
    forced: str = ""                      # why tfcluster killed it (watchdog)
    steps: Deque = field(default_factory=lambda: deque(maxlen=20))   # (time, step) reports
    rate: Optional[float] = None          # this task's reported steps per second

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def progress(self) -> Optional[Progress]:
        return self.seen.progress


class Supervisor:
    def __init__(self, plan: RunPlan, backend: Backend, view: Optional[View] = None,
                 clock: Callable[[], float] = time.time,
                 nap: Optional[Callable[[List[TaskRun], float], None]] = None):
        self.plan = plan
        self.backend = backend
        self.view = view or View()
        self.clock = clock
        self._nap_fn = nap
        self.runs: Dict[str, TaskRun] = {}
        self.root_cause: Optional[TaskRun] = None
        self.root_note: Optional[str] = None
        self.result = RunState.RUNNING
        self.exit_code: Optional[int] = None
        self.decision_words = ""
        self.interrupted: Optional[int] = None
        self.kill_now = False
        self.total_restarts = 0
        self.started = self.clock()
        self.ended: Optional[float] = None
        self.lock = threading.RLock()
        self.dirty = True
        self.last_record = 0.0
        self.rate: Optional[float] = None
        self.best_step: Optional[int] = None
        self.best_step_at = 0.0
        self.last_watch = 0.0
        self.last_progress_line = 0.0
        self._chief_checked = 0.0
        self._chief_seen = False
        self._chief_gone_at: Optional[float] = None
        self._rate_points: Deque = deque(maxlen=20)
        self.events = NullEvents()
        self.display = Display(quiet=self.view.quiet, live=self.view.live, table=self._live_table,
                               stream=self.view.stream, err_stream=self.view.err_stream,
                               options=self.view.output)
        self.secret_values = plan.secret_values()
        self.mask = secrets.Masker(self.secret_values)
        for t in plan.selected_tasks:
            self.runs[t.name] = TaskRun(plan=t, spec=self._spec(t, 0))

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
        old = self._install_signals()
        try:
            self.display.start()
            self._announce()
            self._start_all()
            self._loop()
        except UserError as e:   # found after the run folder exists (a task that cannot start)
            self.root_note = e.message
            self.exit_code = e.exit_code
            raise
        finally:
            try:
                self._stop_all()
            finally:
                self.ended = self.clock()
                if self.result == RunState.RUNNING:   # an error while starting, or a bug
                    self.result = RunState.FAILED
                    if self.exit_code is None:
                        self.exit_code = rules.EXIT_FAILED
                self.display.stop()
                self._restore_signals(old)
                self.events.emit("run_ended", result=self.result.value, exit_code=self.exit_code)
                self._write_record(force=True)
                self.backend.close()
        self._summary()
        if self.events.error:
            self.display.error(f"the event log could not be written: {self.events.error}")
        self.events.close()
        for line in summaries_lines(self.plan.run_dir):
            self.display.info(line)
        self.display.info(f"a picture of this run: tfcluster report {self.plan.run_dir}")
        return self.exit_code if self.exit_code is not None else rules.EXIT_FAILED

    def _make_run_dir(self) -> None:
        run_dir = self.plan.run_dir
        try:
            os.makedirs(self.plan.logdir, exist_ok=True)
            os.makedirs(run_dir, mode=0o700)
        except FileExistsError:
            if not prepared_run_dir(run_dir):   # launch --detach made it for this launcher
                raise UserError(f"--run-id: {run_dir} exists already; choose another run id")
        except OSError as e:
            raise UserError(f"logdir: cannot create {run_dir} ({e.strerror or e})")
        for tr in self.runs.values():
            tr.log_path = os.path.join(run_dir, f"{tr.plan.file_stem}.log")
        self.events = EventLog(run_dir, clock=self.clock)
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
        if self.backend.name == "local" and reachable_beyond_loopback():
            note = security_note(self.plan.source, [tr.plan.port for tr in self.runs.values()],
                                 silenced=not self.display.options.security_note)
            if note:
                d.info(note)

    def _start_all(self) -> None:
        by_job: Dict[str, List[TaskRun]] = {}
        for tr in self.runs.values():
            by_job.setdefault(tr.plan.job, []).append(tr)
        for job in rules.start_order(by_job):
            for tr in by_job[job]:
                if self.interrupted:
                    return
                self._start(tr)

    def _set(self, tr: TaskRun, new: TaskState) -> None:
        """The one place a task's state changes."""
        with self.lock:
            tr.state = check_transition(tr.state, new, tr.name)
            self.dirty = True

    def _start(self, tr: TaskRun) -> None:
        spec = tr.spec = self._spec(tr.plan, tr.restarts)
        try:
            handle = self.backend.start(spec)
        except FileNotFoundError:
            raise UserError(f"{tr.name}: program not found: {spec.argv[0]} (program.command)")
        except PermissionError:
            raise UserError(f"{tr.name}: program cannot be run (permission denied): {spec.argv[0]}")
        except NotADirectoryError:
            raise UserError(f"{tr.name}: working folder does not exist: {spec.cwd}")
        except OSError as e:
            if not os.path.isdir(spec.cwd):
                raise UserError(f"{tr.name}: working folder does not exist: {spec.cwd}")
            raise UserError(f"{tr.name}: cannot start {spec.argv[0]}: {e.strerror or e}")
        now = self.clock()
        with self.lock:
            self._set(tr, TaskState.RUNNING)
            tr.handle, tr.pid = handle, handle.pid
            tr.returncode, tr.ended = None, None
            tr.started = now
            if tr.first_started is None:
                tr.first_started = now
            tr.up, tr.forced = False, ""
            tr.seen.reset()
        verb = "restarted" if tr.restarts else "started"
        self.display.info(f"{verb} {tr.name} (pid {tr.pid})"
                          + (f", restart {tr.restarts}" if tr.restarts else ""))
        self.events.emit("task_started", task=tr.name, pid=tr.pid, attempt=tr.restarts, host=tr.plan.host)
        banner = f"----- tfcluster: restart {tr.restarts} -----" if tr.restarts else ""
        tr.reader = OutputReader(tr.name, handle.stdout, tr.log_path or None, tr.seen, self.lock,
                                 self.mask, self.clock, lambda line, p, tr=tr: self._on_line(tr, line, p),
                                 banner=banner)
        tr.reader.start()

    def _on_line(self, tr: TaskRun, line: str, p: Optional[Progress]) -> None:
        """Called by a task's reader for each line (reader thread)."""
        if p is None or self.view.echo_progress:
            self.display.task_line(tr.name, line)
        if p is None:
            return
        now = self.clock()
        with self.lock:
            if self.best_step is None or p.step > self.best_step:
                self.best_step, self.best_step_at = p.step, now
            self._rate_points.append((now, p.step))
            self.rate = _rate(self._rate_points, now, self.rate)
            tr.steps.append((now, p.step))
            tr.rate = _rate(tr.steps, now, tr.rate)
            self.dirty = True
        self.events.progress(tr.name, p.step, p.total, p.metrics)

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while self.result == RunState.RUNNING:
            if self.interrupted:
                self._decide(RunState.INTERRUPTED, rules.signal_exit_code(self.interrupted),
                             f"interrupted by {_signame(self.interrupted)}")
                return
            now = self.clock()
            for tr in list(self.runs.values()):
                if tr.state == TaskState.RUNNING:
                    rc = tr.handle.poll()
                    if rc is not None:
                        self._on_exit(tr, rc)
                elif tr.state == TaskState.RESTARTING and now >= tr.start_at:
                    self._start(tr)
            if self.result == RunState.RUNNING:
                self._check_success()
            if self.result == RunState.RUNNING and now - self.last_watch >= 0.5:
                self.last_watch = now
                self._watch(now)
            self._tick()
            self._nap([tr for tr in self.runs.values()])

    def _nap(self, runs: List[TaskRun], seconds: float = 0.05) -> None:
        """Sleep up to ``seconds``, waking as soon as one of ``runs`` exits (pidfds)."""
        if self._nap_fn is not None:
            self._nap_fn(runs, seconds)
            return
        fds = [fd for fd in (tr.handle.exit_fd() for tr in runs
                             if tr.handle is not None and tr.state.alive) if fd is not None]
        if not fds:
            time.sleep(seconds)
            return
        try:
            select.select(fds, [], [], seconds)
        except (OSError, ValueError):
            time.sleep(seconds)

    def _tick(self) -> None:
        now = self.clock()
        if self.dirty and now - self.last_record > 1.0:
            self._write_record()
        self.events.flush_due()
        if self.display.shows_table:
            self.display.refresh()
        elif self.best_step is not None and now - self.last_progress_line >= self.view.progress_every:
            self.last_progress_line = now
            self._progress_lines()

    def _ended(self, tr: TaskRun, rc: int, state: TaskState) -> None:
        """Record a task's end (after its output has been read to the end)."""
        if tr.reader is not None:
            tr.reader.join(timeout=2.0)
        with self.lock:
            tr.returncode, tr.ended = rc, self.clock()
            self._set(tr, state)
        self.events.flush_progress(tr.name)
        self.events.emit("task_exited", tr.name, state=state.value, **exit_fields(rc))

    def _on_exit(self, tr: TaskRun, rc: int) -> None:
        self._ended(tr, rc, TaskState.SUCCEEDED if rc == 0 else TaskState.FAILED)
        if rc == 0:
            self.display.info(f"{tr.name} exited 0 after {format_duration(tr.ended - tr.started)}")
            return
        if tr.forced:
            tr.note = tr.forced
        elif tr.seen.port_conflict:
            tr.note = f"port conflict: {tr.plan.endpoint} is in use (Could not start gRPC server)"
        self.display.error(f"{tr.name} failed ({describe_exit(rc)})" + (f": {tr.note}" if tr.note else ""))
        early = (not tr.restarts and tr.first_started is not None and tr.ended is not None
                 and tr.ended - tr.first_started < tr.plan.restart.min_uptime)
        d = rules.decide_restart(tr.plan.restart, rc, tr.restarts, self.total_restarts,
                                 port_conflict=tr.seen.port_conflict, early=early)
        if d.restart:
            tr.restarts += 1
            self.total_restarts += 1
            self._set(tr, TaskState.RESTARTING)
            tr.start_at = self.clock() + d.delay
            self.display.info(f"{tr.name}: {d.reason} in {d.delay:.1f}s")
            self.events.emit("task_restarting", task=tr.name, reason=d.reason, attempt=tr.restarts,
                             delay=d.delay)
            return
        if self.root_cause is None:
            self.root_cause = tr
        if tr.restarts or tr.plan.restart.policy != "never":
            tr.note = (tr.note + "; " if tr.note else "") + f"not restarted: {d.reason}"
        self._decide(RunState.FAILED,
                     rules.EXIT_BAD_INPUT if tr.seen.port_conflict else rules.EXIT_FAILED,
                     f"{tr.name} failed ({describe_exit(rc)})")

    # ------------------------------------------------------------------ watchdog
    def _watch(self, now: float) -> None:
        """No silent hangs: servers that never come up, sessions waiting on a task, a stalled step."""
        wd = self.plan.watchdog
        actions: List[rules.WatchdogAction] = []
        here = {name: tr.state == TaskState.RUNNING and not tr.forced for name, tr in self.runs.items()}
        where = {t.name: t.endpoint for t in self.skipped}
        for tr in self.runs.values():
            if tr.state != TaskState.RUNNING or tr.forced:
                continue
            if not tr.up and tr.plan.job in ("ps", "worker"):
                if self.backend.accepts(tr.plan.host, tr.plan.port):
                    tr.up = True
                    self.dirty = True
                else:
                    a = rules.check_startup(tr.name, tr.started, False, now, wd.startup_timeout,
                                            tr.plan.port)
                    if a is not None:
                        actions.append(a)
                        continue
            with self.lock:
                waiting = dict(tr.seen.waiting_on)
            for a in rules.check_waiting(tr.name, waiting, now, wd.waiting_timeout, here, where):
                tr.seen.waiting_on.pop(a.task, None)
                actions.append(a)
        gone = [f"{tr.name} ({tr.state.value}{', ' + describe_exit(tr.returncode) if tr.returncode is not None else ''})"
                for tr in self.runs.values() if tr.state != TaskState.RUNNING]
        stall = rules.check_stall(self.best_step, self.best_step_at, now, wd.stall_timeout, gone)
        if stall is not None:
            actions.append(stall)
        for a in actions:
            self._act(a)
            if self.result != RunState.RUNNING:
                return

    def _act(self, a: rules.WatchdogAction) -> None:
        self.events.emit("watchdog", task=a.task, reason=a.reason, action=a.action)
        if a.action == "fail_run":
            self.root_note = a.reason
            self.display.error(a.reason)
            self._decide(RunState.FAILED, rules.EXIT_FAILED, a.reason)
            return
        tr = self.runs[a.task]
        if tr.state != TaskState.RUNNING or tr.forced:
            return
        tr.forced = a.reason
        self.display.error(f"{tr.name}: {a.reason}; killing it")
        tr.handle.signal(signal.SIGKILL)

    # ------------------------------------------------------------------ success
    def _check_success(self) -> None:
        chief_here = self.plan.chief in self.runs
        succeeded = {name: tr.state == TaskState.SUCCEEDED for name, tr in self.runs.items()}
        words = rules.success_reached(self.plan.success, self.plan.chief, succeeded, chief_here)
        if words is None and not chief_here and self._remote_chief_ended():
            ep = self.plan.task(self.plan.chief).endpoint
            words = f"{self.plan.chief} on {ep}, which runs elsewhere, has ended"
        if words is not None:
            self._decide(RunState.SUCCEEDED, rules.EXIT_OK, words)

    def _remote_chief_ended(self) -> bool:
        """Per-host mode: the chief runs on another host. Its end is visible through the
        cluster itself: its server's port, once open, stays closed for ``grace`` seconds."""
        now = self.clock()
        if now - self._chief_checked < 0.5:
            return False
        self._chief_checked = now
        chief = self.plan.task(self.plan.chief)
        if self.backend.accepts(chief.host, chief.port):
            if not self._chief_seen:
                self.display.info(f"{chief.name} on {chief.endpoint} is up (runs elsewhere; its end "
                                  f"ends this host's tasks)")
            self._chief_seen, self._chief_gone_at = True, None
            return False
        if not self._chief_seen:
            return False
        if self._chief_gone_at is None:
            self._chief_gone_at = now
        if now - self._chief_gone_at >= max(self.plan.grace, 1.0):
            return True
        return False

    def _decide(self, result: RunState, code: int, words: str) -> None:
        self.result, self.exit_code, self.decision_words = result, code, words
        self.dirty = True
        rule = self.plan.success if result == RunState.SUCCEEDED else (
            "restart" if result == RunState.FAILED else "signal")
        self.events.emit("decision", result=result.value, rule=rule, exit_code=code, reason=words)
        if result == RunState.SUCCEEDED:
            self.display.info(f"run succeeded ({words})")
            self._grace_period()
        elif result == RunState.FAILED and self.root_cause is not None:
            self.display.error(f"run failed: {self.root_cause.name} "
                               f"({describe_exit(self.root_cause.returncode)}); stopping the others")
        elif result == RunState.INTERRUPTED:
            self.display.info(f"{words}; stopping the cluster")

    def _grace_period(self) -> None:
        waiting = [tr for tr in self.runs.values()
                   if tr.state in (TaskState.RUNNING, TaskState.RESTARTING)
                   and rules.waits_for_grace(tr.plan.job)]
        if not waiting or self.plan.grace <= 0:
            return
        self.display.info(f"giving {', '.join(tr.name for tr in waiting)} {self.plan.grace:g}s to finish")
        deadline = self.clock() + self.plan.grace
        while self.clock() < deadline and not self.interrupted:
            left = False
            for tr in waiting:
                if tr.state == TaskState.RUNNING:
                    rc = tr.handle.poll()
                    if rc is None:
                        left = True
                        continue
                    self._ended(tr, rc, TaskState.SUCCEEDED if rc == 0 else TaskState.FAILED)
                    if rc != 0:
                        self.display.info(f"{tr.name} ended with {describe_exit(rc)} after the run "
                                          f"had succeeded")
            if not left:
                return
            self._tick()
            self._nap(waiting)

    # ------------------------------------------------------------------ stopping
    def _stop_all(self) -> None:
        """Stop what still runs, in the rulebook's waves: chief, workers and evaluators (a chief
        that saves a last checkpoint on SIGTERM needs its ps), then ps tasks."""
        for tr in self.runs.values():
            if tr.state in (TaskState.RESTARTING, TaskState.PENDING):
                self._set(tr, TaskState.STOPPED)
        live = [tr for tr in self.runs.values() if tr.state.alive]
        first, then = rules.stop_waves({tr.plan.job for tr in live})
        self._stop([tr for tr in live if tr.plan.job in first])
        self._stop([tr for tr in live if tr.plan.job in then])

    def _stop(self, live: List[TaskRun]) -> None:
        if not live:
            return
        sig = signal.SIGKILL if self.kill_now else signal.SIGTERM
        for tr in live:
            self.display.info(f"stopping {tr.name} (pid {tr.pid}): {sig.name} to its process group")
            if tr.state == TaskState.RUNNING:
                self._set(tr, TaskState.STOPPING)
            tr.handle.signal(sig)
            self.events.emit("stop_sent", task=tr.name, signal=sig.name)
        timeout = self.plan.stop_timeout
        deadline = self.clock() + timeout
        pending = list(live)
        killed = sig == signal.SIGKILL
        while pending:
            for tr in list(pending):
                rc = tr.handle.poll()
                if rc is not None:
                    self._ended(tr, rc, TaskState.STOPPED)
                    pending.remove(tr)
            if not pending:
                break
            if not killed and (self.clock() >= deadline or self.kill_now):
                for tr in pending:
                    self.display.info(f"{tr.name} (pid {tr.pid}) still running after "
                                      f"{timeout:g}s: SIGKILL")
                    tr.handle.signal(signal.SIGKILL)
                    self.events.emit("stop_sent", task=tr.name, signal="SIGKILL")
                killed = True
                deadline = self.clock() + 10
            elif killed and self.clock() >= deadline:
                for tr in pending:
                    self.display.error(f"{tr.name} (pid {tr.pid}) did not die after SIGKILL")
                break
            self._nap(pending)
        # the process group may outlive its leader: make sure nothing of it is left
        for tr in live:
            tr.handle.signal(signal.SIGKILL)

    # ------------------------------------------------------------------ signals
    def interrupt(self, signum: int) -> None:
        """What a signal to the launcher does: stop the run; a second Ctrl-C kills at once."""
        if self.interrupted and signum == signal.SIGINT:
            self.kill_now = True
            return
        if not self.interrupted:
            self.interrupted = signum

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
        tasks = []
        declared = self.plan.secret_names
        for tr in list(self.runs.values()):
            p = tr.progress
            tasks.append({
                "task": tr.name, "host": tr.plan.host, "endpoint": tr.plan.endpoint,
                "chief": tr.name == self.plan.chief,
                "pid": tr.pid, "state": tr.state.value, "exit_code": tr.returncode,
                "exit": describe_exit(tr.returncode), "restarts": tr.restarts,
                "started": tr.started, "first_started": tr.first_started, "ended": tr.ended,
                "log": tr.log_path,
                "argv": secrets.mask_argv(tr.spec.argv, declared, self.secret_values),
                "env": secrets.mask_env(tr.spec.env, declared),
                "note": tr.note,
                "progress": None if p is None else {
                    "step": p.step, "total": p.total, **p.metrics, "at": tr.seen.progress_at},
            })
        for t in self.skipped:
            tasks.append({"task": t.name, "host": t.host, "endpoint": t.endpoint,
                          "chief": t.name == self.plan.chief,
                          "pid": None, "state": TaskState.SKIPPED.value, "exit_code": None,
                          "exit": "", "restarts": 0, "started": None, "ended": None, "log": None})
        rc = self.root_cause
        return {
            "run_id": self.plan.run_id, "file": os.path.abspath(self.plan.source) if self.plan.source else None,
            "run_dir": self.plan.run_dir, "launcher_pid": os.getpid(),
            "launcher_started": _process_start_time(), "backend": self.backend.name,
            "success_rule": self.plan.success, "chief": self.plan.chief,
            "started": self.started, "ended": self.ended,
            "result": self.result.value, "exit_code": self.exit_code if self.ended else None,
            "decision": self.decision_words or None,
            "root_cause": self.root_note if rc is None else f"{rc.name} {describe_exit(rc.returncode)}"
            + (f" ({rc.note})" if rc.note else ""),
            "total_restarts": self.total_restarts, "tasks": tasks,
        }

    def _write_record(self, force: bool = False) -> None:
        if not os.path.isdir(self.plan.run_dir):
            return
        with self.lock:
            data = self.record()
            self.dirty = False
        self.last_record = self.clock()
        try:
            write_json_private(os.path.join(self.plan.run_dir, "run.json"), data)
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
            if tr.rate:
                line += f", {tr.rate:.1f} steps/s"
                if p.total and p.total > p.step:
                    line += f", ETA {format_duration((p.total - p.step) / tr.rate)}"
            if p.metrics:
                line += ", " + ", ".join(f"{k} {_num(v)}" for k, v in p.metrics.items())
            age = now - (tr.seen.progress_at or now)
            if age > 2 * self.view.progress_every:
                line += f" (last report {format_duration(age)} ago)"
            self.display.info(line)

    def _live_table(self):
        from rich.table import Table
        table = Table(box=None, header_style="bold", pad_edge=False)
        metric_names: List[str] = []
        for tr in self.runs.values():
            for k in (tr.progress.metrics if tr.progress else {}):
                if k not in metric_names and len(metric_names) < 4:
                    metric_names.append(k)
        for h in ["task", "state", "pid", "uptime", "restarts", "step", "steps/s"] + metric_names:
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
            table.add_row(name, tr.state.value, str(tr.pid or ""), up, str(tr.restarts), step,
                          f"{tr.rate:.1f}" if tr.rate else "",
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

    def _summary(self) -> None:
        order = list(self.runs.values())
        if self.root_cause is not None:
            order.remove(self.root_cause)
            order.insert(0, self.root_cause)
        record = self.record()
        by_name = {t["task"]: t for t in record["tasks"]}
        rows = task_rows({"tasks": [by_name[tr.name] for tr in order]}, now=self.ended)
        words = {"succeeded": "succeeded", "failed": "FAILED", "interrupted": "interrupted"}
        head = f"run {self.plan.run_id} {words.get(self.result.value, self.result.value)} in " \
               f"{format_duration(self.ended - self.started)} (exit code {self.exit_code})"
        text = [head]
        if self.root_cause is None and self.root_note:
            text.append(f"cause: {self.root_note}")
        if self.root_cause is not None:
            rc = self.root_cause
            text.append(f"first failure: {rc.name} ({describe_exit(rc.returncode)})"
                        + (f" — {rc.note}" if rc.note else "") + f"; log: {rc.log_path}")
        text.append(format_table(HEADER, rows))
        if self.root_cause is not None:
            tail = list(self.root_cause.seen.tail)[-10:]
            if tail:
                text.append(f"last lines of {self.root_cause.name}:")
                text.extend("  " + line for line in tail)
            hint = failure_hint(list(self.root_cause.seen.tail))
            if hint:
                text.append(hint)     # "hint: ..." naming the fix (tfcluster.keras_support)
        self.display.block("\n".join(text))


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


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _process_start_time() -> Optional[float]:
    try:
        import psutil
        return psutil.Process().create_time()
    except Exception:
        return None
