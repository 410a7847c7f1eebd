"""TF1 asynchronous between-graph training whose workers are each held to a pace, as workers
bound by their own input or link are: ``tf1_paced.py TARGET STEP_SECONDS STOP_FILE``. The ps
serve; each worker runs one training step of a shared global step, then sleeps STEP_SECONDS, and
reports the global step (tfcluster's progress protocol) every 0.25 s. The chief (worker:0)
initializes the variables and exits 0 at TARGET or once STOP_FILE exists; the other workers run
until they are stopped. Every worker prints ``FIRST_STEP N`` (the global step of its first step:
a worker that joins late starts where the run is, not from 0)."""
import json
import os
import sys
import time

import tensorflow as tf

from tfcluster.plan.progress import report_progress

tf1 = tf.compat.v1
tf1.disable_eager_execution()
target, pace, stop_file = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
cfg = json.loads(os.environ["TF_CONFIG"])
job, idx = cfg["task"]["type"], cfg["task"]["index"]
cluster = tf.train.ClusterSpec(cfg["cluster"])
# a worker's sessions see the ps and itself only: the workers not started yet are never waited on
filters = ["/job:ps"] if job == "ps" else ["/job:ps", f"/job:{job}/task:{idx}"]
config = tf1.ConfigProto(device_filters=filters, inter_op_parallelism_threads=1,
                         intra_op_parallelism_threads=1)
server = tf1.train.Server(cluster, job_name=job, task_index=idx, config=config)
print(f"{job}:{idx} serving at {server.target}", flush=True)
if job == "ps":
    server.join()
with tf1.device(tf1.train.replica_device_setter(worker_device=f"/job:worker/task:{idx}",
                                                cluster=cluster)):
    w = tf1.get_variable("w", initializer=tf.zeros([64]))
    step = tf1.train.get_or_create_global_step()
    loss = tf.reduce_sum(tf.square(w - 3.0))
    train = tf1.train.GradientDescentOptimizer(0.001).minimize(loss, global_step=step)
    init = tf1.global_variables_initializer()
    uninit = tf1.report_uninitialized_variables()
with tf1.Session(server.target, config=config) as sess:
    if idx == 0:
        sess.run(init)
    while sess.run(uninit).size:
        time.sleep(0.1)
    g, first, last = 0, None, 0.0
    while g < target and not (idx == 0 and os.path.exists(stop_file)):
        _, g = sess.run([train, step])
        if first is None:
            first = int(g)
            print(f"FIRST_STEP {first}", flush=True)
        if time.time() - last >= 0.25:
            report_progress(int(g), target)
            last = time.time()
        time.sleep(pace)
    report_progress(int(g), target)
    print(f"TRAINED {job}:{idx} global_step={g}", flush=True)
