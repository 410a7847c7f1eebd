"""A launcher that dies (SIGKILL) while its run is recorded as running: tfcluster status and runs
say 'lost'. Real processes: a stand-in launcher, then the real `tfcluster launch`. (The rules
of status and runs on written records: tests/unit/test_status.py.)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from helpers import ROOT, cli
from tfcluster.runs.result import STATUS_EXIT

FAKE_LAUNCHER = """
import os, sys, time, psutil
from tfcluster.safe_files import write_json
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
write_json(os.path.join(d, "run.json"), {
    "run_id": "r", "file": None, "launcher_pid": os.getpid(),
    "launcher_started": psutil.Process().create_time(), "started": time.time(), "ended": None,
    "result": "running", "exit_code": None, "tasks": []})
print("ready", flush=True)
time.sleep(120)
"""


def test_a_launcher_killed_with_sigkill_is_reported_lost(tmp_path, capsys):
    run = tmp_path / "runs" / "r"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    p = subprocess.Popen([sys.executable, "-c", FAKE_LAUNCHER, str(run)], stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "ready"
        rc, out, _ = cli(capsys, "status", "--json", str(run))
        shown = json.loads(out)
        assert (rc, shown["result"], shown["launcher_alive"]) == (STATUS_EXIT["running"], "running", True)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
        p.stdout.close()
    before = (run / "run.json").read_bytes()
    rc, out, _ = cli(capsys, "status", "--json", str(run))
    shown = json.loads(out)
    assert (rc, shown["result"], shown["launcher_alive"]) == (5, "lost", False)
    assert (run / "run.json").read_bytes() == before          # status reports, never rewrites
    rc, out, _ = cli(capsys, "status", str(run))
    assert rc == 5 and "lost" in out.splitlines()[0] and "is gone" in out
    rc, out, _ = cli(capsys, "runs", str(tmp_path / "runs"))
    assert rc == 0 and " lost " in out


def test_kill_9_of_a_real_launcher_is_lost(tmp_path, ports):
    """`tfcluster launch`, then kill -9 of the launcher: status says lost."""
    port = ports(1)[0]
    listener = os.path.join(ROOT, "tests", "programs", "listener.py")
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: [localhost:{port}]}}\n"
                 f"program: {{command: [python, {json.dumps(listener)}]}}\nlogdir: runs\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), MODE="sleep")
    launcher = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live",
                                 "--run-id", "r1"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = tmp_path / "runs" / "r1" / "run.json"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if record.exists() and '"state": "running"' in record.read_text():
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the launcher never recorded a running task")
        status = [sys.executable, "-m", "tfcluster", "status", "--json"]
        r = subprocess.run(status, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert (r.returncode, json.loads(r.stdout)["result"]) == (3, "running"), r.stderr
        task_pid = json.loads(r.stdout)["tasks"][0]["pid"]
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
    deadline = time.time() + 10                      # its task dies with it (parent-death signal)
    while psutil.pid_exists(task_pid) and time.time() < deadline:
        time.sleep(0.1)
    r = subprocess.run(status, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert (r.returncode, json.loads(r.stdout)["result"]) == (5, "lost"), r.stderr
    r = subprocess.run([sys.executable, "-m", "tfcluster", "runs"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.splitlines()[1].split()[:2] == ["r1", "lost"]
