"""The benchmark's ``sizing`` figures (``scripts/benchmark.py --only sizing``; issue 50): a run
sized by throughput (``elastic: {max_workers: M, scale: throughput}``) against every fixed worker
count from 1 to M run the same way, time to the same target step, in one benchmark run.

* ``sizing.cpu``: on this machine, where the CPU, not a link, bounds the rate (trainer.py, TF1
  asynchronous between-graph, 1 ps): each fixed count n (``worker: n``) and the sized run
  (``worker: 1``, ``max_workers: M``) train to ``sizing_steps`` global steps; ``seconds`` is the
  launch to the launcher's exit (TensorFlow's start included, the same for each). Figures:
  ``fixed`` (n -> seconds), ``best_fixed_workers``, ``sized_seconds``, ``settled_workers`` (the
  workers in the run at its end, run.json's ``workers.in``), ``decisions`` (the sizing
  decisions, as run.json keeps them), ``time_over_best_fixed`` (sized / best fixed).
  Goals (issue 50): ``time_over_best_fixed`` <= 1.1 and ``settled_workers`` <= best + 1.
* ``sizing.links`` (workers on rate-limited links, network namespaces): not built yet; the
  figure says so (``skipped``).

Run by benchmark.py, which hands over its own helpers (``b``).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional


def _cluster(tmp: str, b, name: str, workers: int, steps: int, top: Optional[int], cfg) -> str:
    base = b.free_ports(1)[0]
    doc: Dict[str, Any] = {
        "cluster": {"ps": 1, "worker": workers}, "base_port": base,
        "program": {"command": ["python", b.TRAINER, f"--train_steps={steps}", "--progress_secs=0.5"]},
        "logdir": os.path.join(tmp, "runs")}
    if top is not None:
        doc["elastic"] = {"min_workers": 1, "max_workers": top, "scale": "throughput",
                          "scale_window": cfg.get("sizing_window", 4.0),
                          "scale_every": cfg.get("sizing_every", 5.0),
                          "scale_gain": cfg.get("sizing_gain", 0.5)}
    path = os.path.join(tmp, f"{name}.yaml")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def _launch(b, tmp: str, name: str, path: str) -> Optional[Dict[str, Any]]:
    r = b.run(name, b.tfcluster_argv() + ["launch", path, "--no-live", "--run-id", name], 900)
    if not r.ok:
        b.log(f"{name}: exit {r.rc}\n{r.tail()}")
        return None
    with open(os.path.join(tmp, "runs", name, "run.json")) as f:
        rec = json.load(f)
    return {"seconds": r.wall, "record": rec}


def bench_cpu(cfg, tmp: str, b) -> Dict[str, Any]:
    steps, top = cfg.get("sizing_steps", 6000), cfg.get("sizing_max_workers", 3)
    fixed: Dict[str, float] = {}
    for n in range(1, top + 1):
        got = _launch(b, tmp, f"sizing-cpu-fixed-{n}", _cluster(tmp, b, f"fixed-{n}", n, steps, None, cfg))
        if got is not None:
            fixed[str(n)] = b.rnd(got["seconds"], 2)
            b.log(f"sizing.cpu fixed {n} workers: {got['seconds']:.1f}s to step {steps}")
    sized = _launch(b, tmp, "sizing-cpu-sized", _cluster(tmp, b, "sized", 1, steps, top, cfg))
    out: Dict[str, Any] = {"steps": steps, "max_workers": top, "fixed": fixed}
    if sized is None or not fixed:
        out["skipped"] = "a run failed (see the log)"
        return out
    best = min(fixed, key=lambda k: fixed[k])
    w = sized["record"].get("workers") or {}
    decisions: List[Any] = ((w.get("sizing") or {}).get("decisions")) or []
    out.update({"best_fixed_workers": int(best), "sized_seconds": b.rnd(sized["seconds"], 2),
                "settled_workers": w.get("in"), "decisions": decisions,
                "rates": (w.get("sizing") or {}).get("rates"),
                "time_over_best_fixed": b.rnd(sized["seconds"] / fixed[best], 3)})
    b.log(f"sizing.cpu: sized {sized['seconds']:.1f}s, settled at {w.get('in')} workers; "
          f"best fixed {best} workers {fixed[best]:.1f}s")
    return out


def bench(cfg, tmp: str, out: Dict[str, Any], notes: List[str], b) -> None:
    result: Dict[str, Any] = {"cpu": bench_cpu(cfg, tmp, b),
                              "links": {"skipped": "not built yet (issue 50: workers on rate-limited "
                                                   "links in network namespaces)"}}
    cpu = result["cpu"]
    if cpu.get("settled_workers") is not None and cpu.get("best_fixed_workers") is not None:
        cpu["settled_within_one_of_best"] = cpu["settled_workers"] <= cpu["best_fixed_workers"] + 1
    out["sizing"] = result
