"""tfcluster trainer template: between-graph replicated training on a ps/worker cluster.

Copy this file and edit the three marked places: INPUT, MODEL, OPTIMIZER.

Run it under tfcluster (TF_CONFIG is set for every task)::

    tfcluster launch cluster.yaml                       # 1 ps + 2 workers, this file
    tfcluster launch cluster.yaml -- python trainer.py --mode=sync --train_steps=2000

or by hand, one process per task, with the flags of TensorFlow's distributed guide::

    python trainer.py --ps_hosts=ps0:2222,ps1:2222 --worker_hosts=w0:2222,w1:2222 \\
        --job_name=ps --task_index=0          # ... and so on for ps:1, worker:0, worker:1

Every process ends by itself: workers after ``--train_steps`` global steps, ps tasks once
every worker has said it is done. The chief (worker 0 unless there is a ``chief`` job)
initialises or restores from ``--checkpoint_dir``, saves checkpoints and summaries, and
prints one summary line: ``... global_step=N accuracy=X loss=Y`` (held-out data).
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep task logs readable

from absl import app, flags, logging

import tfcluster.runtime as rt
from tfcluster.core.messages import nothing_trained
from tfcluster.runtime import data as rt_data

FLAGS = flags.FLAGS
rt.define_task_flags()  # --ps_hosts --worker_hosts --chief_hosts --job_name --task_index
flags.DEFINE_enum("mode", "async", ["async", "sync"],
                  "async: each worker applies its own updates; sync: SyncReplicasOptimizer "
                  "aggregates replicas_to_aggregate gradients per step")
flags.DEFINE_integer("train_steps", 500, "Train until the global step reaches this")
flags.DEFINE_integer("batch_size", 64, "Batch size per worker")
flags.DEFINE_float("learning_rate", 0.01, "Learning rate")
flags.DEFINE_string("checkpoint_dir", "", "Checkpoints and summaries (chief); a run restarted "
                    "on the same directory resumes from its latest checkpoint. Empty: none")
flags.DEFINE_integer("save_checkpoint_steps", 0, "Save a checkpoint every N steps (0: off)")
flags.DEFINE_float("save_checkpoint_secs", 0, "Save a checkpoint every N seconds (0: off; "
                   "with neither, every 600 s). A final checkpoint is always written")
flags.DEFINE_integer("save_summaries_steps", 100, "Write summaries every N steps (0: off)")
flags.DEFINE_integer("replicas_to_aggregate", 0, "sync: gradients per step (0: number of workers)")
flags.DEFINE_integer("backup_workers", 0, "sync: extra workers whose late gradients are dropped")
flags.DEFINE_enum("ps_strategy", "greedy", ["greedy", "round_robin"],
                  "How variables are spread over ps tasks")
flags.DEFINE_integer("partition_min_bytes", 0, "Split variables of at least 2x this many bytes "
                     "across ps tasks (0: never)")
flags.DEFINE_string("data_file", "", "Your data: .npz with x, y (optional x_test, y_test) or "
                    ".csv with the integer label last. Empty: the built-in synthetic dataset")
flags.DEFINE_integer("hidden_units", 64, "Hidden layer width")
flags.DEFINE_integer("seed", 1234, "Seed of the synthetic dataset and of the model")
flags.DEFINE_float("progress_secs", 1.0, "Report progress at most this often (seconds)")
flags.DEFINE_float("step_delay", 0.0, "Seconds each worker sleeps after each of its steps (0: "
                   "none): a stand-in for a slower model or input, which keeps a run going "
                   "without using the CPU (the tests that stop a run from outside use it)")
flags.DEFINE_integer("operation_timeout_ms", rt.DEFAULT_OPERATION_TIMEOUT_MS,
                     "Bound on any single blocking op (ms)")
flags.DEFINE_bool("print_placement", False, "Chief: print where variables are placed (a table "
                  "of every variable, its ps task and size)")


def log(ctx, msg: str) -> None:
    print(f"{ctx.task_id}: {msg}", flush=True)


# --- INPUT: put your data here ------------------------------------------------------------
def load_data():
    """Numpy arrays of train and held-out data (the same on every task)."""
    if FLAGS.data_file:
        return rt_data.load_file(FLAGS.data_file)
    return rt_data.synthetic(seed=FLAGS.seed)


def input_batches(tf, data, ctx):
    """A tf.data pipeline over this worker's shard of the training data: (x, y) tensors."""
    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    # each worker its own slice; in an elastic run, of the workers in it when this one started
    ds = ds.shard(ctx.live_workers, max(ctx.live_worker_index, 0))
    ds = ds.shuffle(4096, seed=FLAGS.seed + ctx.worker_index).repeat().batch(FLAGS.batch_size)
    ds = ds.prefetch(2)
    return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()


