"""In-graph replication (the seed document's other mode): one client, one graph.

The client builds a single graph holding the variables (on the ps tasks) and one replica of
the model per worker task (``tf.device("/job:worker/task:i")``), averages the replicas'
gradients and applies them once per step: synchronous data-parallel training driven from
one process. The ps and worker tasks only host servers: run them with the built-in "just
serve" program (``python -m tfcluster.runtime.serve``, or ``tfcluster serve``).

Under ``tfcluster launch`` give ps and worker tasks the serve program and run this file as
the ``chief`` task (it then starts the chief's server and uses it as the master)::

    TF_CONFIG=... python examples/in_graph.py           # task chief:0 of the cluster

By hand, the client needs no place in the cluster; point it at the cluster::

    python -m tfcluster.runtime.serve --ps_hosts=localhost:2222 \\
        --worker_hosts=localhost:2223,localhost:2224 --job_name=ps --task_index=0   # and workers
    python examples/in_graph.py --cluster='ps=localhost:2222;worker=localhost:2223,localhost:2224'

``--cluster`` also takes JSON (``{"ps": [...], "worker": [...]}`` or a whole TF_CONFIG).
The client prints one line ``in-graph: done: global_step=N accuracy=X loss=Y`` and exits 0;
the serve tasks keep serving until they are stopped (SIGTERM).
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

from tfcluster.plan.progress import report_progress
from tfcluster.runtime import data as rt_data
from tfcluster.runtime.context import ContextError, TaskContext, parse_cluster, task_context

flags.DEFINE_string("cluster", "", "The cluster (JSON or 'ps=h:p,...;worker=h:p,...'); "
                    "default: TF_CONFIG")
flags.DEFINE_integer("train_steps", 200, "Synchronous steps (each uses every worker once)")
flags.DEFINE_integer("batch_size", 64, "Batch size per worker replica")
flags.DEFINE_float("learning_rate", 0.01, "Adam learning rate")
flags.DEFINE_integer("hidden_units", 64, "Hidden layer width")
flags.DEFINE_integer("seed", 1234, "Seed of the synthetic dataset")
FLAGS = flags.FLAGS


def resolve_cluster():
    """(cluster dict, master target, own server or None)."""
    if FLAGS.cluster:
        return parse_cluster(FLAGS.cluster), None
    try:
        ctx = task_context()
    except ContextError as e:
        print(f"tfcluster: error: {e.message} (or pass --cluster)", file=sys.stderr)
        sys.exit(2)
    return ctx.cluster, ctx


def model(tf, x, num_classes):
    """The replica's model: variables via get_variable so every tower shares them."""
    def dense(h, units, name, activation=None):
        with tf.compat.v1.variable_scope(name):
            w = tf.compat.v1.get_variable("kernel", [h.shape[-1], units],
                                          initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))
            b = tf.compat.v1.get_variable("bias", [units], initializer=tf.zeros_initializer())
            out = tf.matmul(h, w) + b
            return activation(out) if activation else out

    with tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE):
        h = dense(x, FLAGS.hidden_units, "hidden1", tf.nn.relu)
        return dense(h, num_classes, "logits")


