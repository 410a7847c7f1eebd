#!/usr/bin/env python3
"""tfcluster benchmark: what tfcluster costs and gains against the alternatives, side by side.

    python scripts/benchmark.py --quick --json bench.json   # about 5 minutes on 2 cores
    python scripts/benchmark.py --json bench.json           # the full run (longer, more repeats)
    python scripts/benchmark.py --quick --tiny              # the test's setting (~1-2 minutes)

Every figure of issue 7, with its JSON key:

1. ``launch_overhead_ratio``: ``tfcluster launch`` running a fixed short 1 ps + 2 worker program
   (scripts/bench_programs/short_task.py) / the same processes started by a plain shell script.
2. ``first_step_ratio``: launch to the first training step of the last worker (trainer.py under
   tfcluster) / start to first step of one process alone (bench_programs/single_mlp.py, the same
   model). ``first_step_seconds.naive_mts``: a naive non-chief MonitoredTrainingSession (full).
3. ``shutdown_seconds.async`` / ``.sync``: the chief's last step to the launcher's exit.
4. ``throughput_ratio_vs_seed.async`` / ``.sync``: trainer.py's examples/s on 1 ps + 2 workers
   against a hand-written seed-style trainer of the same model (bench_programs/seed_mlp.py) on
   the same cluster; ``throughput`` has steps/s, examples/s and the scaling efficiency against
   one process alone.
5. ``ps_balance.round_robin`` / ``.greedy``: max/mean bytes per ps of a skewed model over 2 and
   4 ps (the runtime's Placement; greedy with partitioning); full mode adds the step time of
   each in a transfer-bound run (``ps_balance.step_seconds``).
6. ``transfer_fraction_of_loopback``: bytes/s through the ps in a transfer-bound model
   (bench_programs/transfer.py) / raw loopback TCP bandwidth (bench_programs/loopback.py).
7. ``scale``: 1 ps + 8 workers completes; launcher and per-task RSS; time to render a
   1,000-task cluster for k8s and Slurm, and to validate it.

And of issue 15:

8. ``compute_bound_efficiency.async`` / ``.sync``: examples/s of a small conv net
   (bench_programs/conv.py, tfcluster's runtime) on 1 ps + 2 workers under ``tfcluster launch``
   / examples/s of one process alone (``conv.py --single``) on the same cores.
9. ``first_step_floor``: the first-step ratio this machine allows: the CPU seconds of the 3
   tasks' ``import tensorflow`` over the cores, against one process's import (wall).
10. ``links`` (``--only links``; root, ``ip`` and ``tc`` needed, else skipped with one line):
   the cluster on network-namespace hosts whose links are shaped with ``tc tbf``
   (scripts/netns_links.py); step time of a transfer-bound model against the links' floor
   (bytes each way per global step / (ps hosts x rate)) for round robin, greedy and greedy +
   partitioning over 1, 2, 4 ps, async and sync, and greedy + partitioning with the runtime's
   ``PrefetchCache`` (async); ``links.scaling``: speed-up from 1 ps host; every row has the
   tasks' ``cpu_busy``, ``cpu_seconds_per_step`` (and the ps tasks' part) and the whole
   machine's ``machine_cpu_busy``. ``--set link_workers=N`` (workers on the worker host, 2)
   and ``--set 'link_args=[...]'`` (more links.py flags) try other levers.

And of issue 34:

13. ``data_service`` (``--only data_service``): an input-bound model (bench_programs/data_input.py:
   every example through an expensive ``map``, one dense layer) on one training worker, its
   input made in the worker (0 data workers) or by the cluster's tf.data service with 1 and 2
   data workers (``data_service:``); ``data_service.<n>``: examples/s after the warm-up, the CPU
   seconds of the whole run (launcher and every task) and per 1,000 examples.

And of issue 24:

11. ``peers`` (``--only peers``): one model, data and batch (bench_programs/peers.py) trained by
   tfcluster's runtime (1 ps + 2 workers, between-graph, async) and by TF2
   ParameterServerStrategy + ClusterCoordinator (custom loop; tf_keras fit) on the same cluster
   plus a coordinator: ``peers.runtime_over_pss_loop`` / ``.runtime_over_pss_fit`` (examples/s);
   the same MWMS program under ``tfcluster launch`` / started by a shell script:
   ``peers.mwms_launch_over_hand``; ``peers.first_step_seconds`` for each.
12. ``scale.local.<n>`` (``--only scale``; scripts/scale_local.py): ``tfcluster launch`` with n
   trivial tasks (no TensorFlow) vs a setsid shell script: ``launch_overhead_ratio``,
   ``rss_kb_per_task``, ``stop_seconds``, start to all running, the launcher's CPU, threads and
   open files; ``scale.ssh.<n>`` (scripts/scale_ssh.py): n trivial tasks on 3 ssh hosts in network
   namespaces (one node agent per host) against the same n here and a shell loop of
   ``ssh host cmd &``: ``start_over_local`` (goal <= 2), ``start_seconds``,
   ``local_start_seconds``, ``shell_loop_start_seconds``, ``stop_seconds``, the launcher's CPU.
   ``--only scalefix`` (an experiment): the task start as it is and with proposed changes.

And of issue 35:

13. ``embeddings`` (``--only embeddings``): a DLRM-style model with 256 MB of embedding tables
   (bench_programs/embeddings.py) on 2 ps + 2 workers, async: tfcluster's runtime (partitioned
   variables, greedy placement) vs TF2 ParameterServerStrategy with a variable_partitioner
   (ShardedVariable, custom loop): ``embeddings.runtime_over_pss`` (examples/s),
   ``embeddings.bytes_over_sparse_floor`` (bytes the cluster's TCP connections carried a step,
   from ``ss``, over the step's unique rows down and their gradients up), ``table_mb``; and the
   same on simulated hosts with 1 Gbit/s ps links (``embeddings.links.1gbit``; root, ip, tc).

And of issue 33:

14. ``ray`` (``--only ray``; scripts/bench_ray.py): MWMS Keras fit launched by ``tfcluster
   launch --backend ray`` vs Ray Train's ``TensorflowTrainer`` (same model, data, batch) on one
   Ray head started for it: ``ray.tfcluster_over_ray_train`` (examples/s), ``ray.first_step_seconds``
   for both; trainer.py on Ray vs a local launch: ``ray.over_local``.

And of issue 42:

15. ``elastic`` (``--only elastic``; scripts/bench_elastic.py; run only when named): one node of a
   two-node Ray on loopback lost mid-run under tfcluster (trainer.py async, ``elastic:
   {min_workers: 1}``) and under Ray Train's ``TensorflowTrainer`` with
   ``FailureConfig(max_failures=1)`` (MWMS, same MLP, data and batch): ``elastic.<system>.
   pause_seconds`` (the longest time with no training step after the loss), ``steps_redone``
   (restored from a checkpoint and trained again), ``seconds_to_target``, from step records the
   programs write; ``elastic.pause_over_ray_train``. Goal: tfcluster's pause <= 1 s, 0 steps redone.

And of issue 50:

16. ``sizing`` (``--only sizing``; scripts/bench_sizing.py; run only when named): a run sized by
   throughput (``elastic: {max_workers: M, scale: throughput}``, starting from 1 worker) against
   every fixed worker count 1..M, time to the same target step, the runs alternated (the sized one
   in the middle of the fixed counts, reversed each second repetition). ``sizing.cpu``: trainer.py
   on this machine (M 3), where the CPU bounds the rate: ``time_over_best_fixed`` (goal <= 1.1),
   ``settled_workers`` (goal: at most the best fixed count + 1). ``sizing.links``: links.py with
   each worker on its own rate-limited link and the ps on a faster one (network namespaces, tc;
   ``tfcluster launch`` starts the tasks; M 6): ``time_over_best_fixed`` (goal <= 1.15),
   ``speedup_over_start`` (goal >= 1.5), ``settled_workers`` (goal: within 1 of
   ``best_fixed_workers``). ``--quick``/``--tiny``: every run once and short (M 3 on links), a
   check that it works, not a measurement.

Compared variants alternate within one run and figures are medians of pairwise ratios (this
machine is noisy). Every cluster uses free ports (bound to port 0 first); every process is
started in its own process group and killed at the end, on error and on Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROGRAMS = os.path.join(HERE, "bench_programs")
TRAINER = os.path.join(ROOT, "trainer.py")
PY = sys.executable
sys.path.insert(0, os.path.join(ROOT, "src"))  # run from a checkout without installing too
# ... and so does every process it starts (launcher, tasks): this checkout's tfcluster first
os.environ["PYTHONPATH"] = os.pathsep.join(
    [os.path.join(ROOT, "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
from tfcluster.backends.base import stop_group  # noqa: E402
from tfcluster.net.ports import free_ports  # noqa: E402

CPU_BOUND = 0.8  # a links cell whose tasks use this share of the cores is CPU-bound (issue 24)
BATCH = 64  # trainer.py's default --batch_size, and bench_programs/mlp.py's

SETTINGS: Dict[str, Dict[str, Any]] = {
    # the test's setting: every figure once, small
    "tiny": dict(emb_link_rates=[1e9], emb_rows=100000, emb_dim=64, emb_batch=1024, emb_warmup=1.0, emb_secs=1.5, emb_reps=1,
                 peers_steps=150, peers_epoch=50, peers_mwms_steps=60, peers_mwms_epoch=20, peers_reps=1,
                 peers_variants=["runtime", "pss_loop", "pss_fit", "mwms_tfcluster", "mwms_hand"],
                 reps=1, launch_reps=1, async_steps=400, sync_steps=150, single_steps=1000,
                 transfer_mb=4.0, transfer_secs=1.0, transfer_reps=1, loopback_secs=0.5,
                 scale_workers=2, balance_step_time=False, naive=False, run_timeout=240,
                 cb_reps=1, cb_async_steps=50, cb_sync_steps=25, cb_single_steps=20,
                 link_rates=[1e9], link_ps=[1, 2], link_modes=["async"], link_reps=1, link_secs=1.0,
                 link_mb=4.0, link_placements=["greedy_partitioned", "greedy_partitioned_prefetch"],
                 link_workers=2, link_args=[],
                 scale_tasks=[16, 64], scale_reps=1, scale_hold=1.0, scale_sample=0.1,
                 scale_ssh_totals=[12], scalefix_base="",
                 elastic_steps=3000, elastic_kill_at=1000, elastic_ckpt_steps=400, elastic_window=120.0),
    "quick": dict(emb_link_rates=[1e9], emb_rows=250000, emb_dim=64, emb_batch=1024, emb_warmup=3.0, emb_secs=6.0, emb_reps=2,
                 peers_steps=600, peers_epoch=100, peers_mwms_steps=480, peers_mwms_epoch=80, peers_reps=2,
                 peers_variants=["runtime", "pss_loop", "pss_fit", "mwms_tfcluster", "mwms_hand"],
                 reps=2, launch_reps=2, async_steps=2000, sync_steps=700, single_steps=6000,
                  transfer_mb=16.0, transfer_secs=2.0, transfer_reps=2, loopback_secs=1.0,
                  scale_workers=8, balance_step_time=False, naive=False, run_timeout=300,
                  cb_reps=2, cb_async_steps=200, cb_sync_steps=100, cb_single_steps=80,
                  link_rates=[1e9], link_ps=[1, 2, 4], link_modes=["async"], link_reps=1,
                  link_secs=1.5, link_mb=8.0,
                  link_placements=["round_robin", "greedy", "greedy_partitioned",
                                   "greedy_partitioned_prefetch"],
                  link_workers=2, link_args=[],
                  scale_tasks=[64, 256, 512], scale_reps=1, scale_hold=2.0, scale_sample=0.1,
                  scale_ssh_totals=[96, 384], scalefix_base="",
                  elastic_steps=6000, elastic_kill_at=2200, elastic_ckpt_steps=400, elastic_window=120.0),
    "full": dict(emb_link_rates=[1e9], emb_rows=250000, emb_dim=64, emb_batch=1024, emb_warmup=5.0, emb_secs=12.0, emb_reps=3,
                 peers_steps=1500, peers_epoch=150, peers_mwms_steps=800, peers_mwms_epoch=100, peers_reps=3,
                 peers_variants=["runtime", "pss_loop", "pss_fit", "mwms_tfcluster", "mwms_hand"],
                 reps=5, launch_reps=5, async_steps=4000, sync_steps=1500, single_steps=12000,
                 transfer_mb=32.0, transfer_secs=4.0, transfer_reps=4, loopback_secs=2.0,
                 scale_workers=8, balance_step_time=True, naive=True, run_timeout=420,
                 cb_reps=4, cb_async_steps=600, cb_sync_steps=300, cb_single_steps=200,
                 link_rates=[1e9, 1e10], link_ps=[1, 2, 4], link_modes=["async", "sync"], link_reps=2,
                 link_secs=2.5, link_mb=8.0,
                 link_placements=["round_robin", "greedy", "greedy_partitioned",
                                   "greedy_partitioned_prefetch"],
                  link_workers=2, link_args=[],
                 scale_tasks=[64, 256, 512], scale_reps=3, scale_hold=3.0, scale_sample=0.1,
                 scale_ssh_totals=[96, 384], scalefix_base="",
                 elastic_steps=12000, elastic_kill_at=4200, elastic_ckpt_steps=400, elastic_window=120.0),
}

# issue 50's sizing figures (scripts/bench_sizing.py), the same in every mode: run only when named
for _mode in SETTINGS.values():
    _mode.update(sizing_cases=["cpu", "links"], sizing_steps=8000, sizing_max_workers=3, sizing_cpu_reps=2,
                 sizing_window=4.0, sizing_every=5.0, sizing_gain=0.5,
                 sizing_links_max_workers=6, sizing_links_steps=350, sizing_links_reps=1,
                 sizing_links_worker_mbit=40.0, sizing_links_ps_mbit=100.0, sizing_links_mb=1.0,
                 sizing_links_window=3.0, sizing_links_every=4.0, sizing_links_gain=0.5,
                 sizing_links_timeout=600.0)
# --quick and --tiny: every sizing run once, short (a check that it works, not a measurement)
for _mode in (SETTINGS["quick"], SETTINGS["tiny"]):
    _mode.update(sizing_steps=1500, sizing_cpu_reps=1, sizing_links_max_workers=3, sizing_links_steps=120)

GOALS = {
    "launch_overhead_ratio": ("<=", 1.03),
    "first_step_ratio": ("<=", 1.2),
    "shutdown_seconds.async": ("<=", 1.0),
    "shutdown_seconds.sync": ("<=", 1.0),
    "throughput_ratio_vs_seed.async": (">=", 1.0),
    "throughput_ratio_vs_seed.sync": (">=", 1.0),
    "ps_balance.greedy": ("<=", 1.05),
    "compute_bound_efficiency.async": (">=", 0.85),
    "compute_bound_efficiency.sync": (">=", 0.85),
    "peers.runtime_over_pss_loop": (">=", 1.0),
    "peers.runtime_over_pss_fit": (">=", 1.0),
    "peers.mwms_launch_over_hand": (">=", 0.98),
    "embeddings.runtime_over_pss": (">=", 1.2),
    "embeddings.bytes_over_sparse_floor": ("<=", 1.3),
    "embeddings.table_mb": (">=", 100.0),
    "embeddings.links.1gbit.runtime_over_pss": (">=", 1.2),
    "embeddings.links.1gbit.bytes_over_sparse_floor": ("<=", 1.3),
    "ray.tfcluster_over_ray_train": (">=", 1.0),
}
# issue 50's sizing goals (scripts/bench_sizing.py), under the benchmark's "sizing"
SIZING_GOALS = {"cpu.time_over_best_fixed": ("<=", 1.1), "links.time_over_best_fixed": ("<=", 1.15),
                "links.speedup_over_start": (">=", 1.5)}
SSH_START_OVER_LOCAL = 2.0    # scale.ssh.<n>: all running over 3 ssh hosts / the same tasks here
SCALE_GOALS = {"launch_overhead_ratio": ("<=", 1.2), "rss_kb_per_task": ("<=", 512.0),
               "stop_seconds": ("<=", 2.0)}

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
PROGRESS = re.compile(r"^\[(?P<task>[a-z]+:\d+)\]\s+@tfcluster progress (?P<json>\{.*\})\s*$")
BARE_PROGRESS = re.compile(r"^@tfcluster progress (?P<json>\{.*\})\s*$")
BENCH = re.compile(r"@bench (?P<json>\{.*\})\s*$")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(xs: Sequence[Optional[float]]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return float(statistics.median(xs)) if xs else None


def ratios(a: Sequence[Optional[float]], b: Sequence[Optional[float]]) -> List[float]:
    return [x / y for x, y in zip(a, b) if x is not None and y]


def rnd(x: Optional[float], n: int = 4) -> Optional[float]:
    return None if x is None else round(float(x), n)


# --------------------------------------------------------------------------------------
# processes: each in its own process group, all killed at the end

class Procs:
    """Every process group this benchmark started; :meth:`kill_all` ends them."""

    def __init__(self) -> None:
        self.groups: Dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()

    def popen(self, argv: Sequence[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(list(argv), start_new_session=True, **kw)
        with self.lock:
            self.groups[p.pid] = p
        return p

    def kill(self, p: subprocess.Popen, grace: float = 3.0) -> None:
        # descendants that left the group (setsid) are found by parentage while the leader lives
        try:
            import psutil

            stray = psutil.Process(p.pid).children(recursive=True)
        except Exception:  # gone already
            stray = []
        stop_group(p, grace, kill_wait=5.0)
        for c in stray:
            try:
                os.killpg(c.pid, signal.SIGKILL) if os.getpgid(c.pid) == c.pid else c.kill()
            except Exception:
                pass

    def done(self, p: subprocess.Popen) -> None:
        """The leader has exited: kill what is left of its group and forget it."""
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        with self.lock:
            self.groups.pop(p.pid, None)

    def kill_all(self) -> None:
        with self.lock:
            procs = list(self.groups.values())
            self.groups.clear()
        for p in procs:
            self.kill(p, grace=1.0)


PROCS = Procs()


class Result:
    def __init__(self, name: str):
        self.name = name
        self.start = 0.0
        self.end = 0.0
        self.rc: Optional[int] = None
        self.timed_out = False
        self.lines: List[Tuple[float, str]] = []
        self.samples: List[Dict[str, Any]] = []

    @property
    def wall(self) -> float:
        return self.end - self.start

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def tail(self, n: int = 15) -> str:
        return "\n".join(line for _, line in self.lines[-n:])

    def progress(self) -> List[Tuple[float, str, Dict[str, Any]]]:
        out = []
        for t, line in self.lines:
            m = PROGRESS.match(line)
            if m:
                out.append((t, m.group("task"), json.loads(m.group("json"))))
                continue
            m = BARE_PROGRESS.match(line)
            if m:
                out.append((t, "single:0", json.loads(m.group("json"))))
        return out

    def bench(self) -> Optional[Dict[str, Any]]:
        for _, line in self.lines:
            m = BENCH.search(line)
            if m:
                return json.loads(m.group("json"))
        return None


def run(name: str, argv: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None, sample: Optional[Callable[[int], Dict[str, Any]]] = None,
        sample_every: float = 0.25) -> Result:
    """Run argv in its own process group; stamp every output line; kill it all at the end."""
    r = Result(name)
    full_env = dict(os.environ)
    full_env.update({"PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
    full_env.update(env or {})
    r.start = time.monotonic()
    p = PROCS.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=full_env, cwd=cwd)

    def reader() -> None:
        for raw in iter(p.stdout.readline, b""):
            r.lines.append((time.monotonic(), ANSI.sub("", raw.decode("utf-8", "replace").rstrip())))

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    deadline = r.start + timeout
    next_sample = r.start
    try:
        while True:
            rc = p.poll()
            if rc is not None:
                r.end = time.monotonic()
                r.rc = rc
                break
            now = time.monotonic()
            if now > deadline:
                r.timed_out = True
                r.end = now
                PROCS.kill(p)
                r.rc = p.returncode
                break
            if sample is not None and now >= next_sample:
                try:
                    r.samples.append(sample(p.pid))
                except Exception:  # a process went away between calls
                    pass
                next_sample = now + sample_every
            time.sleep(0.005)
    finally:
        if p.poll() is None:  # interrupted (Ctrl-C) or an error: the whole tree goes
            PROCS.kill(p, grace=1.0)
        PROCS.done(p)
        th.join(5.0)
        try:
            p.stdout.close()
        except OSError:
            pass
    if not r.ok:
        log(f"{name}: {'timed out' if r.timed_out else f'exit {r.rc}'}; last lines:\n{r.tail()}")
    return r


# --------------------------------------------------------------------------------------
# clusters on free ports

def cluster_file(tmp: str, num_ps: int, num_workers: int, tag: str) -> Tuple[str, Dict[str, List[str]]]:
    ports = free_ports(num_ps + num_workers)
    cluster = {"ps": [f"localhost:{p}" for p in ports[:num_ps]],
               "worker": [f"localhost:{p}" for p in ports[num_ps:]]}
    path = os.path.join(tmp, f"{tag}.yaml")
    with open(path, "w") as f:
        json.dump({"cluster": cluster, "program": {"command": ["python", TRAINER]},
                   "logdir": os.path.join(tmp, "runs")}, f)  # JSON is YAML
    return path, cluster


def tfcluster_argv() -> List[str]:
    """This checkout's launcher, with the interpreter the shell baselines use. Not the
    ``tfcluster`` on PATH: that is whatever checkout was installed last (an editable install of
    another worktree fails or measures other code), and it may be a wrapper that picks an
    interpreter first (a pyenv shim: ~0.1 s a call here, which the baselines do not pay)."""
    return [PY, "-m", "tfcluster"]


def launch(name: str, tmp: str, num_ps: int, num_workers: int, command: Sequence[str],
           extra: Sequence[str] = (), timeout: float = 300, **kw) -> Result:
    """``tfcluster launch`` of a fresh cluster file on free ports (one retry on a port race)."""
    for attempt in range(2):
        path, _ = cluster_file(tmp, num_ps, num_workers, f"{name}-{attempt}")
        argv = tfcluster_argv() + ["launch", path, "--no-live", "--echo-progress", "--logdir", os.path.join(tmp, "runs"),
                                   *extra, "--", *command]
        r = run(name, argv, timeout, **kw)
        if r.rc != 2 or "in use" not in r.tail(40):
            return r
    return r


# --------------------------------------------------------------------------------------
# analysis of a training run's progress lines

def first_step_seconds(r: Result, workers: int) -> Optional[float]:
    """Start to the first progress line of the last worker to report one."""
    first: Dict[str, float] = {}
    for t, task, _ in r.progress():
        first.setdefault(task, t)
    if len(first) < workers:
        return None
    return max(first.values()) - r.start


def steps_per_second(r: Result, workers: int) -> Optional[float]:
    """Global steps/s while every worker trains: from the first report of the last worker to
    start, to the last report before the target step."""
    pts = r.progress()
    first: Dict[str, float] = {}
    for t, task, _ in pts:
        first.setdefault(task, t)
    if len(first) < workers:
        return None
    t_begin = max(first.values())
    window = [(t, p["step"]) for t, _, p in pts
              if t >= t_begin and p.get("total") and p["step"] < p["total"]]
    if len(window) < 2:  # the last worker started near the end: fall back to the whole run
        log(f"{r.name}: fewer than 2 progress reports with every worker training; using all")
        window = [(t, p["step"]) for t, _, p in pts if p.get("total") and p["step"] < p["total"]]
    if len(window) < 2:
        return None
    (t0, s0), (t1, s1) = window[0], window[-1]
    return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None


def shutdown_seconds(r: Result, chief: str = "worker:0") -> Optional[float]:
    last = [t for t, task, _ in r.progress() if task == chief]
    if not last or not r.ok:
        return None
    return r.end - last[-1]


# --------------------------------------------------------------------------------------
# the figures

def bench_launch_overhead(cfg, tmp, out, notes) -> None:
    log("launch overhead: tfcluster launch vs a plain shell script (1 ps + 2 workers)")
    prog = [PY, os.path.join(PROGRAMS, "short_task.py"), "--steps=20"]
    walls: Dict[str, List[Optional[float]]] = {"tfcluster": [], "shell_setsid": [], "shell": []}
    names = list(walls)
    for i in range(cfg["launch_reps"]):
        for variant in (names if i % 2 == 0 else names[::-1]):
            if variant == "tfcluster":
                r = launch("launch-tfcluster", tmp, 1, 2, prog, timeout=cfg["run_timeout"])
            else:
                _, cluster = cluster_file(tmp, 1, 2, "launch-shell")
                script = os.path.join(tmp, f"start-{variant}.sh")
                with open(script, "w") as f:
                    f.write(shell_script(cluster, prog, setsid=variant == "shell_setsid"))
                r = run(f"launch-{variant}", ["bash", script], cfg["run_timeout"])
            walls[variant].append(r.wall if r.ok else None)
    pair = ratios(walls["tfcluster"], walls["shell_setsid"])
    plain = ratios(walls["tfcluster"], walls["shell"])
    out["launch_overhead_ratio"] = rnd(median(pair))
    out["launch_overhead"] = {
        "baseline": "shell script starting each task with setsid (its own session, as tfcluster does)",
        **{f"{k}_seconds": [rnd(x, 3) for x in v] for k, v in walls.items()},
        **{f"median_{k}_seconds": rnd(median(v), 3) for k, v in walls.items()},
        "pairwise_ratios": [rnd(x) for x in pair],
        "ratio_vs_plain_shell": rnd(median(plain)),
    }
    if not pair:
        notes.append("launch overhead: no successful pair of runs")
    notes.append("launch_overhead: vs a plain '&' shell script (all tasks in one session, so one "
                 "CFS autogroup) the ratio is launch_overhead.ratio_vs_plain_shell; on a loaded "
                 "machine tfcluster's one-session-per-task gets more CPU share and wins")


def shell_script(cluster: Dict[str, List[str]], prog: Sequence[str], setsid: bool = False) -> str:
    """What a user writes without tfcluster: every task in the background with its
    TF_CONFIG, wait for the workers, kill the ps."""
    lines = ["#!/bin/bash", "set -u"]
    pre = "setsid " if setsid else ""
    for job in ("ps", "worker"):
        for i in range(len(cluster[job])):
            tfc = json.dumps({"cluster": cluster, "task": {"type": job, "index": i}})
            lines.append(f"TF_CONFIG={shlex.quote(tfc)} {pre}{' '.join(shlex.quote(a) for a in prog)} &")
            lines.append(f"{job.upper()}{i}=$!")
    waits = " ".join(f"$WORKER{i}" for i in range(len(cluster["worker"])))
    lines.append(f"wait {waits}")
    lines.append(" ".join(f"kill $PS{i};" for i in range(len(cluster["ps"]))))
    lines.append("wait")
    return "\n".join(lines) + "\n"


def import_cost() -> Optional[Tuple[float, float]]:
    """(wall seconds, CPU seconds user+sys) of ``import tensorflow`` in a fresh process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    t0 = time.monotonic()
    p = PROCS.popen([PY, "-c", "import tensorflow"], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, env=env)
    try:
        _, status, ru = os.wait4(p.pid, 0)
    finally:
        p.returncode = 0
        PROCS.done(p)
    wall = time.monotonic() - t0
    return (wall, ru.ru_utime + ru.ru_stime) if os.waitstatus_to_exitcode(status) == 0 else None


