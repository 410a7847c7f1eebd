"""A task the kernel's OOM killer ends: the launcher says "out of memory" because the memory
cgroup's oom_kill counter grew (tfcluster.backends.oom), not because it guessed from SIGKILL. The
launcher and its task run in a memory cgroup the test makes with a limit."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers.memcg import memory_cgroup
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
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--no-live"],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "worker:0 failed (SIGKILL)" in r.stderr and "out of memory" not in r.stderr
