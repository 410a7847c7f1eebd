"""A run in its own network with real TensorFlow: a default ``tfcluster launch`` of trainer.py
trains to its end while another user's TCP connections to every port the run's tasks listen on
(the profiler's too, with --profiler) fail, and a TF1 client (``ReadFile`` placed on the ps, as
an attacker would) gets no answer; the same launched by an ordinary user, whose tasks keep its
uid. With the profiler on, ports written in the file (14222 and 44222) launch and train, in the
host network too, where the old rule (port +- 30000) gave the ps's profiler the worker's port.
(Without TensorFlow: tests/integration/test_private_network.py.)"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from helpers import ROOT, SRC
from helpers.other_user import Readable, python_path, system_python

TRAINER = os.path.join(ROOT, "trainer.py")
OTHER = 65534                   # mallory: another ordinary user
SECOND = 4242                   # an ordinary user who launches (no passwd entry needed)

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other users")]

ATTACK = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_eager_execution()
port = int(sys.argv[1])
with tf1.device("/job:ps/task:0"):
    read = tf.raw_ops.ReadFile(filename="/etc/hostname")
cfg = tf1.ConfigProto(operation_timeout_in_ms=8000)
try:
    with tf1.Session(f"grpc://127.0.0.1:{port}", config=cfg) as s:
        print("ANSWERED", s.run(read)[:20], flush=True)
except Exception as e:
    print("NO ANSWER", type(e).__name__, flush=True)
"""


@pytest.fixture(scope="module")
def readable():
    """This checkout's files as other users can read them (tests/helpers/other_user.py)."""
    r = Readable(SECOND)
    yield r
    r.close()


def _python_for(readable):
    """(python, PYTHONPATH) with which another user runs TensorFlow and this tfcluster: the
    system's Python of this minor version over this environment's site-packages (None without
    that Python: then the attacker's check runs as root, who reaches more, not less)."""
    python = system_python()
    return None if python is None else (python, python_path(readable, SRC))


def _as(uid):
    def drop():
        os.setgid(uid)
        os.setuid(uid)
    return drop


def _attack(port, readable):
    """What an attacker's TF1 client gets from 127.0.0.1:port: 'ANSWERED ...' or 'NO ANSWER ...'."""
    py = _python_for(readable)
    argv, env, pre = [sys.executable, "-c", ATTACK, str(port)], dict(os.environ), None
    if py is not None:
        argv[0], env["PYTHONPATH"], pre = py[0], py[1], _as(OTHER)
    r = subprocess.run(argv, capture_output=True, text=True, env=env, preexec_fn=pre, timeout=120)
    return (r.stdout.strip().splitlines() or [r.stderr.strip()[-200:]])[-1]


def _tcp(port, uid=OTHER) -> bool:
    code = (f"import encodings.idna, os, socket, sys\nos.setgid({uid}); os.setuid({uid})\n"
            f"try:\n socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
            f"except OSError: sys.exit(1)")
    return subprocess.run([sys.executable, "-I", "-c", code], timeout=30).returncode == 0


def _file(folder, ports, steps, extra="", trainer=TRAINER):
    f = os.path.join(folder, "cluster.yaml")
    with open(f, "w") as fh:
        fh.write(f"cluster: {{ps: [localhost:{ports[0]}], worker: [localhost:{ports[1]}, localhost:{ports[2]}]}}\n"
                 f"program: {{command: [python, {trainer}], args: [--train_steps={steps}, "
                 f"--checkpoint_dir={folder}/ckpt]}}\nlogdir: {folder}/runs\n{extra}")
    return f


def _wait_training(run_dir, launcher, timeout=240):
    deadline = time.time() + timeout
    rec = {}
    while time.time() < deadline and launcher.poll() is None:
        try:
            with open(os.path.join(run_dir, "run.json")) as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            rec = {}
        rows = rec.get("tasks") or []
        if rows and all(t.get("state") == "running" for t in rows) and any(
                (t.get("progress") or {}).get("step", 0) > 0 for t in rows):
            return rec
        time.sleep(0.5)
    pytest.fail(f"the run did not start training: {json.dumps(rec)[-1500:]}")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("who", ["root", "ordinary user"])
