"""A tiny between-graph training program: ps serves, workers train a few steps."""
import json
import os
import sys
import time

import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
cfg = json.loads(os.environ["TF_CONFIG"])
job, idx = cfg["task"]["type"], cfg["task"]["index"]
cluster = tf.train.ClusterSpec(cfg["cluster"])
filters = ["/job:ps", "/job:worker"] if job == "ps" else ["/job:ps", f"/job:{job}/task:{idx}"]
config = tf1.ConfigProto(device_filters=filters, inter_op_parallelism_threads=1,
                         intra_op_parallelism_threads=1)
server = tf1.train.Server(cluster, job_name=job, task_index=idx, config=config)
print(f"{job}:{idx} serving at {server.target}", flush=True)
if job == "ps":
    server.join()
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
with tf1.device(tf1.train.replica_device_setter(worker_device=f"/job:worker/task:{idx}",
                                                cluster=cluster)):
    w = tf1.get_variable("w", initializer=0.0)
    step = tf1.train.get_or_create_global_step()
    loss = tf.square(w - 3.0)
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    init = tf1.global_variables_initializer()
    uninit = tf1.report_uninitialized_variables()
with tf1.Session(server.target, config=config) as sess:
    if idx == 0:
        sess.run(init)
    while sess.run(uninit).size:
        time.sleep(0.1)
    for _ in range(steps):
        _, g, ln = sess.run([train, step, loss])
    print(f"TRAINED {job}:{idx} global_step={g} loss={ln:.4f}", flush=True)
