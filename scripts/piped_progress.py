"""How often piped output (not a terminal: tee, CI) shows progress: runs trainer.py on 1 ps + 2
workers for about SECONDS through ``tfcluster launch`` with stdout and stderr on pipes, and
prints when each progress line arrived and the longest gap between them (issue 32: at least one
line every 7 s, the first soon after the first step).

    python scripts/piped_progress.py [SECONDS]
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRESS = re.compile(r"^tfcluster: worker:\d+: step \d+")


def main(seconds: float = 30.0) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        # about 300 steps a second on 2 cores here; --train_steps sets the length
        steps = int(seconds * 300)
        argv = [sys.executable, "-m", "tfcluster", "launch", "--ps", "1", "--workers", "2",
                "--no-security-note", "--", "python", os.path.join(REPO, "trainer.py"),
                f"--train_steps={steps}"]
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=dict(os.environ, XDG_STATE_HOME=tmp))
        times, first_start = [], None
        for line in proc.stderr:
            now = time.monotonic() - t0
            if first_start is None and "started worker:1" in line:
                first_start = now
            if PROGRESS.match(line):
                times.append(now)
                print(f"{now:6.1f}s  {line.rstrip()}")
        rc = proc.wait()
        end = time.monotonic() - t0
    gaps = [b - a for a, b in zip(times, times[1:])]
    print(f"exit {rc}; run {end:.1f} s; {len(times)} progress lines; first at "
          f"{times[0] if times else float('nan'):.1f} s (tasks started at {first_start or 0:.1f} s); "
          f"longest gap {max(gaps) if gaps else float('nan'):.1f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0))
