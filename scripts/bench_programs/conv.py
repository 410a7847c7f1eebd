"""A compute-bound model: a small conv net on synthetic 32x32x3 images (~56k parameters,
~6 GFLOP per batch of 128 (forward and backward)), so a step is mostly convolution and the ps traffic per step is
a few hundred KB.

Two ways to run it, the same model, data and batch:

* under ``tfcluster launch`` (1 ps + N workers, TF_CONFIG): tfcluster's runtime as a user
  gets it (``start_server`` with its thread-pool defaults, ``Placement``,
  ``TrainingSession``, input pipeline on the worker), async or sync; prints
  ``@tfcluster progress`` lines (the benchmark reads global steps/s from them);
* ``--single``: one process alone, a plain local ``Session`` with TensorFlow's defaults (all
  cores); prints ``@bench {"steps_per_s": ...}`` over the steps after the warm-up.

    python conv.py --single --steps=200
    tfcluster launch c.yaml -- python conv.py --mode=async --steps=400
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCH = 128
IMAGES = 512        # the synthetic dataset: IMAGES images repeated
CLASSES = 10
SEED = 7


def arg(name, default):
    for a in sys.argv[1:]:
        if a == "--" + name and isinstance(default, bool):
            return True
        if a.startswith("--%s=" % name):
            v = a.split("=", 1)[1]
            return v.lower() in ("1", "true", "yes") if isinstance(default, bool) else type(default)(v)
    return default


def input_batches(tf, worker_index=0):
    import numpy as np

    rng = np.random.RandomState(SEED)
    x = rng.uniform(0, 1, size=(IMAGES, 32, 32, 3)).astype("float32")
    y = rng.randint(0, CLASSES, size=(IMAGES,)).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(IMAGES, seed=SEED + worker_index)
    ds = ds.repeat().batch(BATCH, drop_remainder=True).prefetch(2)
    return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()


def model(tf, x):
    init = tf.compat.v1.glorot_uniform_initializer(seed=SEED)

    def conv(h, cin, cout, stride, name):
        with tf.compat.v1.variable_scope(name):
            w = tf.compat.v1.get_variable("kernel", [3, 3, cin, cout], initializer=init)
            b = tf.compat.v1.get_variable("bias", [cout], initializer=tf.zeros_initializer())
            return tf.nn.relu(tf.nn.conv2d(h, w, [1, stride, stride, 1], "SAME") + b)

    with tf.compat.v1.variable_scope("conv"):
        h = conv(x, 3, 32, 1, "c1")
        h = conv(h, 32, 64, 2, "c2")
        h = conv(h, 64, 64, 2, "c3")
        h = tf.reduce_mean(h, axis=[1, 2])
        w = tf.compat.v1.get_variable("logits/kernel", [64, CLASSES], initializer=init)
        b = tf.compat.v1.get_variable("logits/bias", [CLASSES], initializer=tf.zeros_initializer())
        return tf.matmul(h, w) + b


def loss_fn(tf, logits, y):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def optimizer(tf):
    return tf.compat.v1.train.MomentumOptimizer(0.01, 0.9)


def single(tf, steps):
    with tf.Graph().as_default():
        gs = tf.compat.v1.train.get_or_create_global_step()
        x, y = input_batches(tf)
        loss = loss_fn(tf, model(tf, x), y)
        train_op = optimizer(tf).minimize(loss, global_step=gs)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(5):  # warm-up
                sess.run(train_op)
            t0, c0 = time.monotonic(), time.process_time()
            for _ in range(steps):
                sess.run(train_op)
            dt, cpu = time.monotonic() - t0, time.process_time() - c0
    print("@bench " + json.dumps({"steps_per_s": steps / dt, "examples_per_s": steps * BATCH / dt,
                                  "step_seconds": dt / steps, "cpu_seconds_per_step": cpu / steps}),
          flush=True)


def cluster(tf, steps, mode, progress_secs):
    import loop

    import tfcluster.runtime as rt

    ctx = rt.task_context()
    server = rt.start_server(ctx)
    if ctx.is_ps:
        rt.exit_now(rt.serve_until_done(ctx, server))
    placement = rt.Placement(ctx, strategy="greedy")
    sync = mode == "sync"
    with tf.Graph().as_default(), placement.scope():
        gs = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.device(ctx.device + "/device:CPU:0"):
            x, y = input_batches(tf, max(ctx.worker_index, 0))
        loss = loss_fn(tf, model(tf, x), y)
        opt = optimizer(tf)
        if sync:
            opt = rt.make_sync_optimizer(opt, ctx)
        train_op = opt.minimize(loss, global_step=gs)
        progress = rt.ProgressReporter(total=steps, every_secs=progress_secs)
        last = loop.train(rt, ctx, server, steps, train_op, gs, opt if sync else None, progress)
        progress(last, force=True)
    rt.exit_now(0)


def main():
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    steps = arg("steps", 200)
    if arg("single", False):
        single(tf, steps)
        os._exit(0)
    cluster(tf, steps, arg("mode", "async"), arg("progress_secs", 0.25))


if __name__ == "__main__":
    main()
