"""The launcher at scale (``scripts/benchmark.py --only scale``): ``tfcluster launch`` supervising
N trivial tasks (no TensorFlow) through the local backend, against the same N processes started
by a shell script that gives each its own session with ``setsid`` (as the launcher does).

A task is ``sh -c 'echo $$ > MARK/$TFCLUSTER_TASK; echo up; exec sleep HOLD'``: it says it is
running (a file named after it, holding its pid), prints one line (so the launcher's reader
for it has something to read) and sleeps. The launcher's watchdog is off
(``watchdog.startup_timeout: 0``: a task need not open its port) and the run succeeds when
every worker has exited 0 (``success: all-workers``).

Two runs per variant and N, alternating the variants (tfcluster, script, script, tfcluster, ...):

* **run**: every task sleeps ``hold`` seconds and exits 0. ``launch_overhead_ratio`` = wall time
  of ``tfcluster launch`` (start to exit) / the script's (start to its ``wait`` returning);
  ``start_seconds`` = start to every task's mark file present ("all running").
* **stop**: the tasks sleep until stopped; once all are running, SIGTERM goes to the launcher (to
  the script, whose trap sends SIGTERM to every task's process group and waits).
  ``stop_seconds`` = SIGTERM to the launcher's (script's) exit with every task's pid gone.

The launcher is sampled every ``scale_sample`` seconds (psutil): its own CPU seconds (user +
system, not its children's), RSS and peak RSS (``VmHWM``), threads and open files. Per-task
figures are marginal: (figure at N - figure of a one-task launch) / (N - 1), so the
interpreter's fixed ~30 MB does not count as per-task cost; the gross figure / N is kept too.
``tree_cpu_seconds`` is the CPU of the launcher or script and every process it reaped
(``wait4``); the difference of the two is what the launcher costs over the script in CPU.
"""
from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def task_command(mark: str, hold: float) -> List[str]:
    hold_arg = "infinity" if hold <= 0 else f"{hold:g}"
    return ["sh", "-c", f'echo $$ > "{mark}/$TFCLUSTER_TASK"; echo up; exec sleep {hold_arg}']


def cluster_file(tmp: str, n: int, mark: str, hold: float, tag: str) -> str:
    path = os.path.join(tmp, f"scale-{tag}.yaml")
    data = {"cluster": {"worker": n},
            "base_port": random.randint(20000, 30000),
            "program": {"command": task_command(mark, hold)},
            "watchdog": {"startup_timeout": 0},
            "success": "all-workers",
            "logdir": os.path.join(tmp, "runs")}
    with open(path, "w") as f:
        json.dump(data, f)  # JSON is YAML
    return path


def shell_script(n: int, mark: str, hold: float) -> str:
    """N tasks, each in its own session (setsid), with the TF_CONFIG and TFCLUSTER_TASK the
    launcher would give it; wait for all; on SIGTERM, SIGTERM every task's group and wait."""
    cmd = task_command(mark, hold)
    hosts = json.dumps({"worker": [f"localhost:{20000 + i}" for i in range(n)]})
    return "\n".join([
        "#!/bin/bash",
        "PIDS=()",
        "trap 'for p in \"${PIDS[@]}\"; do kill -TERM -- -$p 2>/dev/null; done; wait; exit 143' TERM",
        f"C={shlex.quote(hosts)}",
        f"for ((i = 0; i < {n}; i++)); do",
        '  TF_CONFIG="{\\"cluster\\": $C, \\"task\\": {\\"type\\": \\"worker\\", \\"index\\": $i}}" '
        f'TFCLUSTER_TASK="worker:$i" setsid {" ".join(shlex.quote(a) for a in cmd)} &',
        "  PIDS+=($!)",
        "done",
        "wait",
        "",
    ])


