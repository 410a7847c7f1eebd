"""TF2 ParameterServerStrategy: a coordinator-driven custom training loop with checkpoints.

In ``tf.distribute.ParameterServerStrategy`` one process, the *coordinator* (the ``chief``
task), holds the training loop. It creates the variables (they live on the ``ps`` tasks),
and schedules training steps as remote functions on the ``worker`` tasks with
``tf.distribute.coordinator.ClusterCoordinator``. The ps and worker tasks run no Python
training code at all: they only host a TensorFlow server. Training is asynchronous: each
worker reads the variables from the ps, computes gradients on its own batch and applies
them to the ps variables.

Run it from a cluster file (``examples/ps_strategy.yaml``)::

    tfcluster launch examples/ps_strategy.yaml

where the chief runs this file and ps/worker tasks run the built-in serve program
(``python -m tfcluster serve``). This file serves too when started as a ps or worker task
(``tf.distribute.Server`` + wait), so ``program: {command: [python, ps_strategy.py]}`` for
every task also works.

Keras 3 does not support ParameterServerStrategy in ``Model.fit`` (it was a Keras 2 /
``tf.keras`` feature), so this is the custom training loop TensorFlow's tutorial describes:
a ``tf.Module`` model, ``strategy.run`` inside a ``tf.function``, ``coordinator.schedule``
and ``coordinator.join``, a per-worker dataset (``coordinator.create_per_worker_dataset``).

Fault tolerance (TensorFlow's design, see docs/TF2_STRATEGIES.md):

* a worker that dies: the coordinator reschedules its closures on the other workers and,
  once the launcher has restarted the worker (restart policy ``on-failure``), uses it again
  (it re-creates the worker's dataset iterator). Training goes on; exit 0 at the end.
* a ps that dies: its variables are gone; the coordinator raises (``UnavailableError`` /
  ``AbortedError``) and this program exits 1. With ``on-failure`` on the ps and chief jobs the
  launcher restarts the ps (empty) and the coordinator, which rebuilds the variables and
  resumes from the latest checkpoint (``tf.train.CheckpointManager``).

Output: ``@tfcluster progress`` lines after every loop (``--steps_per_loop`` steps) and one
summary line ``ps_strategy: done: step=N loss=X accuracy=Y resumed_from=K``.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

flags.DEFINE_integer("train_steps", 300, "Global steps (one batch each, on some worker)")
flags.DEFINE_integer("steps_per_loop", 25, "Steps scheduled between joins/checkpoints/progress")
flags.DEFINE_integer("batch_size", 64, "Batch size of one step")
flags.DEFINE_float("learning_rate", 0.1, "SGD learning rate")
flags.DEFINE_integer("hidden_units", 32, "Hidden layer width")
flags.DEFINE_integer("features", 16, "Input features of the synthetic task")
flags.DEFINE_integer("classes", 4, "Classes of the synthetic task")
flags.DEFINE_integer("seed", 1234, "Seed of the synthetic data set")
flags.DEFINE_string("checkpoint_dir", "", "Where checkpoints go; training resumes from the "
                    "latest one found here (empty: no checkpoints)")
flags.DEFINE_integer("max_to_keep", 3, "Checkpoints kept")
flags.DEFINE_float("step_delay", 0.0, "Seconds each step sleeps on its worker (tests use it to "
                   "make a run long enough to kill a worker in the middle)")
FLAGS = flags.FLAGS


def log(msg):
    print(f"ps_strategy: {msg}", flush=True)


def _num(value):
    """A rounded float for the JSON summary; None for NaN (no step was trained in this run)."""
    return None if value != value else round(value, 4)


def synthetic_data(num_examples, seed):
    """(x, y): a learnable task, labels = argmax of a fixed random linear map of x.

    The map comes from ``--seed`` (the same task for training and evaluation); ``seed``
    draws the examples."""
    import numpy as np

    teacher = np.random.default_rng(FLAGS.seed).normal(
        size=(FLAGS.features, FLAGS.classes)).astype("float32")
    x = np.random.default_rng(seed).normal(size=(num_examples, FLAGS.features)).astype("float32")
    y = np.argmax(x @ teacher, axis=1).astype("int64")
    return x, y


def build_model(tf):
    """A two-layer MLP as a tf.Module: plain tf.Variables, created in the strategy's scope."""
    class MLP(tf.Module):
        def __init__(self):
            super().__init__(name="mlp")
            init = tf.random_normal_initializer(stddev=0.1, seed=FLAGS.seed)
            self.w1 = tf.Variable(init([FLAGS.features, FLAGS.hidden_units]), name="w1")
            self.b1 = tf.Variable(tf.zeros([FLAGS.hidden_units]), name="b1")
            self.w2 = tf.Variable(init([FLAGS.hidden_units, FLAGS.classes]), name="w2")
            self.b2 = tf.Variable(tf.zeros([FLAGS.classes]), name="b2")

        def __call__(self, x):
            h = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
            return tf.matmul(h, self.w2) + self.b2

        @property
        def weights(self):
            return [self.w1, self.b1, self.w2, self.b2]

    return MLP()


