"""The launcher: start the cluster's tasks, watch them, decide success or failure, stop them.

This is the part that knows what a run is (success rule, restarts, stopping); how a process is
started is the backend's business (:mod:`tfcluster.launch.backend`).
"""
from __future__ import annotations

import datetime
import os
import re
import select
import shlex
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional

from .. import secrets
from ..config import Cluster, Task
from ..errors import UserError
from ..hosts import describe_port_holder, is_local, port_in_use
from ..progress import Progress, parse_progress
from ..runrecord import HEADER, format_duration, format_table, task_rows, write_json_private
from . import policy
from .backend import Backend, Handle, LocalBackend, ProcessSpec
from .display import Display
from .state import TaskState, describe_exit

PORT_CONFLICT = re.compile(r"Could not start gRPC server|Address already in use|Failed to add port")
STILL_WAITING = re.compile(r"CreateSession still waiting for response from worker: "
                           r"/job:([A-Za-z0-9_]+)/replica:\d+/task:(\d+)")
TAIL_LINES = 20
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


@dataclass
class Options:
    command: List[str] = field(default_factory=list)   # replaces the file's program ('--')
    command_cwd: Optional[str] = None                   # folder for a '--' command
    task_flags: Optional[bool] = None
    success: Optional[str] = None
    grace: Optional[float] = None
    restart: Optional[str] = None
    max_restarts: Optional[int] = None
    logdir: Optional[str] = None
    run_id: Optional[str] = None
    dry_run: bool = False
    quiet: bool = False
    live: Optional[bool] = None
    stop_timeout: float = 5.0          # SIGTERM -> SIGKILL
    hosts: Optional[List[str]] = None  # start only tasks on these hosts (per-host mode)
    stream: object = None              # where to print (default stdout)


@dataclass
class TaskRun:
    """One task's run-time record."""

    task: Task
    spec: Optional[ProcessSpec] = None
    state: TaskState = TaskState.PENDING
    handle: Optional[Handle] = None
    pid: Optional[int] = None
    returncode: Optional[int] = None
    restarts: int = 0
    started: Optional[float] = None
    ended: Optional[float] = None
    start_at: float = 0.0
    log_path: str = ""
    tail: Deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    port_conflict: bool = False
    progress: Optional[Progress] = None
    progress_at: Optional[float] = None
    reader: Optional[threading.Thread] = None
    note: str = ""
    up: bool = False                      # its port accepts connections
    waiting_on: Dict[str, float] = field(default_factory=dict)  # task -> first "still waiting"
    forced: str = ""                      # why tfcluster killed it (watchdog)

    @property
    def name(self) -> str:
        return self.task.name