def first_step_floor(imports: Sequence[Optional[Tuple[float, float]]], tasks: int,
                     cores: int) -> Dict[str, Any]:
    """The first-step ratio this machine allows: the tasks' imports share the cores (their
    CPU seconds / cores), against one process's import (its wall time)."""
    ok = [x for x in imports if x]
    wall = median([w for w, _ in ok])
    cpu = median([c for _, c in ok])
    floor = None if not wall else max(wall, tasks * cpu / cores) / wall
    return {"floor": rnd(floor), "tasks": tasks, "cores": cores,
            "import_wall_seconds": rnd(wall, 3), "import_cpu_seconds": rnd(cpu, 3),
            "runs": [[rnd(w, 3), rnd(c, 3)] for w, c in ok]}


def bench_training(cfg, tmp, out, notes) -> None:
    """first step, shutdown, throughput: trainer.py (async, sync) vs the seed-style trainer
    (async, sync) on 1 ps + 2 workers under tfcluster launch, and one process alone."""
    log("training: trainer.py vs seed-style trainer vs one process (first step, shutdown, "
        "throughput)")
    seed = os.path.join(PROGRAMS, "seed_mlp.py")
    variants = {
        "trainer_async": lambda: launch(
            "trainer-async", tmp, 1, 2, [PY, TRAINER, "--mode=async", f"--train_steps={cfg['async_steps']}",
                                         "--progress_secs=0.25", "--print_placement=false"],
            timeout=cfg["run_timeout"]),
        "trainer_sync": lambda: launch(
            "trainer-sync", tmp, 1, 2, [PY, TRAINER, "--mode=sync", f"--train_steps={cfg['sync_steps']}",
                                        "--progress_secs=0.25", "--print_placement=false"],
            timeout=cfg["run_timeout"]),
        "seed_async": lambda: launch(
            "seed-async", tmp, 1, 2, [PY, seed, "--mode=async", f"--train_steps={cfg['async_steps']}",
                                      f"--logdir={tempfile.mkdtemp(dir=tmp)}"],
            extra=["--task-flags", "--grace=1"], timeout=cfg["run_timeout"]),
        "seed_sync": lambda: launch(
            "seed-sync", tmp, 1, 2, [PY, seed, "--mode=sync", f"--train_steps={cfg['sync_steps']}",
                                     f"--logdir={tempfile.mkdtemp(dir=tmp)}"],
            extra=["--task-flags", "--grace=1"], timeout=cfg["run_timeout"]),
        "single": lambda: run(
            "single", [PY, os.path.join(PROGRAMS, "single_mlp.py"), str(cfg["single_steps"]), "0.25"],
            cfg["run_timeout"]),
    }
    names = list(variants)
    res: Dict[str, List[Result]] = {n: [] for n in names}
    imports: List[Optional[Tuple[float, float]]] = []
    for i in range(cfg["reps"]):
        order = names if i % 2 == 0 else names[::-1]
        for n in order:
            log(f"  rep {i + 1}/{cfg['reps']}: {n}")
            res[n].append(variants[n]())
        imports.append(import_cost())

    def per(name, fn):
        return [fn(r) if r.ok else None for r in res[name]]

    rate = {n: per(n, lambda r, n=n: steps_per_second(r, 2)) for n in names if n != "single"}
    rate["single"] = per("single", lambda r: (r.bench() or {}).get("steps_per_s"))
    first = {n: per(n, lambda r, n=n: first_step_seconds(r, 1 if n == "single" else 2)) for n in names}
    # examples per global step: async one worker's batch; sync replicas_to_aggregate (2) batches
    per_step = {"trainer_async": BATCH, "seed_async": BATCH, "trainer_sync": 2 * BATCH,
                "seed_sync": 2 * BATCH, "single": BATCH}
    examples = {n: [None if x is None else x * per_step[n] for x in rate[n]] for n in names}

    out["first_step_ratio"] = rnd(median(ratios(first["trainer_async"], first["single"])))
    fl = first_step_floor(imports, 3, machine_info()["nproc"] or 1)
    if out["first_step_ratio"] and fl["floor"]:
        fl["ratio_over_floor"] = rnd(out["first_step_ratio"] / fl["floor"])
    out["first_step_floor"] = fl
    out["first_step_seconds"] = {
        "tfcluster": rnd(median(first["trainer_async"]), 3),
        "tfcluster_sync": rnd(median(first["trainer_sync"]), 3),
        "seed_style": rnd(median(first["seed_async"]), 3),
        "single_process": rnd(median(first["single"]), 3),
        "naive_mts": None,
    }
    out["shutdown_seconds"] = {
        "async": rnd(median(per("trainer_async", shutdown_seconds)), 3),
        "sync": rnd(median(per("trainer_sync", shutdown_seconds)), 3),
        "runs": {m: [rnd(x, 3) for x in per(f"trainer_{m}", shutdown_seconds)] for m in ("async", "sync")},
    }
    out["first_step_seconds"]["runs"] = {n: [rnd(x, 3) for x in first[n]] for n in names}
    out["throughput_ratio_vs_seed"] = {
        "async": rnd(median(ratios(examples["trainer_async"], examples["seed_async"]))),
        "sync": rnd(median(ratios(examples["trainer_sync"], examples["seed_sync"]))),
    }
    thr: Dict[str, Any] = {"batch_per_worker": BATCH, "workers": 2, "ps": 1}
    for n in names:
        thr[n] = {"steps_per_s": rnd(median(rate[n]), 2), "examples_per_s": rnd(median(examples[n]), 1),
                  "runs_examples_per_s": [rnd(x, 1) for x in examples[n]]}
    thr["speedup_vs_single"] = {
        "async": rnd(median(ratios(examples["trainer_async"], examples["single"]))),
        "sync": rnd(median(ratios(examples["trainer_sync"], examples["single"])))}
    thr["scaling_efficiency"] = {k: rnd(v / 2) if v is not None else None
                                 for k, v in thr["speedup_vs_single"].items()}
    out["throughput"] = thr
    for n in names:
        bad = [r for r in res[n] if not r.ok]
        if bad:
            notes.append(f"{n}: {len(bad)} of {len(res[n])} run(s) failed (exit {bad[0].rc})")

    if cfg["naive"]:
        log("  naive non-chief MonitoredTrainingSession (first step)")
        r = launch("naive-mts", tmp, 1, 2, [PY, seed, "--session=mts", "--train_steps=200"],
                   extra=["--task-flags", "--grace=1"], timeout=cfg["run_timeout"])
        out["first_step_seconds"]["naive_mts"] = rnd(first_step_seconds(r, 2), 3) if r.ok else None
    else:
        notes.append("first_step_seconds.naive_mts: measured in the full run only (it waits ~30 s)")


