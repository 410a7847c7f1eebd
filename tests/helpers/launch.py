"""Launching the shipped TF2 examples under ``tfcluster launch`` and reading their run records
(tests/system/test_tf2_strategies.py, tests/system/test_keras.py)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from helpers import EXAMPLES


def cluster_file(tmp_path, ports, example, args, name="cluster.yaml"):
    """The example's cluster file with free ports, logdir and checkpoint folder under tmp_path."""
    with open(os.path.join(EXAMPLES, example + ".yaml")) as f:
        doc = yaml.safe_load(f)
    jobs = list(doc["cluster"])
    n = sum(len(doc["cluster"][j]) for j in jobs)
    it = iter(ports(n))
    doc["cluster"] = {j: [f"localhost:{next(it)}" for _ in doc["cluster"][j]] for j in jobs}
    doc["program"]["command"] = ["python", os.path.join(EXAMPLES, example + ".py")]
    doc["program"]["args"] = [f"--checkpoint_dir={tmp_path / 'ckpt'}", *args]
    doc["logdir"] = str(tmp_path / "runs")
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def start(path, tmp_path, tag="launch"):
    out = open(tmp_path / f"{tag}.out", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", path, "--no-live"],
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc.out_path = tmp_path / f"{tag}.out"
    return proc


def finish(proc, timeout=150):
    """Wait for the launcher; on a timeout stop it (it stops its tasks) and fail."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        pytest.fail(f"tfcluster launch did not finish in {timeout}s:\n{tail(proc)}")
    return proc.returncode


def tail(proc, n=60):
    return "\n".join(proc.out_path.read_text().splitlines()[-n:])


def run_record(tmp_path, index=-1):
    runs = sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    with open(runs[index] / "run.json") as f:
        return json.load(f)


def tasks_of(record):
    return {t["task"]: t for t in record["tasks"]}


def task_log(record, task):
    with open(tasks_of(record)[task]["log"]) as f:
        return f.read()


def summary(text, prefix):
    """The JSON object at the end of the example's last ``... done: ...`` line."""
    lines = [ln for ln in text.splitlines() if re.search(prefix + r".* done: step=", ln)]
    assert lines, f"no '{prefix} ... done:' line in:\n{text[-3000:]}"
    return json.loads(lines[-1][lines[-1].index("{"):])


def assert_all_gone(record):
    pids = [t["pid"] for t in record["tasks"] if t["pid"]]
    deadline = time.time() + 10
    alive = pids
    while alive and time.time() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    assert not alive, f"tasks still running: {alive}"


def kill_when(proc, tmp_path, victim, min_step, watch="chief:0", timeout=120):
    """SIGKILL ``victim`` (its pid from run.json) once ``watch`` has reported ``min_step``.
    Returns the step reported at the kill."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            tasks = tasks_of(run_record(tmp_path))
        except (FileNotFoundError, ValueError, IndexError):
            continue  # run.json not written yet, or being replaced
        progress = tasks[watch].get("progress") or {}
        if progress.get("step", 0) >= min_step and tasks[victim]["pid"]:
            os.kill(tasks[victim]["pid"], signal.SIGKILL)
            return progress["step"]
    pytest.fail(f"{watch} never reported step {min_step}:\n{tail(proc)}")
