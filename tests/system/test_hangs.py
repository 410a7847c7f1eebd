"""Hangs with real TensorFlow: a stuck task is named early and shown where it
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

from helpers.hang_runs import _cluster, _events, _launch, _run_dir, _wait_for

pytestmark = pytest.mark.tf


def test_a_stuck_worker_is_named_early_shown_where_it_hangs_and_kept_in_the_summary(tmp_path, ports):
    """Two workers, worker:1 stuck after 2 s, stall_timeout 24: a console line names worker:1
    within about half the deadline; tfcluster stack shows the function it hangs in; the run
    succeeds (the chief ends) and the summary says worker:1 stopped making progress."""
    path = _cluster(tmp_path, ports, "tf1_hangs.py", ["--train_seconds=30", "--stuck_after=2"],
                    {"stall_timeout": 24})
    proc, out_path = _launch(path, tmp_path)
    try:
        run_dir = _run_dir(tmp_path)
        assert _wait_for(out_path, "worker:1 (no progress for", proc, 90), out_path.read_text()[-3000:]
        text = out_path.read_text()
        line = [ln for ln in text.splitlines() if "worker:1 (no progress for" in ln][0]
        assert "while worker:0 goes on" in line and f"tfcluster stack {run_dir} worker:1" in line
        [stalled] = [e for e in _events(run_dir) if e.get("event") == "task_stalled"]
        assert stalled["task"] == "worker:1"
        assert stalled["silent"] <= 24 / 2, stalled       # named within half the deadline

        stack = subprocess.run([sys.executable, "-m", "tfcluster", "stack", run_dir, "worker:1"],
                               capture_output=True, text=True, timeout=60)
        assert stack.returncode == 0, stack.stdout + stack.stderr
        assert "=== worker:1 (pid" in stack.stdout
        assert "wait_for_a_peer_that_never_answers (tf1_hangs.py" in stack.stdout, stack.stdout
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


def test_a_late_ps_keeps_running_and_tasks_that_end_slowly_pass_a_tight_stall(tmp_path, ports):
    """The ps starts 12 s late, so each worker prints
    "CreateSession still waiting for response from worker: /job:ps/..." once and then trains;
    waiting_timeout 8 no longer kills the ps. Then each worker takes 12 s to exit after its
    final step: under stall_timeout 5 the run still succeeds, with no stall."""
    path = _cluster(tmp_path, ports, "tf1_hangs.py",
                    ["--ps_delay=12", "--steps=200", "--end_seconds=12"],
                    {"waiting_timeout": 8, "stall_timeout": 5})
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", path, "--no-live"],
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    run_dir = _run_dir(tmp_path, timeout=5)
    with open(os.path.join(run_dir, "worker-0.log")) as f:
        assert "CreateSession still waiting for response from worker: /job:ps" in f.read()
    assert r.returncode == 0, out[-4000:]
    events = _events(run_dir)
    assert not [e for e in events if e.get("event") == "watchdog"], out[-3000:]
    assert {e["task"] for e in events if e.get("event") == "task_ending"} == {"worker:0", "worker:1"}
    with open(os.path.join(run_dir, "run.json")) as f:
        tasks = {t["task"]: t for t in json.load(f)["tasks"]}
    assert tasks["worker:0"]["state"] == tasks["worker:1"]["state"] == "succeeded"
    assert tasks["ps:0"]["state"] == "stopped" and tasks["ps:0"]["restarts"] == 0
    assert "stood at" not in out and "killing it" not in out

