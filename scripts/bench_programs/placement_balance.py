"""ps balance of a skewed model (one large embedding, several small layers) under the
runtime's Placement: round_robin, greedy, greedy with partitioning; for each ps count given.
Builds graphs only (no cluster). Prints one JSON object."""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from transfer import build

import tfcluster.runtime as rt


def balance(tf, num_ps, strategy, pmin, mb):
    placement = rt.Placement(None, num_ps=num_ps, strategy=strategy,
                             worker_device="/job:worker/task:0/device:CPU:0",
                             partition_min_bytes=pmin or None)
    with tf.Graph().as_default() as graph, placement.scope():
        with tf.compat.v1.variable_scope("", partitioner=placement.partitioner):
            parts = build(tf, "skewed", mb)
        loss = tf.add_n([tf.reduce_sum(v) for v in parts])
        # the optimizer's slots land next to their variables, as in training
        tf.compat.v1.train.AdamOptimizer(0.01).minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step())
        report = placement.report(graph)
    return {"max_mean": report.max_mean_ratio, "bytes_per_ps": report.bytes_per_ps}


def main():
    mb = float(sys.argv[1]) if len(sys.argv) > 1 else 16.0
    counts = [int(c) for c in (sys.argv[2] if len(sys.argv) > 2 else "2,4").split(",")]
    pmin = int(sys.argv[3]) if len(sys.argv) > 3 else 2**20
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    out = {}
    for name, strategy, p in (("round_robin", "round_robin", 0), ("greedy_unpartitioned", "greedy", 0),
                              ("greedy", "greedy", pmin)):
        out[name] = {str(n): balance(tf, n, strategy, p, mb) for n in counts}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
