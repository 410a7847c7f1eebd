"""A sized run (``elastic.scale: throughput``) of tests/programs/tf1_paced.py launched until the
sizing policy settles, then ended by the chief (its stop file): the local and ssh sizing tests
(:func:`events` also the Ray one)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import List, Tuple

from tfcluster.runs.eventlog import read_events


def events(run_dir) -> List[dict]:
    """The run's events.jsonl rows so far (tfcluster's own reader: a row being written is
    skipped); none before the file exists."""
    return read_events(str(run_dir))


def launch_until_settled(path, run_dir, stop, cwd=None, timeout: float = 300) -> Tuple[int, str, List[dict]]:
    """``tfcluster launch path`` (its run folder ``run_dir``, the file's logdir and the run id
    its name) until the policy holds or removes a worker
    (``scale_held``/``scaled_down``), then ``stop`` is written (the chief ends the run):
    (exit code, the launcher's output, the run's events). The launcher's process group is killed
    only if it outlives the test's wait."""
    run_id = os.path.basename(str(run_dir))
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", str(path), "--no-live",
                             "--run-id", run_id], cwd=None if cwd is None else str(cwd),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + timeout
        while proc.poll() is None and time.time() < deadline:
            if any(e["event"] in ("scale_held", "scaled_down") for e in events(run_dir)):
                break
            time.sleep(0.5)
        stop.write_text("")                 # the chief ends the run
        out = proc.communicate(timeout=timeout / 2)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, events(run_dir)
