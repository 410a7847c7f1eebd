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
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Dict, List, Optional  # noqa: E402

from ..launch.backend import stop_group  # noqa: E402
from .slurm import PLAN_ENV, STOP_SIGNAL, expand_hostlist, expand_tasks_per_node, layout  # noqa: E402

EXIT_CANCELLED = 128 + signal.SIGTERM
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
    def __init__(self, plan: Dict[str, Any]):
        self.plan = plan
        rank = int(os.environ["SLURM_PROCID"])
        nodes = expand_hostlist(_env("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") or "")
        per_node = expand_tasks_per_node(_env("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") or "")
        table = layout(plan, nodes, per_node)
        self.rank = rank
        self.job, self.index, self.host, self.port = table[rank]
        self.name = f"{self.job}:{self.index}"
        self.prefix = f"[{self.name}] "
        localid = os.environ.get("SLURM_LOCALID")
        node = os.environ.get("SLURMD_NODENAME")
        if (node and node != self.host) or (localid is not None and self.port != plan["port_base"] + int(localid)):
            raise ValueError(f"rank {rank} runs on {node} (local id {localid}) but the block layout "
                             f"puts it on {self.host}:{self.port}; run srun with --distribution=block")
        cluster: Dict[str, List[str]] = {}
        for job, idx, host, port in table:
            if job != "evaluator":      # TensorFlow's rule
                cluster.setdefault(job, []).append(f"{host}:{port}")
        self.cluster = cluster
        self.spec = plan["jobs"][self.job]
        self.run_dir = plan.get("run_dir")
        if self.run_dir:
            self.run_dir = self.run_dir.replace("{job_id}", os.environ.get("SLURM_JOB_ID", "nojob"))
        self.step = (f"{os.environ['SLURM_JOB_ID']}.{_env('SLURM_STEP_ID', 'SLURM_STEPID')}"
                     if os.environ.get("SLURM_JOB_ID") and _env("SLURM_STEP_ID", "SLURM_STEPID") else None)
        self.log = None
        if self.run_dir:
            try:
                os.makedirs(self.run_dir, exist_ok=True)
                self.log = open(os.path.join(self.run_dir, f"{self.job}-{self.index}.log"), "ab")
            except OSError as e:
                _err(f"cannot write the log in {self.run_dir}: {e}", self.prefix)

    # ---- what runs
    def argv(self) -> List[str]:
        argv = list(self.spec["argv"])
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        if self.spec["task_flags"]:
            argv += [f"--job_name={self.job}", f"--task_index={self.index}"]
            argv += [f"--{j}_hosts={','.join(eps)}" for j, eps in self.cluster.items()]
        return argv

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.pop(PLAN_ENV, None)
        env.update(self.spec["env"])
        gpus = self.spec["gpus"][self.index]
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        env["TF_CONFIG"] = json.dumps({"cluster": self.cluster,
                                       "task": {"type": self.job, "index": self.index}},
                                      separators=(",", ":"))
        env["PYTHONUNBUFFERED"] = "1"
        env["TFCLUSTER_TASK"] = self.name
        if self.run_dir:
            env["TFCLUSTER_RUN_DIR"] = self.run_dir
        return env

    # ---- output
    def emit(self, data: bytes) -> None:
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
            self.emit(raw)

    # ---- life
    def run(self) -> int:
        restarts = 0
        r = self.spec["restart"]
        if self.rank == 0:
            self.say(f"TF_CONFIG cluster: {json.dumps(self.cluster)}")
        while True:
            try:
                proc = subprocess.Popen(self.argv(), env=self.env(), cwd=self.spec["cwd"],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=_child_setup)
            except OSError as e:
                self.say(f"cannot start {self.spec['argv'][0]}: {e.strerror or e}")
                return self.finish(127, failed=True, reason=f"cannot start: {e.strerror or e}")
            self.say(f"started on {self.host}:{self.port} (pid {proc.pid})"
                     + (f", restart {restarts}" if restarts else ""))
            reader = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
            reader.start()
            outcome = self.watch(proc)
            reader.join(5)
            if outcome == "cancelled":
                return self.finish(EXIT_CANCELLED, failed=True, reason="cancelled (SIGTERM)")
            if outcome == "over":
                return self.finish(0, reason="stopped: the run is over")
            rc = outcome
            if rc == 0:
                return self.ended_ok()
            what = f"exit code {rc}" if rc > 0 else f"signal {-rc} ({_signame(-rc)})"
            if self._retry(r, rc, restarts):
                delay = r["backoff"] * (2 ** restarts)
                restarts += 1
                self.say(f"failed ({what}); restarting in {delay:g}s ({restarts}/{r['max_restarts']})")
                if self._sleep(delay):
                    return self.finish(EXIT_CANCELLED if _cancelled.is_set() else 0,
                                       failed=_cancelled.is_set(), reason="stopped while restarting")
                continue
            self.say(f"failed ({what}); stopping the run")
            code = rc if 0 < rc < 256 else 128 + (-rc if rc < 0 else 1)
            self.end_run()
            return self.finish(code, failed=True, reason=what)

    def _retry(self, r: Dict[str, Any], rc: int, restarts: int) -> bool:
        if restarts >= r["max_restarts"] or _over.is_set() or _cancelled.is_set():
            return False
        if r["policy"] == "on-failure":
            return True
        if r["policy"] == "exit-code":   # TFJob's rule: 1-127 permanent, 128-255 and signals retried
            return rc < 0 or rc >= 128
        return False

    def _sleep(self, seconds: float) -> bool:
        deadline = time.time() + seconds
        while time.time() < deadline:
            if _over.is_set() or _cancelled.is_set():
                return True
            time.sleep(0.1)
        return False

    def watch(self, proc: subprocess.Popen):
        """The program's exit code, or 'over' / 'cancelled' once the wrapper stopped it."""
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
                if self.job != "ps" and self.plan["grace"] > 0:
                    try:
                        rc = proc.wait(self.plan["grace"])
                        self.say(f"ended by itself (exit {rc}) after the run was over")
                        return "over"
                    except subprocess.TimeoutExpired:
                        pass
                self.stop(proc)
                return "over"

    def stop(self, proc: subprocess.Popen) -> None:
        """SIGTERM to the program's group, a bounded wait, then SIGKILL."""
        stop_group(proc, self.plan.get("stop_timeout", 5.0))

    def _over_marked(self) -> bool:
        return bool(self.run_dir) and os.path.exists(os.path.join(self.run_dir, OVER_MARK))

    def ended_ok(self) -> int:
        success = self.plan["success"]
        if success == "chief" and self.name == self.plan["chief"]:
            self.say("succeeded; the run is over, stopping the other tasks")
            self.end_run()
        elif success == "all-workers" and self.job in ("worker", "chief"):
            self.mark_done()
            if self.all_done():
                self.say("succeeded, the last worker to do so; the run is over, stopping the other tasks")
                self.end_run()
            else:
                self.say("succeeded")
        else:
            self.say("ended (exit 0)")
        return self.finish(0, reason="exit 0")

    def mark_done(self) -> None:
        if self.run_dir:
            try:
                open(os.path.join(self.run_dir, f".done-{self.job}-{self.index}"), "w").close()
            except OSError:
                pass

    def all_done(self) -> bool:
        if not self.run_dir:
            self.say("success: all-workers needs a run folder shared by the nodes; ending the run now")
            return True
        need = [(j, i) for j in ("chief", "worker") if j in self.plan["jobs"]
                for i in range(self.plan["jobs"][j]["count"])]
        return all(os.path.exists(os.path.join(self.run_dir, f".done-{j}-{i}")) for j, i in need)

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
                with open(os.path.join(self.run_dir, f"{self.job}-{self.index}.exit.json"), "w") as f:
                    json.dump(rec, f)
            except OSError:
                pass
        if self.log is not None:
            self.log.close()
        return code


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