def bench_compute_bound(cfg, tmp, out, notes) -> None:
    """compute_bound_efficiency: examples/s of a small conv net (bench_programs/conv.py) on 1 ps
    + 2 workers under tfcluster launch / examples/s of one process alone on the same cores."""
    log("compute-bound: conv net, 1 ps + 2 workers (async, sync) vs one process alone")
    conv = os.path.join(PROGRAMS, "conv.py")
    batch = 128  # conv.py's BATCH
    variants = {
        "single": lambda: run("conv-single", [PY, conv, "--single", f"--steps={cfg['cb_single_steps']}"],
                              cfg["run_timeout"]),
        "async": lambda: launch("conv-async", tmp, 1, 2, [PY, conv, "--mode=async",
                                                          f"--steps={cfg['cb_async_steps']}"],
                                timeout=cfg["run_timeout"]),
        "sync": lambda: launch("conv-sync", tmp, 1, 2, [PY, conv, "--mode=sync",
                                                        f"--steps={cfg['cb_sync_steps']}"],
                               timeout=cfg["run_timeout"]),
    }
    names = list(variants)
    ex: Dict[str, List[Optional[float]]] = {n: [] for n in names}
    single_cpu: List[Optional[float]] = []
    for i in range(cfg["cb_reps"]):
        for n in (names if i % 2 == 0 else names[::-1]):
            r = variants[n]()
            if n == "single":
                b = r.bench() if r.ok else None
                ex[n].append(b["examples_per_s"] if b else None)
                single_cpu.append(b.get("cpu_seconds_per_step") if b else None)
            else:
                sps = steps_per_second(r, 2) if r.ok else None
                ex[n].append(None if sps is None else sps * batch * (2 if n == "sync" else 1))
    out["compute_bound_efficiency"] = {m: rnd(median(ratios(ex[m], ex["single"]))) for m in ("async", "sync")}
    single_step = median([None if x is None else batch / x for x in ex["single"]])
    out["compute_bound"] = {
        "model": "conv net 32x32x3 -> conv3x3 32, 64/2, 64/2 -> mean -> 10 (56k parameters), batch 128",
        "ps": 1, "workers": 2, "batch_per_worker": batch,
        "single_step_seconds": rnd(single_step, 4),
        "single_cpu_seconds_per_step": rnd(median(single_cpu), 4),
        **{f"{n}_examples_per_s": rnd(median(v), 1) for n, v in ex.items()},
        "runs_examples_per_s": {n: [rnd(x, 1) for x in v] for n, v in ex.items()},
    }
    if single_step is not None and single_step < 0.02:
        notes.append(f"compute_bound: one process took {single_step * 1000:.0f} ms a step (< 20 ms)")


