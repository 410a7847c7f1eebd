"""Hangs with real TensorFlow (issues 31 and 32): a stuck task is named early and shown where it
hangs; tasks that take a while to end after their final step are not killed as stalls.

Real servers on loopback, real training steps. The timings asserted are the watchdog's own
records (events.jsonl's ``silent``, when its warning was given), not wall-clock races.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from helpers import ROOT

pytestmark = pytest.mark.tf

PROGRAMS = os.path.join(ROOT, "tests", "programs")


def _events(run_dir):
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _cluster(tmp_path, ports, program, args, watchdog, workers=2):
    p = ports(1 + workers)
    text = (f"cluster:\n  ps: [localhost:{p[0]}]\n"
            f"  worker: [{', '.join(f'localhost:{x}' for x in p[1:])}]\n"
            f"program:\n  command: [python, {os.path.join(PROGRAMS, program)}]\n"
            f"  args: {json.dumps(args)}\n  task_flags: true\n"
            f"logdir: {tmp_path / 'runs'}\nwatchdog: {json.dumps(watchdog)}\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return str(path)


def _run_dir(tmp_path, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = list((tmp_path / "runs").glob("*/run.json")) if (tmp_path / "runs").exists() else []
        if runs:
            return str(runs[0].parent)
        time.sleep(0.2)
    raise AssertionError("no run folder appeared")


def _wait_for(path, text, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in path.read_text():
            return True
        if proc.poll() is not None:
            return text in path.read_text()
        time.sleep(0.2)
    return False


def test_a_stuck_worker_is_named_early_shown_where_it_hangs_and_kept_in_the_summary(tmp_path, ports):
    """Two workers, worker:1 stuck after 2 s, stall_timeout 24: a console line names worker:1
    within about half the deadline; tfcluster stack shows the function it hangs in; the run
    succeeds (the chief ends) and the summary says worker:1 stopped making progress."""
    path = _cluster(tmp_path, ports, "stuck_worker.py", ["--train_seconds=30", "--stuck_after=2"],
                    {"stall_timeout": 24})
    out_path = tmp_path / "launch.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", path, "--no-live"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        run_dir = _run_dir(tmp_path)
        assert _wait_for(out_path, "worker:1 (no progress for", proc, 90), out_path.read_text()[-3000:]
        text = out_path.read_text()
        line = [ln for ln in text.splitlines() if "worker:1 (no progress for" in ln][0]
        assert "while worker:0 go on" in line and f"tfcluster stack {run_dir} worker:1" in line
        [stalled] = [e for e in _events(run_dir) if e.get("event") == "task_stalled"]
        assert stalled["task"] == "worker:1"
        assert stalled["silent"] <= 24 / 2, stalled       # named within half the deadline

        stack = subprocess.run([sys.executable, "-m", "tfcluster", "stack", run_dir, "worker:1"],
                               capture_output=True, text=True, timeout=60)
        assert stack.returncode == 0, stack.stdout + stack.stderr
        assert "=== worker:1 (pid" in stack.stdout
        assert "wait_for_a_peer_that_never_answers (stuck_worker.py" in stack.stdout, stack.stdout
        assert "=== worker:0" not in stack.stdout          # only the task asked for

        for _ in range(20):        # run.json is rewritten about every second
            status = subprocess.run([sys.executable, "-m", "tfcluster", "status", run_dir],
                                    capture_output=True, text=True, timeout=60)
            if "worker:1 stopped making progress at step" in status.stdout:
                break
            time.sleep(0.5)
        assert "worker:1 stopped making progress at step" in status.stdout, status.stdout
        header = [ln for ln in status.stdout.splitlines() if ln.startswith("task ")][0]
        assert header.split()[-2:] == ["progress", "output"]
        row = [ln for ln in status.stdout.splitlines() if ln.startswith("worker:1 ")][0]
        assert row.endswith(" ago") and row.count(" ago") == 2, row

        assert proc.wait(150) == 0, out_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
    text = out_path.read_text()
    assert "run succeeded" in text
    summary = text[text.index("succeeded in"):]
    assert "warning: worker:1 stopped making progress at step" in summary
    with open(os.path.join(run_dir, "run.json")) as f:
        record = json.load(f)
    assert any(s.startswith("worker:1 stopped making progress") for s in record["stalled"])
    w1 = [t for t in record["tasks"] if t["task"] == "worker:1"][0]
    assert w1["note"].startswith("stopped making progress")
    # the stack command reads only live runs
    again = subprocess.run([sys.executable, "-m", "tfcluster", "stack", run_dir],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "is not running" in again.stderr
