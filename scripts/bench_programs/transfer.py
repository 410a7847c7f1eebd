"""A transfer-bound model on tfcluster's runtime (run under ``tfcluster launch``): every step
the worker reads every variable from the ps and sends back a dense update of the same size,
so a step moves 2 x (model bytes) through the ps tasks and computes almost nothing.

``--model=flat``: one float32 variable of ``--mb`` MB. ``--model=skewed``: one large
embedding (``--mb`` MB) and several small layers, placed with ``--ps_strategy`` and
``--partition_min_bytes`` (the runtime's Placement). The worker prints one line
``@bench {"bytes_per_step": ..., "step_seconds": [...], ...}``.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfcluster.runtime as rt


def arg(name, default):
    for a in sys.argv[1:]:
        if a.startswith("--%s=" % name):
            return type(default)(a.split("=", 1)[1])
    return default


def build(tf, model, mb):
    """Variables of the model (lists of parts for partitioned ones)."""
    init = tf.compat.v1.zeros_initializer()
    out = []
    with tf.compat.v1.variable_scope("m"):
        if model == "flat":
            out.append(tf.compat.v1.get_variable("flat", [int(mb * 2**20 / 4)], initializer=init))
        else:  # skewed: one large embedding, several small layers
            rows = int(mb * 2**20 / (64 * 4))
            out.append(tf.compat.v1.get_variable("embedding", [rows, 64], initializer=init))
            for i, (a, b) in enumerate([(64, 256), (256, 256), (256, 128), (128, 64), (64, 10)]):
                out.append(tf.compat.v1.get_variable("dense%d/kernel" % i, [a, b], initializer=init))
                out.append(tf.compat.v1.get_variable("dense%d/bias" % i, [b], initializer=init))
    parts = []
    for v in out:
        parts.extend(list(v) if hasattr(v, "_get_variable_list") else [v])
    return parts


def main():
    model, mb = arg("model", "flat"), arg("mb", 16.0)
    strategy, pmin = arg("ps_strategy", "greedy"), arg("partition_min_bytes", 0)
    seconds, min_steps = arg("seconds", 3.0), arg("min_steps", 5)
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    ctx = rt.task_context()
    server = rt.start_server(ctx)
    if ctx.is_ps:
        rt.exit_now(rt.serve_until_done(ctx, server))
    placement = rt.Placement(ctx, strategy=strategy, partition_min_bytes=pmin or None)
    with tf.Graph().as_default() as graph, placement.scope():
        with tf.compat.v1.variable_scope("", partitioner=placement.partitioner):
            parts = build(tf, model, mb)
        updates = []
        with tf.compat.v1.device(ctx.device + "/device:CPU:0"):
            for v in parts:
                delta = v.read_value() * 1e-6 + 1e-6       # computed on the worker
                updates.append(delta)
        assigns = [v.assign_add(d, read_value=False) for v, d in zip(parts, updates)]
        step = tf.group(*assigns)
        init = tf.compat.v1.global_variables_initializer()
        report = placement.report(graph)
        nbytes = sum(int(v.shape.num_elements()) * 4 for v in parts)
        with tf.compat.v1.Session(server.target, config=rt.session_config(ctx)) as sess:
            sess.run(init)
            for _ in range(2):
                sess.run(step)
            times = []
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end or len(times) < min_steps:
                t0 = time.monotonic()
                sess.run(step)
                times.append(time.monotonic() - t0)
    print("@bench " + json.dumps({
        "bytes_per_step": 2 * nbytes, "model_bytes": nbytes, "step_seconds": times,
        "bytes_per_ps": report.bytes_per_ps, "max_mean": report.max_mean_ratio,
        "strategy": strategy, "partition_min_bytes": pmin}), flush=True)
    rt.exit_now(0)


if __name__ == "__main__":
    main()