def serve(tf, resolver):
    """A ps or worker task of this strategy: start the server and serve until SIGTERM."""
    import signal
    import threading

    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                         task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc",
                         start=True)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    log(f"{resolver.task_type}:{resolver.task_id} serving")
    while not stop.wait(1.0):
        pass
    return 0


def coordinate(tf, resolver):
    from tfcluster.plan.progress import report_progress

    num_ps = len(resolver.cluster_spec().as_dict().get("ps", []))
    num_workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    if not num_ps or not num_workers:
        log("error: ParameterServerStrategy needs ps and worker tasks in the cluster")
        return 2
    # shard variables bigger than 64 KiB over the ps tasks (a no-op with one ps)
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=64 << 10, max_shards=num_ps)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    log(f"coordinator of {num_ps} ps and {num_workers} worker(s)")

    x_train, y_train = synthetic_data(4096, FLAGS.seed + 1)
    x_eval, y_eval = synthetic_data(1024, FLAGS.seed + 2)

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.shuffle(1024, seed=FLAGS.seed).repeat()
        return ds.batch(input_context.get_per_replica_batch_size(FLAGS.batch_size)).prefetch(2)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    with strategy.scope():
        model = build_model(tf)
        step = tf.Variable(0, dtype=tf.int64, name="global_step", trainable=False)
        # accuracy over the current loop, accumulated on the ps by every worker
        correct = tf.Variable(0.0, name="correct", trainable=False)
        seen = tf.Variable(0.0, name="seen", trainable=False)

    ckpt = tf.train.Checkpoint(model=model, step=step)
    manager = None
    resumed_from = 0
    if FLAGS.checkpoint_dir:
        manager = tf.train.CheckpointManager(ckpt, FLAGS.checkpoint_dir, max_to_keep=FLAGS.max_to_keep)
        if manager.latest_checkpoint:
            ckpt.restore(manager.latest_checkpoint).assert_existing_objects_matched()
            resumed_from = int(step.numpy())
            log(f"resumed from {manager.latest_checkpoint} at step {resumed_from}")

    lr = FLAGS.learning_rate
    delay = FLAGS.step_delay

    @tf.function
    def train_step(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                logits = model(x)
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            grads = tape.gradient(loss, model.weights)
            for v, g in zip(model.weights, grads):
                v.assign_sub(lr * g)
            pred = tf.argmax(logits, axis=1)
            correct.assign_add(tf.reduce_sum(tf.cast(tf.equal(pred, y), tf.float32)))
            seen.assign_add(tf.cast(tf.shape(y)[0], tf.float32))
            step.assign_add(1)
            return loss

        if delay > 0:
            tf.py_function(lambda: time.sleep(delay), [], [])
        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    @tf.function
    def evaluate():
        # runs on the coordinator, reading the variables from the ps
        logits = model(tf.constant(x_eval))
        pred = tf.argmax(logits, axis=1)
        acc = tf.reduce_mean(tf.cast(tf.equal(pred, y_eval), tf.float32))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y_eval, logits=logits))
        return loss, acc

    total = FLAGS.train_steps
    current = int(step.numpy())
    loss = float("nan")
    train_acc = float("nan")
    t0 = time.time()
    ran = 0     # the steps this coordinator scheduled: its own steps/s in the launcher's table
    while current < total:
        correct.assign(0.0)
        seen.assign(0.0)
        n = min(FLAGS.steps_per_loop, total - current)
        last = None
        for _ in range(n):
            last = coordinator.schedule(train_step, args=(per_worker_iterator,))
        coordinator.join()  # raises on a ps failure; worker failures are handled by TF
        loss = float(last.fetch())
        # a closure re-run after a worker failure may count twice: the step may pass `total`
        current = int(step.numpy())
        train_acc = float(correct.numpy() / max(seen.numpy(), 1.0))
        if manager is not None:
            manager.save(checkpoint_number=current)
        ran += n
        report_progress(min(current, total), total, local_step=ran, loss=loss, accuracy=train_acc)

    eval_loss, eval_acc = (float(v) for v in evaluate())
    elapsed = time.time() - t0
    summary = {"step": current, "loss": _num(loss), "train_accuracy": _num(train_acc),
               "eval_loss": _num(eval_loss), "accuracy": _num(eval_acc),
               "resumed_from": resumed_from, "seconds": round(elapsed, 1)}
    log(f"done: step={current} loss={loss:.4f} accuracy={eval_acc:.4f} "
        f"resumed_from={resumed_from} ({elapsed:.1f}s) {json.dumps(summary)}")
    leave(0)    # here, while the coordinator is still referenced: see leave()


