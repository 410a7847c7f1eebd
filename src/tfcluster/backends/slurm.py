"""Slurm: run the cluster as one Slurm job step, one Slurm task per TensorFlow task.

What runs where
  * ``tfcluster launch FILE --backend slurm`` (this module's :func:`launch`) submits a batch
    script with ``sbatch`` -- or, inside an allocation (``SLURM_JOB_ID`` set), runs ``srun``
    directly -- then follows the job, streams its output and returns its result.
  * The job runs ``srun ... python -m tfcluster.backends.slurm_task`` (:mod:`.slurm_task`), one
    Slurm task per TensorFlow task. Each works out its job and index from ``SLURM_PROCID``,
    sets ``TF_CONFIG`` and runs the program as a child in its own process group.

Hosts, counts and ports (as TensorFlow's ``SlurmClusterResolver``)
  Job entries are counts (``worker: 4``; a list counts its entries, its hosts are not used).
  Ranks go to jobs in sorted job-name order (chief, evaluator, ps, worker), as
  ``SlurmClusterResolver`` does, so a program that uses that resolver agrees with
  ``TF_CONFIG``. Node names come from the step's node list (expanded with ``scontrol show
  hostnames``), tasks per node from ``SLURM_STEP_TASKS_PER_NODE``; the tasks on a node get ports
  ``base_port``, ``base_port+1``, ... Unlike the resolver, nodes keep Slurm's order instead of
  being sorted as strings, which is the order ``--distribution=block`` places ranks in.

How the job ends
  ps tasks never end by themselves. When the chief (or ``worker:0``) exits 0 (or, with
  ``success: all-workers``, when every worker has), its wrapper sends ``SIGURG`` to the job step
  (``scancel --signal=URG JOB.STEP``); SIGURG is ignored by default, so only the wrappers act on
  it: ps tasks are stopped at once, workers get ``grace`` seconds to finish, then are stopped,
  and all exit 0. A task that fails beyond its restart budget does the same and exits with its
  own code. ``srun`` exits with the highest task exit code, so the job's exit code is the
  chief's result (or the first failure's). ``scancel JOB`` (Ctrl-C in the launcher) sends
  SIGTERM: the wrappers stop their programs (SIGTERM to the group, then SIGKILL) and exit 143.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, IO, List, Optional, Sequence, Tuple

from ..config import Cluster
from ..errors import UserError

PLAN_ENV = "TFCLUSTER_SLURM_PLAN"
STOP_SIGNAL = signal.SIGURG          # "the run is over": default action is ignore
TASK_MODULE = "tfcluster.backends.slurm_task"
TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


# --------------------------------------------------------------------------------------
# The plan: everything a Slurm task needs, as JSON (no cluster file needed on the nodes).

def make_plan(cluster: Cluster, command: Optional[Sequence[str]] = None,
              task_flags: Optional[bool] = None, run_dir: Optional[str] = None,
              success: Optional[str] = None, grace: Optional[float] = None,
              stop_timeout: float = 5.0, command_cwd: Optional[str] = None) -> Dict[str, Any]:
    """The run as plain data for :mod:`.slurm_task`. Raises UserError for a missing program."""
    jobs = sorted(cluster.jobs)   # SlurmClusterResolver's order: sorted(jobs.items())
    plan_jobs: Dict[str, Any] = {}
    for job in jobs:
        tasks = cluster.jobs[job]
        first = tasks[0]
        argv = list(command) if command else list(first.command) + list(first.args)
        if not argv:
            raise UserError("program.command: no program to run; set it in the file or give one "
                            "after '--' (tfcluster launch FILE --backend slurm -- python my_trainer.py)")
        r = first.restart
        plan_jobs[job] = {
            "count": len(tasks),
            "argv": argv,
            "env": dict(first.env),
            "cwd": (command_cwd or os.getcwd()) if command else first.cwd,
            "task_flags": bool(first.task_flags if task_flags is None else task_flags),
            "gpus": [t.gpus for t in tasks],
            "restart": {"policy": r.policy, "max_restarts": r.max_restarts, "backoff": r.backoff},
        }
    return {
        "version": 1,
        "jobs": plan_jobs,
        "order": jobs,
        "port_base": cluster.base_port,
        "chief": str(cluster.chief),
        "success": success or cluster.success,
        "grace": float(cluster.grace if grace is None else grace),
        "stop_timeout": float(stop_timeout),
        "run_dir": run_dir,
        "python": sys.executable,
        "source": os.path.abspath(cluster.source) if cluster.source else "",
    }


def ntasks(plan: Dict[str, Any]) -> int:
    return sum(j["count"] for j in plan["jobs"].values())


def rank_table(plan: Dict[str, Any]) -> List[Tuple[str, int]]:
    """(job, index) of every rank: jobs in plan order, indexes within a job."""
    return [(job, i) for job in plan["order"] for i in range(plan["jobs"][job]["count"])]


def srun_argv(plan: Dict[str, Any], name: Optional[str] = None, overcommit: bool = True) -> List[str]:
    argv = ["srun", f"--ntasks={ntasks(plan)}", "--distribution=block", "--kill-on-bad-exit=0"]
    if overcommit:
        argv.append("--overcommit")
    if name:
        argv.append(f"--job-name={name}")
    return argv + [plan["python"], "-m", TASK_MODULE]


def batch_script(plan: Dict[str, Any], partition: Optional[str] = None, time: Optional[str] = None,
                 name: Optional[str] = None, overcommit: bool = True,
                 output: Optional[str] = None) -> str:
    """An sbatch script that runs the plan (the text ``tfcluster render slurm`` prints)."""
    n = ntasks(plan)
    lines = ["#!/bin/bash",
             f"# Generated by tfcluster{' from ' + plan['source'] if plan.get('source') else ''}; "
             f"submit with: sbatch THIS_FILE"]
    if name:
        lines.append(f"#SBATCH --job-name={name}")
    lines.append(f"#SBATCH --ntasks={n}")
    if overcommit:
        lines.append("#SBATCH --overcommit")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time:
        lines.append(f"#SBATCH --time={time}")
    if output:
        lines.append(f"#SBATCH --output={output}")
    lines.append("#")
    lines.append("# Slurm task (SLURM_PROCID) -> TensorFlow task, in SlurmClusterResolver's order;")
    lines.append(f"# the tasks on each node listen on ports {plan['port_base']}, "
                 f"{plan['port_base'] + 1}, ...:")
    rank = 0
    for job in plan["order"]:
        c = plan["jobs"][job]["count"]
        span = f"{rank}" if c == 1 else f"{rank}-{rank + c - 1}"
        tasks = f"{job}:0" if c == 1 else f"{job}:0..{job}:{c - 1}"
        lines.append(f"#   {span:<8} {tasks}")
        rank += c
    lines.append(f"# The run ends when {plan['chief']} "
                 + ("exits" if plan["success"] == "chief" else "and every worker exit")
                 + "; ps tasks are then stopped. Stop it early with: scancel $SLURM_JOB_ID")
    lines.append("")
    lines.append(f"export {PLAN_ENV}={shlex.quote(json.dumps(plan, separators=(',', ':')))}")
    run_dir = plan.get("run_dir")
    if run_dir:
        lines.append(f"RUN_DIR={_shell_path(run_dir)}")
        lines.append('mkdir -p "$RUN_DIR"')
    lines.append(" ".join(shlex.quote(w) for w in srun_argv(plan, overcommit=overcommit)))
    lines.append("rc=$?")
    if run_dir:
        lines.append('echo $rc > "$RUN_DIR/exit_code"')
    lines.append("exit $rc")
    return "\n".join(lines) + "\n"


def _shell_path(path: str) -> str:
    """A shell word for ``path`` where ``{job_id}`` becomes ``$SLURM_JOB_ID``."""
    return '"${SLURM_JOB_ID}"'.join(shlex.quote(p) if p else "" for p in path.split("{job_id}"))


# --------------------------------------------------------------------------------------
# Slurm's node list and tasks-per-node expressions.

def expand_hostlist(text: str, use_scontrol: bool = True) -> List[str]:
    """'n[1-2],m5' -> ['n1', 'n2', 'm5'], with ``scontrol show hostnames`` when available."""
    if use_scontrol and shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True,
                                 text=True, timeout=30)
            hosts = out.stdout.split()
            if out.returncode == 0 and hosts:
                return hosts
        except (OSError, subprocess.SubprocessError):
            pass
    return _expand_hostlist_py(text)


def _expand_hostlist_py(text: str) -> List[str]:
    parts, cur, depth = [], "", 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    hosts: List[str] = []
    for part in parts:
        m = re.fullmatch(r"([^\[\]]*)(?:\[([^\]]+)\])?(.*)", part)
        if not m or "[" in m.group(3):
            raise ValueError(f"cannot expand host list '{text}'")
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            hosts.append(part)
            continue
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            hi = hi or lo
            width = len(lo)
            for i in range(int(lo), int(hi) + 1):
                hosts.append(f"{prefix}{str(i).zfill(width)}{suffix}")
    return hosts


def expand_tasks_per_node(text: str) -> List[int]:
    """'3(x2),2,1' -> [3, 3, 2, 1]."""
    out: List[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"cannot read tasks per node '{text}'")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def layout(plan: Dict[str, Any], nodes: Sequence[str], per_node: Sequence[int]
           ) -> List[Tuple[str, int, str, int]]:
    """(job, index, host, port) of every rank: ranks fill nodes in order (block distribution),
    the tasks of a node get ports port_base, port_base+1, ..."""
    if len(nodes) != len(per_node):
        raise ValueError(f"{len(nodes)} nodes but tasks per node for {len(per_node)}")
    slots = [(host, plan["port_base"] + i) for host, n in zip(nodes, per_node) for i in range(n)]
    table = rank_table(plan)
    if len(slots) != len(table):
        raise ValueError(f"the step has {len(slots)} Slurm tasks but the cluster has {len(table)} "
                         f"TensorFlow tasks")
    return [(job, idx, host, port) for (job, idx), (host, port) in zip(table, slots)]


# --------------------------------------------------------------------------------------
# The launcher side: tfcluster launch FILE --backend slurm.

def launch(cluster: Cluster, args) -> int:
    """Submit (sbatch) or run (srun, inside an allocation) the cluster, follow it, stream its
    output and return 0 (succeeded), 1 (failed), 2 (bad input) or 130 (interrupted; the job
    is cancelled)."""
    program = list(getattr(args, "program", None) or [])
    run_id = getattr(args, "run_id", None) or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = os.path.abspath(args.logdir) if getattr(args, "logdir", None) else cluster.logdir
    run_dir = os.path.join(logdir, run_id)
    plan = make_plan(cluster, command=program or None, task_flags=getattr(args, "task_flags", None),
                     run_dir=run_dir, success=getattr(args, "success", None),
                     grace=getattr(args, "grace", None),
                     stop_timeout=getattr(args, "stop_timeout", None) or 5.0,
                     command_cwd=os.getcwd())
    quiet = bool(getattr(args, "quiet", False))
    out = sys.stdout
    inside = bool(os.environ.get("SLURM_JOB_ID"))
    name = f"tfcluster-{run_id}"
    if getattr(args, "dry_run", False):
        if inside:
            print(f"{PLAN_ENV}={shlex.quote(json.dumps(plan))} \\\n  "
                  + " ".join(shlex.quote(w) for w in srun_argv(plan, name=name)), file=out)
        else:
            print(batch_script(plan, name=name, output=os.path.join(run_dir, "slurm-%j.out")),
                  end="", file=out)
        return EXIT_OK
    tool = "srun" if inside else "sbatch"
    if not shutil.which(tool):
        raise UserError(f"--backend slurm: '{tool}' not found on PATH (is Slurm installed here?)")
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as e:
        raise UserError(f"logdir: cannot create {run_dir} ({e.strerror or e})")
    listed = [j for j in cluster.jobs if j not in cluster.count_jobs]
    counts = ", ".join(f"{j}: {plan['jobs'][j]['count']}" for j in plan["order"])
    _info(f"run {run_id}: {ntasks(plan)} Slurm task(s) ({counts}); "
          f"logs in {run_dir}" + (f"; hosts listed for {', '.join(listed)} are not used, Slurm "
                                  f"chooses the nodes" if listed else ""))
    follower = _Follower(plan, run_dir, quiet=quiet)
    if inside:
        return follower.run_srun(name)
    return follower.run_sbatch(name)


def _info(line: str, stream: IO[str] = sys.stderr) -> None:
    try:
        stream.write(f"tfcluster: {line}\n")
        stream.flush()
    except (BrokenPipeError, ValueError):
        pass


class _Follower:
    def __init__(self, plan: Dict[str, Any], run_dir: str, quiet: bool):
        self.plan, self.run_dir, self.quiet = plan, run_dir, quiet

    # ---- output
    def _line(self, text: str) -> None:
        if self.quiet and "tfcluster:" not in text:
            return
        try:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass

    # ---- inside an allocation: srun here
    def run_srun(self, name: str) -> int:
        env = dict(os.environ)
        env[PLAN_ENV] = json.dumps(self.plan, separators=(",", ":"))
        argv = srun_argv(self.plan, name=name)
        _info(f"inside Slurm job {os.environ['SLURM_JOB_ID']}: " + " ".join(argv[:-3]))
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        reader = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        reader.start()
        try:
            with _sigterm_as_interrupt():
                rc = proc.wait()
        except KeyboardInterrupt:
            _info("interrupted: cancelling the job step")
            self._cancel_step(name, proc)
            reader.join(5)
            return EXIT_INTERRUPTED
        reader.join(10)
        return self._result(rc, f"srun exited with {rc}")

    def _pump(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            self._line(raw.decode("utf-8", "replace").rstrip("\n"))

    def _cancel_step(self, name: str, proc: subprocess.Popen) -> None:
        job = os.environ.get("SLURM_JOB_ID", "")
        step = None
        try:
            out = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"],
                                 capture_output=True, text=True, timeout=30).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == name:
                    step = parts[0]
        except (OSError, subprocess.SubprocessError):
            pass
        if step:
            subprocess.run(["scancel", step], capture_output=True, timeout=30)
        else:
            try:
                os.kill(proc.pid, signal.SIGTERM)  # srun forwards SIGTERM to the tasks
            except ProcessLookupError:
                pass
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ---- outside: sbatch and follow
    def run_sbatch(self, name: str) -> int:
        output = os.path.join(self.run_dir, "slurm-%j.out")
        script = batch_script(self.plan, name=name, output=output)
        path = os.path.join(self.run_dir, "job.sbatch")
        with open(path, "w") as f:
            f.write(script)
        r = subprocess.run(["sbatch", "--parsable", path], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip().replace("\n", "; ")
            raise UserError(f"--backend slurm: sbatch refused the job: {msg}")
        job_id = r.stdout.strip().split(";")[0]
        out_path = output.replace("%j", job_id)
        _info(f"submitted Slurm job {job_id} ({name}); output: {out_path}; stop it with: scancel {job_id}")
        tail = _Tail(out_path)
        state, exit_code = "PENDING", None
        try:
            with _sigterm_as_interrupt():
                last = ""
                while True:
                    for line in tail.read():
                        self._line(line)
                    state, exit_code = job_state(job_id)
                    if state != last and state in ("PENDING", "RUNNING"):
                        _info(f"job {job_id} is {state.lower()}")
                        last = state
                    if state is None or state in TERMINAL_STATES:
                        break
                    time.sleep(0.5)
        except KeyboardInterrupt:
            _info(f"interrupted: cancelling Slurm job {job_id}")
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
            deadline = time.time() + 60
            while time.time() < deadline:
                st, _ = job_state(job_id)
                if st is None or st in TERMINAL_STATES:
                    break
                time.sleep(0.5)
            for line in tail.read(final=True):
                self._line(line)
            return EXIT_INTERRUPTED
        # the output file may lag behind the job's end by a moment
        deadline = time.time() + 5
        rc = _read_exit_file(self.run_dir)
        while rc is None and state == "COMPLETED" and time.time() < deadline:
            time.sleep(0.2)
            rc = _read_exit_file(self.run_dir)
        time.sleep(0.3)
        for line in tail.read(final=True):
            self._line(line)
        if rc is None:
            rc = exit_code if exit_code is not None else (0 if state == "COMPLETED" else 1)
        return self._result(rc, f"Slurm job {job_id} {(state or 'ended').lower()}, exit code {rc}")

    def _result(self, rc: int, what: str) -> int:
        failed = _failures(self.run_dir)
        if rc == 0 and not failed:
            _info(f"run succeeded: {what}")
            return EXIT_OK
        _info(f"run failed: {what}")
        for name, rec in failed[:1]:
            _info(f"first failure: {name} on {rec.get('host', '?')}: {rec.get('reason', '?')}")
            log = os.path.join(self.run_dir, f"{name.replace(':', '-')}.log")
            try:
                with open(log, "rb") as f:
                    lines = f.read().decode("utf-8", "replace").splitlines()[-10:]
                for line in lines:
                    _info(f"  | {line}")
            except OSError:
                pass
        return EXIT_FAILED


def _failures(run_dir: str) -> List[Tuple[str, Dict[str, Any]]]:
    out = []
    try:
        names = os.listdir(run_dir)
    except OSError:
        return out
    for n in names:
        if n.endswith(".exit.json"):
            try:
                with open(os.path.join(run_dir, n)) as f:
                    rec = json.load(f)
            except (OSError, ValueError):
                continue
            if rec.get("failed"):
                out.append((rec.get("task", n), rec))
    out.sort(key=lambda x: x[1].get("time", 0))
    return out


def _read_exit_file(run_dir: str) -> Optional[int]:
    try:
        with open(os.path.join(run_dir, "exit_code")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def job_state(job_id: str) -> Tuple[Optional[str], Optional[int]]:
    """(JobState, exit code) from ``scontrol show job``; (None, None) once Slurm forgot the job."""
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "UNKNOWN", None
    if r.returncode != 0:
        if "Invalid job id" in (r.stderr + r.stdout):
            return None, None
        return "UNKNOWN", None
    state = re.search(r"\bJobState=(\S+)", r.stdout)
    code = re.search(r"\bExitCode=(\d+):(\d+)", r.stdout)
    exit_code = None
    if code:
        exit_code = int(code.group(1)) or (128 + int(code.group(2)) if int(code.group(2)) else 0)
    return (state.group(1) if state else "UNKNOWN"), exit_code


class _Tail:
    """New complete lines of a file that another process appends to."""

    def __init__(self, path: str):
        self.path, self.pos, self.rest = path, 0, b""

    def read(self, final: bool = False) -> List[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
        except OSError:
            data = b""
        data = self.rest + data
        lines = data.split(b"\n")
        self.rest = lines.pop()
        if final and self.rest:
            lines.append(self.rest)
            self.rest = b""
        return [l.decode("utf-8", "replace") for l in lines]


class _sigterm_as_interrupt:
    """While following a job, SIGTERM to the launcher cancels the job as Ctrl-C does."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():
            def handler(signum, frame):
                raise KeyboardInterrupt
            self.old = signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False
