"""Per-step cost of the runtime's session choices, in one process (no cluster noise).

trainer.py's model on a local grpc server; microseconds per step of: a plain
``Session.run([train_op, global_step])``; the same with ``operation_timeout_in_ms``; with
intra 1 / inter 2 thread pools (what the runtime gives 3 tasks on 2 cores); a
``MonitoredSession`` with ``StopAtStepHook``, fetching ``loss`` too or not (what trainer.py did
before ``TrainingSession`` checked the step itself); and a ``MonitoredSession`` with no hooks; tfcluster's ``TrainingSession`` (its loop, with
``should_stop()``), async and with a ``SyncReplicasOptimizer`` (1 replica), the latter also with
a per-step hook (``before_run``: MonitoredSession's path).
Variants alternate; prints the medians of ``REPS`` (default 3) repeats as JSON.

    python scripts/bench_programs/step_overhead.py [REPS [VARIANT,VARIANT...]]
"""
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlp


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    from tfcluster.net.ports import free_ports
    from tfcluster.runtime import TrainingSession, parse_tf_config

    addr = "localhost:%d" % free_ports(1)[0]
    cluster = {"worker": [addr]}
    server = tf.compat.v1.train.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=0)
    ctx = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    data = mlp.load_data()

    def build():
        g = tf.Graph()
        with g.as_default():
            gs = tf.compat.v1.train.get_or_create_global_step()
            x, y = mlp.input_batches(tf, data)
            loss = mlp.loss_fn(tf, mlp.model(tf, x, data.num_classes), y)
            op = mlp.optimizer(tf).minimize(loss, global_step=gs)
        return g, gs, loss, op

    def cfg(timeout=False, pools=None):
        c = tf.compat.v1.ConfigProto()
        if timeout:
            c.operation_timeout_in_ms = 120000
        if pools:
            c.intra_op_parallelism_threads, c.inter_op_parallelism_threads = pools
        return c

    def plain(c, n=1500):
        g, gs, _, op = build()
        with g.as_default(), tf.compat.v1.Session(server.target, config=c) as s:
            s.run(tf.compat.v1.global_variables_initializer())
            for _ in range(50):
                s.run([op, gs])
            t = time.perf_counter()
            for _ in range(n):
                s.run([op, gs])
            return (time.perf_counter() - t) / n * 1e6

    def monitored(c, n=1500, stop_hook=True, fetch_loss=True):
        g, gs, loss, op = build()
        fetches = [op, gs, loss] if fetch_loss else [op, gs]
        with g.as_default():
            creator = tf.compat.v1.train.ChiefSessionCreator(master=server.target, config=c)
            hooks = [tf.compat.v1.train.StopAtStepHook(last_step=10**9)] if stop_hook else []
            with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as s:
                for _ in range(50):
                    s.run(fetches)
                t = time.perf_counter()
                for _ in range(n):
                    s.run(fetches)
                return (time.perf_counter() - t) / n * 1e6

    def per_step(s, op, gs, n):
        """Microseconds a ``TrainingSession.run`` of (op, global step), after 50 to warm up."""
        for _ in range(50):
            s.run([op, gs])
        t = time.perf_counter()
        for _ in range(n):
            if s.should_stop():
                break
            s.run([op, gs])
        return (time.perf_counter() - t) / n * 1e6

    def training_session(c, n=1500):
        """tfcluster's TrainingSession as trainer.py uses it (async, no hooks: fast path)."""
        g, gs, _, op = build()
        with g.as_default():
            with TrainingSession(ctx, server.target, last_step=10**9, config=c) as s:
                return per_step(s, op, gs, n)

    class PerStepHook(tf.compat.v1.train.SessionRunHook):
        def before_run(self, run_context):  # per-step work (none): MonitoredSession's path
            return None

    runs = [0]

    def training_session_sync(c, n=1500, hooked=False):
        """TrainingSession with a SyncReplicasOptimizer (1 replica: the chief, its queue runner
        and hook); ``hooked``: plus a hook with before_run, so run() goes through
        MonitoredSession (what every sync replica did before the fast path took hooks
        without per-step work)."""
        from tfcluster.runtime import make_sync_optimizer

        g = tf.Graph()
        runs[0] += 1  # the server keeps the closed token queue: a fresh container per run
        with g.as_default(), g.container("sync%d" % runs[0]):
            gs = tf.compat.v1.train.get_or_create_global_step()
            x, y = mlp.input_batches(tf, data)
            loss = mlp.loss_fn(tf, mlp.model(tf, x, data.num_classes), y)
            opt = make_sync_optimizer(mlp.optimizer(tf), ctx)
            op = opt.minimize(loss, global_step=gs)
            with TrainingSession(ctx, server.target, last_step=10**9, config=c, sync_optimizer=opt,
                                 hooks=[PerStepHook()] if hooked else []) as s:
                assert s._fast is not hooked
                return per_step(s, op, gs, n)

    variants = {"training_session": lambda: training_session(cfg()),
                "training_session_sync": lambda: training_session_sync(cfg()),
                "training_session_sync_hooked": lambda: training_session_sync(cfg(), hooked=True),"plain": lambda: plain(cfg()), "plain_timeout": lambda: plain(cfg(True)),
                "plain_pools_1_2": lambda: plain(cfg(False, (1, 2))),
                "monitored_stopatstep_fetch_loss": lambda: monitored(cfg()),
                "monitored_stopatstep": lambda: monitored(cfg(), fetch_loss=False),
                "monitored_no_hooks": lambda: monitored(cfg(), stop_hook=False, fetch_loss=False)}
    if len(sys.argv) > 2:  # a comma-separated subset of the variants
        variants = {k: variants[k] for k in sys.argv[2].split(",")}
    res = {k: [] for k in variants}
    for i in range(reps):
        for k in (list(variants) if i % 2 == 0 else list(variants)[::-1]):
            res[k].append(variants[k]())
    print(json.dumps({"us_per_step": {k: round(statistics.median(v)) for k, v in res.items()}}))
    os._exit(0)


if __name__ == "__main__":
    main()