def bench_links(cfg, tmp, out, notes) -> None:
    """Simulated network links (scripts/netns_links.py): step time vs the links' floor."""
    import netns_links

    netns_links.bench_links(cfg, tmp, out, notes, log)
    for row in (out.get("links") or {}).get("rows", []):   # issue 24: not held to the link goal
        busy = row.get("cpu_busy")
        row["cpu_bound"] = busy is not None and busy >= CPU_BOUND


def bench_transfer(cfg, tmp, out, notes) -> None:
    log("transfer: transfer-bound model through the ps vs raw loopback TCP")
    prog = [PY, os.path.join(PROGRAMS, "transfer.py"), "--model=flat", f"--mb={cfg['transfer_mb']}",
            f"--seconds={cfg['transfer_secs']}"]
    ps_bps, lo_bps, step_s = [], [], []
    for i in range(cfg["transfer_reps"]):
        for variant in (("tf", "loop") if i % 2 == 0 else ("loop", "tf")):
            if variant == "tf":
                r = launch("transfer", tmp, 1, 1, prog, timeout=cfg["run_timeout"])
                b = r.bench() if r.ok else None
                if b:
                    st = median(b["step_seconds"])
                    step_s.append(st)
                    ps_bps.append(b["bytes_per_step"] / st)
                else:
                    ps_bps.append(None)
            else:
                r = run("loopback", [PY, os.path.join(PROGRAMS, "loopback.py"), str(cfg["loopback_secs"])],
                        60)
                lo_bps.append(json.loads(r.lines[-1][1])["bytes_per_s"] if r.ok else None)
    out["transfer_fraction_of_loopback"] = rnd(median(ratios(ps_bps, lo_bps)))
    out["transfer"] = {"model_mb": cfg["transfer_mb"], "ps": 1, "workers": 1,
                       "bytes_per_step": int(2 * cfg["transfer_mb"] * 2**20),
                       "step_seconds": rnd(median(step_s), 4),
                       "ps_bytes_per_s": rnd(median(ps_bps), 0),
                       "loopback_bytes_per_s": rnd(median(lo_bps), 0)}


