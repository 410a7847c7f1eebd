"""PrefetchCache (tfcluster.runtime.prefetch) with real TensorFlow: the model reads worker-local
copies, gradients go to the ps variables, each step refreshes the copies; not with sync."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.tf


def build(tf, cache, partitioned=True):
    gs = tf.compat.v1.train.get_or_create_global_step()
    part = tf.compat.v1.fixed_size_partitioner(2) if partitioned else None
    with tf.compat.v1.variable_scope("", custom_getter=cache.getter if cache else None):
        w = tf.compat.v1.get_variable("w", [4, 3], initializer=tf.zeros_initializer(),
                                      partitioner=part)
        b = tf.compat.v1.get_variable("b", [3], initializer=tf.zeros_initializer())
        steps_seen = tf.compat.v1.get_variable("seen", [], trainable=False,
                                               initializer=tf.zeros_initializer())
    if not cache and partitioned:
        w = tf.concat(list(w), 0)
    loss = tf.reduce_sum(tf.square(w - 1.0)) + tf.reduce_sum(tf.square(b - 2.0))
    return gs, loss, steps_seen


def test_prefetched_training_converges_and_updates_the_real_variables():
    import tensorflow as tf

    from tfcluster.runtime import PrefetchCache

    final = {}
    for prefetch in (False, True):
        with tf.Graph().as_default():
            cache = PrefetchCache() if prefetch else None
            gs, loss, seen = build(tf, cache)
            opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            op = cache.minimize(opt, loss, gs) if cache else opt.minimize(loss, global_step=gs)
            if prefetch:
                # copies: local, not trainable, one per part; the non-trainable one not cached
                local = sorted(v.op.name for v in tf.compat.v1.local_variables())
                assert local == ["b_prefetched", "w_part_0_prefetched", "w_part_1_prefetched"]
                trainable = sorted(v.op.name for v in tf.compat.v1.trainable_variables())
                assert trainable == ["b", "w/part_0", "w/part_1"]
                assert isinstance(seen, tf.Variable)
            with tf.compat.v1.train.MonitoredSession() as s:
                for _ in range(40):
                    s.run(op)
                final[prefetch] = s.run([loss, gs])
                if prefetch:
                    real = {v.op.name: x for v, x in zip(
                        tf.compat.v1.trainable_variables(),
                        s.run(tf.compat.v1.trainable_variables()))}
                    copies = {v.op.name: x for v, x in zip(
                        tf.compat.v1.local_variables(), s.run(tf.compat.v1.local_variables()))}
                    # the real variables trained; the copies lag them by at most one update
                    assert abs(real["b"] - 2.0).max() < 0.05
                    assert abs(real["w/part_1"] - 1.0).max() < 0.05
                    assert abs(copies["b_prefetched"] - real["b"]).max() < 0.05
                    assert abs(copies["w_part_1_prefetched"] - real["w/part_1"]).max() < 0.05
    assert final[True][1] == final[False][1] == 40
    assert final[False][0] < 1e-3 and final[True][0] < 1e-3


def test_the_copies_are_on_the_worker_and_the_variables_on_the_ps():
    import tensorflow as tf

    from tfcluster.runtime import Placement, PrefetchCache, parse_tf_config

    cluster = {"ps": ["localhost:1", "localhost:2"], "worker": ["localhost:3"]}
    ctx = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    placement = Placement(ctx, strategy="greedy", use_gpu=False)
    with tf.Graph().as_default(), placement.scope():
        cache = PrefetchCache(placement.worker_device)
        gs, loss, _ = build(tf, cache)
        cache.minimize(tf.compat.v1.train.GradientDescentOptimizer(0.1), loss, gs)
        for v in tf.compat.v1.trainable_variables():
            assert v.device.startswith("/job:ps"), v.device
        for v in tf.compat.v1.local_variables():
            assert v.device.startswith("/job:worker/task:0"), (v.op.name, v.device)


def test_not_with_sync_replicas():
    import tensorflow as tf

    from tfcluster.runtime import PrefetchCache

    with tf.Graph().as_default():
        cache = PrefetchCache()
        gs, loss, _ = build(tf, cache, partitioned=False)
        opt = tf.compat.v1.train.SyncReplicasOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=1)
        with pytest.raises(ValueError, match="SyncReplicasOptimizer"):
            cache.minimize(opt, loss, gs)
