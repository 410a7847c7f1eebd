"""status on a real one-node Slurm (the ``slurm_cluster`` fixture of tests/integration/conftest.py): the launcher that
submitted a job is killed with SIGKILL while the job runs; status must say running (the job
goes on), then lost once the job is cancelled. Skips where Slurm cannot be started."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SLEEPER = """\
import os, time
print("up", os.environ["TFCLUSTER_TASK"], flush=True)
time.sleep(600)
"""


def status(run_dir):
    r = subprocess.run([sys.executable, "-m", "tfcluster", "status", "--json", str(run_dir)],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, (json.loads(r.stdout) if r.stdout else {}), r.stderr


def test_a_live_slurm_job_is_not_lost_when_its_launcher_is_killed(slurm_cluster, tmp_path):
    (tmp_path / "prog.py").write_text(SLEEPER)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {worker: 1}\nprogram: {command: [python, prog.py]}\nlogdir: runs\n")
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    launcher = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml",
                                 "--backend", "slurm", "--no-live", "--run-id", "k1"],
                                cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "runs" / "k1"
    job = None
    try:
        deadline = time.time() + 90
        while time.time() < deadline and job is None:
            outs = list(run_dir.glob("slurm-*.out")) if run_dir.exists() else []
            if outs and "RUNNING" in subprocess.run(["squeue", "-h", "-o", "%T"], capture_output=True,
                                                    text=True, timeout=10).stdout:
                job = outs[0].name[len("slurm-"):-len(".out")]
            time.sleep(0.3)
        assert job, "the job never ran: " + slurm_cluster.queue()
        rc, shown, err = status(run_dir)
        assert (rc, shown.get("result"), shown.get("launcher_alive")) == (3, "running", True), err
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        rc, shown, err = status(run_dir)
        assert (rc, shown["result"], shown["launcher_alive"]) == (3, "running", False), err
        assert shown["slurm_job"] == job and shown["slurm_state"] == "RUNNING"
        text = subprocess.run([sys.executable, "-m", "tfcluster", "status", str(run_dir)],
                              capture_output=True, text=True, timeout=60).stdout
        assert f"Slurm job {job} is RUNNING: the tasks go on" in text and f"scancel {job}" in text
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
        assert slurm_cluster.wait_empty_queue(30) == ""
        rc, shown, err = status(run_dir)
        assert (rc, shown["result"]) == (5, "lost"), (shown, err)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
        if job:
            subprocess.run(["scancel", job], capture_output=True, timeout=30)
