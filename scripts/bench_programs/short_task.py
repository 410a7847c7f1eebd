"""A fixed short ps/worker program (launch overhead, scale): reads TF_CONFIG like any
TensorFlow program. ps: ``server.join()`` (whoever started it stops it). Worker: its own
variable on the ps, ``--steps`` assign_add steps through the ps, then exit 0."""
import json
import os
import sys
import time

T0 = time.time()

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    steps = 20
    for a in sys.argv[1:]:
        if a.startswith("--steps="):
            steps = int(a.split("=", 1)[1])
    cfg = json.loads(os.environ["TF_CONFIG"])
    job, index = cfg["task"]["type"], int(cfg["task"]["index"])
    import tensorflow as tf

    t_import = time.time()
    tf.compat.v1.disable_eager_execution()
    cluster = tf.train.ClusterSpec(cfg["cluster"])
    server = tf.compat.v1.train.Server(cluster, job_name=job, task_index=index)
    if job == "ps":
        server.join()
        return
    with tf.compat.v1.device("/job:ps/task:0"):
        v = tf.compat.v1.get_variable("v%d" % index, [1024], initializer=tf.zeros_initializer())
    with tf.compat.v1.device("/job:%s/task:%d" % (job, index)):
        step = tf.reduce_sum(v.assign_add(tf.ones([1024])))
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:%s/task:%d" % (job, index)])
    with tf.compat.v1.Session(server.target, config=config) as sess:
        sess.run(v.initializer)
        for _ in range(steps):
            total = sess.run(step)
    print("%s:%d: done: %g (started %.3f, TensorFlow imported +%.2fs, done +%.2fs)"
          % (job, index, total, T0, t_import - T0, time.time() - T0), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
