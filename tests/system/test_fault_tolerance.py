"""Fault tolerance with real TensorFlow: restarts recover from checkpoints, nothing hangs.

The kill scenarios run scripts/chaos.py with a fixed plan (SIGKILL of a task when the global
step reaches a fraction of the target); it checks exit 0, the final checkpoint at the target,
the step never going back past the last checkpoint, and nothing left behind.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT

CHAOS = os.path.join(ROOT, "scripts", "chaos.py")

pytestmark = pytest.mark.tf


def chaos(*args, timeout=600):
    r = subprocess.run([sys.executable, CHAOS, "--train-steps", "1500", "--checkpoint-every", "150",
                        *args], capture_output=True, text=True, timeout=timeout)
    return r


def test_kill_worker_then_ps_with_on_failure_reaches_the_target():
    r = chaos("--trials", "1", "--kill", "worker:1@0.3", "--kill", "ps:0@0.6", "--json", "/dev/stdout")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed, 0 failed" in r.stdout
    assert "worker:1@" in r.stdout and "ps:0@" in r.stdout


def test_sync_worker_that_never_comes_back_ends_the_run_with_a_clear_message(tmp_path, ports):
    p = ports(3)
    f = tmp_path / "c.yaml"
    f.write_text(f"cluster: {{ps: [localhost:{p[0]}], worker: [localhost:{p[1]}, localhost:{p[2]}]}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live", "--", "python",
         os.path.join(ROOT, "trainer.py"), "--mode=sync", "--train_steps=100000",
         f"--checkpoint_dir={tmp_path / 'ckpt'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 180
        pid = None
        while time.time() < deadline and pid is None:
            for path in (tmp_path / "runs").glob("*/run.json"):
                try:
                    rec = json.loads(path.read_text())
                except ValueError:
                    continue
                w1 = next(t for t in rec["tasks"] if t["task"] == "worker:1")
                chief = next(t for t in rec["tasks"] if t["task"] == "worker:0")
                if chief.get("progress") and chief["progress"]["step"] > 0:
                    pid = w1["pid"]
            time.sleep(0.3)
        assert pid, "training did not start"
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1
    assert "first failure: worker:1 (SIGKILL)" in out


def test_short_random_chaos_kills_the_chief_which_resumes_from_its_checkpoint():
    """chaos.py's random plan; seed 10 draws one kill, of the chief (worker:0) at 44% of the
    target: the run resumes from the chief's checkpoint and reaches the target."""
    r = chaos("--trials", "1", "--seed", "10")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed, 0 failed (1 kills, 1 restarts" in r.stdout, r.stdout[-3000:]
    assert re.search(r"worker:0@0\.44 +worker:0@\d+ ", r.stdout), r.stdout[-3000:]   # planned, done


def test_ctrl_c_leaves_a_checkpoint_that_the_next_launch_resumes_from(tmp_path, ports):
    p = ports(3)
    f = tmp_path / "c.yaml"
    f.write_text(f"cluster: {{ps: [localhost:{p[0]}], worker: [localhost:{p[1]}, localhost:{p[2]}]}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    ckpt = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live", "--", "python",
           os.path.join(ROOT, "trainer.py"), f"--checkpoint_dir={ckpt}"]
    proc = subprocess.Popen(cmd + ["--train_steps=1000000"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 180
        step = 0
        while time.time() < deadline and step < 300:
            for path in (tmp_path / "runs").glob("*/run.json"):
                try:
                    rec = json.loads(path.read_text())
                except ValueError:
                    continue
                steps = [t["progress"]["step"] for t in rec["tasks"] if t.get("progress")]
                step = max(steps or [0])
            time.sleep(0.3)
        assert step >= 300, "training did not progress"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out[-3000:]
    assert "stopped by signal 15" in out
    saved = int(re.search(r'model_checkpoint_path: ".*-(\d+)"', (ckpt / "checkpoint").read_text()).group(1))
    assert saved >= step, (saved, step)  # the final checkpoint is at least where we interrupted
    r = subprocess.run(cmd + [f"--train_steps={saved + 50}"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:]
    # the chief restores the checkpoint it wrote at Ctrl-C. The global step saved in it can be
    # past its name: the Saver names the file by the step it read, then saves the variables,
    # and the other worker may step in between (asynchronous training; seen in CI: -993 held 994)
    got = re.search(rf"restored \S*-{saved} \(global_step=(\d+)\)", r.stdout)
    assert got and int(got.group(1)) >= saved, r.stdout[-3000:]
