"""A TF1 asynchronous between-graph trainer (the guide's flags) that hangs, starts late or ends
slowly on request: the hang scenarios of tests/system/test_hangs.py.

Each worker adds to a global step on the ps and reports its own steps (tfcluster.plan.progress).

- ``--ps_delay``: the ps waits this long before it starts its server, as a ps on a slow node
  does. The workers' ``CreateSession`` then prints TensorFlow's "CreateSession still waiting
  for response from worker: /job:ps/replica:0/task:0" (every 10 s) and trains once it is up.
- ``--steps``: train this many steps, reported as ``step`` of ``total``; else
  ``--train_seconds`` of steps, without a total.
- ``--stuck_after``: after this many seconds of training, worker:1 waits for an event nobody
  sets, in ``wait_for_a_peer_that_never_answers`` -- a hang as real programs have them (a lost
  peer, a queue nobody fills): the process lives, prints nothing and makes no progress.
- ``--end_seconds``: after its last step, a worker spends this long on its way out (a final
  export, a goodbye to its peers), then exits 0.
"""
import argparse
import os
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")   # TensorFlow's "still waiting" is INFO
import tensorflow as tf

from tfcluster.plan.progress import report_progress

p = argparse.ArgumentParser()
p.add_argument("--ps_hosts", required=True)
p.add_argument("--worker_hosts", required=True)
p.add_argument("--job_name", required=True)
p.add_argument("--task_index", type=int, required=True)
p.add_argument("--ps_delay", type=float, default=0.0)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--train_seconds", type=float, default=30.0)
p.add_argument("--stuck_after", type=float, default=-1.0)
p.add_argument("--end_seconds", type=float, default=0.0)
a = p.parse_args()

v1 = tf.compat.v1
v1.disable_eager_execution()
cluster = tf.train.ClusterSpec({"ps": a.ps_hosts.split(","), "worker": a.worker_hosts.split(",")})
me = f"/job:{a.job_name}/task:{a.task_index}"
config = v1.ConfigProto(device_filters=["/job:ps", me], intra_op_parallelism_threads=1,
                        inter_op_parallelism_threads=1)
if a.job_name == "ps":
    time.sleep(a.ps_delay)
    server = v1.train.Server(cluster, job_name="ps", task_index=a.task_index, config=config)
    server.join()
    sys.exit(0)
server = v1.train.Server(cluster, job_name=a.job_name, task_index=a.task_index, config=config)


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
    i, last_report = 0, 0.0
    while (i < a.steps) if a.steps else (time.time() - began < a.train_seconds):
        sess.run(train)
        i += 1
        if a.steps or time.time() - last_report >= 0.2:
            last_report = time.time()
            report_progress(i, a.steps or None)
        time.sleep(0.02)
        if a.task_index == 1 and 0 <= a.stuck_after < time.time() - began:
            print("worker 1: waiting for a peer", flush=True)
            wait_for_a_peer_that_never_answers()
print(f"worker {a.task_index}: last step {i}; on its way out for {a.end_seconds:g}s", flush=True)
time.sleep(a.end_seconds)
print(f"worker {a.task_index} done", flush=True)