def main(argv):
    del argv
    import tensorflow as tf
    from absl import logging as absl_logging

    # TF's INFO lines (some through absl) drown the program's own output
    tf.get_logger().setLevel("WARNING")
    absl_logging.set_verbosity(absl_logging.WARNING)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        return serve(tf, resolver)
    if resolver.task_type not in ("chief", None, ""):
        log(f"error: task type {resolver.task_type!r}: run this file as the chief (coordinator)")
        return 2
    if not resolver.cluster_spec().as_dict():
        log("error: no TF_CONFIG; run it with `tfcluster launch examples/ps_strategy.yaml`")
        return 2
    # several tasks share this machine: keep the coordinator's own pools small
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    return coordinate(tf, resolver)


def leave(code):
    """Exit at once, with nothing torn down. Teardown can hang past the launcher's
    ``watchdog.end_timeout``: when ``coordinate``'s frame is let go, ``ClusterCoordinator.__del__``
    stops its failure handler under the lock its worker-recovery thread holds while it waits for a
    worker, and each dataset and ``tf.function`` is deleted on every worker by RPC. So this is
    called before any of them is let go: from ``coordinate`` after the summary line, and inside
    ``run``'s ``except`` (the exception's traceback holds that frame)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run():
    try:
        code = app.run(main) or 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if type(e).__name__ in ("UnavailableError", "AbortedError", "CancelledError"):
            # a ps task (or the coordinator's link to it) is gone: its variables are lost.
            # Exit 1; with restart on-failure the launcher restarts this coordinator, which
            # rebuilds the variables on the (restarted) ps and resumes from the checkpoint.
            print(f"ps_strategy: failed: {type(e).__name__} (a ps task is unreachable or "
                  f"restarted): {first[:200]}", file=sys.stderr, flush=True)
            print("ps_strategy: exiting 1; a restarted coordinator resumes from the latest "
                  "checkpoint", file=sys.stderr, flush=True)
        else:
            import traceback

            traceback.print_exc()
            print(f"ps_strategy: failed: {type(e).__name__}: {first[:200]}", file=sys.stderr,
                  flush=True)
        leave(1)
    leave(code)


if __name__ == "__main__":
    run()
