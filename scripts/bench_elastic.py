"""The benchmark's ``elastic`` figures (``scripts/benchmark.py --only elastic``; issue 42): one
node lost mid-run, under tfcluster (``elastic: {min_workers: 1}``) and under Ray Train's
``TensorflowTrainer`` with ``FailureConfig(max_failures=1)``, side by side.

Each system gets a fresh two-node Ray on this machine (tests/helpers/ray_nodes.py: a head on
127.0.0.2 with 4 CPUs and the custom resources ``head`` and ``spot``, a second node on 127.0.0.3
with 2 CPUs and ``spot``), is started, and once its global step has passed ``elastic_kill_at``
(and the second node's worker has trained) the second node's processes (raylet, workers) are
killed. Then it runs to its target.

* tfcluster: trainer.py (TF1 asynchronous between-graph) through bench_programs/elastic_trainer.py,
  1 ps and the chief on the head, 2 workers (``spot: 1`` each: one per node), ``min_workers: 1``,
  a checkpoint every ``elastic_ckpt_steps`` global steps; target ``elastic_steps`` global steps
  (one batch of 64 each).
* Ray Train: bench_programs/ray_train_elastic.py, 2 workers (``CPU: 1``, ``SPREAD``: one per
  node) of MultiWorkerMirroredStrategy on the same MLP, data and batch per worker; a checkpoint
  reported every ``elastic_ckpt_steps / 2`` steps; target ``elastic_steps / 2`` steps (2 batches
  of 64 each): the same examples and the same checkpoint cadence in examples as tfcluster's.

Figures, from the step records the programs write themselves (``<time> <step>`` per step and
process, never the programs' console output):

* ``pause_seconds``: the longest time with no training step anywhere (every process merged) from
  the last step before the kill to ``elastic_window`` seconds after it;
  ``pause_seconds_before_loss``: the same in the equal window before the kill (this machine's
  own jitter, for scale).
* ``steps_redone``: the global step reached before the kill minus the step that processes started
  after the kill began from (a restore from a checkpoint), 0 when none started or none went
  back; ``examples_redone``: that in examples (tfcluster: 64 a step; MWMS: 64 x workers).
* ``seconds_to_target``: the command's start to the first step record at the target;
  ``restarted_processes``: training processes that started after the kill, and
  ``resumed_from_step``: the step they began from (null when none started); ``step_at_loss``;
  ``checkpoint_reported_before_loss`` (Ray Train): the last step whose ``ray.train.report`` with a
  checkpoint had returned on rank 0 before the kill.
* ``loss_noticed_seconds`` (tfcluster): the kill to the run's ``run_shrunk`` event.
* ``pause_over_ray_train`` and ``seconds_to_target_over_ray_train``: tfcluster's / Ray Train's.

Run by benchmark.py, which hands over its own helpers (``bench``'s ``b``).
"""
from __future__ import annotations

import glob
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

Series = Dict[str, Any]   # {"name": file name, "points": [(time, step), ...]}


# --------------------------------------------------------------------------------------
# the step records (pure: tests/unit/test_bench_elastic.py)

def read_steps(folder: str) -> List[Series]:
    """Every ``*.steps`` file under ``folder``: one series per process, in time order."""
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.steps"))):
        pts: List[Tuple[float, int]] = []
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    try:
                        pts.append((float(parts[0]), int(parts[1])))
                    except ValueError:
                        pass       # a line cut by the kill
        if pts:
            out.append({"name": os.path.basename(path)[:-len(".steps")], "points": pts})
    return out


def max_step(series: List[Series], until: Optional[float] = None) -> int:
    return max((s for x in series for t, s in x["points"] if until is None or t <= until), default=0)


def longest_gap(series: List[Series], begin: float, end: float) -> Optional[float]:
    """The longest time between consecutive steps (every process merged) from the last step at or
    before ``begin`` (else the first after it) to the last step at or before ``end``; None
    without a step after ``begin`` or with fewer than two."""
    times = sorted(t for x in series for t, _ in x["points"])
    before = [t for t in times if t <= begin]
    inside = [t for t in times if begin < t <= end]
    pts = before[-1:] + inside
    if not inside or len(pts) < 2:
        return None
    return max(b - a for a, b in zip(pts, pts[1:]))