# --- MODEL: put your model here -----------------------------------------------------------
def model(tf, x, num_classes, partitioner=None):
    """Logits for a batch ``x``. Variables come from get_variable so that the training and
    evaluation graphs share them (AUTO_REUSE), and land on the ps tasks (``partitioner``
    splits large ones across ps tasks when --partition_min_bytes is set)."""
    init = tf.compat.v1.glorot_uniform_initializer(seed=FLAGS.seed)

    def dense(h, units, name, activation=None):
        with tf.compat.v1.variable_scope(name):
            w = tf.compat.v1.get_variable("kernel", [h.shape[-1], units], initializer=init)
            b = tf.compat.v1.get_variable("bias", [units], initializer=tf.zeros_initializer())
            out = tf.matmul(h, w) + b
            return activation(out) if activation else out

    with tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE,
                                     partitioner=partitioner):
        h = dense(x, FLAGS.hidden_units, "hidden1", tf.nn.relu)
        h = dense(h, FLAGS.hidden_units, "hidden2", tf.nn.relu)
        return dense(h, num_classes, "logits")


def loss_fn(tf, logits, labels):
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


# --- OPTIMIZER: put your optimizer here ---------------------------------------------------
def optimizer(tf):
    return tf.compat.v1.train.AdamOptimizer(FLAGS.learning_rate)


# --- the distributed part: usually no need to edit below -----------------------------------
def train(ctx, server, data) -> int:
    import tensorflow as tf

    placement = rt.Placement(ctx, strategy=FLAGS.ps_strategy,
                             partition_min_bytes=FLAGS.partition_min_bytes or None)
    sync = FLAGS.mode == "sync"
    with tf.Graph().as_default() as graph, placement.scope():
        tf.compat.v1.set_random_seed(FLAGS.seed)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.device(ctx.device + "/device:CPU:0"):  # input stays on the CPU
            x, y = input_batches(tf, data, ctx)
        logits = model(tf, x, data.num_classes, placement.partitioner)
        loss = loss_fn(tf, logits, y)
        tf.compat.v1.summary.scalar("loss", loss)

        opt = optimizer(tf)
        if sync:
            opt = rt.make_sync_optimizer(opt, ctx, FLAGS.replicas_to_aggregate or None,
                                         backup_workers=FLAGS.backup_workers)
        with rt.quiet_deprecations():   # SyncReplicasOptimizer builds TF's own (deprecated) QueueRunner
            train_op = opt.minimize(loss, global_step=global_step)

        # held-out evaluation (fed from numpy by the chief at the end)
        x_eval = tf.compat.v1.placeholder(tf.float32, [None, data.num_features], name="x_eval")
        y_eval = tf.compat.v1.placeholder(tf.int32, [None], name="y_eval")
        eval_logits = model(tf, x_eval, data.num_classes, placement.partitioner)
        eval_loss = loss_fn(tf, eval_logits, y_eval)
        eval_acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(eval_logits, 1, output_type=tf.int32),
                                                   y_eval), tf.float32))

        if ctx.is_chief and FLAGS.print_placement:
            print(placement.report(graph).to_text(), flush=True)

        session = rt.TrainingSession(
            ctx, server, last_step=FLAGS.train_steps, checkpoint_dir=FLAGS.checkpoint_dir,
            sync_optimizer=opt if sync else None,
            save_checkpoint_steps=FLAGS.save_checkpoint_steps or None,
            save_checkpoint_secs=FLAGS.save_checkpoint_secs or None,
            save_summaries_steps=FLAGS.save_summaries_steps or None,
            operation_timeout_ms=FLAGS.operation_timeout_ms)
        # session: each report also carries the steps this worker ran (its own steps/s)
        progress = rt.ProgressReporter(total=FLAGS.train_steps, every_secs=FLAGS.progress_secs,
                                       session=session)
        t0 = time.time()
        with session as sess:
            step = sess.start_step
            if sess.restored_from:
                log(ctx, f"restored {sess.restored_from} (global_step={sess.restored_step})")
            if step >= FLAGS.train_steps:
                # A re-run on the same --checkpoint_dir: say so plainly, and how to train.
                log(ctx, nothing_trained(step, FLAGS.train_steps, FLAGS.checkpoint_dir or None))
            else:
                log(ctx, f"training ({FLAGS.mode}, {ctx.num_workers} worker(s), {ctx.num_ps} ps) "
                         f"from global_step={step} to {FLAGS.train_steps}")
            loss_value = float("nan")
            while not sess.should_stop():
                if progress.due():  # fetch the loss only when a progress line is due
                    out = sess.run([train_op, global_step, loss])
                    if out is None:
                        break
                    _, step, loss_value = out
                    progress(step, loss=loss_value)
                elif sess.run([train_op, global_step]) is None:
                    break
                if FLAGS.step_delay > 0:
                    time.sleep(FLAGS.step_delay)
            step = sess.current_step()
            progress(step, force=True, loss=loss_value)
            if sess.stopped_by_signal:
                log(ctx, f"stopped by signal {sess.stopped_by_signal} at global_step={step}"
                         + ("; the final checkpoint is written on close"
                            if ctx.is_chief and FLAGS.checkpoint_dir else ""))
            elif ctx.is_chief:
                acc, test_loss = sess.run_raw([eval_acc, eval_loss],
                                              feed_dict={x_eval: data.x_test, y_eval: data.y_test})
                print(rt.summary_line(ctx, step, float(acc), float(test_loss),
                                      mode=FLAGS.mode, secs=round(time.time() - t0, 2)),
                      flush=True)
    if session.stopped_by_signal:
        return 128 + session.stopped_by_signal
    return 0


