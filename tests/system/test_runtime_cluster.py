"""Real clusters on loopback: the seed trainer by hand, in-graph against serve tasks, errors.

Also the helpers that tests/test_trainer.py uses. Every task is its own process in its own
session (process group); every group is killed in a ``finally``. Step counts are small.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from conftest import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(ROOT, "trainer.py")
SEED = os.path.join(ROOT, "examples", "seed_trainer.py")
IN_GRAPH = os.path.join(ROOT, "examples", "in_graph.py")

pytestmark = pytest.mark.tf


@dataclass
class Result:
    task: str
    rc: Optional[int]  # None: still running at the deadline (killed)
    output: str
    secs: float


def _env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    src = os.path.join(ROOT, "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def run_tasks(tasks: Sequence[Tuple[str, List[str], Dict[str, str]]], tmp_path,
              timeout: float = 90.0) -> Dict[str, Result]:
    """Start every (task, argv, env) at once and wait for all of them to end by themselves
    (until ``timeout``); kill every process group in any case."""
    procs = []
    start = time.monotonic()
    try:
        for task, argv, env in tasks:
            log = open(tmp_path / f"{task.replace(':', '')}.log", "w+")
            p = subprocess.Popen(argv, cwd=ROOT, env=_env(env), stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            procs.append((task, p, log))
        ended: Dict[str, float] = {}
        while len(ended) < len(procs) and time.monotonic() - start < timeout:
            for task, p, _ in procs:
                if task not in ended and p.poll() is not None:
                    ended[task] = time.monotonic() - start
            time.sleep(0.1)
        results = {}
        for task, p, log in procs:
            alive = p.poll() is None
            _kill_group(p)
            log.seek(0)
            results[task] = Result(task, None if alive else p.returncode, log.read(),
                                   ended.get(task, time.monotonic() - start))
            log.close()
        return results
    finally:
        for _, p, log in procs:
            _kill_group(p)
            log.close()


def tf_config_tasks(script: str, cluster: Dict[str, List[str]], args: List[str]):
    tasks = []
    for job, hosts in cluster.items():
        for i in range(len(hosts)):
            cfg = json.dumps({"cluster": cluster, "task": {"type": job, "index": i}})
            tasks.append((f"{job}:{i}", [sys.executable, script, *args], {"TF_CONFIG": cfg}))
    return tasks


def seed_flag_tasks(script: str, ps: List[str], workers: List[str], args: List[str]):
    base = [f"--ps_hosts={','.join(ps)}", f"--worker_hosts={','.join(workers)}"]
    return [(f"{job}:{i}", [sys.executable, script, *base, f"--job_name={job}", f"--task_index={i}",
                            *args], {})
            for job, hosts in (("ps", ps), ("worker", workers)) for i in range(len(hosts))]


def assert_all_ended_ok(results: Dict[str, Result]) -> None:
    for r in results.values():
        assert r.rc == 0, f"{r.task} rc={r.rc} after {r.secs:.1f}s\n{r.output[-3000:]}"


SUMMARY = re.compile(r"global_step=(\d+) accuracy=([0-9.]+) loss=([0-9.]+)")


def summary(result: Result) -> Tuple[int, float, float]:
    found = SUMMARY.findall(result.output)
    assert len(found) == 1, f"{result.task}: expected one summary line\n{result.output[-3000:]}"
    step, acc, loss = found[0]
    return int(step), float(acc), float(loss)


def local_cluster(num_ps: int, num_workers: int):
    ports = free_ports(num_ps + num_workers)
    return {"ps": [f"localhost:{p}" for p in ports[:num_ps]],
            "worker": [f"localhost:{p}" for p in ports[num_ps:]]}


# --- by hand with the seed's flags: four processes, every one ends by itself ------------------

def test_seed_trainer_by_hand_four_processes(tmp_path):
    cluster = local_cluster(2, 2)
    tasks = seed_flag_tasks(SEED, cluster["ps"], cluster["worker"],
                            ["--train_steps=150", f"--logdir={tmp_path / 'logs'}"])
    results = run_tasks(tasks, tmp_path, timeout=90)
    assert_all_ended_ok(results)
    for i in (0, 1):
        assert f"ps {i}: all workers done" in results[f"ps:{i}"].output
        assert re.search(r"worker \d: done: global_step=\d+", results[f"worker:{i}"].output)


# --- in-graph replication against "just serve" tasks -----------------------------------------

def test_in_graph_example_against_serve_tasks(tmp_path):
    cluster = local_cluster(1, 2)
    serve = [sys.executable, "-m", "tfcluster.runtime.serve"]
    procs = []
    try:
        for job, hosts in cluster.items():
            for i in range(len(hosts)):
                cfg = json.dumps({"cluster": cluster, "task": {"type": job, "index": i}})
                log = open(tmp_path / f"serve-{job}{i}.log", "w+")
                procs.append((f"{job}:{i}", log, subprocess.Popen(
                    serve, cwd=ROOT, env=_env({"TF_CONFIG": cfg}), stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True)))
        spec = f"ps={cluster['ps'][0]};worker={','.join(cluster['worker'])}"
        client = run_tasks([("client", [sys.executable, IN_GRAPH, f"--cluster={spec}",
                                        "--train_steps=100"], {})], tmp_path, timeout=90)["client"]
        assert client.rc == 0, client.output[-3000:]
        step, acc, _ = summary(client)
        assert step == 100 and acc >= 0.9
        # the serve tasks are still serving; SIGTERM ends each promptly with exit 0
        for task, log, p in procs:
            assert p.poll() is None, task
            os.killpg(p.pid, signal.SIGTERM)
        for task, log, p in procs:
            rc = p.wait(timeout=15)
            log.seek(0)
            out = log.read()
            assert rc == 0, f"{task}: rc={rc}\n{out[-2000:]}"
            assert "SIGTERM received" in out
    finally:
        for _, log, p in procs:
            _kill_group(p)
            log.close()


# --- errors --------------------------------------------------------------------------------

def test_taken_port_is_one_clear_line_and_exit_2(capsys):
    from tfcluster.runtime import serve

    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        rc = serve.main([f"--ps_hosts=localhost:{port}", "--worker_hosts=localhost:1",
                         "--job_name=ps", "--task_index=0"])
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert rc == 2
    line = [ln for ln in err.splitlines() if ln.startswith("tfcluster: error:")]
    assert len(line) == 1
    assert f"ps:0: port {port} is already in use" in line[0]
    assert "Could not start gRPC server" in line[0]


def test_bad_context_exit_2(capsys):
    from tfcluster.runtime import serve

    assert serve.main(["--job_name=ps"]) == 2
    assert "tfcluster: error:" in capsys.readouterr().err
