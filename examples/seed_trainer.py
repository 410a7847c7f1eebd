"""The seed document's trainer (TensorFlow distributed guide), run on TensorFlow 2.x.

Between-graph replication, asynchronous training, ``tf.train.Supervisor``,
``replica_device_setter`` and the flags ``--ps_hosts --worker_hosts --job_name
--task_index``, as in the guide. Changed only as far as TensorFlow 2 requires, and so that
the four hand-started processes all end by themselves:

* ``tf.compat.v1`` graph mode (``tf.app.flags`` -> ``absl.flags``, ``tf.app.run`` ->
  ``absl.app.run``, ``tf.merge_all_summaries`` -> ``tf.compat.v1.summary.merge_all``,
  ``tf.initialize_all_variables`` -> ``tf.compat.v1.global_variables_initializer``);
* "Build model..." is filled in with a small softmax classifier on synthetic data;
* ``--train_steps`` (the guide loops to 1000000) and ``--logdir`` (the guide's
  ``/tmp/train_logs``) are flags;
* sessions get ``device_filters`` (a worker would otherwise wait for every task) and the
  non-chief ``Supervisor`` polls every second rather than every 30 s;
* ``server.join()`` never returns, so the ps waits instead on a "done" queue that each
  worker signals once its training session is closed, then exits.

Four processes (run each in its own terminal)::

    python examples/seed_trainer.py --ps_hosts=localhost:2222,localhost:2223 \\
        --worker_hosts=localhost:2224,localhost:2225 --job_name=ps --task_index=0
    ... --job_name=ps --task_index=1
    ... --job_name=worker --task_index=0
    ... --job_name=worker --task_index=1
"""
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from absl import app, flags

tf.compat.v1.disable_eager_execution()

# Flags for defining the tf.train.ClusterSpec
flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs")
flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs")
# Flags for defining the tf.train.Server
flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'")
flags.DEFINE_integer("task_index", 0, "Index of task within the job")
# Added: how long to train, where the chief writes checkpoints and summaries
flags.DEFINE_integer("train_steps", 300, "Global steps to train")
flags.DEFINE_string("logdir", "/tmp/train_logs", "Supervisor logdir (chief)")
FLAGS = flags.FLAGS


def done_queue(ps_index):
    """A queue on ps task ``ps_index`` that workers put one token in when they finish."""
    with tf.compat.v1.device("/job:ps/task:%d" % ps_index):
        return tf.queue.FIFOQueue(100, [tf.int32], shapes=[[]],
                                  shared_name="done_queue_ps%d" % ps_index)


def synthetic_batch(batch_size, seed):
    """Build model...: 4-class points around fixed centres (same centres on every task)."""
    centres = np.random.RandomState(0).normal(0, 1, (4, 8)).astype(np.float32) * 2.0
    labels = tf.random.uniform([batch_size], 0, 4, dtype=tf.int32, seed=seed)
    points = tf.gather(centres, labels) + tf.random.normal([batch_size, 8], seed=seed)
    return points, labels


def main(_):
    ps_hosts = FLAGS.ps_hosts.split(",")
    worker_hosts = FLAGS.worker_hosts.split(",")

    # Create a cluster from the parameter server and worker hosts.
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})

    # Create and start a server for the local task.
    server = tf.compat.v1.train.Server(cluster,
                                       job_name=FLAGS.job_name,
                                       task_index=FLAGS.task_index)

    if FLAGS.job_name == "ps":
        # server.join() would never return: wait for every worker's "done" token instead.
        dequeue = done_queue(FLAGS.task_index).dequeue_many(len(worker_hosts))
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps/task:%d" % FLAGS.task_index])
        with tf.compat.v1.Session(server.target, config=config) as sess:
            sess.run(dequeue)
        print("ps %d: all workers done" % FLAGS.task_index, flush=True)
        time.sleep(2)  # let the last worker's enqueue get its answer before the server goes
        os._exit(0)  # the server cannot be stopped; leave without waiting for it
    elif FLAGS.job_name == "worker":
        # Assigns ops to the local worker by default.
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
                worker_device="/job:worker/task:%d" % FLAGS.task_index,
                cluster=cluster)):
            # Build model...
            x, y = synthetic_batch(64, seed=FLAGS.task_index)
            w = tf.compat.v1.get_variable("w", [8, 4], initializer=tf.zeros_initializer())
            b = tf.compat.v1.get_variable("b", [4], initializer=tf.zeros_initializer())
            logits = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=logits))
            accuracy = tf.reduce_mean(tf.cast(tf.equal(
                tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32))
            tf.compat.v1.summary.scalar("loss", loss)
            global_step = tf.compat.v1.train.get_or_create_global_step()

            train_op = tf.compat.v1.train.AdagradOptimizer(0.5).minimize(
                loss, global_step=global_step)

            saver = tf.compat.v1.train.Saver()
            summary_op = tf.compat.v1.summary.merge_all()
            init_op = tf.compat.v1.global_variables_initializer()
        done_ops = [done_queue(i).enqueue([FLAGS.task_index]) for i in range(len(ps_hosts))]

        # Create a "supervisor", which oversees the training process.
        sv = tf.compat.v1.train.Supervisor(is_chief=(FLAGS.task_index == 0),
                                           logdir=FLAGS.logdir,
                                           init_op=init_op,
                                           summary_op=summary_op,
                                           saver=saver,
                                           global_step=global_step,
                                           save_model_secs=600,
                                           recovery_wait_secs=1)
        config = tf.compat.v1.ConfigProto(
            device_filters=["/job:ps", "/job:worker/task:%d" % FLAGS.task_index])

        # The supervisor takes care of session initialization, restoring from
        # a checkpoint, and closing when done or an error occurs.
        with sv.managed_session(server.target, config=config) as sess:
            # Loop until the supervisor shuts down or train_steps have completed.
            step = 0
            while not sv.should_stop() and step < FLAGS.train_steps:
                # Run a training step asynchronously.
                # See `tf.train.SyncReplicasOptimizer` for additional details on how to
                # perform *synchronous* training.
                _, step = sess.run([train_op, global_step])
            acc, loss_value = sess.run([accuracy, loss])
            print("worker %d: done: global_step=%d accuracy=%.4f loss=%.4f"
                  % (FLAGS.task_index, step, acc, loss_value), flush=True)

        # Ask for all the services to stop.
        sv.stop()
        # Only now, with the training session closed, tell every ps this worker is finished:
        # the last token lets the ps exit, and a session still open on it could then wait
        # for it forever. The wait for the ps's answer is bounded, and the process leaves
        # without closing this session (closing it would talk to a ps that may be gone).
        run_options = tf.compat.v1.RunOptions(timeout_in_ms=20000)
        try:
            tf.compat.v1.Session(server.target, config=config).run(done_ops, options=run_options)
        except tf.errors.OpError as e:
            print("worker %d: could not signal done: %s" % (FLAGS.task_index, e), flush=True)
        os._exit(0)


if __name__ == "__main__":
    app.run(main)
