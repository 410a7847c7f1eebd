"""Placement: greedy vs round-robin, resource-variable bytes, local variables, partitioning.

Graph building only (no servers): device strings are assigned when ops are created.
"""
from __future__ import annotations

import pytest

from tfcluster.runtime.context import TaskContext
from tfcluster.runtime.placement import (
    GreedyLoadBalancingStrategy,
    Placement,
    RoundRobinStrategy,
    byte_size_load_fn,
    make_strategy,
    placement_report,
)

tf = None  # TensorFlow, imported by the first test (never at collection: it takes seconds)


@pytest.fixture(autouse=True, scope="module")
def _tensorflow():
    global tf
    tf = pytest.importorskip("tensorflow")


def ctx_with(num_ps: int) -> TaskContext:
    return TaskContext(cluster={"ps": [f"localhost:{10 + i}" for i in range(num_ps)],
                                "worker": ["localhost:1", "localhost:2"]},
                       job_name="worker", task_index=1)


def build_skewed(placement: Placement):
    """A big variable followed by small ones, repeatedly: round-robin piles the big ones up."""
    graph = tf.Graph()
    with graph.as_default(), placement.scope():
        for i in range(8):
            tf.compat.v1.get_variable(f"big{i}", [256, 64])     # 64 KiB each
            for j in range(placement.num_ps - 1):
                tf.compat.v1.get_variable(f"small{i}_{j}", [4])  # 16 B each
    return graph


@pytest.mark.parametrize("num_ps", [2, 4])
def test_greedy_balances_skewed_variables_far_better(num_ps):
    rr = placement_report(build_skewed(Placement(ctx_with(num_ps), strategy="round_robin")),
                          num_ps=num_ps)
    greedy = placement_report(build_skewed(Placement(ctx_with(num_ps), strategy="greedy")),
                              num_ps=num_ps)
    assert rr.total_ps_bytes == greedy.total_ps_bytes == 8 * 256 * 64 * 4 + 8 * (num_ps - 1) * 16
    # round-robin puts every big variable on ps:0
    assert rr.max_mean_ratio > 0.9 * num_ps
    assert greedy.max_mean_ratio < 1.05
    assert all(b > 0 for b in greedy.bytes_per_ps)


def test_resource_variable_bytes_from_attrs():
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device("/job:ps/task:0"):
            v = tf.compat.v1.get_variable("w", [100, 10], dtype=tf.float32)
            tf.compat.v1.get_variable("s", [], dtype=tf.int64)
            tf.compat.v1.get_variable("h", [3, 5], dtype=tf.float16)
    op = v.op if v.op.type == "VarHandleOp" else graph.get_operation_by_name("w")
    assert op.type == "VarHandleOp"
    assert op.outputs[0].dtype == tf.resource  # the output says nothing about the size...
    assert byte_size_load_fn(op) == 100 * 10 * 4  # ...the attributes do
    assert byte_size_load_fn(graph.get_operation_by_name("s")) == 8
    assert byte_size_load_fn(graph.get_operation_by_name("h")) == 3 * 5 * 2
    report = placement_report(graph, num_ps=1)
    assert report.bytes_per_ps == [4000 + 8 + 30]
    assert report.of("w").job == "ps" and report.of("w").task == 0


def test_ref_variable_bytes():
    graph = tf.Graph()
    with graph.as_default():
        op = tf.raw_ops.VariableV2(shape=[7, 3], dtype=tf.float64).op
    assert byte_size_load_fn(op) == 7 * 3 * 8


def test_strategies_directly():
    graph = tf.Graph()
    with graph.as_default():
        ops = [tf.compat.v1.get_variable(f"v{i}", [n]).op
               for i, n in enumerate([1000, 10, 10, 1000, 10, 10])]
    greedy = GreedyLoadBalancingStrategy(2)
    assert [greedy(o) for o in ops] == [0, 1, 1, 1, 0, 0] and greedy.loads == [4080, 4080]
    rr = RoundRobinStrategy(3)
    assert [rr(o) for o in ops] == [0, 1, 2, 0, 1, 2]
    with pytest.raises(ValueError, match="unknown ps strategy"):
        make_strategy("random", 2)


def test_local_variables_stay_on_worker_and_sync_optimizer():
    placement = Placement(ctx_with(2), strategy="greedy")
    graph = tf.Graph()
    with graph.as_default(), placement.scope():
        gs = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", [10, 2])
        loc = tf.compat.v1.get_variable("counter", [3], trainable=False,
                                        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        acc, _ = tf.compat.v1.metrics.accuracy(tf.constant([1, 0]), tf.constant([1, 1]))
        opt = tf.compat.v1.train.SyncReplicasOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2)
        opt.minimize(tf.reduce_sum(w), global_step=gs)
    report = placement.report(graph)
    for name in ("counter", "accuracy/count", "accuracy/total", "sync_rep_local_step"):
        assert report.of(name).job == "worker" and report.of(name).task == 1, name
    for name in ("w", "global_step"):
        assert report.of(name).job == "ps", name
    assert "/device:CPU:0" in report.of("w").device  # ps stays on CPU
    assert loc.device.startswith("/job:worker/task:1")
    assert "w" in report.to_text() and report.as_dict()["bytes_per_ps"] == report.bytes_per_ps


def test_partitioning_large_variables_across_ps():
    placement = Placement(ctx_with(4), strategy="greedy", partition_min_bytes=16 * 1024)
    graph = tf.Graph()
    with graph.as_default(), placement.scope():
        with tf.compat.v1.variable_scope("m", partitioner=placement.partitioner):
            big = tf.compat.v1.get_variable("emb", [1024, 64])   # 256 KiB -> 4 parts
            small = tf.compat.v1.get_variable("bias", [64])       # 256 B -> 1 part
    assert len(list(big)) == 4
    assert len(list(small)) == 1  # too small to split
    report = placement.report(graph)
    parts = [v for v in report.variables if v.name.startswith("m/emb/part_")]
    assert sorted(v.task for v in parts) == [0, 1, 2, 3]
    assert report.max_mean_ratio < 1.01 + 256 * 4 / report.total_ps_bytes


def test_no_ps_places_everything_on_worker():
    placement = Placement(TaskContext({"worker": ["localhost:1"]}, "worker", 0))
    graph = tf.Graph()
    with graph.as_default(), placement.scope():
        tf.compat.v1.get_variable("w", [2])
    assert placement.report(graph).of("w").job == "worker"
    assert placement.partitioner is None