def _read_hwm_kb(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Sampler(threading.Thread):
    """Samples one process (the launcher or the script) until stopped; keeps peaks and the
    last CPU figure."""

    def __init__(self, pid: int, every: float):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.stop_ev = threading.Event()
        self.cpu = 0.0
        self.rss_kb = 0
        self.hwm_kb = 0
        self.threads = 0
        self.fds = 0
        self.samples = 0

    def run(self) -> None:
        import psutil

        try:
            proc = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self.stop_ev.is_set():
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    self.cpu = max(self.cpu, t.user + t.system)
                    self.rss_kb = max(self.rss_kb, proc.memory_info().rss // 1024)
                    self.threads = max(self.threads, proc.num_threads())
                    self.fds = max(self.fds, proc.num_fds())
                self.hwm_kb = max(self.hwm_kb, _read_hwm_kb(self.pid) or 0)
                self.samples += 1
            except psutil.Error:
                return
            self.stop_ev.wait(self.every)


def _count_marks(mark: str) -> int:
    try:
        return len(os.listdir(mark))
    except OSError:
        return 0


def _pids(mark: str) -> List[int]:
    pids = []
    for name in os.listdir(mark):
        try:
            with open(os.path.join(mark, name)) as f:
                pids.append(int(f.read().strip()))
        except (OSError, ValueError):
            pass
    return pids


def _alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def one_run(popen: Callable[..., subprocess.Popen], done: Callable[[subprocess.Popen], None],
            argv: List[str], n: int, mark: str, stop: bool, timeout: float,
            sample_every: float) -> Dict[str, Any]:
    """Start argv; wait for all n marks; (stop: SIGTERM it once all are running); wait for its
    exit (wait4: its tree's CPU). Returns the figures, or {"error": ...}."""
    os.makedirs(mark, exist_ok=True)
    t0 = time.monotonic()
    p = popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    lines: List[str] = []

    def drain() -> None:
        for raw in iter(p.stdout.readline, b""):
            lines.append(raw.decode("utf-8", "replace").rstrip())
            if len(lines) > 4000:
                del lines[:2000]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    sampler = Sampler(p.pid, sample_every)
    sampler.start()
    res: Dict[str, Any] = {}
    all_running = None
    stop_sent = None
    status = ru = None
    deadline = t0 + timeout
    try:
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            now = time.monotonic()
            if pid:
                break
            if all_running is None and _count_marks(mark) >= n:
                all_running = now
                if stop:
                    stop_sent = time.monotonic()
                    os.kill(p.pid, signal.SIGTERM)
            if now > deadline:
                res["error"] = f"timed out after {timeout:g}s ({_count_marks(mark)} of {n} running)"
                os.killpg(p.pid, signal.SIGKILL)
                _, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
        end = time.monotonic()
        p.returncode = os.waitstatus_to_exitcode(status)
        # the tasks: every pid gone (a reaped task's pid is gone; a task the launcher did not reap
        # is reparented and reaped by init)
        pids = _pids(mark)
        while any(_alive(q) for q in pids) and time.monotonic() < end + 10:
            time.sleep(0.005)
        gone = time.monotonic()
        left = [q for q in pids if _alive(q)]
    finally:
        sampler.stop_ev.set()
        sampler.join(2)
        if p.returncode is None:
            p.returncode = -9
        done(p)
        reader.join(5)
        try:
            p.stdout.close()
        except OSError:
            pass
    expect = 143 if stop else 0
    if "error" not in res and p.returncode not in (expect, -signal.SIGTERM):
        res["error"] = f"exit {p.returncode}; last lines: " + " | ".join(lines[-6:])
    if left:
        res["error"] = f"{len(left)} task(s) still alive 10 s after the end"
        for q in left:
            try:
                os.killpg(q, signal.SIGKILL)
            except OSError:
                pass
    res.update({
        "wall_seconds": end - t0,
        "start_seconds": None if all_running is None else all_running - t0,
        "stop_seconds": None if stop_sent is None else gone - stop_sent,
        "end_to_gone_seconds": gone - end,
        "tasks_seen": len(pids),
        "tree_cpu_seconds": ru.ru_utime + ru.ru_stime if ru else None,
        "cpu_seconds": sampler.cpu, "rss_kb": sampler.rss_kb,
        "hwm_kb": sampler.hwm_kb or sampler.rss_kb, "threads": sampler.threads, "fds": sampler.fds,
        "samples": sampler.samples,
    })
    return res


def bench_scale_local(cfg: Dict[str, Any], tmp: str, popen, done, tfcluster_argv: List[str],
                      log: Callable[[str], None]) -> Dict[str, Any]:
    ns: List[int] = list(cfg["scale_tasks"])
    reps: int = cfg["scale_reps"]
    hold: float = cfg["scale_hold"]
    every: float = cfg["scale_sample"]
    timeout = 120.0
    counter = [0]

    def variant(kind: str, n: int, stop: bool) -> Dict[str, Any]:
        counter[0] += 1
        tag = f"{kind}-{n}-{'stop' if stop else 'run'}-{counter[0]}"
        mark = os.path.join(tmp, "marks", tag)
        h = 0 if stop else hold
        if kind == "tfcluster":
            path = cluster_file(tmp, n, mark, h, tag)
            argv = tfcluster_argv + ["launch", path, "--no-live", "--stop-timeout=5", "--grace=0"]
        else:
            script = os.path.join(tmp, f"scale-{tag}.sh")
            with open(script, "w") as f:
                f.write(shell_script(n, mark, h))
            argv = ["bash", script]
        r = one_run(popen, done, argv, n, mark, stop, timeout, every)
        if r.get("error"):
            log(f"  scale {tag}: {r['error']}")
        return r

    # the launcher's fixed cost: one task
    base = [variant("tfcluster", 1, False) for _ in range(reps)]
    raw: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    for n in ns:
        log(f"  scale: {n} tasks, tfcluster launch vs a setsid shell script ({reps} pair(s) each of "
            f"a {hold:g} s run and a stop)")
        got: Dict[str, List[Dict[str, Any]]] = {"tfcluster.run": [], "script.run": [],
                                                "tfcluster.stop": [], "script.stop": []}
        for i in range(reps):
            order = ("tfcluster", "script") if i % 2 == 0 else ("script", "tfcluster")
            for stop in (False, True):
                for kind in order:
                    got[f"{kind}.{'stop' if stop else 'run'}"].append(variant(kind, n, stop))
        raw[str(n)] = got
    return summarize(ns, base, raw, hold)


def _med(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    xs = sorted(xs)
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def _r(x, k=4):
    return None if x is None else round(float(x), k)


def summarize(ns, base, raw, hold) -> Dict[str, Any]:
    ok_base = [b for b in base if not b.get("error")]

    def bmed(key):
        return _med([b[key] for b in ok_base])

    out: Dict[str, Any] = {
        "task": "sh -c 'echo $$ > mark; echo up; exec sleep HOLD' (no TensorFlow)",
        "hold_seconds": hold,
        "baseline": "bash script: each task started with setsid (its own session), TF_CONFIG and "
                    "TFCLUSTER_TASK set; wait; on SIGTERM kills every task's group",
        "one_task": {"cpu_seconds": _r(bmed("cpu_seconds"), 3), "hwm_kb": bmed("hwm_kb"),
                     "threads": bmed("threads"), "fds": bmed("fds"),
                     "wall_seconds": _r(bmed("wall_seconds"), 3)},
    }
    for n in ns:
        got = raw[str(n)]
        ok = {k: [x if not x.get("error") else None for x in v] for k, v in got.items()}

        def vals(k, key, ok=ok):
            return [None if x is None else x.get(key) for x in ok[k]]

        def pair_ratio(key, a, b):
            rs = [x / y for x, y in zip(vals(a, key), vals(b, key)) if x is not None and y]
            return rs

        wall_pairs = pair_ratio("wall_seconds", "tfcluster.run", "script.run")
        tf_runs = [x for x in ok["tfcluster.run"] + ok["tfcluster.stop"] if x is not None]
        hwm = _med([x["hwm_kb"] for x in tf_runs])
        thr = _med([x["threads"] for x in tf_runs])
        fds = _med([x["fds"] for x in tf_runs])
        cpu_run = _med(vals("tfcluster.run", "cpu_seconds"))
        tree_tf = _med(vals("tfcluster.run", "tree_cpu_seconds"))
        tree_sh = _med(vals("script.run", "tree_cpu_seconds"))

        def marginal(v, b, n=n):
            return None if v is None or b is None or n <= 1 else (v - b) / (n - 1)

        out[str(n)] = {
            "tasks": n,
            "launch_overhead_ratio": _r(_med(wall_pairs)),
            "pairwise_ratios": [_r(x) for x in wall_pairs],
            "wall_seconds": {"tfcluster": _r(_med(vals("tfcluster.run", "wall_seconds")), 3),
                             "script": _r(_med(vals("script.run", "wall_seconds")), 3)},
            "start_seconds": {"tfcluster": _r(_med(vals("tfcluster.run", "start_seconds")
                                                   + vals("tfcluster.stop", "start_seconds")), 3),
                              "script": _r(_med(vals("script.run", "start_seconds")
                                                + vals("script.stop", "start_seconds")), 3)},
            "stop_seconds": _r(_med(vals("tfcluster.stop", "stop_seconds")), 3),
            "stop_seconds_script": _r(_med(vals("script.stop", "stop_seconds")), 3),
            "stop_runs": [_r(x, 3) for x in vals("tfcluster.stop", "stop_seconds")],
            "run_end_to_gone_seconds": _r(_med(vals("tfcluster.run", "end_to_gone_seconds")), 3),
            "launcher_cpu_seconds": _r(cpu_run, 3),
            "cpu_ms_per_task": _r(None if cpu_run is None else 1000 * cpu_run / n, 3),
            "cpu_ms_per_task_marginal": _r(None if cpu_run is None else
                                           1000 * marginal(cpu_run, bmed("cpu_seconds")), 3),
            "tree_cpu_seconds": {"tfcluster": _r(tree_tf, 3), "script": _r(tree_sh, 3)},
            "launcher_peak_rss_kb": hwm,
            "rss_kb_per_task": _r(marginal(hwm, bmed("hwm_kb")), 1),
            "rss_kb_per_task_gross": _r(None if hwm is None else hwm / n, 1),
            "threads": thr,
            "threads_per_task": _r(marginal(thr, bmed("threads")), 3),
            "open_files": fds,
            "open_files_per_task": _r(marginal(fds, bmed("fds")), 3),
            "failed_runs": sum(1 for v in got.values() for x in v if x.get("error")),
            "errors": sorted({x["error"][:200] for v in got.values() for x in v if x.get("error")})[:3],
        }
    return out


def bench_start_patches(cfg: Dict[str, Any], tmp: str, popen, done, py: str,
                        log: Callable[[str], None]) -> Dict[str, Any]:
    """Experiment (``--only scalefix``): the launcher's start of N trivial tasks as it is, and
    with each proposed change of bench_programs/launch_patched.py, alternating; start_seconds,
    wall and the launcher's tree CPU per variant (medians)."""
    prog = os.path.join(HERE, "bench_programs", "launch_patched.py")
    n = max(cfg["scale_tasks"])
    hold = cfg["scale_hold"]
    patches = ["preexec", "none", "no_preexec"]
    base_src = cfg.get("scalefix_base") or ""
    if base_src:     # another tfcluster (a checkout's src/, e.g. before a change), alternating too
        patches.insert(0, "base")
    got: Dict[str, List[Dict[str, Any]]] = {k: [] for k in patches}
    log(f"  experiment: starting {n} tasks with each task start ({', '.join(patches)})")
    for i in range(max(2, cfg["scale_reps"])):
        for patch in (patches if i % 2 == 0 else patches[::-1]):
            tag = f"patch-{patch}-{i}"
            mark = os.path.join(tmp, "marks", tag)
            path = cluster_file(tmp, n, mark, hold, tag)
            argv = ([py, prog, patch] if patch != "base" else
                    ["env", f"PYTHONPATH={base_src}", py, "-m", "tfcluster"]) + ["launch", path, "--no-live"]
            r = one_run(popen, done, argv, n, mark, False, 120.0, cfg["scale_sample"])
            if r.get("error"):
                log(f"  {tag}: {r['error']}")
            got[patch].append(r)
    res: Dict[str, Any] = {"tasks": n, "hold_seconds": hold}
    for patch, runs in got.items():
        ok = [r for r in runs if not r.get("error")]
        res[patch] = {k: _r(_med([r[k] for r in ok]), 3)
                      for k in ("start_seconds", "wall_seconds", "cpu_seconds", "tree_cpu_seconds")}
        res[patch]["runs_start_seconds"] = [_r(r.get("start_seconds"), 3) for r in runs]
    return res
