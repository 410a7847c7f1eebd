"""The task contract (tfcluster/plan/contract.py) as tables: TF_CONFIG, the seed's task flags, the
environment every task gets, and the symbolic interpreter."""
from __future__ import annotations

import json

import pytest

from tfcluster.plan import contract

SEED = {"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]}
FULL = {"chief": ["c:1"], "ps": ["p0:2", "p1:3"], "worker": ["w:4"]}


@pytest.mark.parametrize("endpoints, cluster", [
    (SEED, SEED),
    ({**FULL, "evaluator": ["e:5"]}, FULL),                      # evaluator: not in the cluster
    ({"evaluator": ["e:5"]}, {}),
    ({"local": ["localhost:2222", "localhost:2223"]}, {"local": ["localhost:2222", "localhost:2223"]}),
])
def test_cluster_dict_leaves_the_evaluator_out(endpoints, cluster):
    assert contract.cluster_dict(endpoints) == cluster


@pytest.mark.parametrize("cluster, job, index", [
    (SEED, "worker", 1), (SEED, "ps", 0), (FULL, "chief", 0), (FULL, "evaluator", 0),
    (FULL, "ps", "1"),                                           # an index as text is a number
])
def test_tf_config_is_tensorflows_format(cluster, job, index):
    expect = {"cluster": {j: list(e) for j, e in cluster.items()}, "task": {"type": job, "index": int(index)}}
    assert contract.tf_config(cluster, job, index) == expect
    text = contract.tf_config_json(cluster, job, index)
    assert json.loads(text) == expect and " " not in text        # compact, one word in a shell line


@pytest.mark.parametrize("cluster, job, index, flags", [
    (SEED, "worker", 1, ["--job_name=worker", "--task_index=1", "--ps_hosts=ps0:2222",
                         "--worker_hosts=w0:2222,w1:2222"]),
    (SEED, "ps", 0, ["--job_name=ps", "--task_index=0", "--ps_hosts=ps0:2222",
                     "--worker_hosts=w0:2222,w1:2222"]),
    (FULL, "chief", 0, ["--job_name=chief", "--task_index=0", "--chief_hosts=c:1", "--ps_hosts=p0:2,p1:3",
                        "--worker_hosts=w:4"]),
])
def test_task_flags_are_the_seeds(cluster, job, index, flags):
    assert contract.task_flags(cluster, job, index) == flags
    assert contract.task_argv(["python", "t.py", "--lr=1"], cluster, job, index, True) == [
        "python", "t.py", "--lr=1"] + flags
    assert contract.task_argv(["python", "t.py"], cluster, job, index, False) == ["python", "t.py"]


@pytest.mark.parametrize("kwargs, expect", [
    ({}, {"PYTHONUNBUFFERED": "1", "TFCLUSTER_TASK": "worker:1", "TFCLUSTER_RESTART_COUNT": "0",
          "TFCLUSTER_MAX_RESTARTS": "0"}),
    ({"gpus": ""}, {"CUDA_VISIBLE_DEVICES": ""}),
    ({"gpus": "0,1"}, {"CUDA_VISIBLE_DEVICES": "0,1"}),
    ({"run_dir": "/runs/r1"}, {"TFCLUSTER_RUN_DIR": "/runs/r1"}),
    ({"local_tasks": 3}, {"TFCLUSTER_LOCAL_TASKS": "3"}),
    ({"local_tasks": 0}, {"TFCLUSTER_LOCAL_TASKS": "1"}),         # at least this task
    ({"restart_count": 2, "max_restarts": 3}, {"TFCLUSTER_RESTART_COUNT": "2", "TFCLUSTER_MAX_RESTARTS": "3"}),
    ({"file_env": {"LR": "0.1", "TFCLUSTER_TASK": "spoofed"}}, {"LR": "0.1", "TFCLUSTER_TASK": "worker:1"}),
])
def test_task_env(kwargs, expect):
    env = contract.task_env("worker", 1, SEED, **kwargs)
    assert {k: env.get(k) for k in expect} == expect
    assert json.loads(env["TF_CONFIG"]) == {"cluster": SEED, "task": {"type": "worker", "index": 1}}
    for absent, key in [("gpus", "CUDA_VISIBLE_DEVICES"), ("run_dir", "TFCLUSTER_RUN_DIR"),
                        ("local_tasks", "TFCLUSTER_LOCAL_TASKS")]:
        if absent not in kwargs:
            assert key not in env


def test_task_env_without_a_cluster_leaves_tf_config_to_where_the_task_runs():
    env = contract.task_env("worker", 0, None)
    assert "TF_CONFIG" not in env and env["TFCLUSTER_TASK"] == "worker:0"


def test_the_profiler_port_is_given_only_when_the_plan_chose_one():
    """No port is derived from a task's own: without a chosen port nothing is opened."""
    assert "TFCLUSTER_PROFILER_PORT" not in contract.task_env("worker", 1, SEED)
    assert "TFCLUSTER_PROFILER_PORT" not in contract.task_env("worker", 1, None)
    assert contract.task_env("worker", 1, SEED, profiler=4000)["TFCLUSTER_PROFILER_PORT"] == "4000"


@pytest.mark.parametrize("argv, symbolic, local, shown", [
    (["python", "t.py"], ["{python}", "t.py"], ["/venv/bin/python3", "t.py"], ["python", "t.py"]),
    (["python3", "-m", "m"], ["{python}", "-m", "m"], ["/venv/bin/python3", "-m", "m"], ["python", "-m", "m"]),
    (["python3.11", "t.py"], ["python3.11", "t.py"], ["python3.11", "t.py"], ["python3.11", "t.py"]),
    (["bash", "python"], ["bash", "python"], ["bash", "python"], ["bash", "python"]),
    ([], [], [], []),
])
def test_the_symbolic_interpreter(argv, symbolic, local, shown):
    assert contract.symbolic_argv(argv) == symbolic
    assert contract.resolve_argv(symbolic, ["/venv/bin/python3"]) == local
    assert contract.display_argv(symbolic) == shown


def test_resolve_argv_takes_an_interpreter_of_several_words():
    assert contract.resolve_argv(["{python}", "t.py"], ["env", "python3", "-u"]) == [
        "env", "python3", "-u", "t.py"]


@pytest.mark.parametrize("value, count", [(None, 0), ("0", 0), ("3", 3), ("x", 0), ("-1", 0), ("", 0)])
def test_a_program_reads_its_restart_count(monkeypatch, value, count):
    if value is None:
        monkeypatch.delenv("TFCLUSTER_RESTART_COUNT", raising=False)
    else:
        monkeypatch.setenv("TFCLUSTER_RESTART_COUNT", value)
    assert contract.restart_count() == count


def test_data_service_address_and_tf_config_without_the_data_jobs():
    cluster = {"worker": ["h:1", "h:2"], "tfdata_dispatcher": ["d:5"], "tfdata_worker": ["d:6", "e:6"]}
    env = contract.task_env("worker", 1, cluster)
    assert env[contract.DATA_SERVICE] == "grpc://d:5"
    assert json.loads(env["TF_CONFIG"])["cluster"] == {"worker": ["h:1", "h:2"]}
    assert contract.task_flags(cluster, "worker", 0) == ["--job_name=worker", "--task_index=0",
                                                         "--worker_hosts=h:1,h:2"]
    # a data worker finds its own address in the whole layout
    own = json.loads(contract.task_env("tfdata_worker", 1, cluster)["TF_CONFIG"])
    assert own["cluster"]["tfdata_worker"][1] == "e:6"
    assert contract.DATA_SERVICE not in contract.task_env("worker", 0, {"worker": ["h:1"]})
    assert contract.chief_task(["tfdata_dispatcher", "tfdata_worker", "local"]) == "local:0"
    from tfcluster.core import rules  # one vocabulary: the contract spells the rulebook's names
    assert contract.DATA_DISPATCHER == rules.DATA_SERVICE_JOBS[0]
