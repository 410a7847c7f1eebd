#!/usr/bin/env python3
"""Keras ``fit`` under MultiWorkerMirroredStrategy with a tight stall deadline, launched again
and again (issue 31): how many launches succeed.

Each launch runs examples/keras_mwms.py (two workers, ``--epochs 2 --steps_per_epoch 20``: 40
steps) under ``tfcluster launch`` with ``watchdog: {stall_timeout: 8}``. Under MWMS a worker
whose leader has exited logs coordination-service errors and exits 0 by itself 7-8 s later;
before the watchdog read a task at its final step as ending, 2 of 6 such launches failed with
"the global step has stood at 40 for 8.8s". Prints one line per launch and ``N of M launches
succeeded``; exit 0 only when all did. Not a test (it takes about 30 s a launch here)::

    python scripts/mwms_end_loop.py --launches 10
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from tfcluster.net.ports import free_ports  # noqa: E402


def one(workdir: str, stall: float, epochs: int, steps: int) -> tuple:
    a, b = free_ports(2)
    path = os.path.join(workdir, "cluster.yaml")
    with open(path, "w") as f:
        f.write(f"cluster: {{worker: [localhost:{a}, localhost:{b}]}}\n"
                f"program:\n  command: [python, {os.path.join(ROOT, 'examples', 'keras_mwms.py')}]\n"
                f"  args: [--epochs={epochs}, --steps_per_epoch={steps}, "
                f"--backup_dir={os.path.join(workdir, 'backup')}]\n"
                f"  env: {{TF_USE_LEGACY_KERAS: '1'}}\n"
                f"success: all-workers\nlogdir: {os.path.join(workdir, 'runs')}\n"
                f"watchdog: {json.dumps({'stall_timeout': stall})}\n")
    began = time.time()
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", path, "--no-live"],
                       capture_output=True, text=True, timeout=600)
    took = time.time() - began
    why = ""
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if "watchdog" in ln or "failed" in ln]
        why = (lines or r.stderr.splitlines()[-1:] or ["?"])[0][:300]
    return r.returncode, took, why


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=10)
    p.add_argument("--stall-timeout", type=float, default=8.0)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    a = p.parse_args()
    ok = 0
    for i in range(a.launches):
        with tempfile.TemporaryDirectory(prefix="mwms-end-") as d:
            rc, took, why = one(d, a.stall_timeout, a.epochs, a.steps_per_epoch)
        ok += rc == 0
        print(f"launch {i + 1}: exit {rc} in {took:.1f}s" + (f": {why}" if why else ""), flush=True)
    print(f"{ok} of {a.launches} launches succeeded (Keras fit under MWMS, "
          f"watchdog.stall_timeout: {a.stall_timeout:g})", flush=True)
    return 0 if ok == a.launches else 1


if __name__ == "__main__":
    sys.exit(main())
