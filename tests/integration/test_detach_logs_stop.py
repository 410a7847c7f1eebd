"""launch --detach with real processes, then logs -f and stop from another folder; a detached
launch that fails at once. The tasks are tests/programs/listener.py
(no TensorFlow)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTENER = os.path.join(HERE, "programs", "listener.py")


def _tfcluster(*args, cwd, **kw):
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120, **kw)


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def test_detach_then_logs_follow_and_stop_from_another_folder(tmp_path, ports, state):
    here, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    p = ports(3)
    (here / "cluster.yaml").write_text(
        f"cluster:\n  ps: [localhost:{p[0]}]\n  worker: [localhost:{p[1]}, localhost:{p[2]}]\n"
        f"program: {{command: [python, {json.dumps(LISTENER)}]}}\nlogdir: runs\n")
    env = dict(os.environ, XDG_STATE_HOME=str(state))
    r = _tfcluster("launch", "--detach", "--stop-timeout", "3", "--run-id", "bg1", cwd=here, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "run bg1 started in the background" in r.stdout and "tfcluster stop bg1" in r.stdout
    run_dir = here / "runs" / "bg1"
    launcher = None
    follower = None
    try:
        rec = json.loads((run_dir / "run.json").read_text())
        launcher = rec["launcher_pid"]
        deadline = time.time() + 60
        while time.time() < deadline:
            rec = json.loads((run_dir / "run.json").read_text())
            if sum(t["state"] == "running" for t in rec["tasks"]) == 3:
                break
            time.sleep(0.2)
        follower = subprocess.Popen([sys.executable, "-m", "tfcluster", "logs", "bg1", "worker:1", "-f"],
                                    cwd=elsewhere, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        s = _tfcluster("stop", "bg1", cwd=elsewhere, env=env)
        assert s.returncode == 0, s.stderr
        assert "SIGTERM to its launcher" in s.stderr and "ended: interrupted" in s.stderr
        out, err = follower.communicate(timeout=30)
        assert follower.returncode == 0, err
        assert "worker:1 listening on" in out
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.wait()
        if launcher and psutil.pid_exists(launcher):
            try:
                os.killpg(launcher, signal.SIGKILL)
            except OSError:
                pass
    assert not psutil.pid_exists(launcher) or psutil.Process(launcher).status() == psutil.STATUS_ZOMBIE
    # stopped in order: chief and workers, then ps
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    sent = [e["task"] for e in events if e["event"] == "stop_sent"]
    assert sent and sent[-1] == "ps:0" and set(sent[:2]) == {"worker:0", "worker:1"}
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "interrupted"
    assert (run_dir / "console.log").read_text().count("run bg1") >= 1


def test_detach_reports_a_launch_that_fails_at_once(tmp_path, ports, state):
    """A detached launcher that stops before its run starts (a taken port): launch --detach
    prints its output and returns its exit code instead of 'started in the background'."""
    import socket
    p = ports(2)
    (tmp_path / "cluster.yaml").write_text(
        f"cluster:\n  ps: [localhost:{p[0]}]\n  worker: [localhost:{p[1]}]\n"
        f"program: {{command: [python, {json.dumps(LISTENER)}]}}\nlogdir: runs\n"
        "network: host\n")            # (in a run's own network the host's ports do not matter)
    env = dict(os.environ, XDG_STATE_HOME=str(state))
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", p[1]))
        s.listen()
        r = _tfcluster("launch", "--detach", "--run-id", "bad1", cwd=tmp_path, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"port {p[1]} (worker:0) is already in use" in r.stderr
    assert "started in the background" not in r.stdout
    # no run started; what the launcher said stays in the prepared folder
    assert not (tmp_path / "runs" / "bad1" / "run.json").exists()
    assert "already in use" in (tmp_path / "runs" / "bad1" / "console.log").read_text()