def test_a_default_run_trains_while_another_user_reaches_none_of_its_ports(who, ports, readable):
    trainer = TRAINER
    if who == "root":
        python, env, pre = sys.executable, dict(os.environ, PYTHONPATH=SRC), None
    else:
        py = _python_for(readable)
        if py is None:
            pytest.skip("no system Python of this version (/usr/bin/python3.X) for another user here")
        python, pre, trainer = py[0], _as(SECOND), readable(TRAINER)
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": py[1], "LANG": "C.UTF-8"}
    folder = tempfile.mkdtemp(prefix="tfc-pn-")
    os.chmod(folder, 0o755)
    if who != "root":
        os.chown(folder, SECOND, SECOND)
    env["HOME"] = folder
    p = ports(3)
    try:
        f = _file(folder, p, 1000, trainer=trainer)
        if who != "root":
            os.chown(f, SECOND, SECOND)
        launcher = subprocess.Popen([python, "-m", "tfcluster", "launch", f, "--no-live", "--run-id", "v1",
                                     "--profiler"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env=env, cwd=folder, preexec_fn=pre, start_new_session=True)
        run_dir = os.path.join(folder, "runs", "v1")
        rec = _wait_training(run_dir, launcher)
        if who != "root":          # first: the tasks keep the launcher's uid (no root inside)
            for t in rec["tasks"]:
                with open(f"/proc/{t['pid']}/status") as fh:
                    uids = next(ln for ln in fh if ln.startswith("Uid:")).split()[1:]
                assert uids == [str(SECOND)] * 4, uids
        assert rec["network"]["mode"] == "private"
        # the workers wait (SIGSTOP to their process groups) while the attacks are made, so that
        # the run is still training when they are, however slow the machine; SIGCONT after
        workers = [os.getpgid(t["pid"]) for t in rec["tasks"] if t["task"].startswith("worker")]
        others = {os.getpgid(launcher.pid)} | {os.getpgid(t["pid"]) for t in rec["tasks"]
                                                if not t["task"].startswith("worker")}
        assert len(set(workers)) == 2 and not set(workers) & others, (workers, others)
        for g in workers:
            os.killpg(g, signal.SIGSTOP)
        try:
            listened = sorted({t["profiler_port"] for t in rec["tasks"]} | set(p))
            assert len(listened) == 6
            for port in listened:                      # every task port and profiler port: closed
                assert not _tcp(port), port
            assert _attack(p[0], readable).startswith("NO ANSWER")
            assert launcher.poll() is None, "the run ended before the attacks were made"
        finally:
            for g in workers:
                os.killpg(g, signal.SIGCONT)
        out = launcher.communicate(timeout=600)[0].decode()
        assert launcher.returncode == 0, out[-3000:]
        assert "run succeeded" in out
        final = json.load(open(os.path.join(run_dir, "run.json")))
        assert max((t.get("progress") or {}).get("step", 0) for t in final["tasks"]) >= 1000
    finally:
        if 'launcher' in locals() and launcher.poll() is None:
            os.killpg(launcher.pid, 9)
            launcher.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("network", ["host", "private"])
def test_ports_14222_and_44222_with_the_profiler_launch_and_train(network, tmp_path):
    """The ps at 14222 and a worker at 44222: the old profiler rule gave the ps's profiler
    44222, the worker's own port, and the launch failed. The profiler's ports are chosen now."""
    from tfcluster.net.ports import port_in_use
    if network == "host" and any(port_in_use(x) for x in (14222, 44222, 44223)):
        pytest.skip("14222/44222/44223 are taken on this machine")
    f = _file(str(tmp_path), [14222, 44222, 44223], 200, extra=f"network: {network}\n")
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", f, "--no-live", "--profiler",
                        "--run-id", "p1"], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SRC),
                       timeout=500)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.load(open(tmp_path / "runs" / "p1" / "run.json"))
    assert rec["network"]["mode"] == network
    prof = {t["task"]: t["profiler_port"] for t in rec["tasks"]}
    assert len(set(prof.values())) == 3 and not set(prof.values()) & {14222, 44222, 44223}, prof
