"""The benchmark's ``ray`` figures (``scripts/benchmark.py --only ray``), on one Ray head started
for them on this machine (127.0.0.2, ``--num-cpus`` 4, no dashboard; ended by its session id):

* ``ray.tfcluster_over_ray_train``: examples/s of MultiWorkerMirroredStrategy Keras ``fit``
  (bench_programs/ray_mwms.py: peers.py's model, data and batch; 2 workers) launched by
  ``tfcluster launch --backend ray`` / the same ``train`` function run by Ray Train's
  ``TensorflowTrainer`` (bench_programs/ray_train_mwms.py), on the same Ray; the medians of
  pairwise ratios; goal >= 1.0. Examples/s from the program's own stamps (worker 0's first and
  last epoch ends), so both are measured by the same clock in the same code.
* ``ray.first_step_seconds.tfcluster`` / ``.ray_train``: the command's start to worker 0's first
  finished step (its stamp).
* ``ray.over_local``: trainer.py's global steps/s on 1 ps + 2 workers under ``--backend ray`` /
  under a local launch (reported, no goal).

Run by benchmark.py, which hands over its own helpers (``bench``'s ``b``) so that every process
is its process tracker's.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from helpers import ray_nodes  # noqa: E402  (the tests' Ray nodes: ray start, by session id)

STAMP = re.compile(r"@raybench (?P<json>\{.*\})\s*$")


def stamps(r) -> List[Dict[str, Any]]:
    out = []
    for _, line in r.lines:
        m = STAMP.search(line)
        if m:
            out.append(json.loads(m.group("json")))
    return out


def examples_per_s(r, batch: int) -> Optional[float]:
    """Global examples/s between worker 0's first and last epoch ends."""
    ep = [s for s in stamps(r) if s["event"] == "epoch"]
    if len(ep) < 2:
        return None
    a, z = ep[0], ep[-1]
    return (z["step"] - a["step"]) * batch * z["workers"] / (z["t"] - a["t"])


def first_step(r, started_wall: float) -> Optional[float]:
    got = [s["t"] for s in stamps(r) if s["event"] == "first_step"]
    return got[0] - started_wall if got else None


def bench(cfg, tmp, out, notes, b) -> None:
    try:
        import ray  # noqa: F401
        from ray.train.tensorflow import TensorflowTrainer  # noqa: F401
    except ImportError as e:
        notes.append(f"ray: skipped ({e}; pip install -e '.[bench]')")
        out["ray"] = {"skipped": str(e)}
        return
    steps, epoch = cfg["peers_mwms_steps"], cfg["peers_mwms_epoch"]
    reps = cfg["peers_reps"]
    prog = os.path.join(b.PROGRAMS, "ray_mwms.py")
    driver = os.path.join(b.PROGRAMS, "ray_train_mwms.py")
    b.log("ray: starting a Ray head (127.0.0.2, 4 CPUs, no dashboard)")
    cluster = ray_nodes.start((("127.0.0.2", 4, None),))
    env = {"RAY_ADDRESS": cluster.address, "TF_USE_LEGACY_KERAS": "1"}
    counter = [0]

    def tfcluster_run():
        counter[0] += 1
        path = os.path.join(tmp, f"ray-mwms-{counter[0]}.yaml")
        with open(path, "w") as f:
            json.dump({"backend": "ray", "cluster": {"worker": 2},
                       # tasks get their node's environment, the file's env and the contract
                       "program": {"command": [b.PY, prog], "args": [f"--steps={steps}",
                                                                     f"--epoch_steps={epoch}"],
                                   "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}},
                       "success": "all-workers", "logdir": os.path.join(tmp, "runs")}, f)
        t0 = time.time()
        r = b.run("ray-tfcluster", b.tfcluster_argv() + ["launch", path, "--no-live"],
                  cfg["run_timeout"], env=env)
        return r, t0

    def ray_train_run():
        counter[0] += 1
        t0 = time.time()
        r = b.run("ray-train", [b.PY, driver, f"--steps={steps}", f"--epoch_steps={epoch}",
                                f"--storage={tmp}", f"--name=ray-train-{counter[0]}"],
                  cfg["run_timeout"], env=env)
        return r, t0

    def trainer_run(backend):
        extra = ["--backend", "ray"] if backend == "ray" else []
        return b.launch(f"trainer-{backend}", tmp, 1, 2,
                        [b.PY, b.TRAINER, f"--train_steps={cfg['async_steps']}"], extra=extra,
                        timeout=cfg["run_timeout"], env=env)

    ex: Dict[str, List[Optional[float]]] = {"tfcluster": [], "ray_train": []}
    first: Dict[str, List[Optional[float]]] = {"tfcluster": [], "ray_train": []}
    sps: Dict[str, List[Optional[float]]] = {"ray": [], "local": []}
    runs = {"tfcluster": tfcluster_run, "ray_train": ray_train_run}
    try:
        for i in range(reps):
            for n in (["tfcluster", "ray_train"] if i % 2 == 0 else ["ray_train", "tfcluster"]):
                b.log(f"  rep {i + 1}/{reps}: MWMS fit, {n}")
                r, t0 = runs[n]()
                ex[n].append(examples_per_s(r, b.PEERS_BATCH) if r.ok else None)
                first[n].append(first_step(r, t0) if r.ok else None)
                if not r.ok:
                    notes.append(f"ray.{n}: a run failed (exit {r.rc}): {r.tail(3)[-300:]}")
            for n in (["ray", "local"] if i % 2 == 0 else ["local", "ray"]):
                b.log(f"  rep {i + 1}/{reps}: trainer.py, {n}")
                r = trainer_run(n)
                sps[n].append(b.steps_per_second(r, 2) if r.ok else None)
                if not r.ok:
                    notes.append(f"ray.trainer_{n}: a run failed (exit {r.rc}): {r.tail(3)[-300:]}")
        left = ray_nodes.leftovers(cluster) or {"actors": [], "groups": []}
        ours = [a for a in left["actors"] if a.endswith(" TaskRunner")]
        if ours or left["groups"]:
            notes.append(f"ray: tfcluster left on the cluster: {ours}, {left['groups']}")
        others = [a for a in left["actors"] if a not in ours]
        if others:    # Ray Train's detached helpers (an autoscaling coordinator) stay
            notes.append(f"ray: Ray Train left these actors on the cluster: {others}")
    finally:
        cluster.stop()
    pr = b.ratios(ex["tfcluster"], ex["ray_train"])
    lr = b.ratios(sps["ray"], sps["local"])
    out["ray"] = {
        "tfcluster_over_ray_train": b.rnd(b.median(pr)),
        "over_local": b.rnd(b.median(lr)),
        "examples_per_s": {n: b.rnd(b.median(v), 1) for n, v in ex.items()},
        "first_step_seconds": {n: b.rnd(b.median(v), 3) for n, v in first.items()},
        "trainer_steps_per_s": {n: b.rnd(b.median(v), 2) for n, v in sps.items()},
        "pairwise_ratios": {"tfcluster_over_ray_train": [b.rnd(x) for x in pr],
                            "over_local": [b.rnd(x) for x in lr]},
        "runs_examples_per_s": {n: [b.rnd(x, 1) for x in v] for n, v in ex.items()},
        "model": "peers.py's MLP (399k parameters), SGD 0.01, batch 128 per worker and step; "
                 "MWMS Keras fit on 2 workers; trainer.py async on 1 ps + 2 workers",
        "cluster": "one Ray head on this machine, 4 logical CPUs, no dashboard",
    }
