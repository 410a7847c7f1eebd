"""A transfer-bound training step on tfcluster's runtime, for the simulated-link benchmark
(scripts/netns_links.py starts one process per task inside network namespaces, TF_CONFIG set).

The model is transfer.py's skewed one (a ``--mb`` MB embedding and five small dense layers),
placed with ``--ps_strategy`` and ``--partition_min_bytes`` (the runtime's Placement); the
loss reads every variable densely (``sum(v**2)``), so each replica step moves the whole model
from the ps tasks to the worker and a gradient of the same size back. ``--mode=sync`` wraps
plain SGD in ``SyncReplicasOptimizer`` (every worker's gradient per global step).
``--prefetch=1`` (async): the runtime's ``PrefetchCache`` -- the model reads worker-local copies
that each step refreshes from the ps while it sends its update (same bytes each way per step).

ps tasks serve until killed. Workers run ``--steps`` global steps in a ``TrainingSession``;
the chief prints ``@bench {"steps_per_s": ..., "model_bytes": ..., "bytes_per_ps": ...}``
over the steps after ``--warmup``. ``--progress_secs=S`` (> 0): every worker also reports its
global step to the launcher (``@tfcluster progress``) at most every S seconds, as the sizing
policy reads it (scripts/bench_sizing.py's ``sizing.links``, run by ``tfcluster launch``).
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loop
from transfer import arg, build

import tfcluster.runtime as rt


def main():
    mb, steps, warmup = arg("mb", 8.0), arg("steps", 40), arg("warmup", 4)
    strategy, pmin, mode = arg("ps_strategy", "greedy"), arg("partition_min_bytes", 0), arg("mode", "async")
    prefetch = bool(arg("prefetch", 0))
    progress_secs = arg("progress_secs", 0.0)
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    ctx = rt.task_context()
    server = rt.start_server(ctx)
    if ctx.is_ps:
        rt.join_forever(server)
    placement = rt.Placement(ctx, strategy=strategy, partition_min_bytes=pmin or None)
    sync = mode == "sync"
    with tf.Graph().as_default() as graph, placement.scope():
        gs = tf.compat.v1.train.get_or_create_global_step()
        cache = rt.PrefetchCache(placement.worker_device) if prefetch else None
        with tf.compat.v1.variable_scope("", partitioner=placement.partitioner,
                                         custom_getter=cache.getter if cache else None):
            parts = build(tf, "skewed", mb)
        loss = tf.add_n([tf.reduce_sum(tf.square(v)) for v in parts]) * 1e-9
        opt = tf.compat.v1.train.GradientDescentOptimizer(1e-3)
        if sync:
            opt = rt.make_sync_optimizer(opt, ctx)
        train_op = (cache.minimize(opt, loss, global_step=gs) if cache
                    else opt.minimize(loss, global_step=gs))
        report = placement.report(graph) if ctx.is_chief else None
        nbytes = sum(int(v.shape.num_elements()) * 4 for v in parts)
        marks = []
        progress = rt.ProgressReporter(total=steps, every_secs=progress_secs) if progress_secs > 0 else None

        def on_step(step):
            marks.append((time.monotonic(), step))
            if progress is not None:
                progress(step)

        loop.train(rt, ctx, server, steps, train_op, gs, opt if sync else None, on_step)
    if ctx.is_chief:
        window = [m for m in marks if m[1] >= warmup]
        (t0, s0), (t1, s1) = window[0], window[-1]
        print("@bench " + json.dumps({
            "steps_per_s": (s1 - s0) / (t1 - t0) if t1 > t0 else None, "steps": s1 - s0,
            "window": [t0, t1],   # CLOCK_MONOTONIC: the benchmark reads the tasks' CPU over it
            "model_bytes": nbytes, "bytes_per_ps": report.bytes_per_ps if report else None,
            "mode": mode, "strategy": strategy, "partition_min_bytes": pmin,
            "prefetch": prefetch}), flush=True)
    rt.exit_now(0)


if __name__ == "__main__":
    main()
