"""An input-bound training task: every example goes through an expensive ``map`` (a stack of
small matmuls and a sort, pure TensorFlow ops), the model is one dense layer. Reads its input
through the cluster's tf.data service when TFCLUSTER_DATA_SERVICE is set
(``tfcluster.runtime.distribute``), else in this process with a parallel map (AUTOTUNE).

    python data_input.py [--steps N] [--warmup N] [--work N]

Prints ``@bench {"examples_per_s": ..., "steps": ...}`` over the steps after the warm-up.
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

import tfcluster.runtime as rt

BATCH = 32
FEATURES = 64

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--warmup", type=int, default=10)
p.add_argument("--work", type=int, default=48, help="matmuls per example (the map's cost)")
args = p.parse_args()


def expensive(i):
    x = tf.random.stateless_normal([FEATURES, FEATURES], seed=tf.stack([i, i + 1]))
    for _ in range(args.work):
        x = tf.tanh(tf.matmul(x, x) / FEATURES)
    feats = tf.sort(tf.reshape(x, [-1]))[:FEATURES]
    return feats, tf.cast(i % 2, tf.float32)


dataset = tf.data.Dataset.range(10 ** 9).map(expensive, num_parallel_calls=tf.data.AUTOTUNE)
dataset = dataset.batch(BATCH)
dataset = rt.distribute(dataset, job_name="bench")        # unchanged without a data service
dataset = dataset.prefetch(2)

w = tf.Variable(tf.zeros([FEATURES, 1]))


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((tf.squeeze(tf.matmul(x, w), 1) - y) ** 2)
    g = tape.gradient(loss, w)
    w.assign_sub(0.01 * g)
    return loss


it = iter(dataset)
for _ in range(args.warmup):
    step(*next(it))
t0 = time.monotonic()
for _ in range(args.steps):
    step(*next(it))
dt = time.monotonic() - t0
print("@bench " + json.dumps({"examples_per_s": args.steps * BATCH / dt, "steps": args.steps,
                              "data_service": os.environ.get("TFCLUSTER_DATA_SERVICE", "")}), flush=True)
