"""A task the kernel's OOM killer ends: the launcher says "out of memory" because the memory
cgroup's oom_kill counter grew (tfcluster.backends.oom), not because it guessed from SIGKILL. The
launcher and its task run in a memory cgroup the test makes with a limit."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers.memcg import memory_cgroup
from tfcluster.backends.oom import OomWatch
from tfcluster.net.ports import free_port_run

HOG = """\
import time
chunks = []
print("allocating", flush=True)
for _ in range(200):
    chunks.append(bytearray(16 * 1024 * 1024))   # 16 MiB at a time, touched
    time.sleep(0.005)
print("still alive after 3 GiB", flush=True)
"""


def test_a_task_killed_by_the_oom_killer_is_said_to_have_run_out_of_memory(tmp_path):
    (tmp_path / "hog.py").write_text(HOG)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {worker: 1}\nprogram: {command: [python, hog.py]}\n"
        f"base_port: {free_port_run(1, 24000 + os.getpid() % 2000)}\n")
    with memory_cgroup(f"tfcluster-test-{os.getpid()}", 400 * 1024 * 1024) as procs:
        # the shell joins the cgroup, then becomes the launcher: the task is born inside it
        r = subprocess.run(["sh", "-c", f'echo $$ > "{procs}" && exec "$0" -m tfcluster launch '
                            f'cluster.yaml --run-id oom --no-live', sys.executable],
                           cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    assert "still alive" not in out
    assert "worker:0 failed (SIGKILL): out of memory: the memory limit of the launcher's cgroup" \
        in r.stderr, out[-3000:]
    assert "first failure: worker:0 (SIGKILL) — out of memory" in r.stderr, out[-3000:]
    record = json.loads((tmp_path / "runs" / "oom" / "run.json").read_text())
    task = next(t for t in record["tasks"] if t["task"] == "worker:0")
    assert task["note"].startswith("out of memory") and task["exit_code"] in (-9, 137), task


def test_a_sigkill_from_a_person_is_not_called_out_of_memory(tmp_path):
    """The same SIGKILL without an OOM kill: no out-of-memory words (nothing is guessed)."""
    (tmp_path / "selfkill.py").write_text("import os, signal\nprint('bye', flush=True)\n"
                                          "os.kill(os.getpid(), signal.SIGKILL)\n")
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {worker: 1}\nprogram: {command: [python, selfkill.py]}\n"
        f"base_port: {free_port_run(1, 24000 + os.getpid() % 2000)}\n")
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--no-live",
                        "--run-id", "self"], cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "worker:0 failed (SIGKILL)" in r.stderr and "out of memory" not in r.stderr
    if OomWatch().paths["kernel"] and OomWatch().start["kernel"] is not None:
        assert "first failure: worker:0 (SIGKILL) — not tfcluster, not the OOM killer" in r.stderr
        record = json.loads((tmp_path / "runs" / "self" / "run.json").read_text())
        assert record["tasks"][0]["note"].startswith("not tfcluster, not the OOM killer")


@pytest.mark.skipif(OomWatch().start["kernel"] is None, reason="/proc/vmstat has no oom_kill here")
def test_who_sent_a_sigkill_is_said_in_the_summary_and_the_record(tmp_path):
    """A task killed by SIGKILL from outside (this test, by its pid) is said to be killed by
    neither tfcluster nor the OOM killer; a task tfcluster killed itself (still running after
    its SIGTERM) is said to be tfcluster's kill, in run.json and in the summary."""
    (tmp_path / "stubborn.py").write_text(
        "import os, signal, sys, time\n"
        "if os.environ['TFCLUSTER_TASK'] == 'worker:1':\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\n"
        "time.sleep(float(sys.argv[1]) if os.environ['TFCLUSTER_TASK'] == 'worker:0' else 600)\n")
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {worker: 2}\nprogram: {command: [python, stubborn.py, '600']}\n"
        "success: all-workers\nrestart: {policy: on-failure, max_restarts: 1, min_uptime: 0, backoff: 0.1}\n"
        f"base_port: {free_port_run(2, 24000 + os.getpid() % 2000)}\n")
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--no-live",
                             "--run-id", "k", "--stop-timeout", "1"], cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run = tmp_path / "runs" / "k" / "run.json"
        deadline = time.time() + 60
        pid = None
        while time.time() < deadline and pid is None:
            time.sleep(0.2)
            try:
                tasks = {t["task"]: t for t in json.loads(run.read_text())["tasks"]}
            except (OSError, ValueError):
                continue
            if tasks["worker:0"]["state"] == "running" and tasks["worker:0"]["pid"]:
                pid = tasks["worker:0"]["pid"]
        assert pid, "worker:0 never ran"
        os.kill(pid, signal.SIGKILL)          # from outside: not tfcluster, not the OOM killer
        time.sleep(3)                         # restarted (on-failure); then the run is stopped
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "worker:0 failed (SIGKILL): not tfcluster, not the OOM killer" in err, err[-3000:]
    record = json.loads(run.read_text())
    w1 = next(t for t in record["tasks"] if t["task"] == "worker:1")
    assert w1["exit"] == "SIGKILL" and w1["note"] == "killed by tfcluster: still running 1s after SIGTERM", w1
    assert "worker:1 ended by SIGKILL: killed by tfcluster: still running 1s after SIGTERM" in err, err[-3000:]
    events = [json.loads(x) for x in (tmp_path / "runs" / "k" / "events.jsonl").read_text().splitlines()]
    assert [e["exit"] for e in events if e["event"] == "task_exited" and e["task"] == "worker:0"][0] == "SIGKILL"