def bench_ps_balance(cfg, tmp, out, notes) -> None:
    log("ps balance: skewed model over 2 and 4 ps (round_robin, greedy, greedy + partitioning)")
    mb, pmin = 16.0, 2**20
    r = run("placement", [PY, os.path.join(PROGRAMS, "placement_balance.py"), str(mb), "2,4", str(pmin)],
            cfg["run_timeout"])
    bal = json.loads(r.lines[-1][1]) if r.ok else {}
    pb: Dict[str, Any] = {}
    for k in ("round_robin", "greedy", "greedy_unpartitioned"):
        pb[k] = {n: rnd(v["max_mean"]) for n, v in bal.get(k, {}).items()} or None
    pb["model"] = {"embedding_mb": mb, "small_layers": 5, "partition_min_bytes": pmin,
                   "optimizer": "Adam (slots placed with their variables)"}
    pb["bytes_per_ps"] = {k: {n: v["bytes_per_ps"] for n, v in d.items()} for k, d in bal.items()}
    pb["step_seconds"] = None
    if cfg["balance_step_time"]:
        log("  step time of each placement, transfer-bound (2 ps + 1 worker)")
        variants = {"round_robin": ["--ps_strategy=round_robin"],
                    "greedy_unpartitioned": ["--ps_strategy=greedy"],
                    "greedy": ["--ps_strategy=greedy", f"--partition_min_bytes={pmin}"]}
        times: Dict[str, List[Optional[float]]] = {k: [] for k in variants}
        names = list(variants)
        for i in range(max(2, cfg["transfer_reps"] // 2)):
            for k in (names if i % 2 == 0 else names[::-1]):
                rr = launch(f"balance-{k}", tmp, 2, 1,
                            [PY, os.path.join(PROGRAMS, "transfer.py"), "--model=skewed",
                             f"--mb={mb}", f"--seconds={cfg['transfer_secs']}", *variants[k]],
                            timeout=cfg["run_timeout"])
                b = rr.bench() if rr.ok else None
                times[k].append(median(b["step_seconds"]) if b else None)
        pb["step_seconds"] = {"2": {k: rnd(median(v), 4) for k, v in times.items()}}
    else:
        notes.append("ps_balance.step_seconds: measured in the full run only")
    out["ps_balance"] = pb


def rss_sampler(pid: int) -> Dict[str, Any]:
    import psutil

    me = psutil.Process(pid)
    tasks = {}
    for child in me.children(recursive=False):
        try:
            if "TFCLUSTER_TASK" not in child.environ():
                continue    # the launcher's reaper, not a task
            total = child.memory_info().rss
            for g in child.children(recursive=True):
                try:
                    total += g.memory_info().rss
                except psutil.Error:
                    pass
            tasks[child.pid] = total
        except psutil.Error:
            pass
    return {"launcher": me.memory_info().rss, "tasks": tasks}


def bench_scale(cfg, tmp, out, notes) -> None:
    import scale_local

    log(f"scale: the launcher supervising {', '.join(map(str, cfg['scale_tasks']))} trivial tasks "
        "(no TensorFlow) vs a setsid shell script")
    sc: Dict[str, Any] = {"local": scale_local.bench_scale_local(
        cfg, tmp, PROCS.popen, PROCS.done, tfcluster_argv(), log)}
    for n in cfg["scale_tasks"]:
        loc = sc["local"][str(n)]
        if loc["failed_runs"]:
            notes.append(f"scale.local.{n}: {loc['failed_runs']} run(s) failed: {loc['errors'][0]}")
    out["scale"] = sc
    bench_scale_ssh(cfg, tmp, out, notes)
    bench_scale_tf(cfg, tmp, out, notes)


def bench_scale_ssh(cfg, tmp, out, notes) -> None:
    import scale_ssh

    log(f"scale: 3 ssh hosts (network namespaces), {cfg['scale_ssh_totals']} trivial tasks in all")
    ssh = out["scale"]["ssh"] = scale_ssh.bench_scale_ssh(cfg, tmp, PROCS.popen, PROCS.done,
                                                          tfcluster_argv(), log)
    if ssh.get("skipped"):
        notes.append(f"scale.ssh: skipped: {ssh['skipped']}")
    for n, one in ssh.items():
        if n.isdigit() and one.get("failed_runs"):
            notes.append(f"scale.ssh.{n}: {one['failed_runs']} run(s) failed: {one['errors'][0]}")


def bench_scale_tf(cfg, tmp, out, notes) -> None:
    n = cfg["scale_workers"]
    log(f"scale: 1 ps + {n} workers under tfcluster launch; render and validate 1,000 tasks")
    r = launch("scale", tmp, 1, n, [PY, os.path.join(PROGRAMS, "short_task.py"), "--steps=20"],
               timeout=cfg["run_timeout"], sample=rss_sampler, sample_every=0.25)
    launcher = max((s["launcher"] for s in r.samples), default=0)
    peaks: Dict[int, int] = {}
    for s in r.samples:
        for pid, rss in s["tasks"].items():
            peaks[pid] = max(peaks.get(pid, 0), rss)
    mb = 2.0**20
    sc: Dict[str, Any] = out["scale"]
    sc.update({
        "ps": 1, "workers": n, "completed": bool(r.ok), "seconds": rnd(r.wall, 2),
        "launcher_rss_mb": rnd(launcher / mb, 1) if launcher else None,
        "task_rss_mb": {"median": rnd(median(list(peaks.values())) / mb, 1) if peaks else None,
                        "max": rnd(max(peaks.values()) / mb, 1) if peaks else None,
                        "tasks_seen": len(peaks)},
    })
    sc.update(render_and_validate(tmp, notes))


def render_and_validate(tmp: str, notes: List[str], tasks: int = 1000) -> Dict[str, Any]:
    from tfcluster.clusterfile import config

    num_ps = 16
    data = {"cluster": {"ps": [f"ps-{i}.example.com:2222" for i in range(num_ps)],
                        "worker": [f"worker-{i}.example.com:2222" for i in range(tasks - num_ps)]},
            "program": {"command": ["python", "trainer.py"], "args": ["--train_steps=1000"]}}

    def timed(fn, reps=3):
        ts = []
        val = None
        for _ in range(reps):
            t0 = time.perf_counter()
            val = fn()
            ts.append(time.perf_counter() - t0)
        return median(ts), val

    validate_s, cluster = timed(lambda: config.from_dict(data, source="bench-1000.yaml", base_dir=tmp))
    path = os.path.join(tmp, "bench-1000.yaml")
    with open(path, "w") as f:
        json.dump(data, f)
    r = run("validate-cli", tfcluster_argv() + ["validate", path], 120)
    res: Dict[str, Any] = {"render_tasks": tasks, "validate_seconds": rnd(validate_s, 4),
                           "validate_cli_seconds": rnd(r.wall, 3) if r.ok else None,
                           "render_k8s_seconds": None, "render_slurm_seconds": None}
    try:
        from tfcluster.k8s import render
    except ImportError as e:
        notes.append(f"scale.render_*: tfcluster.k8s.render is missing ({e})")
        return res
    for key, fn in (("render_k8s_seconds",
                     lambda: render.render_k8s(cluster, image="tensorflow/tensorflow:2.21.0")),
                    ("render_slurm_seconds", lambda: render.render_slurm(cluster))):
        try:
            s, text = timed(fn)
            res[key] = rnd(s, 4)
            res[key.replace("_seconds", "_bytes")] = len(text)
        except Exception as e:  # the renderer is still being written
            notes.append(f"scale.{key}: {type(e).__name__}: {e}")
    return res


# --------------------------------------------------------------------------------------
# report

def get(d: Dict[str, Any], dotted: str):
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def goal_rows(out: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = []

    def add(key, value, goal=None, met=None, unit=""):
        rows.append({"figure": key, "value": value, "goal": goal, "met": met, "unit": unit})

    for key, (op, target) in GOALS.items():
        v = get(out, key)
        if key == "ps_balance.greedy":
            v = max(v.values()) if isinstance(v, dict) and v else None
        met = None if v is None else (v <= target if op == "<=" else v >= target)
        add(key + (" (max of 2, 4 ps)" if key == "ps_balance.greedy" else ""), v, f"{op} {target:g}", met)
    add("throughput_ratio_vs_seed (stretch)", get(out, "throughput_ratio_vs_seed.async"), ">= 1.2",
        None if get(out, "throughput_ratio_vs_seed.async") is None
        else get(out, "throughput_ratio_vs_seed.async") >= 1.2)
    for n in ("trainer_async", "seed_async", "trainer_sync", "seed_sync", "single"):
        add(f"throughput.{n}.examples_per_s", get(out, f"throughput.{n}.examples_per_s"))
    add("throughput.scaling_efficiency.async", get(out, "throughput.scaling_efficiency.async"))
    add("throughput.scaling_efficiency.sync", get(out, "throughput.scaling_efficiency.sync"))
    for n, cell in (out.get("data_service") or {}).items():
        add(f"data_service.{n}.examples_per_s ({n} data workers)", cell.get("examples_per_s"))
        add(f"data_service.{n}.cpu_seconds (whole run)", cell.get("cpu_seconds"))
    for n in ("single", "async", "sync"):
        add(f"compute_bound.{n}_examples_per_s", get(out, f"compute_bound.{n}_examples_per_s"))
    add("compute_bound.single_step_seconds", get(out, "compute_bound.single_step_seconds"), unit="s")
    add("first_step_floor (3 tasks' import CPU / cores vs one import)", get(out, "first_step_floor.floor"))
    add("first_step_ratio / floor", get(out, "first_step_floor.ratio_over_floor"), "<= 1.1",
        None if get(out, "first_step_floor.ratio_over_floor") is None
        else get(out, "first_step_floor.ratio_over_floor") <= 1.1)
    add("first_step_seconds.tfcluster", get(out, "first_step_seconds.tfcluster"), unit="s")
    add("first_step_seconds.single_process", get(out, "first_step_seconds.single_process"), unit="s")
    add("first_step_seconds.naive_mts", get(out, "first_step_seconds.naive_mts"), unit="s")
    for n in ("2", "4"):
        add(f"ps_balance.round_robin[{n} ps]", get(out, f"ps_balance.round_robin.{n}"))
        add(f"ps_balance.greedy[{n} ps]", get(out, f"ps_balance.greedy.{n}"), "<= 1.05",
            None if get(out, f"ps_balance.greedy.{n}") is None else get(out, f"ps_balance.greedy.{n}") <= 1.05)
    st = get(out, "ps_balance.step_seconds.2")
    if isinstance(st, dict):
        for k, v in st.items():
            add(f"ps_balance.step_seconds[2 ps].{k}", v, unit="s")
    links = out.get("links") or {}
    if links.get("skipped"):
        add("links (simulated network links)", "skipped: " + links["skipped"])
    for row in links.get("rows", []):
        name = f"links[{row['rate_gbit']:g} Gbit/s, {row['ps']} ps, {row['mode']}].{row['placement']}"
        v = row.get("over_floor")
        goal = met = None
        if row["placement"].startswith("greedy_partitioned") and row["ps"] > 1:
            if row.get("cpu_bound"):     # the tasks use >= 0.8 of the cores: the CPU is the limit
                goal = f"CPU-bound (tasks' cpu_busy {row.get('cpu_busy')})"
            else:
                goal, met = "<= 1.3", None if v is None else v <= 1.3
        add(name + " step/floor", v, goal, met)
        add(name + " CPU s/step", row.get("cpu_seconds_per_step"), unit="s")
    for key, sc in (links.get("scaling") or {}).items():
        for n, v in sc.items():
            add(f"links.scaling[{key}] 1 -> {n} ps (speed-up)", v)
    add("transfer_fraction_of_loopback", out.get("transfer_fraction_of_loopback"))
    add("transfer.ps_bytes_per_s (MB/s)", None if get(out, "transfer.ps_bytes_per_s") is None
        else round(get(out, "transfer.ps_bytes_per_s") / 1e6, 1))
    add("transfer.loopback_bytes_per_s (MB/s)", None if get(out, "transfer.loopback_bytes_per_s") is None
        else round(get(out, "transfer.loopback_bytes_per_s") / 1e6, 1))
    for n in ("runtime", "pss_loop", "pss_fit", "mwms_tfcluster", "mwms_hand"):
        add(f"peers.examples_per_s.{n}", get(out, f"peers.examples_per_s.{n}"))
        add(f"peers.first_step_seconds.{n}", get(out, f"peers.first_step_seconds.{n}"), unit="s")
    for n in ("tfcluster", "ray_train"):
        add(f"ray.examples_per_s.{n}", get(out, f"ray.examples_per_s.{n}"))
        add(f"ray.first_step_seconds.{n}", get(out, f"ray.first_step_seconds.{n}"), unit="s")
    add("ray.over_local (trainer.py steps/s, Ray / local)", get(out, "ray.over_local"))
    el = out.get("elastic") or {}
    for n in ("tfcluster", "ray_train") if el else ():
        if get(el, f"{n}.skipped"):
            add(f"elastic.{n}", "not measured: " + get(el, f"{n}.skipped"))
            continue
        pause, redone = get(el, f"{n}.pause_seconds"), get(el, f"{n}.steps_redone")
        add(f"elastic.{n}.pause_seconds (node lost)", pause, "<= 1" if n == "tfcluster" else None,
            None if n != "tfcluster" or pause is None else pause <= 1.0, unit="s")
        add(f"elastic.{n}.steps_redone", redone, "0" if n == "tfcluster" else None,
            None if n != "tfcluster" or redone is None else redone == 0)
        add(f"elastic.{n}.seconds_to_target", get(el, f"{n}.seconds_to_target"), unit="s")
    if el:
        add("elastic.pause_over_ray_train", el.get("pause_over_ray_train"))
    sz = out.get("sizing") or {}
    for case in ("cpu", "links") if sz else ():
        if get(sz, f"{case}.skipped"):
            add(f"sizing.{case}", "not measured: " + get(sz, f"{case}.skipped"))
    for case, (op, target) in SIZING_GOALS.items():
        key = case.split(".")[0]
        v = get(sz, case)
        if v is not None:
            add(f"sizing.{case}", v, f"{op} {target:g}", v <= target if op == "<=" else v >= target)
        best, settled = get(sz, f"{key}.best_fixed_workers"), get(sz, f"{key}.settled_workers")
        if case.endswith("time_over_best_fixed") and best is not None:
            low = best - 1 if key == "links" else 1     # cpu: at most one above; links: within one
            add(f"sizing.{key}.settled_workers (best fixed {best})", settled, f"{low}..{best + 1}",
                None if settled is None else low <= settled <= best + 1)
            add(f"sizing.{key}.near_best_fixed_workers (the fewest within 2% of best)",
                get(sz, f"{key}.near_best_fixed_workers"))
            for n, secs in sorted((get(sz, f"{key}.fixed") or {}).items(), key=lambda kv: int(kv[0])):
                add(f"sizing.{key}.fixed.{n} (seconds to step {get(sz, f'{key}.steps')})", secs, unit="s")
            add(f"sizing.{key}.sized_seconds", get(sz, f"{key}.sized_seconds"), unit="s")
    sc = out.get("scale") or {}
    loc = sc.get("local") or {}
    for n in sorted((k for k in loc if k.isdigit()), key=int):
        for key, (op, target) in SCALE_GOALS.items():
            v = get(loc, f"{n}.{key}")
            add(f"scale.local.{n}.{key}", v, f"{op} {target:g}",
                None if v is None else (v <= target if op == "<=" else v >= target),
                unit="KB" if key.startswith("rss") else ("s" if key.endswith("seconds") else ""))
        add(f"scale.local.{n}.start_seconds (tfcluster / script)",
            None if get(loc, f"{n}.start_seconds.tfcluster") is None else
            f"{get(loc, f'{n}.start_seconds.tfcluster'):.3g} / {get(loc, f'{n}.start_seconds.script'):.3g}",
            unit="s")
        for key in ("cpu_ms_per_task", "threads_per_task", "open_files_per_task"):
            add(f"scale.local.{n}.{key}", get(loc, f"{n}.{key}"))
    ssh = sc.get("ssh") or {}
    if ssh.get("skipped"):
        add("scale.ssh", "skipped: " + ssh["skipped"])
    if ssh.get("ssh_floor_seconds") is not None:
        add("scale.ssh.ssh_floor_seconds (3 hosts at once / 1 host: ssh host true)",
            f"{ssh['ssh_floor_seconds']:.3g} / {ssh.get('ssh_one_host_seconds') or 0:.3g}", unit="s")
    for n in sorted((k for k in ssh if k.isdigit()), key=int):
        v = get(ssh, f"{n}.start_over_local")
        add(f"scale.ssh.{n}.start_over_local (3 hosts / here)", v, "<= 2",
            None if v is None else v <= SSH_START_OVER_LOCAL)
        add(f"scale.ssh.{n}.start_seconds (ssh agents / here / shell loop of ssh)",
            None if get(ssh, f"{n}.start_seconds") is None else
            " / ".join("-" if get(ssh, f"{n}.{k}") is None else f"{get(ssh, f'{n}.{k}'):.3g}"
                       for k in ("start_seconds", "local_start_seconds", "shell_loop_start_seconds")),
            unit="s")
        for key in ("stop_seconds", "wall_seconds", "cpu_ms_per_task", "launcher_peak_rss_kb", "threads",
                    "open_files", "left_on_hosts"):
            add(f"scale.ssh.{n}.{key}", get(ssh, f"{n}.{key}"),
                unit="s" if key.endswith("seconds") else ("KB" if key.endswith("_kb") else ""))
    add(f"scale.completed (1 ps + {sc.get('workers')} workers)", sc.get("completed"), "completes",
        sc.get("completed"))
    add("scale.launcher_rss_mb", sc.get("launcher_rss_mb"), unit="MB")
    add("scale.task_rss_mb.median", get(sc, "task_rss_mb.median"), unit="MB")
    for k in ("render_k8s_seconds", "render_slurm_seconds", "validate_seconds", "validate_cli_seconds"):
        add(f"scale.{k} (1,000 tasks)", sc.get(k), unit="s")
    return rows


def print_table(rows: List[Dict[str, Any]], stream=sys.stdout) -> None:
    def fmt(v):
        if v is None:
            return "n/a"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    head = ("figure", "value", "goal", "met")
    body = [(r["figure"], fmt(r["value"]) + (f" {r['unit']}" if r["unit"] and r["value"] is not None else ""),
             r["goal"] or "", "" if r["met"] is None else ("yes" if r["met"] else "NO")) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(4)]
    line = "  ".join("{:<%d}" % w for w in widths)
    print(line.format(*head), file=stream)
    print(line.format(*("-" * w for w in widths)), file=stream)
    for b in body:
        print(line.format(*b), file=stream)


def machine_info() -> Dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from importlib.metadata import version

        tf_version = version("tensorflow")
    except Exception:
        tf_version = None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {"nproc": cores, "cpu_model": model, "tensorflow": tf_version,
            "python": platform.python_version(), "platform": platform.platform(),
            "loadavg_at_start": list(os.getloadavg())}


def bench_fastclose(cfg, tmp, out, notes) -> None:
    """Experiment (only with --only fastclose): shutdown latency of trainer.py as it is against
    bench_programs/trainer_fast_close.py (the proposed TrainingSession.__exit__), async and sync."""
    log("experiment: shutdown with the proposed fast close (trainer_fast_close.py) vs trainer.py")
    fast = os.path.join(PROGRAMS, "trainer_fast_close.py")
    res: Dict[str, List[Optional[float]]] = {}
    for i in range(max(2, cfg["reps"])):
        for mode in ("sync", "async"):
            steps = cfg["sync_steps"] if mode == "sync" else cfg["async_steps"]
            progs = [("now", TRAINER), ("fast_close", fast)]
            for name, prog in (progs if i % 2 == 0 else progs[::-1]):
                r = launch(f"fastclose-{mode}-{name}", tmp, 1, 2,
                           [PY, prog, f"--mode={mode}", f"--train_steps={steps}", "--progress_secs=0.25",
                            "--print_placement=false"], timeout=cfg["run_timeout"])
                res.setdefault(f"{mode}.{name}", []).append(shutdown_seconds(r))
    out["experiment_fast_close"] = {k: {"median_seconds": rnd(median(v), 3), "runs": [rnd(x, 3) for x in v]}
                                    for k, v in res.items()}


PEERS_BATCH = 128  # bench_programs/peers.py's BATCH (per worker and step)


def peers_cluster(tmp: str, tag: str, jobs: Dict[str, int], command: Sequence[str],
                  extra: Dict[str, Any]) -> Tuple[str, Dict[str, List[str]]]:
    ports = iter(free_ports(sum(jobs.values())))
    cluster = {j: [f"localhost:{next(ports)}" for _ in range(n)] for j, n in jobs.items()}
    path = os.path.join(tmp, f"{tag}.yaml")
    with open(path, "w") as f:
        json.dump({"cluster": cluster, "program": {"command": list(command)},
                   "logdir": os.path.join(tmp, "runs"), **extra}, f)
    return path, cluster


def mwms_script(cluster: Dict[str, List[str]], prog: Sequence[str]) -> str:
    """MWMS by hand: every worker in the background (its own session, as tfcluster starts it)
    with its TF_CONFIG; wait for all."""
    lines = ["#!/bin/bash", "set -u"]
    for i in range(len(cluster["worker"])):
        tfc = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        lines.append(f"TF_CONFIG={shlex.quote(tfc)} setsid {' '.join(shlex.quote(a) for a in prog)} &")
        lines.append(f"W{i}=$!")
    lines.append("RC=0; for p in " + " ".join(f"$W{i}" for i in range(len(cluster["worker"])))
                 + "; do wait $p || RC=1; done; exit $RC")
    return "\n".join(lines) + "\n"


PEERS_FIRST = re.compile(r"^(?:\[(?P<task>[a-z]+:\d+)\]\s+)?@peers first_step\s*$")


def peers_first_step(r: Result, reporters: int) -> Optional[float]:
    """Start to the ``@peers first_step`` line of the last task to print one."""
    seen: Dict[str, float] = {}
    for t, line in r.lines:
        m = PEERS_FIRST.match(line)
        if m:
            seen.setdefault(m.group("task") or "single:0", t)
    return max(seen.values()) - r.start if len(seen) >= reporters else None


def bench_peers(cfg, tmp, out, notes) -> None:
    """The alternatives a TensorFlow user would pick, on the same model, data, batch and cluster
    (bench_programs/peers.py): tfcluster's runtime (between-graph, async) vs TF2
    ParameterServerStrategy + ClusterCoordinator (custom loop; Keras fit), and MWMS under
    tfcluster vs the same MWMS program started by a shell script."""
    log("peers: tfcluster runtime vs TF2 PSS (custom loop, fit) and MWMS launched by tfcluster vs by hand")
    prog = os.path.join(PROGRAMS, "peers.py")
    steps, epoch = cfg["peers_steps"], cfg["peers_epoch"]
    msteps, mepoch = cfg["peers_mwms_steps"], cfg["peers_mwms_epoch"]
    env = {"TF_USE_LEGACY_KERAS": "1"}
    serve = {"command": ["python", "-m", "tfcluster.runtime.serve"], "args": [],
             "env": {"GRPC_FAIL_FAST": "use_caller"}}
    pss_jobs = {"chief": 1, "ps": 1, "worker": 2}
    pss_extra = {"jobs": {"ps": serve, "worker": serve}, "success": "chief", "grace": 1}
    counter = [0]

    def tfl(name, jobs, args, extra):
        for _attempt in range(2):
            counter[0] += 1
            path, _ = peers_cluster(tmp, f"peers-{name}-{counter[0]}", jobs, [PY, prog, *args], extra)
            argv = tfcluster_argv() + ["launch", path, "--no-live", "--echo-progress"]
            r = run(f"peers-{name}", argv, cfg["run_timeout"], env=env)
            if r.rc != 2 or "in use" not in r.tail(40):
                return r
        return r

    def hand():
        counter[0] += 1
        _, cluster = peers_cluster(tmp, f"peers-mwms-hand-{counter[0]}", {"worker": 2}, [], {})
        script = os.path.join(tmp, f"peers-mwms-hand-{counter[0]}.sh")
        with open(script, "w") as f:
            f.write(mwms_script(cluster, [PY, prog, "--variant=mwms", f"--steps={msteps}",
                                          f"--epoch_steps={mepoch}"]))
        return run("peers-mwms-hand", ["bash", script], cfg["run_timeout"], env=env)

    variants: Dict[str, Tuple[Callable[[], Result], int, int]] = {
        # name: (run, tasks reporting progress, examples per reported step)
        "runtime": (lambda: tfl("runtime", {"ps": 1, "worker": 2}, ["--variant=runtime", f"--steps={steps}"],
                                {"grace": 1}), 2, PEERS_BATCH),
        "pss_loop": (lambda: tfl("pss-loop", pss_jobs, ["--variant=pss_loop", f"--steps={steps}",
                                                        f"--epoch_steps={epoch}"], pss_extra), 1, PEERS_BATCH),
        "pss_fit": (lambda: tfl("pss-fit", pss_jobs, ["--variant=pss_fit", f"--steps={steps}",
                                                      f"--epoch_steps={epoch}"], pss_extra), 1, PEERS_BATCH),
        "mwms_tfcluster": (lambda: tfl("mwms", {"worker": 2}, ["--variant=mwms", f"--steps={msteps}",
                                                               f"--epoch_steps={mepoch}"],
                                       {"success": "all-workers"}), 1, 2 * PEERS_BATCH),
        "mwms_hand": (hand, 1, 2 * PEERS_BATCH),
    }
    unknown = set(cfg["peers_variants"]) - set(variants)
    if unknown:
        raise ValueError(f"peers_variants: unknown {sorted(unknown)} (one of {', '.join(variants)})")
    names = [n for n in variants if n in cfg["peers_variants"]]
    ex: Dict[str, List[Optional[float]]] = {n: [] for n in variants}
    first: Dict[str, List[Optional[float]]] = {n: [] for n in variants}
    for i in range(cfg["peers_reps"]):
        for n in (names if i % 2 == 0 else names[::-1]):
            log(f"  rep {i + 1}/{cfg['peers_reps']}: {n}")
            fn, reporters, per_step = variants[n]
            r = fn()
            sps = steps_per_second(r, reporters) if r.ok else None
            ex[n].append(None if sps is None else sps * per_step)
            first[n].append(peers_first_step(r, reporters) if r.ok else None)
            if not r.ok:
                notes.append(f"peers.{n}: a run failed (exit {r.rc}): {r.tail(3)[-300:]}")
    pr = {"runtime_over_pss_loop": ratios(ex["runtime"], ex["pss_loop"]),
          "runtime_over_pss_fit": ratios(ex["runtime"], ex["pss_fit"]),
          "mwms_launch_over_hand": ratios(ex["mwms_tfcluster"], ex["mwms_hand"])}
    peers: Dict[str, Any] = {k: rnd(median(v)) for k, v in pr.items()}
    peers.update({
        "model": "MLP 256 -> 512 -> 512 -> 10 (399k parameters), SGD 0.01, batch 128 per worker and step",
        "clusters": {"runtime": "1 ps + 2 workers", "pss": "chief (coordinator) + 1 ps + 2 workers",
                     "mwms": "2 workers"},
        "pairwise_ratios": {k: [rnd(x) for x in v] for k, v in pr.items()},
        "variants": names,
        "examples_per_s": {n: rnd(median(v), 1) for n, v in ex.items()},
        "runs_examples_per_s": {n: [rnd(x, 1) for x in v] for n, v in ex.items()},
        "first_step_seconds": {n: rnd(median(v), 3) for n, v in first.items()},
        "first_step_ratios": {  # medians of pairwise first-step time ratios
            "runtime_over_pss_loop": rnd(median(ratios(first["runtime"], first["pss_loop"]))),
            "runtime_over_pss_fit": rnd(median(ratios(first["runtime"], first["pss_fit"]))),
            "mwms_launch_over_hand": rnd(median(ratios(first["mwms_tfcluster"], first["mwms_hand"])))},
        "runs_first_step_seconds": {n: [rnd(x, 3) for x in v] for n, v in first.items()},
    })
    out["peers"] = peers


def bench_embeddings(cfg, tmp, out, notes) -> None:
    """Issue 35: a DLRM-style model with >= 100 MB of embedding tables (bench_programs/
    embeddings.py) on 2 ps + 2 workers, async: tfcluster's runtime (partitioned variables,
    greedy placement) vs TF2 ParameterServerStrategy with a variable_partitioner (custom loop),
    alternating, under ``tfcluster launch`` on loopback. Each run measures its examples/s and
    the bytes its TCP connections carried (``ss``) over a window after a warm-up."""
    log("embeddings: runtime (partitioned tables) vs TF2 PSS (ShardedVariable), 2 ps + 2 workers")
    prog = os.path.join(PROGRAMS, "embeddings.py")
    args = [f"--rows={cfg['emb_rows']}", f"--dim={cfg['emb_dim']}", f"--batch={cfg['emb_batch']}",
            f"--warmup={cfg['emb_warmup']}", f"--seconds={cfg['emb_secs']}"]
    serve = {"command": ["python", "-m", "tfcluster.runtime.serve"], "args": [],
             "env": {"GRPC_FAIL_FAST": "use_caller"}}
    variants = {
        "runtime": ({"ps": 2, "worker": 2}, {"grace": 1}),
        "pss": ({"chief": 1, "ps": 2, "worker": 2},
                {"jobs": {"ps": serve, "worker": serve}, "success": "chief", "grace": 1}),
    }
    runs: Dict[str, List[Optional[Dict[str, Any]]]] = {n: [] for n in variants}
    for i in range(cfg["emb_reps"]):
        for n in (list(variants) if i % 2 == 0 else list(variants)[::-1]):
            log(f"  rep {i + 1}/{cfg['emb_reps']}: {n}")
            jobs, extra = variants[n]
            r = None
            for attempt in range(2):
                path, _ = peers_cluster(tmp, f"emb-{n}-{i}-{attempt}", jobs,
                                        [PY, prog, f"--variant={n}", *args], extra)
                r = run(f"emb-{n}", tfcluster_argv() + ["launch", path, "--no-live"],
                        cfg["run_timeout"])
                if r.rc != 2 or "in use" not in r.tail(40):
                    break
            b = r.bench() if r is not None and r.ok else None
            runs[n].append(b)
            if b is None:
                notes.append(f"embeddings.{n}: a run failed (exit {r.rc if r else '?'}): "
                             f"{r.tail(3)[-300:] if r else ''}")

    out["embeddings"] = emb_figures(runs, cfg)
    out["embeddings"]["clusters"] = {"runtime": "2 ps + 2 workers",
                                     "pss": "chief (coordinator) + 2 ps + 2 workers"}
    links: Dict[str, Any] = {}
    for rate in cfg["emb_link_rates"]:
        links[f"{rate / 1e9:g}gbit"] = emb_links(cfg, tmp, notes, prog, args, rate)
    if links:
        out["embeddings"]["links"] = links


def emb_links(cfg, tmp, notes, prog, args, rate) -> Dict[str, Any]:
    """The embeddings runs on simulated hosts (scripts/netns_links.py): the workers (and PSS's
    coordinator) on one host, each ps on its own, every ps link shaped to ``rate`` each way."""
    import netns_links

    why = netns_links.unavailable()
    if why:
        notes.append(f"embeddings.links: skipped ({why})")
        return {"skipped": why}
    log(f"embeddings: the same on simulated hosts, ps links at {rate / 1e9:g} Gbit/s (tbf)")
    port = netns_links.PORT
    runs: Dict[str, List[Optional[Dict[str, Any]]]] = {"runtime": [], "pss": []}
    with netns_links.Hosts(2, rate) as hosts:
        for i in range(cfg["emb_reps"]):
            for n in (["runtime", "pss"] if i % 2 == 0 else ["pss", "runtime"]):
                log(f"  rep {i + 1}/{cfg['emb_reps']}: {n} at {rate / 1e9:g} Gbit/s")
                cluster: Dict[str, List[str]] = {
                    "ps": [f"{hosts.ps_addr(j)}:{port}" for j in range(2)],
                    "worker": [f"{hosts.worker_addr}:{port + j}" for j in range(2)]}
                if n == "pss":
                    cluster = {"chief": [f"{hosts.worker_addr}:{port + 2}"], **cluster}
                ntasks = sum(len(v) for v in cluster.values())
                reporter = None
                for job, eps in cluster.items():
                    for j, _ in enumerate(eps):
                        ns = hosts.ps_ns[j] if job == "ps" else hosts.worker_ns
                        serve = n == "pss" and job != "chief"
                        argv = [PY, "-m", "tfcluster.runtime.serve"] if serve else [
                            PY, prog, f"--variant={n}", *args]
                        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2",
                                   GRPC_FAIL_FAST="use_caller", TFCLUSTER_TASK=f"{job}:{j}",
                                   TFCLUSTER_LOCAL_TASKS=str(ntasks),
                                   TF_CONFIG=json.dumps({"cluster": cluster,
                                                         "task": {"type": job, "index": j}}))
                        path = os.path.join(tmp, f"emb-links-{n}-{i}-{job}{j}.log")
                        p = hosts.start(ns, argv, env, path)
                        if (job, j) == (("chief", 0) if n == "pss" else ("worker", 0)):
                            reporter = (p, path)
                b = None
                try:
                    reporter[0].wait(cfg["run_timeout"])
                except subprocess.TimeoutExpired:
                    pass
                finally:
                    hosts.kill_tasks()
                with open(reporter[1], errors="replace") as f:
                    lines = f.read().splitlines()
                b = next((json.loads(m.group("json")) for m in map(BENCH.search, lines) if m), None)
                runs[n].append(b)
                if b is None:
                    notes.append(f"embeddings.links.{n}: a run failed: {' | '.join(lines[-3:])[-300:]}")
    figures = emb_figures(runs, cfg)
    figures["rate_gbit"] = rate / 1e9
    figures["hosts"] = "workers (and PSS's coordinator) on one host, each ps on its own"
    return figures


def emb_figures(runs: Dict[str, List[Optional[Dict[str, Any]]]], cfg) -> Dict[str, Any]:
    """The embeddings keys from the runs' ``@bench`` dicts (medians; pairwise ratios)."""

    def col(n, key):
        return [None if b is None else b.get(key) for b in runs[n]]

    over = ratios(col("runtime", "examples_per_s"), col("pss", "examples_per_s"))
    first = next((b for b in runs["runtime"] + runs["pss"] if b), {}) or {}
    return {
        "runtime_over_pss": rnd(median(over)),
        "bytes_over_sparse_floor": rnd(median(col("runtime", "bytes_over_floor"))),
        "pss_bytes_over_sparse_floor": rnd(median(col("pss", "bytes_over_floor"))),
        "table_mb": rnd(first.get("table_mb"), 1),
        "model": f"4 tables x {cfg['emb_rows']} rows x {cfg['emb_dim']} (Zipf 1.05 ids, unique per "
                 f"step) + 13 -> {cfg['emb_dim']} bottom, -> 64 -> 1 top; SGD; batch "
                 f"{cfg['emb_batch']} per worker step",
        "pairwise_ratios": [rnd(x) for x in over],
        "examples_per_s": {n: rnd(median(col(n, "examples_per_s")), 1) for n in runs},
        "bytes_per_step": {n: rnd(median(col(n, "bytes_per_step")), 0) for n in runs},
        "floor_bytes_per_step": rnd(first.get("floor_bytes_per_step"), 0),
        "unique_rows_per_step": rnd(first.get("unique_rows_per_step"), 1),
        "runs": runs,
    }


def bench_scalefix(cfg, tmp, out, notes) -> None:
    """Experiment (only with --only scalefix): the launcher's start of many trivial tasks as it
    is and with proposed changes to the local backend's task start (monkeypatched)."""
    import scale_local

    out["experiment_start_patches"] = scale_local.bench_start_patches(
        cfg, tmp, PROCS.popen, PROCS.done, PY, log)


def bench_ray(cfg, tmp, out, notes) -> None:
    """tfcluster on Ray against Ray Train, and on Ray against a local launch (scripts/bench_ray.py)."""
    sys.path.insert(0, HERE)
    import bench_ray as figures
    figures.bench(cfg, tmp, out, notes, sys.modules[__name__])


def bench_elastic(cfg, tmp, out, notes) -> None:
    """Issue 42: one node lost mid-run, tfcluster (elastic) against Ray Train (scripts/bench_elastic.py)."""
    sys.path.insert(0, HERE)
    import bench_elastic as figures
    figures.bench(cfg, tmp, out, notes, sys.modules[__name__])


def bench_sizing(cfg, tmp, out, notes) -> None:
    """Issue 50: a run sized by throughput against every fixed worker count (scripts/bench_sizing.py)."""
    sys.path.insert(0, HERE)
    import bench_sizing as figures
    figures.bench(cfg, tmp, out, notes, sys.modules[__name__])


def bench_data_service(cfg, tmp, out, notes) -> None:
    """Issue 34: an input-bound model (bench_programs/data_input.py, an expensive ``map``) on one
    training worker, its input made in-process (0 data workers) or by the cluster's tf.data
    service with 1 and 2 data workers. ``data_service.<n>``: examples/s after the warm-up, and
    the CPU seconds of the whole run (launcher, worker, dispatcher, data workers: the
    launcher's reaped children) per 1,000 examples."""
    import resource

    steps, warmup = cfg.get("ds_steps", 300), cfg.get("ds_warmup", 20)
    result: Dict[str, Any] = {}
    for n in cfg.get("ds_workers", [0, 1, 2]):
        ports = free_ports(1 + (1 + n if n else 0))
        doc: Dict[str, Any] = {"cluster": {"worker": [f"localhost:{ports[0]}"]},
                               "program": {"command": ["python", os.path.join(PROGRAMS, "data_input.py"),
                                                       f"--steps={steps}", f"--warmup={warmup}"]},
                               "logdir": os.path.join(tmp, "runs")}
        if n:
            doc["data_service"] = {"dispatcher": f"localhost:{ports[1]}",
                                   "workers": [f"localhost:{p}" for p in ports[2:]]}
        path = os.path.join(tmp, f"data-service-{n}.yaml")
        with open(path, "w") as f:
            json.dump(doc, f)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = run(f"data_service.{n}", tfcluster_argv() + ["launch", path, "--no-live"], 600)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        b = r.bench() if r.ok else None
        if b is None:
            notes.append(f"data_service.{n}: no result (exit {r.rc})")
            continue
        examples = (steps + warmup) * 32
        result[str(n)] = {"examples_per_s": rnd(b["examples_per_s"], 1), "cpu_seconds": rnd(cpu, 1),
                          "wall_seconds": rnd(r.end - r.start, 1),
                          "cpu_seconds_per_1000_examples": rnd(cpu / examples * 1000, 2)}
        log(f"data_service.{n}: {result[str(n)]}")
    out["data_service"] = result


FIGURES = (("launch", bench_launch_overhead), ("training", bench_training),
           ("compute", bench_compute_bound), ("links", bench_links),
           ("transfer", bench_transfer), ("balance", bench_ps_balance), ("scale", bench_scale),
           ("peers", bench_peers), ("embeddings", bench_embeddings), ("ray", bench_ray),
           ("data_service", bench_data_service), ("elastic", bench_elastic), ("sizing", bench_sizing),
           ("fastclose", bench_fastclose), ("scalefix", bench_scalefix))
EXPERIMENTS = {"fastclose", "scalefix"}  # run only when named in --only
# figures run only when named in --only: issue 34's, and issue 42's (two fresh two-node Rays, a node
# killed in each: minutes, and Ray Train from the bench extra)
# (elastic_kill_at: halfway between two checkpoints of both systems, the mean of a loss at a random
# time; at a checkpoint's step the kill landed in Ray Train's report of it)
ON_REQUEST = {"data_service", "elastic", "sizing"}   # sizing: issue 50's, 4 runs of trainer.py


def compile_checkout() -> bool:
    """Byte-compile this checkout's ``src/tfcluster`` first, so every launch is measured as an
    installed tfcluster runs (pip compiles a package's modules when it installs it). Without
    it, with PYTHONDONTWRITEBYTECODE set (these machines set it) or sources newer than their
    cached bytecode, each launch compiled the modules again: 25 ms for cli.py alone here."""
    import compileall

    return bool(compileall.compile_dir(os.path.join(ROOT, "src", "tfcluster"), quiet=1))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="about 5 minutes on 2 cores")
    ap.add_argument("--tiny", action="store_true",
                    help="smallest setting, every figure once (the test; also TFCLUSTER_BENCH_TINY=1)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--only", metavar="NAMES",
                    help="comma-separated subset of: " + ", ".join(n for n, _ in FIGURES)
                    + " (fastclose and scalefix are experiments, and data_service, elastic and sizing, run only when named)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one setting of the mode, e.g. --set reps=3 (see SETTINGS)")
    args = ap.parse_args(argv)
    mode = "tiny" if (args.tiny or os.environ.get("TFCLUSTER_BENCH_TINY") == "1") else (
        "quick" if args.quick else "full")
    cfg = dict(SETTINGS[mode])
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in cfg:
            ap.error(f"--set {item}: unknown setting (one of: {', '.join(cfg)})")
        if isinstance(cfg[key], bool):
            cfg[key] = value.lower() in ("1", "true", "yes")
        elif isinstance(cfg[key], list):
            cfg[key] = list(json.loads(value))
        else:
            cfg[key] = type(cfg[key])(json.loads(value))
    only = set(args.only.split(",")) if args.only else None

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    tmp = tempfile.mkdtemp(prefix="tfcluster-bench-")
    out: Dict[str, Any] = {}
    notes: List[str] = []
    t0 = time.time()
    info = machine_info()
    info["bytecode_compiled"] = compile_checkout()
    log(f"mode {mode}; {info['nproc']} cores ({info['cpu_model']}); TensorFlow {info['tensorflow']}; "
        f"work folder {tmp}")
    code = 0
    try:
        for name, fn in FIGURES:
            if (only and name not in only) or (not only and name in EXPERIMENTS | ON_REQUEST):
                continue
            t = time.time()
            try:
                fn(cfg, tmp, out, notes)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # one figure failing must not lose the others
                import traceback

                traceback.print_exc()
                notes.append(f"{name}: {type(e).__name__}: {e}")
                code = 1
            log(f"{name}: {time.time() - t:.0f}s")
    except KeyboardInterrupt:
        log("interrupted: stopping every process")
        code = 130
    finally:
        PROCS.kill_all()
        for s, h in old.items():
            signal.signal(s, h)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    out["goals"] = goal_rows(out)
    out["notes"] = notes
    out["meta"] = {"mode": mode, "settings": cfg, "machine": info,
                   "command": " ".join([os.path.relpath(sys.argv[0], ROOT) if sys.argv[0] else "benchmark.py",
                                        *(argv if argv is not None else sys.argv[1:])]),
                   "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0)),
                   "seconds": round(time.time() - t0, 1)}
    print()
    print(f"tfcluster benchmark ({mode}, {out['meta']['seconds']:.0f}s; {info['nproc']} cores, "
          f"{info['cpu_model']}, TensorFlow {info['tensorflow']})")
    print_table(out["goals"])
    for n in notes:
        print(f"note: {n}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"results: {args.json}")
    return code


if __name__ == "__main__":
    sys.exit(main())
