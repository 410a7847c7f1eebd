"""One Slurm task of a tfcluster run (``srun ... python -m tfcluster.backends.slurm_task``).

It reads the plan from ``TFCLUSTER_SLURM_PLAN``, works out its TensorFlow job and index from
``SLURM_PROCID`` and the step's node list (see :mod:`tfcluster.backends.slurm`), sets
``TF_CONFIG``, runs the program in its own process group, prefixes its output lines with
``[job:index]`` (and copies them to ``<run_dir>/<job>-<index>.log``), restarts it as the
restart policy says, and ends the whole step when the run is over:

* SIGURG (from the task that ends the run, through ``scancel --signal=URG JOB.STEP``): the run
  is over; ps is stopped at once, other tasks get ``grace`` seconds; exit 0.
* SIGTERM / SIGINT / SIGHUP (scancel, time limit, Ctrl-C): stop the program; exit 143.
"""
from __future__ import annotations

import signal
import threading

_over = threading.Event()         # the run is over (SIGURG)
_cancelled = threading.Event()    # stop now (SIGTERM, SIGINT, SIGHUP)


def _on_over(signum, frame):
    _over.set()


def _on_cancel(signum, frame):
    _cancelled.set()


# Installed first thing: a stop signal may come soon after start.
signal.signal(signal.SIGURG, _on_over)
for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, _on_cancel)

import ctypes  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Dict, List, Optional  # noqa: E402

from .. import contract, rules, secrets  # noqa: E402
from ..hosts import accepts  # noqa: E402
from ..plan import RunPlan  # noqa: E402
from ..progress import parse_progress  # noqa: E402
from .base import stop_group  # noqa: E402
from .slurm import (PLAN_ENV, SECRET_PREFIX, STOP_SIGNAL, expand_hostlist,  # noqa: E402
                    expand_tasks_per_node, fill_secrets, layout)

STILL_WAITING = re.compile(r"CreateSession still waiting for response from worker: "
                           r"/job:([A-Za-z0-9_]+)/replica:\d+/task:(\d+)")

EXIT_CANCELLED = rules.signal_exit_code(signal.SIGTERM)
OVER_MARK = "run_over"


def _err(msg: str, prefix: str = "") -> None:
    sys.stdout.write(f"{prefix}tfcluster: {msg}\n")
    sys.stdout.flush()


def _env(name: str, *alts: str) -> Optional[str]:
    for n in (name,) + alts:
        v = os.environ.get(n)
        if v:
            return v
    return None


def _child_setup() -> None:
    try:  # the program dies with its wrapper, even when the wrapper is SIGKILLed
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGURG, signal.SIG_DFL)


