#!/usr/bin/env python3
"""Side by side: the launch overhead of variants of tfcluster, each against the same shell
script, alternating run by run (1 ps + 2 workers of bench_programs/short_task.py, as
``benchmark.py --only launch``). A variant is an environment: another checkout through
PYTHONPATH, or a setting.

    python scripts/ab_launch.py --reps 6 '{"before": {"PYTHONPATH": "/work/wt/old/src"}, "now": {}}'

Prints, per variant: the median wall of a launch, its median of pairwise ratios against the
setsid shell script run beside it (``launch_overhead_ratio``), the median of pairwise ratios
against the first variant, and the launcher's start: the command's start to the first worker's
own first line of Python (short_task.py stamps it). Run it under the benchmark lock on a shared
machine: ``flock /tmp/tfcluster-tests.lock python scripts/ab_launch.py ...``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark as B

STARTED = re.compile(r"started (\d+\.\d+)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", help='JSON: {"name": {"ENV": "value"}, ...}')
    ap.add_argument("--reps", type=int, default=4, help="rounds (each: every variant and the script)")
    ap.add_argument("--steps", type=int, default=20, help="steps of each worker (short_task.py)")
    args = ap.parse_args(argv)
    variants = json.loads(args.variants)
    B.compile_checkout()
    for env in variants.values():
        for path in env.get("PYTHONPATH", "").split(os.pathsep):
            if path and os.path.isdir(os.path.join(path, "tfcluster")):
                import compileall
                compileall.compile_dir(os.path.join(path, "tfcluster"), quiet=1)
    tmp = tempfile.mkdtemp(prefix="tfcluster-ab-launch-")
    prog = [B.PY, os.path.join(B.PROGRAMS, "short_task.py"), f"--steps={args.steps}"]
    names = list(variants) + ["shell"]
    wall = {k: [] for k in names}
    start = {k: [] for k in variants}
    try:
        for i in range(args.reps):
            for name in (names if i % 2 == 0 else names[::-1]):
                if name == "shell":
                    _, cluster = B.cluster_file(tmp, 1, 2, "ab-shell")
                    script = os.path.join(tmp, "start.sh")
                    with open(script, "w") as f:
                        f.write(B.shell_script(cluster, prog, setsid=True))
                    r = B.run("shell", ["bash", script], 300)
                else:
                    t0 = time.time()
                    r = B.launch(name, tmp, 1, 2, prog, timeout=300,
                                 env=dict(os.environ, **variants[name]))
                    stamps = [float(m.group(1)) for _, line in r.lines for m in [STARTED.search(line)] if m]
                    start[name].append(min(stamps) - t0 if r.ok and stamps else None)
                wall[name].append(r.wall if r.ok else None)
                B.log(f"round {i + 1} {name}: {'%.3f s' % r.wall if r.ok else 'FAILED: ' + r.tail(5)}")
    finally:
        B.PROCS.kill_all()
    first = list(variants)[0]
    print(f"{'variant':<12} {'median wall':>12} {'over shell':>11} {'over ' + first:>14} {'launcher start':>15}")
    for name in variants:
        over_shell = B.median(B.ratios(wall[name], wall["shell"]))
        over_first = B.median(B.ratios(wall[name], wall[first]))
        print(f"{name:<12} {B.median(wall[name]) or 0:>11.3f}s {over_shell or 0:>11.3f} "
              f"{over_first or 0:>14.3f} {B.median(start[name]) or 0:>14.3f}s")
    print(f"{'shell':<12} {B.median(wall['shell']) or 0:>11.3f}s")
    print("pairwise over shell: " + json.dumps({k: [round(x, 3) for x in B.ratios(wall[k], wall["shell"])]
                                               for k in variants}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