class Run:
    def __init__(self, cluster: Cluster, options: Options, backend: Optional[Backend] = None):
        self.cluster = cluster
        self.opt = options
        self.backend = backend or LocalBackend()
        self.success_rule = options.success or cluster.success
        self.grace = cluster.grace if options.grace is None else options.grace
        self.runs: Dict[str, TaskRun] = {}
        self.skipped: List[Task] = []
        self.root_cause: Optional[TaskRun] = None
        self.result = "running"
        self.exit_code: Optional[int] = None
        self.interrupted: Optional[int] = None
        self.kill_now = False
        self.total_restarts = 0
        self.started = time.time()
        self.ended: Optional[float] = None
        self.lock = threading.RLock()
        self.dirty = True
        self.last_record = 0.0
        self.rate: Optional[float] = None
        self.watchdog = cluster.spec.watchdog
        self.best_step: Optional[int] = None
        self.best_step_at = 0.0
        self.last_watch = 0.0
        self.root_note: Optional[str] = None
        self._chief_checked = 0.0
        self._chief_seen = False
        self._chief_gone_at: Optional[float] = None
        self.remote_chief_done = False
        self._rate_points: Deque = deque(maxlen=20)
        self.display = Display(quiet=options.quiet, live=options.live, table=self._live_table,
                               stream=options.stream)
        self.run_id = options.run_id or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.logdir = os.path.abspath(options.logdir) if options.logdir else cluster.logdir
        self.run_dir = os.path.join(self.logdir, self.run_id)
        secret_env = {k: v for t in cluster.tasks for k, v in cluster.env(t.id).items()} \
            if cluster.resolved else {}
        self.mask = secrets.Masker(secrets.secret_values(secret_env, dict(os.environ)))
        self._select_tasks()

    # ------------------------------------------------------------------ setup
    def _select_tasks(self) -> None:
        for t in self.cluster.tasks:
            host = t.endpoint.host
            wanted = (host in self.opt.hosts) if self.opt.hosts else is_local(host)
            if wanted:
                self.runs[t.name] = TaskRun(task=t)
            else:
                self.skipped.append(t)
        if not self.runs:
            raise UserError("cluster: no task of this file runs on this machine "
                            f"(hosts: {', '.join(sorted({t.endpoint.host for t in self.cluster.tasks}))}); "
                            "use --backend ssh to start remote tasks")
        local_count = len(self.runs)
        for tr in self.runs.values():
            tr.spec = self._process_spec(tr.task, local_count)

    def _process_spec(self, task: Task, local_count: int) -> ProcessSpec:
        cluster = self.cluster
        argv = cluster.argv(task.id, command=self.opt.command or None, task_flags=self.opt.task_flags)
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        cwd = (self.opt.command_cwd or os.getcwd()) if self.opt.command else task.cwd
        env = cluster.env(task.id)
        env["PYTHONUNBUFFERED"] = "1"
        env["TFCLUSTER_TASK"] = task.name
        env["TFCLUSTER_LOCAL_TASKS"] = str(local_count)
        env["TFCLUSTER_RUN_DIR"] = self.run_dir
        return ProcessSpec(name=task.name, argv=argv, env=env, cwd=cwd, host=task.endpoint.host)

    def check_ports(self) -> None:
        """Every local port must be free before anything starts (exit 2 otherwise)."""
        if self.backend.name != "local":
            return
        problems = []
        for tr in self.runs.values():
            port = tr.task.endpoint.port
            if port_in_use(port):
                problems.append(f"cluster.{tr.task.job}[{tr.task.index}]: port {port} ({tr.name}) is "
                                f"already in use{describe_port_holder(port)}; nothing was started")
        if problems:
            raise UserError("\n".join(problems))

    def dry_run(self) -> int:
        out = []
        for tr in self.runs.values():
            s = tr.spec
            out.append(f"{tr.name}  ({tr.task.endpoint})")
            out.append("  argv: " + " ".join(shlex.quote(a) for a in s.argv))
            out.append(f"  cwd:  {s.cwd}")
            for k, v in secrets.mask_env(s.env).items():
                out.append(f"  env:  {k}={v}")
        for t in self.skipped:
            out.append(f"{t.name}  ({t.endpoint})  skipped: not this machine")
        self.display.block("\n".join(out))
        return 0

    # ------------------------------------------------------------------ main
    def run(self) -> int:
        if self.opt.dry_run:
            return self.dry_run()
        if not self.cluster.resolved:
            raise UserError("cluster: endpoints are not assigned")
        self.check_ports()
        self._make_run_dir()
        old = self._install_signals()
        try:
            self.display.start()
            self._announce()
            self._start_all()
            self._loop()
        finally:
            try:
                self._stop_all()
            finally:
                self.ended = time.time()
                self.display.stop()
                self._restore_signals(old)
                self._write_record(force=True)
                self.backend.close()
        self._summary()
        return self.exit_code if self.exit_code is not None else EXIT_FAILED

    def _make_run_dir(self) -> None:
        try:
            os.makedirs(self.logdir, exist_ok=True)
            base, n = self.run_dir, 1
            while os.path.exists(self.run_dir):
                n += 1
                self.run_dir = f"{base}-{n}"
            os.makedirs(self.run_dir, mode=0o700)
        except OSError as e:
            raise UserError(f"logdir: cannot create {self.run_dir} ({e.strerror or e})")
        self.run_id = os.path.basename(self.run_dir)
        for tr in self.runs.values():
            tr.log_path = os.path.join(self.run_dir, f"{tr.task.id.file_stem}.log")
            tr.spec.env["TFCLUSTER_RUN_DIR"] = self.run_dir

    def _announce(self) -> None:
        d = self.display
        names = ", ".join(f"{tr.name}@{tr.task.endpoint}" for tr in self.runs.values())
        d.info(f"run {self.run_id}: {len(self.runs)} task(s): {names}; logs in {self.run_dir}")
        if self.skipped:
            d.info(("skipped (not on --host " + ", ".join(self.opt.hosts) + "): " if self.opt.hosts
                    else "skipped (not this machine): ")
                   + ", ".join(f"{t.name}@{t.endpoint}" for t in self.skipped))
        if self.backend.name == "local" and _reachable_beyond_loopback():
            ports = ", ".join(str(tr.task.endpoint.port) for tr in self.runs.values())
            d.info(f"note: TensorFlow's gRPC servers have no authentication or encryption and listen "
                   f"on every interface (ports {ports}); fence them off (see docs/SECURITY.md)")

    def _start_all(self) -> None:
        order = sorted(self.runs.values(), key=lambda tr: 0 if tr.task.job == "ps" else 1)
        for tr in order:
            if self.interrupted:
                return
            self._start(tr)

    def _start(self, tr: TaskRun) -> None:
        try:
            handle = self.backend.start(tr.spec)
        except FileNotFoundError:
            raise UserError(f"{tr.name}: program not found: {tr.spec.argv[0]} (program.command)")
        except PermissionError:
            raise UserError(f"{tr.name}: program cannot be run (permission denied): {tr.spec.argv[0]}")
        except NotADirectoryError:
            raise UserError(f"{tr.name}: working folder does not exist: {tr.spec.cwd}")
        except OSError as e:
            if not os.path.isdir(tr.spec.cwd):
                raise UserError(f"{tr.name}: working folder does not exist: {tr.spec.cwd}")
            raise UserError(f"{tr.name}: cannot start {tr.spec.argv[0]}: {e.strerror or e}")
        with self.lock:
            tr.handle, tr.pid = handle, handle.pid
            tr.state, tr.returncode, tr.ended = TaskState.RUNNING, None, None
            tr.started = time.time()
            tr.port_conflict = False
            tr.up, tr.forced = False, ""
            tr.waiting_on.clear()
            self.dirty = True
        verb = "restarted" if tr.restarts else "started"
        self.display.info(f"{verb} {tr.name} (pid {tr.pid})"
                          + (f", restart {tr.restarts}" if tr.restarts else ""))
        tr.reader = threading.Thread(target=self._read_output, args=(tr, handle), daemon=True,
                                     name=f"out-{tr.name}")
        tr.reader.start()

    def _read_output(self, tr: TaskRun, handle: Handle) -> None:
        mode = "ab"
        fd = os.open(tr.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, mode) as log:
            if tr.restarts:
                log.write(f"----- tfcluster: restart {tr.restarts} -----\n".encode())
            for raw in iter(handle.stdout.readline, b""):
                line = self.mask(raw.decode("utf-8", "replace").rstrip("\r\n"))
                log.write((line + "\n").encode("utf-8", "replace"))
                log.flush()
                with self.lock:
                    tr.tail.append(line)
                    if PORT_CONFLICT.search(line):
                        tr.port_conflict = True
                    m = STILL_WAITING.search(line)
                    if m:
                        tr.waiting_on.setdefault(f"{m.group(1)}:{m.group(2)}", time.time())
                    p = parse_progress(line)
                    if p is not None:
                        self._on_progress(tr, p)
                if p is None or not self.display.live:
                    self.display.task_line(tr.name, line)
        try:
            handle.stdout.close()
        except OSError:
            pass

    def _on_progress(self, tr: TaskRun, p: Progress) -> None:
        now = time.time()
        tr.progress, tr.progress_at = p, now
        if self.best_step is None or p.step > self.best_step:
            self.best_step, self.best_step_at = p.step, now
        self._rate_points.append((now, p.step))
        pts = [x for x in self._rate_points if now - x[0] <= 30]
        if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
            self.rate = max(0.0, (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]))
        self.dirty = True

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while self.result == "running":
            if self.interrupted:
                self._decide("interrupted", SIGNAL_EXIT.get(self.interrupted, 128 + self.interrupted))
                return
            now = time.time()
            for tr in list(self.runs.values()):
                if tr.state == TaskState.RUNNING:
                    rc = tr.handle.poll()
                    if rc is not None:
                        self._on_exit(tr, rc)
                elif tr.state == TaskState.RESTARTING and now >= tr.start_at:
                    self._start(tr)
            if self.result == "running":
                self._check_success()
            if self.result == "running" and now - self.last_watch >= 0.5:
                self.last_watch = now
                self._watch(now)
            self._tick()
            self._nap(self.runs.values())

    def _nap(self, runs, seconds: float = 0.05) -> None:
        """Sleep up to ``seconds``, waking as soon as one of ``runs`` exits (pidfds)."""
        fds = [fd for fd in (tr.handle.exit_fd() for tr in runs
                             if tr.handle is not None and tr.state in
                             (TaskState.RUNNING, TaskState.STOPPING)) if fd is not None]
        if not fds:
            time.sleep(seconds)
            return
        try:
            select.select(fds, [], [], seconds)
        except (OSError, ValueError):
            time.sleep(seconds)

    def _tick(self) -> None:
        now = time.time()
        if self.dirty and now - self.last_record > 1.0:
            self._write_record()
        self.display.refresh()

    def _ended(self, tr: TaskRun, rc: int, state: TaskState) -> None:
        """Record a task's end (after its output has been read to the end)."""
        if tr.reader is not None:
            tr.reader.join(timeout=2.0)
        with self.lock:
            tr.returncode, tr.ended, tr.state = rc, time.time(), state
            self.dirty = True

    def _on_exit(self, tr: TaskRun, rc: int) -> None:
        self._ended(tr, rc, TaskState.SUCCEEDED if rc == 0 else TaskState.FAILED)
        if rc == 0:
            self.display.info(f"{tr.name} exited 0 after {format_duration(tr.ended - tr.started)}")
            return
        what = describe_exit(rc)
        if tr.forced:
            tr.note = tr.forced
        elif tr.port_conflict:
            tr.note = f"port conflict: {tr.task.endpoint} is in use (Could not start gRPC server)"
        self.display.error(f"{tr.name} failed ({what})" + (f": {tr.note}" if tr.note else ""))
        restart = self.cluster.task(tr.task.id).restart
        policy_name = self.opt.restart or restart.policy
        max_restarts = restart.max_restarts if self.opt.max_restarts is None else self.opt.max_restarts
        d = policy.decide(policy_name, rc, tr.restarts, max_restarts, self.total_restarts,
                          restart.max_total_restarts, restart.backoff)
        if d.restart and not tr.port_conflict:
            tr.restarts += 1
            self.total_restarts += 1
            tr.state = TaskState.RESTARTING
            tr.start_at = time.time() + d.delay
            self.display.info(f"{tr.name}: {d.reason} in {d.delay:.1f}s")
            return
        if self.root_cause is None:
            self.root_cause = tr
        if tr.restarts or policy_name != "never":
            tr.note = (tr.note + "; " if tr.note else "") + f"not restarted: {d.reason}"
        self._decide("failed", EXIT_BAD_INPUT if tr.port_conflict else EXIT_FAILED)

    # ------------------------------------------------------------------ watchdog
    def _watch(self, now: float) -> None:
        """No silent hangs: servers that never come up, sessions waiting on a task, a stalled step."""
        wd = self.watchdog
        for tr in self.runs.values():
            if tr.state != TaskState.RUNNING or tr.forced:
                continue
            if not tr.up and tr.task.job in ("ps", "worker"):
                if _accepts(tr.task.endpoint.host, tr.task.endpoint.port):
                    tr.up = True
                    self.dirty = True
                elif wd.startup_timeout and now - tr.started > wd.startup_timeout:
                    self._force_fail(tr, f"watchdog: its server did not open port "
                                         f"{tr.task.endpoint.port} within {wd.startup_timeout:g}s")
                    continue
            for other, since in list(tr.waiting_on.items()):
                if not wd.waiting_timeout or now - since < wd.waiting_timeout:
                    continue
                tr.waiting_on.pop(other)
                target = self.runs.get(other)
                if target is None:
                    where = next((str(t.endpoint) for t in self.skipped if t.name == other), "?")
                    self._fail_run(f"watchdog: {tr.name} has waited {wd.waiting_timeout:g}s for "
                                   f"{other} ({where}), which this launcher does not run; is it started?")
                    return
                if target.state == TaskState.RUNNING and not target.forced:
                    self._force_fail(target, f"watchdog: {tr.name} has waited {wd.waiting_timeout:g}s "
                                             f"for it (CreateSession still waiting)")
        if wd.stall_timeout and self.best_step is not None and now - self.best_step_at > wd.stall_timeout:
            gone = [f"{tr.name} ({tr.state.value}{', ' + describe_exit(tr.returncode) if tr.returncode is not None else ''})"
                    for tr in self.runs.values() if tr.state != TaskState.RUNNING]
            self._fail_run(f"watchdog: the global step has stood at {self.best_step} for "
                           f"{wd.stall_timeout:g}s" + (f"; not running: {', '.join(gone)}" if gone else
                                                      "; every task is still running"))

    def _force_fail(self, tr: TaskRun, reason: str) -> None:
        """Kill a hung task; its exit then goes through the restart policy like any failure."""
        tr.forced = reason
        self.display.error(f"{tr.name}: {reason}; killing it")
        tr.handle.signal(signal.SIGKILL)

    def _fail_run(self, reason: str) -> None:
        self.root_note = reason
        self.display.error(reason)
        self._decide("failed", EXIT_FAILED)

    def _check_success(self) -> None:
        runs = self.runs
        chief = self.cluster.chief
        chief_run = runs.get(str(chief))
        if self.success_rule == "chief" and chief_run is not None:
            if chief_run.state == TaskState.SUCCEEDED:
                self._decide("succeeded", 0)
            return
        if all(tr.state == TaskState.SUCCEEDED for tr in runs.values()):
            self._decide("succeeded", 0)  # every task here ended by itself (a trainer ps does)
            return
        if chief_run is None and self._remote_chief_ended():
            self._decide("succeeded", 0)
            return
        # all-workers, or the chief runs elsewhere: every local worker/chief must exit 0
        workers = [tr for tr in runs.values() if tr.task.job in ("worker", "chief")]
        if not workers:
            workers = [tr for tr in runs.values() if tr.task.job not in ("ps", "evaluator")]
        if workers and all(tr.state == TaskState.SUCCEEDED for tr in workers):
            self._decide("succeeded", 0)

    def _remote_chief_ended(self) -> bool:
        """Per-host mode: the chief runs on another host. Its end is visible through the
        cluster itself: its server's port, once open, stays closed for ``grace`` seconds."""
        now = time.time()
        if now - self._chief_checked < 0.5:
            return False
        self._chief_checked = now
        ep = self.cluster.task(self.cluster.chief).endpoint
        if _accepts(ep.host, ep.port):
            if not self._chief_seen:
                self.display.info(f"{self.cluster.chief} on {ep} is up (runs elsewhere; its end "
                                  f"ends this host's tasks)")
            self._chief_seen, self._chief_gone_at = True, None
            return False
        if not self._chief_seen:
            return False
        if self._chief_gone_at is None:
            self._chief_gone_at = now
        if now - self._chief_gone_at >= max(self.grace, 1.0):
            self.remote_chief_done = True
            return True
        return False

    def _decide(self, result: str, code: int) -> None:
        self.result, self.exit_code = result, code
        self.dirty = True
        if result == "succeeded":
            self.display.info(f"run succeeded ({self._success_words()})")
            self._grace_period()
        elif result == "failed" and self.root_cause is not None:
            self.display.error(f"run failed: {self.root_cause.name} "
                               f"({describe_exit(self.root_cause.returncode)}); stopping the others")
        elif result == "interrupted":
            self.display.info(f"interrupted by {signal.Signals(self.interrupted).name}; "
                              f"stopping the cluster")

    def _success_words(self) -> str:
        if self.success_rule == "chief" and str(self.cluster.chief) in self.runs:
            return f"{self.cluster.chief} exited 0"
        if self.remote_chief_done:
            ep = self.cluster.task(self.cluster.chief).endpoint
            return f"{self.cluster.chief} on {ep}, which runs elsewhere, has ended"
        if all(tr.state == TaskState.SUCCEEDED for tr in self.runs.values()):
            return "every task here exited 0"
        return "every worker exited 0"

    def _grace_period(self) -> None:
        waiting = [tr for tr in self.runs.values()
                   if tr.state in (TaskState.RUNNING, TaskState.RESTARTING)
                   and tr.task.job not in ("ps", "evaluator")]
        if not waiting or self.grace <= 0:
            return
        self.display.info(f"giving {', '.join(tr.name for tr in waiting)} {self.grace:g}s to finish")
        deadline = time.time() + self.grace
        while time.time() < deadline and not self.interrupted:
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
        """Stop what still runs: first chief, workers and evaluators (a chief that saves a last
        checkpoint on SIGTERM needs its ps), then ps tasks."""
        for tr in self.runs.values():
            if tr.state in (TaskState.RESTARTING, TaskState.PENDING):
                tr.state = TaskState.STOPPED
        live = [tr for tr in self.runs.values() if tr.state in (TaskState.RUNNING, TaskState.STOPPING)]
        self._stop([tr for tr in live if tr.task.job != "ps"])
        self._stop([tr for tr in live if tr.task.job == "ps"])

    def _stop(self, live: List[TaskRun]) -> None:
        if not live:
            return
        sig = signal.SIGKILL if self.kill_now else signal.SIGTERM
        for tr in live:
            self.display.info(f"stopping {tr.name} (pid {tr.pid}): {sig.name} to its process group")
            tr.state = TaskState.STOPPING
            tr.handle.signal(sig)
        deadline = time.time() + self.opt.stop_timeout
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
            if not killed and (time.time() >= deadline or self.kill_now):
                for tr in pending:
                    self.display.info(f"{tr.name} (pid {tr.pid}) still running after "
                                      f"{self.opt.stop_timeout:g}s: SIGKILL")
                    tr.handle.signal(signal.SIGKILL)
                killed = True
                deadline = time.time() + 10
            elif killed and time.time() >= deadline:
                for tr in pending:
                    self.display.error(f"{tr.name} (pid {tr.pid}) did not die after SIGKILL")
                break
            self._nap(pending)
        # the process group may outlive its leader: make sure nothing of it is left
        for tr in live:
            tr.handle.signal(signal.SIGKILL)

    # ------------------------------------------------------------------ signals
    def _install_signals(self):
        old = {}
        if threading.current_thread() is not threading.main_thread():
            return old

        def handler(signum, frame):
            if self.interrupted and signum == signal.SIGINT:
                self.kill_now = True  # a second Ctrl-C: kill at once
                return
            if not self.interrupted:
                self.interrupted = signum

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, handler)
        return old

    def _restore_signals(self, old) -> None:
        for sig, h in old.items():
            signal.signal(sig, h)

    # ------------------------------------------------------------------ records
    def record(self) -> dict:
        tasks = []
        for tr in list(self.runs.values()):
            tasks.append({
                "task": tr.name, "host": tr.task.endpoint.host, "endpoint": str(tr.task.endpoint),
                "pid": tr.pid, "state": tr.state.value, "exit_code": tr.returncode,
                "exit": describe_exit(tr.returncode), "restarts": tr.restarts,
                "started": tr.started, "ended": tr.ended, "log": tr.log_path,
                "argv": tr.spec.argv, "env": secrets.mask_env(tr.spec.env), "note": tr.note,
                "progress": None if tr.progress is None else {
                    "step": tr.progress.step, "total": tr.progress.total, **tr.progress.metrics,
                    "at": tr.progress_at},
            })
        for t in self.skipped:
            tasks.append({"task": t.name, "host": t.endpoint.host, "endpoint": str(t.endpoint),
                          "pid": None, "state": TaskState.SKIPPED.value, "exit_code": None,
                          "exit": "", "restarts": 0, "started": None, "ended": None, "log": None})
        rc = self.root_cause
        return {
            "run_id": self.run_id, "file": os.path.abspath(self.cluster.source) if self.cluster.source else None,
            "run_dir": self.run_dir, "launcher_pid": os.getpid(), "backend": self.backend.name,
            "success_rule": self.success_rule, "started": self.started, "ended": self.ended,
            "result": self.result, "exit_code": self.exit_code if self.ended else None,
            "root_cause": self.root_note if rc is None else f"{rc.name} {describe_exit(rc.returncode)}"
            + (f" ({rc.note})" if rc.note else ""),
            "total_restarts": self.total_restarts, "tasks": tasks,
        }

    def _write_record(self, force: bool = False) -> None:
        if not os.path.isdir(self.run_dir):
            return
        with self.lock:
            data = self.record()
            self.dirty = False
        self.last_record = time.time()
        try:
            write_json_private(os.path.join(self.run_dir, "run.json"), data)
        except OSError as e:
            if force:
                self.display.error(f"cannot write run.json: {e}")

    def _live_table(self):
        from rich.table import Table
        table = Table(box=None, header_style="bold", pad_edge=False)
        for h in ("task", "state", "pid", "uptime", "restarts", "step"):
            table.add_column(h)
        now = time.time()
        best = None
        for tr in self.runs.values():
            up = format_duration((tr.ended or now) - tr.started) if tr.started else ""
            step = "" if tr.progress is None else str(tr.progress.step)
            if tr.progress is not None and (best is None or tr.progress.step > best.step):
                best = tr.progress
            table.add_row(tr.name, tr.state.value, str(tr.pid or ""), up, str(tr.restarts), step)
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
        head = f"run {self.run_id} {words.get(self.result, self.result)} in " \
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
            tail = list(self.root_cause.tail)[-10:]
            if tail:
                text.append(f"last lines of {self.root_cause.name}:")
                text.extend("  " + line for line in tail)
        self.display.block("\n".join(text))


def _accepts(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    if is_local(host):
        host = "localhost"
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _reachable_beyond_loopback() -> bool:
    """True when this machine has a network address other than loopback."""
    try:
        import psutil
        for name, addrs in psutil.net_if_addrs().items():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    ip = a.address.split("%")[0]
                    if not (ip.startswith("127.") or ip == "::1" or ip.startswith("fe80")):
                        return True
    except Exception:
        return True
    return False
