"""1 ps + 2 sync replicas (SyncReplicasOptimizer) in one process, each replica a thread with
its own graph and TrainingSession: prints one JSON line saying, per replica, whether run()
took the fast path (``_fast``) and how many steps went through MonitoredSession.run instead.

    python sync_fast_path.py STEPS [before_run]   # before_run: worker:1 gets a per-step hook

Used by tests/system/test_training_session.py; ends with os._exit (the sync chief's queue
runner thread stays blocked, as in trainer.py).
"""
import json
import os
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from tfcluster.net.ports import free_ports
from tfcluster.runtime import TrainingSession, make_sync_optimizer, parse_tf_config
from tfcluster.runtime.server import session_config

tf.compat.v1.disable_eager_execution()


class CountingHook(tf.compat.v1.train.SessionRunHook):
    """A hook with per-step work: counts its before_run calls."""

    def __init__(self):
        self.calls = 0

    def before_run(self, run_context):
        self.calls += 1
        return None


def main():
    steps = int(sys.argv[1])
    with_hook = len(sys.argv) > 2 and sys.argv[2] == "before_run"
    ports = free_ports(3)
    cluster = {"ps": ["localhost:%d" % ports[0]],
               "worker": ["localhost:%d" % p for p in ports[1:]]}

    def ctx_of(job, i):
        return parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": job, "index": i}}))

    spec = tf.train.ClusterSpec(cluster)
    servers = {("ps", 0): tf.compat.v1.train.Server(spec, job_name="ps", task_index=0,
                                                    config=session_config(ctx_of("ps", 0)))}
    for i in range(2):
        servers[("worker", i)] = tf.compat.v1.train.Server(
            spec, job_name="worker", task_index=i, config=session_config(ctx_of("worker", i)))
    out, errors = {}, []
    start = threading.Barrier(2, timeout=60)  # both sessions up before either steps

    def replica(i):
        try:
            ctx = ctx_of("worker", i)
            with tf.Graph().as_default():
                with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
                        worker_device=ctx.device, cluster=spec)):
                    gs = tf.compat.v1.train.get_or_create_global_step()
                    w = tf.compat.v1.get_variable("w", [4], initializer=tf.zeros_initializer())
                    loss = tf.reduce_sum(tf.square(w - 1.0))
                    opt = make_sync_optimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), ctx)
                    train_op = opt.minimize(loss, global_step=gs)
                hook = CountingHook() if (with_hook and i == 1) else None
                sess = TrainingSession(ctx, servers[("worker", i)], last_step=steps,
                                       sync_optimizer=opt, hooks=[hook] if hook else [],
                                       signal_done_at_end=False)
                slow = [0]
                with sess as s:
                    monitored_run = s.session.run

                    def counting_run(*a, **k):
                        slow[0] += 1
                        return monitored_run(*a, **k)

                    s.session.run = counting_run
                    start.wait()
                    n = 0
                    while not s.should_stop():
                        if s.run([train_op, gs]) is None:
                            break
                        n += 1
                    final = s.current_step()
                out[ctx.task_id] = {"fast": sess._fast, "runs": n, "monitored_runs": slow[0],
                                    "hook_before_run_calls": hook.calls if hook else None,
                                    "final_step": final, "local_step": sess.local_step}
        except Exception as e:  # reported in the JSON line
            errors.append("worker:%d: %r" % (i, e))

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    print(json.dumps({"replicas": out, "errors": errors}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
