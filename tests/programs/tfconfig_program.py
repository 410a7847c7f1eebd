"""A TF_CONFIG-only program: every task starts its server from TF_CONFIG. The chief (worker:0)
runs a few steps on a variable placed on ps and exits; the other workers then keep waiting
(as real non-chief workers often do) until the launcher stops them."""
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

from tfcluster.plan.progress import report_progress

cfg = json.loads(os.environ["TF_CONFIG"])
job, index = cfg["task"]["type"], cfg["task"]["index"]
v1 = tf.compat.v1
v1.disable_eager_execution()
cluster = tf.train.ClusterSpec(cfg["cluster"])
me = f"/job:{job}/task:{index}"
config = v1.ConfigProto(device_filters=["/job:ps", me])
server = v1.train.Server(cluster, job_name=job, task_index=index, config=config)
if job == "ps":
    server.join()
elif index == 0:
    with v1.device("/job:ps/task:0"):
        w = v1.get_variable("w", initializer=1.0, use_resource=True)
    step = w.assign_add(1.0)
    with v1.Session(server.target, config=config) as sess:
        sess.run(v1.global_variables_initializer())
        for _i in range(10):
            value = sess.run(step)
        report_progress(10, 10, w=float(value))
        print(f"chief done w={value}", flush=True)
else:
    print("waiting for more work", flush=True)
    while True:
        time.sleep(1)
