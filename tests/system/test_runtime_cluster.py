"""Real clusters on loopback: the seed trainer by hand, in-graph against serve tasks, errors.

The helpers (shared with tests/system/test_trainer.py) are in tests/helpers/tasks.py. Every
task is its own process in its own session (process group); every group is killed in a ``finally``. Step counts are small.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from helpers import ROOT
from helpers.tasks import _env, _kill_group, assert_all_ended_ok, local_cluster, run_tasks, seed_flag_tasks, summary

SEED = os.path.join(ROOT, "examples", "seed_trainer.py")
IN_GRAPH = os.path.join(ROOT, "examples", "in_graph.py")

pytestmark = pytest.mark.tf


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
        for task, _log, p in procs:
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




def test_the_server_config_of_tasks_that_share_a_machine_does_not_spin(monkeypatch):
    """The flag lands in TensorFlow's own ConfigProto (a renamed field would raise here)."""
    from tfcluster.runtime.context import TaskContext
    from tfcluster.runtime.server import session_config

    monkeypatch.delenv("TFCLUSTER_LOCAL_TASKS", raising=False)
    monkeypatch.delenv("TFCLUSTER_THREAD_SPINNING", raising=False)
    shared = TaskContext(cluster=local_cluster(1, 2), job_name="ps", task_index=0)
    alone = TaskContext(cluster={"ps": ["far.example:1"], "worker": ["localhost:2"]},
                        job_name="worker", task_index=0)
    assert session_config(shared).experimental.disable_thread_spinning is True
    assert session_config(alone).experimental.disable_thread_spinning is False
    assert session_config(shared, spinning=True).experimental.disable_thread_spinning is False
