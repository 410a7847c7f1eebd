"""Elastic workers with real TensorFlow (``elastic: {min_workers: N}``), on this machine:
worker:1 is SIGKILLed by the test each time it starts, beyond its restart budget, and the run
goes on without it to its target. trainer.py async on 1 ps + 2 workers: the console,
events.jsonl, run.json and ``tfcluster status`` say the run shrank; worker:1's attempts carried
TFCLUSTER_LIVE_WORKERS and TFCLUSTER_WORKER_RANK; nothing is left. The TF2
ParameterServerStrategy custom loop of examples/ps_strategy.py: the coordinator goes on with the
worker left (TensorFlow schedules the lost worker's closures on it), no ps restarted."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers import ROOT

pytestmark = pytest.mark.tf


def _record(tmp_path):
    for path in (tmp_path / "runs").glob("*/run.json"):
        try:
            return path.parent, json.loads(path.read_text())
        except ValueError:
            return None, None
    return None, None


def _launch(f):
    return subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc, timeout=400):
    try:
        return proc.communicate(timeout=timeout)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_worker_out_of_restarts_leaves_and_trainer_reaches_its_target(tmp_path, ports):
    ps, w0, w1 = ports(3)
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{ps: [localhost:{ps}], worker: [localhost:{w0}, localhost:{w1}]}}\n"
                 f"program: {{command: [python, {os.path.join(ROOT, 'trainer.py')}], "
                 f"args: [--train_steps=1500, '--checkpoint_dir={tmp_path / 'ckpt'}']}}\n"
                 f"restart: {{policy: on-failure, max_restarts: 1, min_uptime: 0, backoff: 0.2}}\n"
                 f"elastic: {{min_workers: 1}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    proc = _launch(f)
    killed, pids = set(), []
    try:
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline and len(killed) < 2:
            _, rec = _record(tmp_path)
            if rec:
                w = next(t for t in rec["tasks"] if t["task"] == "worker:1")
                if w["state"] == "running" and w.get("pid") and w["pid"] not in killed:
                    env = w.get("env") or {}
                    assert env.get("TFCLUSTER_LIVE_WORKERS") == "2" and env.get("TFCLUSTER_WORKER_RANK") == "1", env
                    try:
                        os.kill(w["pid"], signal.SIGKILL)
                        killed.add(w["pid"])
                        pids.append(w["pid"])
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
    finally:
        out = _finish(proc)
    assert len(killed) == 2, out[-3000:]
    assert proc.returncode == 0, out[-4000:]
    assert "worker:1 left the run (not restarted: restart budget spent (1 of 1)): going on with " \
           "1 of 2 workers, min 1" in out, out[-4000:]
    assert "run succeeded (worker:0 exited 0)" in out, out[-3000:]
    run_dir, rec = _record(tmp_path)
    assert rec["result"] == "succeeded" and rec["exit_code"] == 0
    assert rec["workers"]["in"] == 1 and rec["workers"]["of"] == 2 and rec["workers"]["min"] == 1
    assert "worker:1" in rec["workers"]["left"]
    chief = next(t for t in rec["tasks"] if t["task"] == "worker:0")
    assert chief["progress"]["step"] >= 1500
    w1 = next(t for t in rec["tasks"] if t["task"] == "worker:1")
    assert "left the run" in (w1.get("note") or "") and w1["state"] == "left", w1
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    shrunk = [e for e in events if e["event"] == "run_shrunk"]
    assert len(shrunk) == 1 and shrunk[0]["task"] == "worker:1" and shrunk[0]["workers"] == 1
    assert "node" not in shrunk[0] and "node=" not in (run_dir / "launcher.log").read_text()
    # the report draws it as a worker that left, not as a failure (issue 48, item 7)
    from tfcluster.runs.report import write_report
    page = open(write_report(str(run_dir)), encoding="utf-8").read()
    last = re.findall(r'<rect class="attempt att-(\w+)" id="attempt-worker-1-\d+"', page)[-1]
    assert last == "left" and "node=" not in page, last
    status = subprocess.run([sys.executable, "-m", "tfcluster", "status", str(run_dir)],
                            capture_output=True, text=True, timeout=60)
    assert "workers: 1 of 2, min 1 (worker:1 left: not restarted: restart budget spent (1 of 1))" \
        in status.stdout, status.stdout
    for pid in pids + [t["pid"] for t in rec["tasks"] if t.get("pid")]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_the_pss_coordinator_goes_on_with_the_workers_left(tmp_path, ports):
    ps, w0, w1, chief = ports(4)
    ex = os.path.join(ROOT, "examples")
    serve = "{command: [python, -m, tfcluster.runtime.serve], args: [], env: {GRPC_FAIL_FAST: use_caller}"
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{chief: [localhost:{chief}], ps: [localhost:{ps}], "
                 f"worker: [localhost:{w0}, localhost:{w1}]}}\n"
                 f"program: {{command: [python, {os.path.join(ex, 'ps_strategy.py')}], "
                 f"args: [--train_steps=600, '--checkpoint_dir={tmp_path / 'ckpt'}']}}\n"
                 f"jobs:\n  ps: {serve}}}\n"
                 f"  worker: {serve}, restart: {{policy: on-failure, max_restarts: 1, min_uptime: 0, "
                 f"backoff: 0.2}}}}\n"
                 f"elastic: {{min_workers: 1}}\nsuccess: chief\ngrace: 1\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    proc = _launch(f)
    killed = []
    try:
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline and len(killed) < 2:
            _, rec = _record(tmp_path)
            if rec:
                rows = {t["task"]: t for t in rec["tasks"]}
                step = (rows["chief:0"].get("progress") or {}).get("step") or 0
                w = rows["worker:1"]
                if step > 20 * (len(killed) + 1) and w["state"] == "running" and w.get("pid") not in killed:
                    try:
                        os.kill(w["pid"], signal.SIGKILL)
                        killed.append(w["pid"])
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
    finally:
        out = _finish(proc)
    assert len(killed) == 2, out[-3000:]
    assert proc.returncode == 0, out[-4000:]
    assert "worker:1 left the run" in out and "going on with 1 of 2 workers, min 1" in out, out[-3000:]
    _, rec = _record(tmp_path)
    rows = {t["task"]: t for t in rec["tasks"]}
    assert rows["chief:0"]["progress"]["step"] >= 600 and rows["chief:0"]["restarts"] == 0
    assert rows["ps:0"]["restarts"] == 0 and rows["worker:0"]["restarts"] == 0
    assert rec["workers"] == {"in": 1, "of": 2, "min": 1, "left": {"worker:1": rec["workers"]["left"]["worker:1"]}}


def _kill_once_when(tmp_path, proc, task, ready, timeout=300):
    """SIGKILL ``task``'s process once ``ready(run.json rows)`` holds; its pid, or None."""
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        _, rec = _record(tmp_path)
        if rec:
            rows = {t["task"]: t for t in rec["tasks"]}
            if rows[task]["state"] == "running" and rows[task].get("pid") and ready(rows):
                try:
                    os.kill(rows[task]["pid"], signal.SIGKILL)
                    return rows[task]["pid"]
                except ProcessLookupError:
                    pass
        time.sleep(0.2)
    return None


