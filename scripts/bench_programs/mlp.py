"""The model of trainer.py, written out by hand for the benchmark's baselines.

Same data (tfcluster.runtime.data.synthetic: numpy only), same input pipeline (shard,
shuffle 4096, repeat, batch 64, prefetch 2), same MLP (16 -> 64 relu -> 64 relu -> 4, glorot
uniform, zero bias), same loss and Adam(0.01). The baselines (seed-style trainer, single
process) build it with these functions so that only the distributed machinery differs.
"""
import json
import sys
import time

BATCH = 64
HIDDEN = 64
SEED = 1234
LR = 0.01


def load_data():
    from tfcluster.runtime.data import synthetic

    return synthetic(seed=SEED)


def input_batches(tf, data, num_workers=1, worker_index=0, batch=BATCH):
    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    ds = ds.shard(num_workers, worker_index)
    ds = ds.shuffle(4096, seed=SEED + worker_index).repeat().batch(batch).prefetch(2)
    return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()


def model(tf, x, num_classes, hidden=HIDDEN):
    init = tf.compat.v1.glorot_uniform_initializer(seed=SEED)

    def dense(h, units, name, activation=None):
        with tf.compat.v1.variable_scope(name):
            w = tf.compat.v1.get_variable("kernel", [h.shape[-1], units], initializer=init)
            b = tf.compat.v1.get_variable("bias", [units], initializer=tf.zeros_initializer())
            out = tf.matmul(h, w) + b
            return activation(out) if activation else out

    with tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE):
        h = dense(x, hidden, "hidden1", tf.nn.relu)
        h = dense(h, hidden, "hidden2", tf.nn.relu)
        return dense(h, num_classes, "logits")


def loss_fn(tf, logits, labels):
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def optimizer(tf, lr=LR):
    return tf.compat.v1.train.AdamOptimizer(lr)


class Progress:
    """Prints tfcluster's progress line (the benchmark reads it) at most every ``secs``."""

    def __init__(self, total, secs=0.25):
        self.total, self.secs, self.last = total, secs, 0.0

    def __call__(self, step, force=False):
        now = time.monotonic()
        if force or now - self.last >= self.secs:
            self.last = now
            sys.stdout.write("@tfcluster progress " + json.dumps(
                {"step": int(step), "total": int(self.total)}) + "\n")
            sys.stdout.flush()
