"""TF2 strategies from a cluster file, end to end: ParameterServerStrategy (examples/ps_strategy.py,
a coordinator with serving ps/worker tasks) and MultiWorkerMirroredStrategy (examples/mwms.py),
each under ``tfcluster launch`` with real TensorFlow servers on loopback ports.

The cluster files are the shipped examples (examples/ps_strategy.yaml, examples/mwms.yaml) with
free ports, a temporary logdir and checkpoint folder, and fewer steps.
"""
import importlib.util
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

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")

# the tests run TensorFlow in the tasks only; pytest itself need not import it (seconds)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="TensorFlow is not installed")


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


# ------------------------------------------------------------------ ParameterServerStrategy

def test_pss_example_runs_to_the_end(tmp_path, ports):
    path = cluster_file(tmp_path, ports, "ps_strategy", ["--train_steps=100", "--steps_per_loop=25"])
    proc = start(path, tmp_path)
    assert finish(proc) == 0, tail(proc)
    record = run_record(tmp_path)
    tasks = tasks_of(record)
    assert record["result"] == "succeeded"
    assert tasks["chief:0"]["exit_code"] == 0 and tasks["chief:0"]["restarts"] == 0
    # ps and workers ran the built-in serve program, and were stopped by the launcher
    for t in ("ps:0", "worker:0", "worker:1"):
        assert "tfcluster.runtime.serve" in " ".join(tasks[t]["argv"]), tasks[t]["argv"]
        assert tasks[t]["state"] == "stopped", tasks[t]
        assert "serving at" in task_log(record, t)
    s = summary(task_log(record, "chief:0"), "ps_strategy:")
    assert s["step"] >= 100 and s["resumed_from"] == 0
    assert s["accuracy"] > 0.6, s  # a learnable task: far above chance (0.25)
    assert tasks["chief:0"]["progress"]["step"] == 100
    assert (tmp_path / "ckpt" / "checkpoint").exists()
    assert_all_gone(record)


def test_pss_worker_killed_mid_run_is_survived(tmp_path, ports):
    """TensorFlow's fault tolerance: the coordinator reschedules the dead worker's closures;
    the launcher restarts the worker (on-failure); the run ends with exit 0."""
    path = cluster_file(tmp_path, ports, "ps_strategy",
                        ["--train_steps=300", "--steps_per_loop=25", "--step_delay=0.04"])
    proc = start(path, tmp_path)
    try:
        at = kill_when(proc, tmp_path, "worker:1", min_step=50)
    finally:
        rc = finish(proc)
    assert at < 300, "the worker was killed after the end of training"
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    tasks = tasks_of(record)
    assert record["result"] == "succeeded"
    assert tasks["worker:1"]["restarts"] >= 1, tasks["worker:1"]
    assert tasks["chief:0"]["restarts"] == 0, "the coordinator should have gone on"
    s = summary(task_log(record, "chief:0"), "ps_strategy:")
    assert s["step"] >= 300 and s["resumed_from"] == 0
    assert_all_gone(record)


def test_pss_ps_killed_restarts_coordinator_from_checkpoint(tmp_path, ports):
    """A ps loss loses the variables: the coordinator fails (UnavailableError), the launcher
    restarts the ps (empty) and the coordinator (on-failure), which resumes from its checkpoint."""
    path = cluster_file(tmp_path, ports, "ps_strategy",
                        ["--train_steps=200", "--steps_per_loop=25", "--step_delay=0.04"])
    proc = start(path, tmp_path)
    try:
        at = kill_when(proc, tmp_path, "ps:0", min_step=50)
    finally:
        rc = finish(proc)
    assert at < 200, "the ps was killed after the end of training"
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    tasks = tasks_of(record)
    assert tasks["ps:0"]["restarts"] >= 1 and tasks["chief:0"]["restarts"] >= 1, tasks
    log = task_log(record, "chief:0")
    assert "a restarted coordinator resumes from the latest checkpoint" in log
    s = summary(log, "ps_strategy:")
    assert s["resumed_from"] >= 50 and s["step"] >= 200, s
    assert_all_gone(record)