def started_after(series: List[Series], t_kill: float) -> List[Series]:
    return [x for x in series if x["points"][0][0] > t_kill]


def resumed_from(series: List[Series], t_kill: float) -> Optional[int]:
    """The step the processes started after the kill began from (their first record is one past
    it); None when none started."""
    late = started_after(series, t_kill)
    return min(x["points"][0][1] for x in late) - 1 if late else None


def steps_redone(series: List[Series], t_kill: float) -> int:
    """The step reached before the kill minus the step the processes started after it began
    from, 0 when none started or none went back."""
    start = resumed_from(series, t_kill)
    return 0 if start is None else max(0, max_step(series, t_kill) - start)


def checkpoint_before(folder: str, t_kill: Optional[float]) -> Optional[int]:
    """The last step whose checkpoint a program had reported (``checkpoints.log``: ``<time> <step>``
    lines) before the kill; None without such a record."""
    path = os.path.join(folder, "checkpoints.log")
    if t_kill is None or not os.path.exists(path):
        return None
    with open(path) as f:
        got = [int(p[1]) for p in (line.split() for line in f) if len(p) == 2 and float(p[0]) <= t_kill]
    return max(got) if got else None


def seconds_to(series: List[Series], target: int, t0: float) -> Optional[float]:
    hits = [t for x in series for t, s in x["points"] if s >= target]
    return min(hits) - t0 if hits else None


def figures(series: List[Series], t_kill: Optional[float], t0: float, target: int, window: float,
            examples_per_step: int) -> Dict[str, Any]:
    """The figures of one run (see the module's docstring); None where a run lacks what they need."""
    def rnd(x, n=3):
        return None if x is None else round(float(x), n)

    if t_kill is None:
        return {"pause_seconds": None, "pause_seconds_before_loss": None, "steps_redone": None,
                "examples_redone": None, "seconds_to_target": rnd(seconds_to(series, target, t0), 1),
                "restarted_processes": None, "step_at_loss": None, "resumed_from_step": None}
    redone = steps_redone(series, t_kill)
    return {
        "pause_seconds": rnd(longest_gap(series, t_kill, t_kill + window)),
        "pause_seconds_before_loss": rnd(longest_gap(series, t_kill - window, t_kill)),
        "steps_redone": redone,
        "examples_redone": redone * examples_per_step,
        "seconds_to_target": rnd(seconds_to(series, target, t0), 1),
        "restarted_processes": len(started_after(series, t_kill)),
        "step_at_loss": max_step(series, t_kill),
        "resumed_from_step": resumed_from(series, t_kill),
    }


# --------------------------------------------------------------------------------------
# the runs

NODES = (("127.0.0.2", 4, {"head": 1, "spot": 1}), ("127.0.0.3", 2, {"spot": 1}))
LOST_IP = "127.0.0.3"


def _run_and_lose(b, name: str, argv: List[str], env: Dict[str, str], steps_dir: str, kill_at: int,
                  timeout: float, cluster) -> Tuple[Any, Optional[float], float]:
    """Run ``argv`` (benchmark.py's ``run``, in a thread) and kill the cluster's second node once
    the step records pass ``kill_at`` and a process on that node has trained; the result, the
    kill's time (None when it never came to it) and the start's time (time.time())."""
    import threading

    box: Dict[str, Any] = {}
    t0 = time.time()
    th = threading.Thread(target=lambda: box.update(r=b.run(name, argv, timeout, env=env)), daemon=True)
    th.start()
    t_kill = None
    while th.is_alive():
        series = read_steps(steps_dir)
        if max_step(series) >= kill_at and any(LOST_IP in x["name"] for x in series):
            t_kill = time.time()
            cluster.kill_node(1)
            b.log(f"elastic: {name}: node {LOST_IP} killed at step {max_step(series, t_kill)}")
            break
        time.sleep(0.05)
    th.join(timeout + 30)
    return box.get("r"), t_kill, t0


