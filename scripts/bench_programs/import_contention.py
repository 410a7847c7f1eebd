"""How long three ``import tensorflow`` take side by side against one alone, with no launcher:
what a 3-task cluster on this machine pays before any of tfcluster's work (the benchmark's
``first_step_floor`` assumes a perfect share of the cores: 3 x one import's CPU / cores).

    python scripts/bench_programs/import_contention.py [tries] [tasks]
"""
import os
import subprocess
import sys
import time

CODE = "import tensorflow, os; os._exit(0)"   # no interpreter teardown in the figure


def batch(n: int) -> float:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", CODE], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(n)]
    try:
        for p in procs:
            p.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return time.monotonic() - t0


def main() -> None:
    tries = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    tasks = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for _ in range(tries):
        one, many = batch(1), batch(tasks)
        print(f"one {one:.2f} s, {tasks} side by side {many:.2f} s: {many / one:.3f}x", flush=True)


if __name__ == "__main__":
    main()