# ------------------------------------------------------------------ MultiWorkerMirroredStrategy

def test_mwms_example_runs_to_the_end_and_resumes(tmp_path, ports):
    path = cluster_file(tmp_path, ports, "mwms", ["--train_steps=100", "--steps_per_loop=25"])
    proc = start(path, tmp_path)
    assert finish(proc) == 0, tail(proc)
    record = run_record(tmp_path)
    tasks = tasks_of(record)
    assert record["success_rule"] == "all-workers" and record["result"] == "succeeded"
    sums = {}
    for i in (0, 1):
        t = tasks[f"worker:{i}"]
        assert t["state"] == "succeeded" and t["exit_code"] == 0, t
        log = task_log(record, f"worker:{i}")
        # GPUs per worker from jobs.worker.gpus (no GPU here: it trains on its CPU)
        assert f"CUDA_VISIBLE_DEVICES='{i}'" in log
        sums[i] = summary(log, f"mwms: worker:{i}")
        assert sums[i]["step"] == 100 and sums[i]["replicas"] == 2
        assert "StartAbort" not in log, log[-2000:]   # issue 23: no error line at the end
    # synchronous training: both workers hold the same model
    assert sums[0]["loss"] == sums[1]["loss"] and sums[0]["accuracy"] == sums[1]["accuracy"]
    assert sums[0]["accuracy"] > 0.6, sums[0]
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "checkpoint").exists()
    assert not [p for p in os.listdir(ckpt) if p.startswith("workertemp")], os.listdir(ckpt)
    assert_all_gone(record)

    # a second launch with a later target resumes from the chief's checkpoint
    path = cluster_file(tmp_path, ports, "mwms", ["--train_steps=125", "--steps_per_loop=25"],
                        name="again.yaml")
    proc = start(path, tmp_path, tag="again")
    assert finish(proc) == 0, tail(proc)
    record = run_record(tmp_path)
    for i in (0, 1):
        s = summary(task_log(record, f"worker:{i}"), f"mwms: worker:{i}")
        assert s["resumed_from"] == 100 and s["step"] == 125, s
    assert_all_gone(record)

    # at the target already (e.g. a worker restarted after the others finished): each worker
    # ends at once instead of waiting for peers to all-reduce with
    proc = start(path, tmp_path, tag="done")
    assert finish(proc, timeout=60) == 0, tail(proc)
    record = run_record(tmp_path)
    for i in (0, 1):
        log = task_log(record, f"worker:{i}")
        assert "is at step 125 (--train_steps=125)" in log and "done: step=" not in log, log[-2000:]
    assert_all_gone(record)


def test_mwms_worker_killed_every_worker_restarts_and_resumes(tmp_path, ports):
    """A lost MWMS worker aborts the others' collectives (they exit 1); with on-failure (the
    example's policy) every worker is restarted and all resume from the chief's checkpoint."""
    # long enough (a few seconds) for the kill to land mid-run, not after the last step
    path = cluster_file(tmp_path, ports, "mwms", ["--train_steps=1000", "--steps_per_loop=25"])
    proc = start(path, tmp_path)
    try:
        at = kill_when(proc, tmp_path, "worker:1", min_step=50, watch="worker:0")
    finally:
        rc = finish(proc)
    assert at < 1000
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    tasks = tasks_of(record)
    sums = {}
    for i in (0, 1):
        assert tasks[f"worker:{i}"]["restarts"] >= 1, tasks[f"worker:{i}"]
        sums[i] = summary(task_log(record, f"worker:{i}"), f"mwms: worker:{i}")
        assert sums[i]["step"] == 1000 and sums[i]["resumed_from"] >= 50, sums[i]
    assert sums[0]["loss"] == sums[1]["loss"]
    assert_all_gone(record)
