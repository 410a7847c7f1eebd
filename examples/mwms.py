"""TF2 MultiWorkerMirroredStrategy: a synchronous custom training loop with checkpoints.

Every worker runs this same program. ``tf.distribute.MultiWorkerMirroredStrategy`` keeps a
copy of every variable on every worker (and on every GPU of a worker) and all-reduces the
gradients each step (collective ops: ring all-reduce over gRPC on CPU, NCCL on GPUs), so all
copies stay identical. There are no ps tasks; worker:0 (or the ``chief`` task, when the
cluster has one) is the chief that writes the real checkpoint.

Run it from a cluster file (``examples/mwms.yaml``)::

    tfcluster launch examples/mwms.yaml

with ``success: all-workers`` (every worker must finish; they finish together) and the GPUs
of each worker from ``jobs.worker.gpus`` (``CUDA_VISIBLE_DEVICES``; on a machine without GPUs
every worker trains on its CPU).

Checkpoints (TensorFlow's MWMS rule): *every* worker must call ``save`` (saving may run
collective ops, and a worker that skips it blocks the others); only the chief writes to
``--checkpoint_dir``, the others write to a temporary folder they delete at once. Every
worker restores from the chief's latest checkpoint at start, so a relaunch resumes. This
assumes a folder every worker can read (one machine here; a shared file system otherwise).

``Model.fit`` also works with MWMS in Keras 3; this custom loop shows the pieces:
``strategy.run`` in a ``tf.function``, ``distribute_datasets_from_function`` (each worker
reads its shard), the loss scaled by the global batch (``tf.nn.compute_average_loss``) and
gradients all-reduced before they are applied.

Output: ``@tfcluster progress`` lines and one summary line per worker
``mwms: worker:0 done: step=N loss=X accuracy=Y replicas=R resumed_from=K``.
"""
import json
import os
import signal
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

flags.DEFINE_integer("train_steps", 200, "Synchronous global steps")
flags.DEFINE_integer("steps_per_loop", 25, "Steps between checkpoints and progress reports")
flags.DEFINE_integer("batch_size", 32, "Batch size per replica (global = this x replicas)")
flags.DEFINE_float("learning_rate", 0.1, "SGD learning rate")
flags.DEFINE_integer("hidden_units", 32, "Hidden layer width")
flags.DEFINE_integer("features", 16, "Input features of the synthetic task")
flags.DEFINE_integer("classes", 4, "Classes of the synthetic task")
flags.DEFINE_integer("seed", 1234, "Seed of the synthetic data set")
flags.DEFINE_string("checkpoint_dir", "", "The chief's checkpoint folder; training resumes from "
                    "the latest checkpoint here (empty: no checkpoints)")
flags.DEFINE_integer("max_to_keep", 3, "Checkpoints kept")
FLAGS = flags.FLAGS


def _num(value):
    """A rounded float for the JSON summary; None for NaN (no step was trained in this run)."""
    return None if value != value else round(value, 4)


def synthetic_data(num_examples, seed):
    """(x, y): labels = argmax of a fixed random linear map (from --seed) of x (from seed)."""
    import numpy as np

    teacher = np.random.default_rng(FLAGS.seed).normal(
        size=(FLAGS.features, FLAGS.classes)).astype("float32")
    x = np.random.default_rng(seed).normal(size=(num_examples, FLAGS.features)).astype("float32")
    y = np.argmax(x @ teacher, axis=1).astype("int64")
    return x, y


def build_model(tf):
    """A two-layer MLP as a tf.Module; created in the strategy's scope, its variables are
    mirrored on every replica."""
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


def is_chief(resolver):
    """TensorFlow's rule: the ``chief`` task, else worker:0 when the cluster has no chief."""
    cluster = resolver.cluster_spec().as_dict()
    if resolver.task_type == "chief":
        return True
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster


