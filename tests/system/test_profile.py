"""``tfcluster profile RUN``: a TensorFlow profile of every live task of a real
trainer.py run (1 ps + 2 workers, TF1 graph mode), written into the run folder in the layout
TensorBoard's profile plugin reads; and a TF2 program's profiler server started with one line."""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(HERE)


def _tfcluster(*args, cwd, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout, env=env)


def _wait_running(run_dir, tasks, launcher, timeout=150.0):
    """run.json once every task runs and every worker has reported a step."""
    deadline = time.time() + timeout
    rec = {}
    while time.time() < deadline and launcher.poll() is None:
        try:
            with open(os.path.join(run_dir, "run.json")) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            rec = {}
        rows = {t["task"]: t for t in rec.get("tasks") or []}
        if all(rows.get(t, {}).get("state") == "running" for t in tasks) and all(
                (rows[t].get("progress") or {}).get("step", 0) > 0
                for t in tasks if t.startswith("worker")):
            return rec
        time.sleep(0.5)
    pytest.fail(f"the run did not come up: {json.dumps(rec)[-2000:]}")


def _events(path):
    """(plane name, event names) of an XSpace file: what the trace holds."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    out = {}
    for plane in space.planes:
        names = {m.id: m.name for m in plane.event_metadata.values()}
        out[plane.name] = {names.get(e.metadata_id, "") for line in plane.lines for e in line.events}
    return out


@pytest.mark.tf
def test_profile_traces_every_task_of_a_live_trainer_run(tmp_path, ports):
    """tfcluster profile RUN --seconds 3 on trainer.py (1 ps + 2 workers): one non-empty trace
    per task under <run_dir>/profile/<time>/plugins/profile/<time>/, each with the host trace
    of that task's TensorFlow work, and the way to open it."""
    p = ports(3)
    (tmp_path / "cluster.yaml").write_text(
        "version: 1\n"
        f"cluster: {{ps: [localhost:{p[0]}], worker: [localhost:{p[1]}, localhost:{p[2]}]}}\n"
        f"program: {{command: [python, {os.path.join(REPO, 'trainer.py')}], "
        # steps of ~10 ms (still hundreds in a 3 s trace), not flat out beside the other lane
        "args: [--train_steps=100000000, --step_delay=0.01]}\n"
        f"logdir: {tmp_path / 'runs'}\n")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--run-id", "prof1",
         "--no-live", "--no-security-note", "--profiler"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    run_dir = str(tmp_path / "runs" / "prof1")
    try:
        rec = _wait_running(run_dir, ["ps:0", "worker:0", "worker:1"], launcher)
        ports_seen = {t["task"]: t.get("profiler_port") for t in rec["tasks"]}
        # chosen with the task ports, never derived from them: three distinct ports of its own
        assert len(set(ports_seen.values())) == 3 and not set(ports_seen.values()) & set(p), ports_seen
        # as soon as the workers report progress (the first captures of a process that has
        # just started come back empty): traced again until every trace has data, and said
        r = _tfcluster("profile", "prof1", "--seconds", "3", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "every trace has data" in r.stderr, r.stderr
        assert "tfcluster tensorboard prof1 --profile" in r.stdout
        files = sorted(glob.glob(os.path.join(run_dir, "profile", "*", "plugins", "profile", "*",
                                              "*.xplane.pb")))
        assert [os.path.basename(f) for f in files] == [
            "ps-0.xplane.pb", "worker-0.xplane.pb", "worker-1.xplane.pb"], files
        for f in files:
            assert os.path.getsize(f) > 0
            planes = _events(f)
            host = {n for plane, names in planes.items() if plane.startswith("/host:") for n in names}
            assert host, (f, list(planes))
            if "worker" in f:   # the worker's trace holds its session's graph runs
                assert any("RunGraph" in n or "Session" in n or "MatMul" in n for n in host), \
                    sorted(host)[:50]
        # a task that is not the run's: one line, exit 2
        bad = _tfcluster("profile", "prof1", "--tasks", "worker:7", cwd=tmp_path, env=env)
        assert bad.returncode == 2 and "worker:7" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


@pytest.mark.tf
def test_a_tf2_program_starts_its_profiler_server_with_one_line(tmp_path, ports):
    """A TF2 eager program calls tfcluster.runtime.start_profiler() (TFCLUSTER_PROFILER_PORT);
    TensorFlow's profiler client then traces its tf.function steps."""
    port = ports(1)[0]
    prog = tmp_path / "tf2.py"
    prog.write_text(
        "import sys, tensorflow as tf, tfcluster.runtime as rt\n"
        "print('profiler port', rt.start_profiler(), flush=True)\n"
        "v = tf.Variable(tf.ones([64, 64]))\n"
        "@tf.function\n"
        "def step():\n"
        "    v.assign(tf.matmul(v, v) / 64.0)\n"
        "while True:\n"
        "    step()\n")
    env = dict(os.environ, TFCLUSTER_PROFILER_PORT=str(port), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, str(prog)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == f"profiler port {port}"
        out = tmp_path / "trace"
        r = subprocess.run([sys.executable, "-c",
                            "import sys, tensorflow as tf; tf.profiler.experimental.client.trace("
                            "sys.argv[1], sys.argv[2], 2000)", f"grpc://localhost:{port}", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        files = glob.glob(str(out / "plugins" / "profile" / "*" / "*.xplane.pb"))
        assert len(files) == 1
        host = {n for plane, names in _events(files[0]).items() if plane.startswith("/host:")
                for n in names}
        assert any("step" in n or "MatMul" in n for n in host), sorted(host)[:50]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
