"""With real TensorFlow: the quick start without a file (``launch --ps/--workers``) trains, and
tfcluster tensorboard serves a run's summaries."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tfcluster.runs import index

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tfcluster(*args, cwd, **kw):
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600, **kw)


@pytest.fixture
def state(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(d))
    return d


REPO = os.path.dirname(HERE)


@pytest.mark.tf
def test_quick_start_without_a_file_trains(tmp_path, state):
    """tfcluster launch --ps 1 --workers 2 -- python trainer.py --train_steps=200,
    with no cluster file: free ports on this machine, the usual records, indexed by run id."""
    import shutil
    shutil.copy(os.path.join(REPO, "trainer.py"), tmp_path / "trainer.py")
    env = dict(os.environ, XDG_STATE_HOME=str(state))
    r = _tfcluster("launch", "--ps", "1", "--workers", "2", "--no-security-note", "--", "python",
                   "trainer.py", "--train_steps=200", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "done: global_step=" in r.stdout
    runs = [d for d in (tmp_path / "runs").iterdir() if (d / "run.json").is_file()]
    assert len(runs) == 1
    rec = json.loads((runs[0] / "run.json").read_text())
    assert rec["result"] == "succeeded" and {t["task"] for t in rec["tasks"]} == {
        "ps:0", "worker:0", "worker:1"}
    idx = (state / "tfcluster" / "runs.jsonl").read_text()
    assert rec["run_id"] in idx


@pytest.mark.tf
def test_tensorboard_serves_the_runs_summaries(tmp_path, state, ports):
    """tfcluster tensorboard RUN starts TensorBoard on the chief's --checkpoint_dir."""
    pytest.importorskip("tensorboard")
    import urllib.request
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    d = tmp_path / "runs" / "tb1"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({
        "run_id": "tb1", "result": "succeeded", "file": str(tmp_path / "cluster.yaml"),
        "tasks": [{"task": "worker:0", "state": "succeeded", "chief": True,
                   "argv": ["python", "t.py", "--checkpoint_dir=ckpt"]}]}))
    index.register(str(d))
    port = ports(1)[0]
    env = dict(os.environ, XDG_STATE_HOME=str(state))
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "tensorboard", "tb1", "--port",
                             str(port), "--bind", "localhost"], cwd=tmp_path / "runs", env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline, body = time.time() + 120, None
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/data/environment", timeout=5) as f:
                    body = json.loads(f.read())
                break
            except OSError:
                time.sleep(0.5)
        assert body is not None, proc.stdout.read() if proc.poll() is not None else "no answer"
        assert body["data_location"] == str(ckpt)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.stdout.close()