def main(argv):
    del argv
    import tensorflow as tf

    from tfcluster.runtime.placement import GreedyLoadBalancingStrategy, placement_report
    from tfcluster.runtime.server import exit_now, session_config, start_server

    tf.compat.v1.disable_eager_execution()
    cluster, ctx = resolve_cluster()
    workers = cluster.get("worker", [])
    num_ps = len(cluster.get("ps", []))
    if not workers:
        print("tfcluster: error: in-graph replication needs a 'worker' job", file=sys.stderr)
        return 2
    if ctx is not None and ctx.in_cluster and ctx.job_name == "chief":
        server = start_server(ctx, device_filters=["/job:ps", "/job:worker", ctx.device])
        target, own = server.target, ctx.device
    else:  # a client outside the cluster: worker 0's master runs the graph
        target, own = "grpc://" + workers[0], None
    me = TaskContext(cluster=dict(cluster), job_name="worker", task_index=0)

    data = rt_data.synthetic(seed=FLAGS.seed)
    # variables on the ps tasks (greedy byte balancing); without ps, on worker 0
    strategy = GreedyLoadBalancingStrategy(max(num_ps, 1))
    ps_device = "/job:ps/device:CPU:0" if num_ps else "/job:worker/device:CPU:0"
    graph = tf.Graph()
    with graph.as_default():
        global_step = None
        tower_grads, tower_losses = [], []
        opt = tf.compat.v1.train.AdamOptimizer(FLAGS.learning_rate)
        for i in range(len(workers)):
            worker = f"/job:worker/task:{i}"
            setter = tf.compat.v1.train.replica_device_setter(
                ps_tasks=max(num_ps, 1), ps_device=ps_device, worker_device=worker,
                ps_strategy=strategy)
            with tf.compat.v1.device(setter):
                if global_step is None:
                    global_step = tf.compat.v1.train.get_or_create_global_step()
                with tf.compat.v1.device(worker + "/device:CPU:0"):  # this replica's input shard
                    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
                    ds = ds.shard(len(workers), i).shuffle(4096, seed=i).repeat()
                    x, y = tf.compat.v1.data.make_one_shot_iterator(
                        ds.batch(FLAGS.batch_size)).get_next()
                logits = model(tf, x, data.num_classes)  # replica i of the model, on worker i
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=y, logits=logits))
                tower_losses.append(loss)
                tower_grads.append(opt.compute_gradients(loss))
        # average the replicas' gradients, apply once (the variables live on the ps tasks)
        with tf.compat.v1.device("/job:worker/task:0"):
            averaged = []
            for grads_and_vars in zip(*tower_grads):
                var = grads_and_vars[0][1]
                grad = tf.add_n([g for g, _ in grads_and_vars]) / float(len(workers))
                averaged.append((grad, var))
            mean_loss = tf.add_n(tower_losses) / float(len(workers))
        with tf.compat.v1.device(setter):
            train_op = opt.apply_gradients(averaged, global_step=global_step)
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.device("/job:worker/task:0"):
            x_eval = tf.compat.v1.placeholder(tf.float32, [None, data.num_features])
            y_eval = tf.compat.v1.placeholder(tf.int32, [None])
            eval_logits = model(tf, x_eval, data.num_classes)
            eval_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y_eval, logits=eval_logits))
            eval_acc = tf.reduce_mean(tf.cast(tf.equal(
                tf.argmax(eval_logits, 1, output_type=tf.int32), y_eval), tf.float32))
        print(placement_report(graph, num_ps=num_ps, strategy="greedy").to_text(), flush=True)

    config = session_config(me, device_filters=["/job:ps", "/job:worker"] + ([own] if own else []),
                            operation_timeout_ms=120_000)
    print(f"in-graph: {len(workers)} replica(s), {num_ps} ps, master {target}", flush=True)
    t0, last = time.time(), 0.0
    with tf.compat.v1.Session(target, graph=graph, config=config) as sess:
        sess.run(init)
        step, loss_value = 0, float("nan")
        while step < FLAGS.train_steps:
            _, step, loss_value = sess.run([train_op, global_step, mean_loss])
            if time.monotonic() - last >= 1.0:
                last = time.monotonic()
                report_progress(step, FLAGS.train_steps, loss=loss_value)
        report_progress(step, FLAGS.train_steps, loss=loss_value)
        acc, test_loss = sess.run([eval_acc, eval_loss],
                                  feed_dict={x_eval: data.x_test, y_eval: data.y_test})
    print(f"in-graph: done: global_step={step} accuracy={acc:.4f} loss={test_loss:.4f} "
          f"secs={time.time() - t0:.2f}", flush=True)
    exit_now(0)


if __name__ == "__main__":
    app.run(main)