class Task:
    """One TensorFlow task on a Slurm node: the same plan, contract and rules as the local
    supervisor (restart decisions, the run's restart budget, success, watchdog), with the run
    folder -- shared by the nodes -- as the place tasks tell each other things."""

    def __init__(self, data: Dict[str, Any]):
        self.data = data
        missing = fill_secrets(data, dict(os.environ))
        if missing:
            raise ValueError(f"secret values not passed to the job: {', '.join(missing)} (export "
                             f"them where sbatch runs)")
        self.plan = RunPlan.from_dict(data)
        rank = int(os.environ["SLURM_PROCID"])
        nodes = expand_hostlist(_env("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") or "")
        per_node = expand_tasks_per_node(_env("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") or "")
        table = layout(data, nodes, per_node)
        self.rank = rank
        self.job, self.index, self.host, self.port = table[rank]
        self.name = f"{self.job}:{self.index}"
        self.prefix = f"[{self.name}] "
        localid = os.environ.get("SLURM_LOCALID")
        node = os.environ.get("SLURMD_NODENAME")
        if (node and node != self.host) or (localid is not None and self.port != self.plan.base_port + int(localid)):
            raise ValueError(f"rank {rank} runs on {node} (local id {localid}) but the block layout "
                             f"puts it on {self.host}:{self.port}; run srun with --distribution=block")
        self.cluster = contract.cluster_dict(_endpoints(table))
        self.local_tasks = per_node[nodes.index(self.host)] if self.host in nodes else 1
        self.task = self.plan.task(self.name)
        self.rule = self.task.restart
        self.run_dir = self.plan.run_dir
        if self.run_dir:
            self.run_dir = self.run_dir.replace("{job_id}", os.environ.get("SLURM_JOB_ID", "nojob"))
        self.step = (f"{os.environ['SLURM_JOB_ID']}.{_env('SLURM_STEP_ID', 'SLURM_STEPID')}"
                     if os.environ.get("SLURM_JOB_ID") and _env("SLURM_STEP_ID", "SLURM_STEPID") else None)
        self.where = {f"{j}:{i}": f"{h}:{p}" for j, i, h, p in table}
        self.mask = secrets.Masker(self.plan.secret_values())
        self.log = None
        self.best_step: Optional[int] = None
        self.best_step_at = 0.0
        self.waiting_on: Dict[str, float] = {}
        self.forced = ""
        if self.run_dir:
            try:
                os.makedirs(self.run_dir, mode=0o700, exist_ok=True)
                fd = os.open(os.path.join(self.run_dir, f"{self.job}-{self.index}.log"),
                             os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self.log = os.fdopen(fd, "ab")
            except OSError as e:
                _err(f"cannot write the log in {self.run_dir}: {e}", self.prefix)

    # ---- what runs: the plan and the task contract, as everywhere
    def argv(self) -> List[str]:
        return contract.resolve_argv(self.plan.argv(self.task, cluster=self.cluster), [sys.executable])

    def env(self, restarts: int) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(SECRET_PREFIX)}
        env.pop(PLAN_ENV, None)
        run_plan = self.plan.with_run_dir(self.run_dir) if self.run_dir else self.plan
        env.update(run_plan.env(self.task, restarts, cluster=self.cluster, local_tasks=self.local_tasks))
        return env

    # ---- output
    def emit(self, data: bytes) -> None:
        if self.mask.pattern is not None:
            data = self.mask(data.decode("utf-8", "replace")).encode("utf-8", "replace")
        line = self.prefix.encode() + data
        if not line.endswith(b"\n"):
            line += b"\n"
        try:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass
        if self.log is not None:
            try:
                self.log.write(data if data.endswith(b"\n") else data + b"\n")
                self.log.flush()
            except (OSError, ValueError):
                pass

    def say(self, msg: str) -> None:
        self.emit(f"tfcluster: {msg}".encode())

    def _pump(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            text = raw.decode("utf-8", "replace")
            p = parse_progress(text)
            if p is not None and (self.best_step is None or p.step > self.best_step):
                self.best_step, self.best_step_at = p.step, time.time()
            m = STILL_WAITING.search(text)
            if m:
                self.waiting_on.setdefault(f"{m.group(1)}:{m.group(2)}", time.time())
            self.emit(raw)

    # ---- life
    def run(self) -> int:
        restarts = 0
        if self.rank == 0:
            self.say(f"TF_CONFIG cluster: {json.dumps(self.cluster)}")
        first_start = time.time()
        while True:
            try:
                proc = subprocess.Popen(self.argv(), env=self.env(restarts), cwd=self.task.cwd,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=_child_setup)
            except OSError as e:
                self.say(f"cannot start {self.task.argv[0]}: {e.strerror or e}")
                return self.finish(127, failed=True, reason=f"cannot start: {e.strerror or e}")
            self.say(f"started on {self.host}:{self.port} (pid {proc.pid})"
                     + (f", restart {restarts}" if restarts else ""))
            self.forced, self.waiting_on = "", {}
            reader = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
            reader.start()
            outcome = self.watch(proc)
            reader.join(5)
            if outcome == "cancelled":
                return self.finish(EXIT_CANCELLED, failed=True, reason="cancelled (SIGTERM)")
            if outcome == "over":
                return self.finish(0, reason="stopped: the run is over")
            if isinstance(outcome, tuple):        # the watchdog failed the run
                self.say(f"{outcome[1]}; stopping the run")
                self.end_run()
                return self.finish(rules.EXIT_FAILED, failed=True, reason=outcome[1])
            rc = outcome
            if rc == 0:
                return self.ended_ok()
            what = rules.describe_exit(rc) + (f" ({self.forced})" if self.forced else "")
            early = not restarts and time.time() - first_start < self.rule.min_uptime
            d = rules.decide_restart(self.rule, rc, restarts, self._total_restarts(),
                                     run_over=_over.is_set() or _cancelled.is_set(), early=early)
            if d.restart and self._claim_restart():
                restarts += 1
                self.say(f"failed ({what}); {d.reason} in {d.delay:g}s")
                if self._sleep(d.delay):
                    return self.finish(EXIT_CANCELLED if _cancelled.is_set() else 0,
                                       failed=_cancelled.is_set(), reason="stopped while restarting")
                continue
            if d.restart:
                d = rules.Decision(False, f"the run's restart budget is spent "
                                          f"({self.rule.max_total_restarts} of {self.rule.max_total_restarts})")
            self.say(f"failed ({what}); not restarted: {d.reason}; stopping the run")
            self.end_run()
            return self.finish(rules.task_exit_code(rc), failed=True, reason=f"{what}; {d.reason}")

    # ---- the run's restart budget, shared through the run folder
    def _total_restarts(self) -> int:
        if not self.run_dir:
            return 0
        try:
            return sum(1 for n in os.listdir(self.run_dir) if n.startswith(".restart-"))
        except OSError:
            return 0

    def _claim_restart(self) -> bool:
        """Take one restart of the run's budget (``max_total_restarts``): an exclusive file per
        restart in the run folder, so tasks on different nodes count together."""
        limit = self.rule.max_total_restarts
        if limit is None:
            return True
        if not self.run_dir:
            return True
        for k in range(limit):
            try:
                os.close(os.open(os.path.join(self.run_dir, f".restart-{k}"),
                                 os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                return True
            except FileExistsError:
                continue
            except OSError:
                return True
        return False

    def _sleep(self, seconds: float) -> bool:
        deadline = time.time() + seconds
        while time.time() < deadline:
            if _over.is_set() or _cancelled.is_set():
                return True
            time.sleep(0.1)
        return False

    def watch(self, proc: subprocess.Popen):
        """The program's exit code, 'over' / 'cancelled' once the wrapper stopped it, or
        ('fail', reason) when the watchdog fails the run."""
        started = time.time()
        up = False
        last_watch = 0.0
        wd = self.plan.watchdog
        while True:
            try:
                return proc.wait(0.2)
            except subprocess.TimeoutExpired:
                pass
            if _cancelled.is_set():
                self.stop(proc)
                return "cancelled"
            if _over.is_set() or self._over_marked():
                _over.set()
                if rules.waits_for_grace(self.job) and self.plan.grace > 0:
                    try:
                        rc = proc.wait(self.plan.grace)
                        self.say(f"ended by itself (exit {rc}) after the run was over")
                        return "over"
                    except subprocess.TimeoutExpired:
                        pass
                self.stop(proc)
                return "over"
            now = time.time()
            if now - last_watch < 0.5 or self.forced:
                continue
            last_watch = now
            # the watchdog: the same checks as the local supervisor
            if self._kill_requested():
                self._force(proc, self._kill_requested())
                continue
            if not up and self.job in ("ps", "worker"):
                up = accepts("localhost", self.port)
                a = rules.check_startup(self.name, started, up, now, wd.startup_timeout, self.port)
                if a is not None:
                    self._force(proc, a.reason)
                    continue
            here = {self.name: True}
            for a in rules.check_waiting(self.name, dict(self.waiting_on), now, wd.waiting_timeout,
                                         here, self.where):
                self.waiting_on.pop(a.task, None)
                self._request_kill(a.task, f"watchdog: {self.name} has waited "
                                           f"{wd.waiting_timeout:g}s for it (CreateSession still waiting)")
            a = rules.check_stall(self.best_step, self.best_step_at, now, wd.stall_timeout)
            if a is not None:
                self.stop(proc)
                return ("fail", a.reason)

    def _force(self, proc: subprocess.Popen, reason: str) -> None:
        self.forced = reason
        self.say(f"{reason}; killing it")
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def _request_kill(self, task: str, reason: str) -> None:
        """Ask the wrapper of ``task`` (maybe on another node) to kill its program."""
        if not self.run_dir:
            return
        try:
            with open(os.path.join(self.run_dir, f".kill-{task.replace(':', '-')}"), "w") as f:
                f.write(reason)
        except OSError:
            pass

    def _kill_requested(self) -> str:
        if not self.run_dir:
            return ""
        path = os.path.join(self.run_dir, f".kill-{self.job}-{self.index}")
        try:
            with open(path) as f:
                reason = f.read().strip() or "watchdog"
            os.unlink(path)
            return reason
        except OSError:
            return ""

    def stop(self, proc: subprocess.Popen) -> None:
        """SIGTERM to the program's group, a bounded wait, then SIGKILL."""
        stop_group(proc, self.plan.stop_timeout)

    def _over_marked(self) -> bool:
        return bool(self.run_dir) and os.path.exists(os.path.join(self.run_dir, OVER_MARK))

    def ended_ok(self) -> int:
        self.mark_done()
        succeeded = self.succeeded_so_far()
        words = rules.success_reached(self.plan.success, self.plan.chief, succeeded)
        if words is not None:
            self.say(f"succeeded; the run is over ({words}), stopping the other tasks")
            self.end_run()
        else:
            self.say("ended (exit 0)")
        return self.finish(0, reason="exit 0")

    def mark_done(self) -> None:
        if self.run_dir:
            try:
                open(os.path.join(self.run_dir, f".done-{self.job}-{self.index}"), "w").close()
            except OSError:
                pass

    def succeeded_so_far(self) -> Dict[str, bool]:
        """Every task of the run -> whether it has exited 0 (done files in the run folder)."""
        out = {}
        for t in self.plan.tasks:
            if t.name == self.name:
                out[t.name] = True
            elif not self.run_dir:
                out[t.name] = False
            else:
                out[t.name] = os.path.exists(os.path.join(self.run_dir, f".done-{t.job}-{t.index}"))
        if not self.run_dir and self.plan.success != "chief":
            self.say("success: all-workers needs a run folder shared by the nodes; ending the run now")
            return {k: True for k in out}
        return out

    def end_run(self) -> None:
        """Tell every task of the step that the run is over (SIGURG through Slurm)."""
        if self.run_dir:
            try:
                open(os.path.join(self.run_dir, OVER_MARK), "w").close()
            except OSError:
                pass
        if not self.step:
            return
        for attempt in range(2):   # twice: a task may not have installed its handler yet
            try:
                subprocess.run(["scancel", f"--signal={int(STOP_SIGNAL)}", self.step],
                               capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as e:
                self.say(f"cannot signal the job step {self.step}: {e}")
                return
            if attempt == 0:
                time.sleep(1.0)

    def finish(self, code: int, failed: bool = False, reason: str = "") -> int:
        if self.run_dir:
            rec = {"task": self.name, "host": self.host, "port": self.port, "rank": self.rank,
                   "exit_code": code, "failed": failed, "reason": reason, "time": time.time()}
            try:
                fd = os.open(os.path.join(self.run_dir, f"{self.job}-{self.index}.exit.json"),
                             os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    json.dump(rec, f)
            except OSError:
                pass
        if self.log is not None:
            self.log.close()
        return code


def _endpoints(table) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for job, idx, host, port in table:
        out.setdefault(job, []).append(f"{host}:{port}")
    return out


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def main() -> int:
    text = os.environ.get(PLAN_ENV)
    if not text:
        _err(f"{PLAN_ENV} is not set; this module runs inside a job made by tfcluster "
             f"(tfcluster render slurm / launch --backend slurm)")
        return 2
    if "SLURM_PROCID" not in os.environ:
        _err("SLURM_PROCID is not set: run this module with srun")
        return 2
    try:
        task = Task(json.loads(text))
    except (ValueError, KeyError, IndexError) as e:
        _err(f"rank {os.environ.get('SLURM_PROCID')}: {e}")
        return 2
    return task.run()


if __name__ == "__main__":
    sys.exit(main())
