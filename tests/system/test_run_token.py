"""A task never trains against another run's ps: tfcluster's runtime (trainer.py through
``TrainingSession``) checks the run's token (``TFCLUSTER_RUN_TOKEN``) on ps:0 before training.
Two "runs" share one ps here, as a stale endpoint or a reused port would make them: the first
trains, the second stops with one line naming the ps, and the first goes on."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT, SRC

TRAINER = os.path.join(ROOT, "trainer.py")
pytestmark = pytest.mark.tf


def _start(argv, tf_config, token, log):
    env = dict(os.environ, PYTHONPATH=SRC, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=json.dumps(tf_config),
               TFCLUSTER_RUN_TOKEN=token)
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.timeout(600)
def test_a_worker_of_another_run_stops_before_training_against_this_runs_ps(tmp_path, ports):
    p = ports(3)
    cluster = {"ps": [f"localhost:{p[0]}"], "worker": [f"localhost:{p[1]}", f"localhost:{p[2]}"]}
    logs = {n: open(tmp_path / f"{n}.log", "w+") for n in ("ps", "a", "b")}
    procs = []
    try:
        procs.append(_start([sys.executable, "-m", "tfcluster.runtime.serve"],
                            {"cluster": cluster, "task": {"type": "ps", "index": 0}}, "run-a", logs["ps"]))
        a = _start([sys.executable, TRAINER, "--train_steps=100000000", "--step_delay=0.01",
                    f"--checkpoint_dir={tmp_path}/ckpt"],
                   {"cluster": cluster, "task": {"type": "worker", "index": 0}}, "run-a", logs["a"])
        procs.append(a)
        deadline = time.time() + 240
        while time.time() < deadline and "step" not in (tmp_path / "a.log").read_text():
            time.sleep(0.5)
        assert a.poll() is None and "step" in (tmp_path / "a.log").read_text(), (tmp_path / "a.log").read_text()[-2000:]
        b = _start([sys.executable, TRAINER, "--train_steps=100"],
                   {"cluster": cluster, "task": {"type": "worker", "index": 1}}, "run-b", logs["b"])
        procs.append(b)
        rc = b.wait(240)
        out = (tmp_path / "b.log").read_text()
        assert rc != 0, out[-2000:]
        assert f"worker:1: the ps at localhost:{p[0]} belongs to another run" in out, out[-2000:]
        assert a.poll() is None, "the first run's worker went on"
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for f in logs.values():
            f.close()