def test_sync_training_restarts_with_the_workers_left_and_reaches_its_target(tmp_path, ports):
    """trainer.py --mode=sync (SyncReplicasOptimizer aggregates one gradient per worker):
    elastic.on_change restart. worker:1 dies: every task stops, then starts again with TF_CONFIG
    listing worker:0 alone, so it aggregates 1 gradient a step; the chief resumes from its
    checkpoint and reaches the target."""
    ps, w0, w1 = ports(3)
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{ps: [localhost:{ps}], worker: [localhost:{w0}, localhost:{w1}]}}\n"
                 f"program: {{command: [python, {os.path.join(ROOT, 'trainer.py')}], "
                 f"args: [--mode=sync, --train_steps=600, --save_checkpoint_steps=50, "
                 f"'--checkpoint_dir={tmp_path / 'ckpt'}']}}\n"
                 f"elastic: {{min_workers: 1, on_change: restart}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    proc = _launch(f)
    try:
        pid = _kill_once_when(tmp_path, proc, "worker:1",
                              lambda rows: ((rows["worker:0"].get("progress") or {}).get("step") or 0) > 120)
    finally:
        out = _finish(proc)
    assert pid, out[-3000:]
    assert proc.returncode == 0, out[-4000:]
    assert "worker:1 left: restarting every task with 1 of 2 workers, min 1" in out, out[-3000:]
    assert "worker:1 left: starting every task with 1 of 2 workers, min 1" in out, out[-3000:]
    _, rec = _record(tmp_path)
    rows = {t["task"]: t for t in rec["tasks"]}
    assert rows["worker:0"]["progress"]["step"] >= 600 and rows["worker:0"]["restarts"] == 1
    conf = json.loads(rows["worker:0"]["env"]["TF_CONFIG"])
    assert conf["cluster"]["worker"] == [f"localhost:{w0}"] and conf["task"]["index"] == 0
    assert rows["worker:0"]["env"]["TFCLUSTER_LIVE_WORKERS"] == "1"
    assert rec["total_restarts"] == 0 and rec["workers"]["in"] == 1


