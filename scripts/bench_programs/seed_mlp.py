"""A hand-written seed-style trainer of trainer.py's model: what a user writes from the
TensorFlow distributed guide (flags, ``replica_device_setter``, ``Supervisor``, default
``ConfigProto``: no thread-pool sizing, no device filters), async or ``SyncReplicasOptimizer``
the way TensorFlow's mnist_replica example does it.

``--session=mts`` is the naive alternative for time-to-first-step: a plain
``MonitoredTrainingSession(master, is_chief)`` whose non-chief polls readiness every 30 s.

The ps runs ``server.join()`` (the launcher stops it). Workers print tfcluster progress lines
(the benchmark reads them) and leave with ``os._exit`` once they reach ``--train_steps``.
"""
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlp
import tensorflow as tf
from absl import app, flags

tf.compat.v1.disable_eager_execution()
flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs")
flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs")
flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'")
flags.DEFINE_integer("task_index", 0, "Index of task within the job")
flags.DEFINE_integer("train_steps", 1000, "Global steps to train")
flags.DEFINE_enum("mode", "async", ["async", "sync"], "async or SyncReplicasOptimizer")
flags.DEFINE_enum("session", "supervisor", ["supervisor", "mts"], "Supervisor or naive MTS")
flags.DEFINE_float("progress_secs", 0.25, "progress line period")
flags.DEFINE_string("logdir", "", "Supervisor logdir (default: a temporary folder)")
FLAGS = flags.FLAGS


def main(_):
    ps_hosts = FLAGS.ps_hosts.split(",")
    worker_hosts = FLAGS.worker_hosts.split(",")
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})
    server = tf.compat.v1.train.Server(cluster, job_name=FLAGS.job_name,
                                       task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
        return
    is_chief = FLAGS.task_index == 0
    num_workers = len(worker_hosts)
    sync = FLAGS.mode == "sync"
    data = mlp.load_data()
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % FLAGS.task_index, cluster=cluster)):
        tf.compat.v1.set_random_seed(mlp.SEED)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.device("/job:worker/task:%d/device:CPU:0" % FLAGS.task_index):
            x, y = mlp.input_batches(tf, data, num_workers, FLAGS.task_index)
        loss = mlp.loss_fn(tf, mlp.model(tf, x, data.num_classes), y)
        opt = mlp.optimizer(tf)
        if sync:
            opt = tf.compat.v1.train.SyncReplicasOptimizer(
                opt, replicas_to_aggregate=num_workers, total_num_replicas=num_workers)
        train_op = opt.minimize(loss, global_step=global_step)
        init_op = tf.compat.v1.global_variables_initializer()
        if sync:
            local_init_op = opt.chief_init_op if is_chief else opt.local_step_init_op
            ready_for_local_init_op = opt.ready_for_local_init_op
            chief_queue_runner = opt.get_chief_queue_runner()
            init_tokens_op = opt.get_init_tokens_op()

    progress = mlp.Progress(FLAGS.train_steps, FLAGS.progress_secs)
    logdir = FLAGS.logdir or tempfile.mkdtemp(prefix="seed_mlp_")
    if FLAGS.session == "mts":
        hooks = [opt.make_session_run_hook(is_chief)] if sync else []
        sess = tf.compat.v1.train.MonitoredTrainingSession(
            master=server.target, is_chief=is_chief, hooks=hooks, save_checkpoint_secs=None,
            save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None)
        step = 0
        while step < FLAGS.train_steps:
            _, step = sess.run([train_op, global_step])
            progress(step)
        progress(step, force=True)
        print("worker %d: done: global_step=%d" % (FLAGS.task_index, step), flush=True)
        os._exit(0)

    kwargs = {}
    if sync:
        kwargs = dict(local_init_op=local_init_op, ready_for_local_init_op=ready_for_local_init_op)
    sv = tf.compat.v1.train.Supervisor(is_chief=is_chief, logdir=logdir, init_op=init_op,
                                       recovery_wait_secs=1, global_step=global_step,
                                       save_model_secs=600, **kwargs)
    with sv.prepare_or_wait_for_session(server.target) as sess:
        if sync and is_chief:
            sv.start_queue_runners(sess, [chief_queue_runner])
            sess.run(init_tokens_op)
        step = 0
        while not sv.should_stop() and step < FLAGS.train_steps:
            _, step = sess.run([train_op, global_step])
            progress(step)
        progress(step, force=True)
        print("worker %d: done: global_step=%d" % (FLAGS.task_index, step), flush=True)
        os._exit(0)  # a sync worker would otherwise wait for tokens / the Supervisor's threads


if __name__ == "__main__":
    app.run(main)