def run_tfcluster(cfg, tmp, b, cluster, steps_dir) -> Tuple[Any, Optional[float], float, Optional[float]]:
    path = os.path.join(tmp, "elastic-tfcluster.yaml")
    prog = os.path.join(b.PROGRAMS, "elastic_trainer.py")
    with open(path, "w") as f:
        json.dump({"backend": "ray",
                   "ray": {"placement_timeout": 60, "jobs": {"ps": {"resources": {"head": 0.5}},
                                                             "chief": {"resources": {"head": 0.5}},
                                                             "worker": {"resources": {"spot": 1}}}},
                   "cluster": {"ps": 1, "chief": 1, "worker": 2},
                   "elastic": {"min_workers": 1},
                   "program": {"command": [b.PY, prog],
                               "args": [f"--train_steps={cfg['elastic_steps']}",
                                        f"--checkpoint_dir={os.path.join(tmp, 'elastic-ckpt')}",
                                        f"--save_checkpoint_steps={cfg['elastic_ckpt_steps']}"],
                               "env": {"BENCH_STEPS_DIR": steps_dir}},
                   "logdir": os.path.join(tmp, "elastic-runs")}, f)
    r, t_kill, t0 = _run_and_lose(b, "elastic-tfcluster", b.tfcluster_argv() + ["launch", path, "--no-live"],
                                  {"RAY_ADDRESS": cluster.address}, steps_dir, cfg["elastic_kill_at"],
                                  cfg["run_timeout"] + 120, cluster)
    noticed = None
    for ev in glob.glob(os.path.join(tmp, "elastic-runs", "*", "events.jsonl")):
        with open(ev) as f:
            shrunk = [json.loads(line)["time"] for line in f if '"run_shrunk"' in line]
        if shrunk and t_kill is not None:
            noticed = min(shrunk) - t_kill
    return r, t_kill, t0, noticed


