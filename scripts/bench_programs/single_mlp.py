"""One process alone: trainer.py's model, no cluster, a plain local Session (the baseline of
time-to-first-step and of scaling efficiency). Prints tfcluster progress lines."""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlp


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    progress_secs = float(sys.argv[2]) if len(sys.argv) > 2 else 0.25
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    data = mlp.load_data()
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(mlp.SEED)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        x, y = mlp.input_batches(tf, data)
        loss = mlp.loss_fn(tf, mlp.model(tf, x, data.num_classes), y)
        train_op = mlp.optimizer(tf).minimize(loss, global_step=global_step)
        progress = mlp.Progress(steps, progress_secs)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            _, step = sess.run([train_op, global_step])
            progress(step)
            t1, s1 = time.monotonic(), step
            while step < steps:
                _, step = sess.run([train_op, global_step])
                progress(step)
            t2 = time.monotonic()
            progress(step, force=True)
    print("@bench " + json.dumps({"steps_per_s": (step - s1) / (t2 - t1)}), flush=True)
    print("single: done: global_step=%d" % step, flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