def evaluate(ctx, data) -> int:
    """The evaluator task: evaluates each new checkpoint in --checkpoint_dir until the last."""
    import tensorflow as tf

    if not FLAGS.checkpoint_dir:
        log(ctx, "evaluator: no --checkpoint_dir, nothing to evaluate")
        return 0
    partitioner = rt.Placement(None, num_ps=ctx.num_ps,
                               partition_min_bytes=FLAGS.partition_min_bytes or None).partitioner
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        logits = model(tf, tf.constant(data.x_test), data.num_classes, partitioner)
        loss = loss_fn(tf, logits, tf.constant(data.y_test))
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32),
                                              data.y_test), tf.float32))
        saver = tf.compat.v1.train.Saver()
        for path in tf.compat.v1.train.checkpoints_iterator(FLAGS.checkpoint_dir, timeout=300):
            with tf.compat.v1.Session() as sess:
                saver.restore(sess, path)
                step, a, lo = sess.run([global_step, acc, loss])
            log(ctx, f"eval: global_step={step} accuracy={a:.4f} loss={lo:.4f}")
            if step >= FLAGS.train_steps:
                break
    return 0


def main(argv):
    del argv
    import tensorflow as tf

    if not FLAGS["verbosity"].present:  # TensorFlow's INFO logs drown the task output
        logging.set_verbosity(logging.WARNING)

    tf.compat.v1.disable_eager_execution()
    try:
        ctx = rt.context_from_flags()
    except rt.ContextError as e:
        rt.fail(e)
    if ctx.is_evaluator:
        return evaluate(ctx, load_data())
    server = rt.start_server(ctx)  # exits 2 with a one-line error if the port is taken
    if ctx.is_ps:
        # A ps only serves variables. It ends when every worker has said it is done (by hand),
        # or when tfcluster launch stops it (SIGTERM).
        code = rt.serve_until_done(ctx, server)
        rt.exit_now(code)
    data = load_data()
    code = train(ctx, server, data)
    # The server cannot be stopped and background TensorFlow threads may still be blocked
    # (the sync queue runner); end the process now rather than at interpreter teardown.
    rt.exit_now(code)


if __name__ == "__main__":
    try:
        app.run(main)
    except rt.ContextError as e:  # pragma: no cover - raised before main
        print(f"tfcluster: error: {e}", file=sys.stderr)
        sys.exit(2)
