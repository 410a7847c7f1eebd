"""A seed-style trainer (the guide's flags; ps calls server.join()), not part of tfcluster.

Between-graph replication with replica_device_setter: each worker adds to a variable on the
ps; worker:0 (the chief) initialises it; the others wait until it is initialised.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

p = argparse.ArgumentParser()
p.add_argument("--ps_hosts", required=True)
p.add_argument("--worker_hosts", required=True)
p.add_argument("--job_name", required=True)
p.add_argument("--task_index", type=int, required=True)
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()

v1 = tf.compat.v1
v1.disable_eager_execution()
cluster = tf.train.ClusterSpec({"ps": a.ps_hosts.split(","), "worker": a.worker_hosts.split(",")})
me = f"/job:{a.job_name}/task:{a.task_index}"
config = v1.ConfigProto(device_filters=["/job:ps", me], intra_op_parallelism_threads=1,
                        inter_op_parallelism_threads=1)
server = v1.train.Server(cluster, job_name=a.job_name, task_index=a.task_index, config=config)
if a.job_name == "ps":
    print("ps serving", flush=True)
    server.join()
    sys.exit(0)

with v1.device(v1.train.replica_device_setter(worker_device=me, cluster=cluster)):
    total = v1.get_variable("total", initializer=0.0, use_resource=True)
    add = total.assign_add(1.0)
init = v1.global_variables_initializer()
uninit = v1.report_uninitialized_variables()
with v1.Session(server.target, config=config) as sess:
    if a.task_index == 0:
        sess.run(init)
    else:
        while len(sess.run(uninit)):
            time.sleep(0.1)
    for _ in range(a.steps):
        value = sess.run(add)
    print(f"worker {a.task_index} done, total={value}", flush=True)