def test_mwms_keras_fit_restarts_alone_from_its_backup_and_ends_at_its_target_epoch(tmp_path, ports):
    """The Keras MultiWorkerMirroredStrategy tutorial's shape (tests/programs/keras_tutorial_mwms.py,
    unmodified: BackupAndRestore), 2 workers, elastic {min_workers: 1, on_change: restart}:
    worker:1 dies mid-fit; worker:0 is restarted alone (TF_CONFIG of 1 worker), resumes from the
    backup and ends at its last epoch; the run succeeds (all-workers: the workers in the run)."""
    pytest.importorskip("tf_keras")
    w0, w1 = ports(2)
    prog = os.path.join(ROOT, "tests", "programs", "keras_tutorial_mwms.py")
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: [localhost:{w0}, localhost:{w1}]}}\n"
                 f"program: {{command: [python, {prog}], args: [--epochs=6, --steps_per_epoch=20, "
                 f"'--backup_dir={tmp_path / 'backup'}'], env: {{TF_USE_LEGACY_KERAS: '1'}}}}\n"
                 f"success: all-workers\n"
                 f"elastic: {{min_workers: 1, on_change: restart}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    proc = _launch(f)
    log0 = None
    try:
        def two_epochs(rows):
            path = rows["worker:0"].get("log")
            return bool(path) and os.path.exists(path) and open(path).read().count("Epoch 3/6") >= 1
        pid = _kill_once_when(tmp_path, proc, "worker:1", two_epochs)
    finally:
        out = _finish(proc)
    assert pid, out[-3000:]
    assert proc.returncode == 0, out[-4000:]
    assert "worker:1 left: restarting every task with 1 of 2 workers, min 1" in out, out[-3000:]
    _, rec = _record(tmp_path)
    rows = {t["task"]: t for t in rec["tasks"]}
    log0 = open(rows["worker:0"]["log"]).read()
    assert rows["worker:0"]["restarts"] == 1 and rows["worker:0"]["state"] == "succeeded"
    assert json.loads(rows["worker:0"]["env"]["TF_CONFIG"])["cluster"]["worker"] == [f"localhost:{w0}"]
    done = [ln for ln in log0.splitlines() if "keras_tutorial: done: " in ln]
    assert done, log0[-3000:]
    # resumed from the backup: the restarted fit trained the epochs left, not all 6 again
    history = json.loads(done[-1].split("keras_tutorial: done: ", 1)[1])
    assert 1 <= len(history["loss"]) < 6, history
