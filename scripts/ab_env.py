#!/usr/bin/env python3
"""Side by side: one training program on 1 ps + 2 workers under ``tfcluster launch``, in
variants that differ by their environment (or by the program), alternating run by run; prints
each run's examples/s and each variant's median of pairwise ratios against the first.

    python scripts/ab_env.py --mode sync --reps 4 \\
        '{"seed": {"_prog": "seed"}, "spinning": {"TFCLUSTER_THREAD_SPINNING": "1"}, "now": {}}'

A variant is ``{"ENV_VAR": "value", ...}``; ``"_prog"`` picks its program: ``trainer``
(trainer.py, the default), ``seed`` (bench_programs/seed_mlp.py, the seed-style trainer) or
``conv`` (bench_programs/conv.py, the compute-bound conv net). Uses scripts/benchmark.py's
launcher (this checkout, free ports, every process ended at the end). Run it under the
benchmark lock on a shared machine: ``flock /tmp/tfcluster-heavy.lock python scripts/ab_env.py ...``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark as B

BATCH = {"trainer": 64, "seed": 64, "conv": 128}


def command(prog: str, mode: str, steps: int, tmp: str):
    if prog == "conv":
        return [B.PY, os.path.join(B.PROGRAMS, "conv.py"), f"--mode={mode}", f"--steps={steps}"], ()
    if prog == "seed":
        return ([B.PY, os.path.join(B.PROGRAMS, "seed_mlp.py"), f"--mode={mode}", f"--train_steps={steps}",
                 f"--logdir={tempfile.mkdtemp(dir=tmp)}"], ["--task-flags", "--grace=1"])
    return [B.PY, B.TRAINER, f"--mode={mode}", f"--train_steps={steps}", "--progress_secs=0.25",
            "--print_placement=false"], ()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", help='JSON: {"name": {"ENV": "value", "_prog": "trainer|seed|conv"}, ...}')
    ap.add_argument("--mode", choices=["async", "sync"], default="async")
    ap.add_argument("--reps", type=int, default=3, help="runs of each variant (alternating order)")
    ap.add_argument("--steps", type=int, default=0, help="global steps (default 3000 async, 1500 sync; conv 150)")
    args = ap.parse_args(argv)
    variants = json.loads(args.variants)
    B.compile_checkout()
    tmp = tempfile.mkdtemp(prefix="tfcluster-ab-")
    rate = {k: [] for k in variants}
    per_step = {}
    try:
        for i in range(args.reps):
            for name in (list(variants) if i % 2 == 0 else list(variants)[::-1]):
                env = dict(variants[name])
                prog = env.pop("_prog", "trainer")
                steps = args.steps or (150 if prog == "conv" else 1500 if args.mode == "sync" else 3000)
                per_step[name] = BATCH[prog] * (2 if args.mode == "sync" else 1)
                argv_, extra = command(prog, args.mode, steps, tmp)
                r = B.launch(name, tmp, 1, 2, argv_, extra=extra, timeout=300, env=dict(os.environ, **env))
                sps = B.steps_per_second(r, 2) if r.ok else None
                rate[name].append(None if sps is None else sps * per_step[name])
                print(f"{name}: {'failed (exit %s)' % r.rc if not r.ok else f'{rate[name][-1]:.0f} examples/s'}",
                      flush=True)
    finally:
        B.PROCS.kill_all()
    base = next(iter(variants))
    for k in variants:
        rs = B.ratios(rate[k], rate[base])
        print(f"{k}: median {B.median(rate[k]) or 0:.0f} examples/s; over {base}: "
              f"{B.rnd(B.median(rs))} (pairs {', '.join(f'{x:.3f}' for x in rs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
