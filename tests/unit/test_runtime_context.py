"""Task context parsing (TF_CONFIG, seed flags), is-chief rule, thread pools: no TensorFlow."""
from __future__ import annotations

import json

import pytest

from tfcluster.runtime.context import ContextError, TaskContext, parse_cluster, parse_tf_config, task_context
from tfcluster.runtime.server import default_device_filters, thread_pool_sizes, thread_spinning

CLUSTER = {"ps": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]}


def tf_config(cluster, job, index):
    return json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})


def test_tf_config_worker():
    ctx = parse_tf_config(tf_config(CLUSTER, "worker", 1))
    assert (ctx.job_name, ctx.task_index, ctx.task_id) == ("worker", 1, "worker:1")
    assert not ctx.is_chief and ctx.is_worker and not ctx.is_ps
    assert ctx.num_workers == 2 and ctx.num_ps == 1
    assert ctx.worker_index == 1
    assert ctx.address == "localhost:2224" and ctx.port == 2224
    assert ctx.device == "/job:worker/task:1"
    assert ctx.target() == "grpc://localhost:2224"
    assert json.loads(ctx.tf_config())["task"] == {"type": "worker", "index": 1}


def test_is_chief_rule():
    assert parse_tf_config(tf_config(CLUSTER, "worker", 0)).is_chief
    assert not parse_tf_config(tf_config(CLUSTER, "ps", 0)).is_chief
    with_chief = dict(CLUSTER, chief=["localhost:2225"])
    chief = parse_tf_config(tf_config(with_chief, "chief", 0))
    w0 = parse_tf_config(tf_config(with_chief, "worker", 0))
    assert chief.is_chief and not w0.is_chief
    assert chief.num_workers == 3
    assert chief.replica_tasks == ["chief:0", "worker:0", "worker:1"]
    assert chief.worker_index == 0 and w0.worker_index == 1


def test_evaluator_is_not_in_cluster():
    ctx = parse_tf_config(tf_config(CLUSTER, "evaluator", 0))
    assert ctx.is_evaluator and not ctx.in_cluster and ctx.address is None
    assert ctx.worker_index == -1 and not ctx.is_chief


@pytest.mark.parametrize("text, words", [
    ("not json", "not valid JSON"),
    (json.dumps({"cluster": CLUSTER}), "task"),
    (tf_config(CLUSTER, "worker", 5), "has only 2"),
    (tf_config(CLUSTER, "chief", 0), "not in the cluster"),
    (tf_config({"ps": "localhost:1"}, "ps", 0), "list"),
])
def test_tf_config_errors(text, words):
    with pytest.raises(ContextError, match=words):
        parse_tf_config(text)


def test_seed_flags_without_tf_config():
    ctx = task_context(ps_hosts="h0:1,h1:2", worker_hosts="h2:3,h3:4", job_name="worker",
                       task_index=1, environ={})
    assert ctx.source == "flags"
    assert ctx.cluster == {"worker": ["h2:3", "h3:4"], "ps": ["h0:1", "h1:2"]}
    assert ctx.task_id == "worker:1" and not ctx.is_chief
    ctx0 = task_context(ps_hosts="h0:1", worker_hosts="h2:3", job_name="worker", environ={})
    assert ctx0.task_index == 0 and ctx0.is_chief


def test_flags_win_over_tf_config():
    env = {"TF_CONFIG": tf_config(CLUSTER, "worker", 1)}
    assert task_context(environ=env).task_id == "worker:1"
    assert task_context(job_name="ps", task_index=0, environ=env).task_id == "ps:0"
    ctx = task_context(ps_hosts="a:1", worker_hosts="a:2", job_name="worker", task_index=0,
                       environ=env)
    assert ctx.cluster == {"worker": ["a:2"], "ps": ["a:1"]} and ctx.source == "TF_CONFIG+flags"
    # only the index given: the job comes from TF_CONFIG
    assert task_context(task_index=0, environ=env).task_id == "worker:0"


def test_chief_hosts_flag():
    ctx = task_context(ps_hosts="a:1", worker_hosts="a:2", chief_hosts="a:3", job_name="chief",
                       environ={})
    assert ctx.is_chief and ctx.num_workers == 2


def test_no_context_is_an_error():
    with pytest.raises(ContextError, match="TF_CONFIG"):
        task_context(environ={})
    with pytest.raises(ContextError, match="job_name"):
        task_context(ps_hosts="a:1", worker_hosts="a:2", environ={})


def test_parse_cluster_forms():
    assert parse_cluster("ps=a:1;worker=a:2,a:3") == {"worker": ["a:2", "a:3"], "ps": ["a:1"]}
    assert parse_cluster(json.dumps(CLUSTER)) == CLUSTER
    assert parse_cluster(tf_config(CLUSTER, "ps", 0)) == CLUSTER
    with pytest.raises(ContextError):
        parse_cluster("nonsense")


def test_local_task_count_and_thread_pools(monkeypatch):
    ctx = TaskContext(cluster={"ps": ["localhost:1"], "worker": ["127.0.0.1:2", "far.example:3"]},
                      job_name="worker", task_index=0)
    assert ctx.local_task_count() == 2
    monkeypatch.setattr("tfcluster.runtime.server.available_cores", lambda: 8)
    monkeypatch.delenv("TFCLUSTER_INTRA_OP_THREADS", raising=False)
    monkeypatch.delenv("TFCLUSTER_INTER_OP_THREADS", raising=False)
    assert thread_pool_sizes(ctx) == (4, 4)
    monkeypatch.setattr("tfcluster.runtime.server.available_cores", lambda: 2)
    three = TaskContext(cluster=CLUSTER, job_name="ps", task_index=0)
    assert thread_pool_sizes(three) == (1, 2)  # at least 1 intra, 2 inter
    monkeypatch.setenv("TFCLUSTER_INTRA_OP_THREADS", "3")
    assert thread_pool_sizes(three)[0] == 3
    assert thread_pool_sizes(three, intra_op=5, inter_op=6) == (5, 6)


def test_tasks_that_share_a_machine_do_not_spin(monkeypatch):
    monkeypatch.delenv("TFCLUSTER_LOCAL_TASKS", raising=False)
    monkeypatch.delenv("TFCLUSTER_THREAD_SPINNING", raising=False)
    shared = TaskContext(cluster=CLUSTER, job_name="worker", task_index=1)  # 3 tasks here
    alone = TaskContext(cluster={"ps": ["far.example:1"], "worker": ["localhost:2"]},
                        job_name="worker", task_index=0)
    assert shared.local_task_count() > 1 and alone.local_task_count() == 1
    assert thread_spinning(shared) is False
    assert thread_spinning(alone) is True  # TensorFlow's default
    monkeypatch.setenv("TFCLUSTER_LOCAL_TASKS", "1")  # what the launcher says wins
    assert thread_spinning(shared) is True
    monkeypatch.setenv("TFCLUSTER_THREAD_SPINNING", "1")
    monkeypatch.setenv("TFCLUSTER_LOCAL_TASKS", "3")
    assert thread_spinning(shared) is True
    monkeypatch.setenv("TFCLUSTER_THREAD_SPINNING", "off")
    assert thread_spinning(alone) is False
    assert thread_spinning(alone, spinning=True) is True  # the argument wins


def test_device_filters():
    w1 = parse_tf_config(tf_config(CLUSTER, "worker", 1))
    assert default_device_filters(w1) == ["/job:ps", "/job:worker/task:1"]
    assert default_device_filters(parse_tf_config(tf_config(CLUSTER, "ps", 0))) == []