def local_threads():
    """Cores per task on this machine (tfcluster launch says how many tasks run here)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    tasks = int(os.environ.get("TFCLUSTER_LOCAL_TASKS") or 1)
    return max(1, cores // max(1, tasks))


def main(argv):
    del argv
    import tensorflow as tf
    from absl import logging as absl_logging

    from tfcluster.plan.progress import report_progress

    # TF's INFO lines (some through absl) drown the program's own output
    tf.get_logger().setLevel("WARNING")
    absl_logging.set_verbosity(absl_logging.WARNING)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster = resolver.cluster_spec().as_dict()
    if not cluster:
        print("mwms: error: no TF_CONFIG; run it with `tfcluster launch examples/mwms.yaml`",
              file=sys.stderr)
        return 2
    if resolver.task_type not in ("worker", "chief"):
        print(f"mwms: error: task type {resolver.task_type!r}: MultiWorkerMirroredStrategy runs "
              "on worker (and chief) tasks only; remove ps from the cluster", file=sys.stderr)
        return 2
    me = f"{resolver.task_type}:{resolver.task_id}"

    def log(msg):
        print(f"mwms: {me} {msg}", flush=True)

    # A worker restarted after the others have finished (it died while the last steps were
    # saved, or in its teardown) would wait forever for peers that are gone: with the chief's
    # checkpoint already at --train_steps there is nothing left to do.
    latest = tf.train.latest_checkpoint(FLAGS.checkpoint_dir) if FLAGS.checkpoint_dir else None
    if latest:
        saved = int(tf.train.load_variable(latest, "step/.ATTRIBUTES/VARIABLE_VALUE"))
        if saved >= FLAGS.train_steps:
            log(f"nothing to train: {latest} is at step {saved} (--train_steps={FLAGS.train_steps})")
            return 0

    # thread pools are fixed when the strategy starts this task's server: size them first
    tf.config.threading.set_intra_op_parallelism_threads(local_threads())
    tf.config.threading.set_inter_op_parallelism_threads(max(2, local_threads()))
    gpus = tf.config.list_physical_devices("GPU")
    Impl = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=Impl.NCCL if gpus else Impl.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                                         communication_options=options)
    # TensorFlow's coordination service (enabled by MWMS) installs a C++ SIGTERM handler for
    # its preemption notifier: SIGTERM would no longer end this process, and `tfcluster launch`
    # would have to SIGKILL it after --stop-timeout. This loop does not use preemption
    # checkpointing (tf.distribute.experimental.PreemptionCheckpointHandler): restore the
    # default action.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    replicas = strategy.num_replicas_in_sync
    chief = is_chief(resolver)
    log(f"{'chief, ' if chief else ''}{len(gpus)} GPU(s) "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}), "
        f"{replicas} replica(s) in sync")

    global_batch = FLAGS.batch_size * replicas
    x_train, y_train = synthetic_data(4096, FLAGS.seed + 1)
    x_eval, y_eval = synthetic_data(1024, FLAGS.seed + 2)

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.shuffle(1024, seed=FLAGS.seed).repeat()
        return ds.batch(input_context.get_per_replica_batch_size(global_batch)).prefetch(2)

    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    iterator = iter(dataset)

    with strategy.scope():
        model = build_model(tf)
        step = tf.Variable(0, dtype=tf.int64, name="global_step", trainable=False)

    ckpt = tf.train.Checkpoint(model=model, step=step)
    manager = None
    resumed_from = 0
    if FLAGS.checkpoint_dir:
        # every worker saves; only the chief's copy is kept
        write_dir = (FLAGS.checkpoint_dir if chief else
                     os.path.join(FLAGS.checkpoint_dir, f"workertemp_{resolver.task_type}_{resolver.task_id}"))
        manager = tf.train.CheckpointManager(ckpt, write_dir, max_to_keep=FLAGS.max_to_keep)
        if latest:  # the chief's (read above)
            ckpt.restore(latest).assert_existing_objects_matched()
            resumed_from = int(step.numpy())
            log(f"resumed from {latest} at step {resumed_from}")

    lr = FLAGS.learning_rate

    def apply_gradients(distribution, grads_and_vars):
        # cross-replica context: all-reduce (sum) the gradients, then update every copy
        reduced = distribution.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, grads_and_vars)
        for g, (_, v) in zip(reduced, grads_and_vars):
            distribution.extended.update(v, lambda var, grad: var.assign_sub(lr * grad), args=(g,))

    @tf.function
    def train_step(it):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                logits = model(x)
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.weights)
            tf.distribute.get_replica_context().merge_call(
                apply_gradients, args=(list(zip(grads, model.weights)),))
            correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1), y), tf.float32))
            return loss, correct

        loss, correct = strategy.run(replica_fn, args=(next(it),))
        step.assign_add(1)
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None))

    @tf.function
    def evaluate():
        logits = model(tf.constant(x_eval))
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1), y_eval), tf.float32))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y_eval, logits=logits))
        return loss, acc

    total = FLAGS.train_steps
    current = int(step.numpy())
    loss = train_acc = float("nan")
    t0 = time.time()
    ran = 0     # the steps this worker ran itself: its own steps/s in the launcher's table
    while current < total:
        n = min(FLAGS.steps_per_loop, total - current)
        correct_sum = 0.0
        for _ in range(n):
            loss_t, correct_t = train_step(iterator)
            correct_sum += float(correct_t)
        ran += n
        current = int(step.numpy())
        loss = float(loss_t)
        train_acc = correct_sum / (n * global_batch)
        if manager is not None:
            manager.save(checkpoint_number=current)  # on every worker (MWMS rule)
            if not chief:
                tf.io.gfile.rmtree(manager.directory)  # the temporary copy
        report_progress(current, total, local_step=ran, loss=loss, accuracy=train_acc)

    eval_loss, eval_acc = (float(v) for v in evaluate())
    # Every worker leaves together: a last all-reduce is a barrier, so that no worker's exit
    # tears down a collective a peer still runs (TensorFlow then logs
    # "BaseCollectiveExecutor::StartAbort UNAVAILABLE" at the end of a successful run).
    strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
    elapsed = time.time() - t0
    summary = {"step": current, "loss": _num(loss), "train_accuracy": _num(train_acc),
               "eval_loss": _num(eval_loss), "accuracy": _num(eval_acc),
               "replicas": replicas, "resumed_from": resumed_from, "seconds": round(elapsed, 1)}
    log(f"done: step={current} loss={loss:.4f} accuracy={eval_acc:.4f} replicas={replicas} "
        f"resumed_from={resumed_from} ({elapsed:.1f}s) {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    app.run(main)
