"""A TF1 asynchronous between-graph trainer (the guide's flags) whose worker:1 gets stuck.

Each worker adds to a global step on the ps and reports it (tfcluster.progress). After
``--stuck_after`` seconds of training, worker:1 waits for an event nobody sets, in
``wait_for_a_peer_that_never_answers`` -- a hang as real programs have them (a lost peer, a
queue nobody fills): the process lives, prints nothing and makes no progress. worker:0 (the
chief) trains ``--train_seconds`` and exits 0, so the run succeeds; the launcher must still say
that worker:1 stopped making progress (issue 32).
"""
import argparse
import os
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from tfcluster.progress import report_progress  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--ps_hosts", required=True)
p.add_argument("--worker_hosts", required=True)
p.add_argument("--job_name", required=True)
p.add_argument("--task_index", type=int, required=True)
p.add_argument("--train_seconds", type=float, default=30.0)
p.add_argument("--stuck_after", type=float, default=2.0)
a = p.parse_args()

v1 = tf.compat.v1
v1.disable_eager_execution()
cluster = tf.train.ClusterSpec({"ps": a.ps_hosts.split(","), "worker": a.worker_hosts.split(",")})
me = f"/job:{a.job_name}/task:{a.task_index}"
config = v1.ConfigProto(device_filters=["/job:ps", me], intra_op_parallelism_threads=1,
                        inter_op_parallelism_threads=1)
server = v1.train.Server(cluster, job_name=a.job_name, task_index=a.task_index, config=config)
if a.job_name == "ps":
    server.join()
    sys.exit(0)


def wait_for_a_peer_that_never_answers():
    threading.Event().wait()


with v1.device(v1.train.replica_device_setter(worker_device=me, cluster=cluster)):
    step = v1.train.get_or_create_global_step()
    train = v1.assign_add(step, 1)
init = v1.global_variables_initializer()
uninit = v1.report_uninitialized_variables() if a.task_index else None
with v1.Session(server.target, config=config) as sess:
    if a.task_index == 0:
        sess.run(init)
    else:
        while len(sess.run(uninit)):
            time.sleep(0.1)
    began = time.time()
    last_report = 0.0
    while time.time() - began < a.train_seconds:
        value = sess.run(train)
        if time.time() - last_report >= 0.2:
            last_report = time.time()
            report_progress(int(value))
        time.sleep(0.01)
        if a.task_index == 1 and time.time() - began > a.stuck_after:
            print("worker 1: waiting for a peer", flush=True)
            wait_for_a_peer_that_never_answers()
    print(f"worker {a.task_index} done at step {value}", flush=True)