def run_ray_train(cfg, tmp, b, cluster, steps_dir) -> Tuple[Any, Optional[float], float]:
    driver = os.path.join(b.PROGRAMS, "ray_train_elastic.py")
    half = lambda n: max(1, n // 2)  # noqa: E731 - MWMS steps: 2 batches each
    argv = [b.PY, driver, f"--steps={half(cfg['elastic_steps'])}", f"--ckpt_steps={half(cfg['elastic_ckpt_steps'])}",
            f"--steps_dir={steps_dir}", f"--storage={os.path.join(tmp, 'elastic-ray-train')}", "--name=elastic"]
    return _run_and_lose(b, "elastic-ray-train", argv, {"RAY_ADDRESS": cluster.address, "TF_USE_LEGACY_KERAS": "1"},
                         steps_dir, half(cfg["elastic_kill_at"]), cfg["run_timeout"] + 240, cluster)


def missing(module: str) -> Optional[str]:
    """Why ``module`` cannot be imported here (None: it can)."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as e:
        return f"{e}; pip install -e '.[bench]'"
    return None


def bench(cfg, tmp, out, notes, b) -> None:
    from helpers import ray_nodes  # the tests' two-node Ray on loopback (ray start, by session id)

    no_ray = missing("ray")
    if no_ray:
        notes.append(f"elastic: skipped ({no_ray})")
        out["elastic"] = {"skipped": no_ray}
        return
    have_train = missing("ray.train.tensorflow")   # Ray Train: only its side is skipped
    res: Dict[str, Any] = {}
    window = cfg["elastic_window"]
    for system in ("tfcluster", "ray_train"):
        if system == "ray_train" and have_train:
            notes.append(f"elastic.ray_train: not measured ({have_train})")
            res[system] = {"skipped": have_train}
            continue
        steps_dir = os.path.join(tmp, f"elastic-steps-{system}")
        os.makedirs(steps_dir, exist_ok=True)
        b.log(f"elastic: {system}: starting a two-node Ray (127.0.0.2 head, 127.0.0.3)")
        cluster = ray_nodes.start(NODES)
        noticed = None
        try:
            if system == "tfcluster":
                r, t_kill, t0, noticed = run_tfcluster(cfg, tmp, b, cluster, steps_dir)
                per_step, target = b.BATCH, cfg["elastic_steps"]
            else:
                r, t_kill, t0 = run_ray_train(cfg, tmp, b, cluster, steps_dir)
                per_step, target = b.BATCH * 2, max(1, cfg["elastic_steps"] // 2)
        finally:
            cluster.stop()
        series = read_steps(steps_dir)
        fig = figures(series, t_kill, t0, target, window, per_step)
        fig["exit"] = None if r is None else r.rc
        fig["target_steps"] = target
        if system == "ray_train":
            fig["checkpoint_reported_before_loss"] = checkpoint_before(steps_dir, t_kill)
        if system == "tfcluster":
            fig["loss_noticed_seconds"] = None if noticed is None else round(noticed, 2)
        if t_kill is None:
            notes.append(f"elastic.{system}: the node was not killed (the run ended or failed before "
                         f"step {cfg['elastic_kill_at']} on both nodes)")
        elif fig["pause_seconds"] is None:
            notes.append(f"elastic.{system}: no training step within {window:.0f}s after the loss: pause not measured")
        if r is None or not r.ok:
            notes.append(f"elastic.{system}: the run did not succeed (exit {None if r is None else r.rc}): "
                         f"{'' if r is None else r.tail(4)[-400:]}")
        b.log(f"elastic: {system}: {fig}")
        res[system] = fig
    tf_, rt = res.get("tfcluster", {}), res.get("ray_train", {})

    def over(key):
        a, z = tf_.get(key), rt.get(key)
        return round(a / z, 4) if isinstance(a, (int, float)) and isinstance(z, (int, float)) and z else None

    res["pause_over_ray_train"] = over("pause_seconds")
    res["seconds_to_target_over_ray_train"] = over("seconds_to_target")
    res["setup"] = ("two Ray nodes on loopback (127.0.0.2 head: 4 CPUs; 127.0.0.3: 2 CPUs), the second killed "
                    f"past global step {cfg['elastic_kill_at']} (tfcluster's count; Ray Train: half, 2 batches a step); "
                    "tfcluster: trainer.py async, 1 ps + chief on the head, 2 workers one per node, min_workers 1; "
                    "Ray Train: TensorflowTrainer, 2 MWMS workers (SPREAD), FailureConfig(max_failures=1); "
                    "MLP 16-64-64-4, Adam 0.01, batch 64 per worker")
    out["elastic"] = res
    print_side_by_side(res)


def print_side_by_side(res: Dict[str, Any], stream=None) -> None:
    stream = stream or sys.stdout
    rows = [("pause_seconds", "s with no training step after the loss"),
            ("pause_seconds_before_loss", "s, the same before the loss (jitter)"),
            ("steps_redone", "steps trained again"), ("examples_redone", "examples trained again"),
            ("restarted_processes", "training processes started after the loss"),
            ("seconds_to_target", "s, start to the target step"), ("step_at_loss", "global step at the loss"),
            ("resumed_from_step", "step the restarted processes began from"),
            ("checkpoint_reported_before_loss", "last checkpoint step reported before the loss")]
    print("\nelastic: one node lost mid-run", file=stream)
    print(f"  {'':32} {'tfcluster':>12} {'Ray Train':>12}", file=stream)

    def fmt(v):
        return "n/a" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))

    for key, what in rows:
        a, z = res.get("tfcluster", {}), res.get("ray_train", {})
        print(f"  {key:32} {fmt(a.get(key)):>12} {fmt(z.get(key)):>12}   {what}", file=stream)
    print(f"  pause ratio (tfcluster / Ray Train): {fmt(res.get('pause_over_ray_train'))}", file=stream)
