"""Keras ``Model.fit`` under MultiWorkerMirroredStrategy (TensorFlow's "Multi-worker training
with Keras" tutorial), with fault tolerance from ``BackupAndRestore``.

Every worker runs this same program: it builds and compiles a Keras model in
``MultiWorkerMirroredStrategy().scope()`` and calls ``model.fit`` (synchronous training, the
gradients all-reduced every step). Run it from its cluster file::

    pip install -e '.[keras2]'            # tf_keras: Keras 2, which runs this on TF 2.16+
    tfcluster launch examples/keras_mwms.yaml

The file sets ``TF_USE_LEGACY_KERAS=1`` for the tasks: on TensorFlow 2.16+ the default Keras 3
fails ``fit`` under this strategy (docs/TF2_STRATEGIES.md has the measured table).

- ``tf.keras.callbacks.BackupAndRestore(backup_dir)`` saves the training state at every
  epoch's end (the chief into ``--backup_dir``, the other workers into temporary folders, as
  Keras does under MWMS). When a worker dies the others' collectives fail, the launcher
  restarts every worker (``restart: on-failure``) and ``fit`` resumes from the epoch after the
  last backup. The program prints where it starts: ``keras_mwms: worker:0 initial epoch 2``.
- ``tfcluster.runtime.keras.ProgressCallback`` reports the global step, epoch and metrics to the
  launcher's live table.
- At the end each worker prints one line,
  ``keras_mwms: worker:0 done: epochs=5 loss=0.21 accuracy=0.95 initial_epoch=0 {...}``, and
  the chief writes ``<backup_dir>.done`` so that a worker restarted after the run ended (the
  others are gone) exits at once instead of waiting for peers.
"""
import json
import os
import signal
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

flags.DEFINE_integer("epochs", 5, "Epochs")
flags.DEFINE_integer("steps_per_epoch", 50, "Steps per epoch")
flags.DEFINE_integer("per_worker_batch_size", 32, "Batch size per worker (global = x workers)")
flags.DEFINE_enum("input", "dataset", ["dataset", "numpy"], "Fit on a tf.data.Dataset or on "
                  "numpy arrays")
flags.DEFINE_string("backup_dir", "runs/keras_mwms-backup", "BackupAndRestore's folder "
                    "(on a file system every worker can read); empty: no backups")
flags.DEFINE_float("step_delay", 0.0, "Seconds to sleep after each step (to watch, or to kill "
                   "a worker mid-fit)")
flags.DEFINE_integer("verbose", 2, "Keras' fit verbosity (1: progress bar, 2: a line per epoch)")
FLAGS = flags.FLAGS


def synthetic_data(num_examples, seed):
    """A learnable 4-class task: the label is the argmax of a fixed linear map of x."""
    import numpy as np

    teacher = np.random.default_rng(1234).normal(size=(16, 4)).astype("float32")
    x = np.random.default_rng(seed).normal(size=(num_examples, 16)).astype("float32")
    return x, np.argmax(x @ teacher, axis=1).astype("int64")


def build_and_compile_model(tf):
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(16,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(4),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
                  metrics=["accuracy"])
    return model


def main(argv):
    del argv
    import tensorflow as tf
    from absl import logging as absl_logging

    from tfcluster.runtime.keras import ProgressCallback

    # TF's INFO lines (some through absl) drown the program's own output
    tf.get_logger().setLevel("ERROR")
    absl_logging.set_verbosity(absl_logging.WARNING)
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    if "worker" not in tf_config.get("cluster", {}):
        print("keras_mwms: error: no TF_CONFIG with workers; run it with "
              "`tfcluster launch examples/keras_mwms.yaml`", file=sys.stderr)
        return 2
    task = tf_config["task"]
    me = f"{task['type']}:{task['index']}"
    chief = task["type"] == "chief" or (task["type"] == "worker" and task["index"] == 0
                                        and "chief" not in tf_config["cluster"])

    def log(msg):
        print(f"keras_mwms: {me} {msg}", flush=True)

    # absolute: a relative --backup_dir is relative to the task's folder (the cluster file's,
    # examples/), not to where tfcluster was started; say where it really is
    done_file = os.path.abspath(FLAGS.backup_dir.rstrip("/") + ".done") if FLAGS.backup_dir else None
    if done_file and os.path.exists(done_file):
        with open(done_file) as f:
            done = json.load(f)
        if done.get("epochs", 0) >= FLAGS.epochs:
            log(f"nothing to train: {done_file} says {done['epochs']} epochs are done (delete "
                f"it and {os.path.abspath(FLAGS.backup_dir)} to train again)")
            return 0

    num_workers = len(tf_config["cluster"]["worker"]) + len(tf_config["cluster"].get("chief", []))
    global_batch_size = FLAGS.per_worker_batch_size * num_workers

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    # MWMS enables TensorFlow's coordination service, whose C++ SIGTERM handler would keep
    # this process alive on SIGTERM (tfcluster stops tasks with it): restore the default
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    x_train, y_train = synthetic_data(4096, 1)
    x_eval, y_eval = synthetic_data(1024, 2)
    with strategy.scope():
        model = build_and_compile_model(tf)

    class InitialEpoch(tf.keras.callbacks.Callback):
        """Prints the epoch fit starts from (after BackupAndRestore) and slows steps down."""

        first = None

        def on_epoch_begin(self, epoch, logs=None):
            if InitialEpoch.first is None:
                InitialEpoch.first = epoch
                log(f"initial epoch {epoch}")

        def on_train_batch_end(self, batch, logs=None):
            if FLAGS.step_delay:
                time.sleep(FLAGS.step_delay)

    callbacks = [InitialEpoch(), ProgressCallback()]
    if FLAGS.backup_dir:
        callbacks.insert(0, tf.keras.callbacks.BackupAndRestore(backup_dir=FLAGS.backup_dir))

    t0 = time.time()
    if FLAGS.input == "numpy":
        history = model.fit(x_train, y_train, batch_size=global_batch_size, epochs=FLAGS.epochs,
                            steps_per_epoch=FLAGS.steps_per_epoch, callbacks=callbacks,
                            verbose=FLAGS.verbose)
    else:
        dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        dataset = dataset.shuffle(4096, seed=1).repeat().batch(global_batch_size)
        history = model.fit(dataset, epochs=FLAGS.epochs, steps_per_epoch=FLAGS.steps_per_epoch,
                            callbacks=callbacks, verbose=FLAGS.verbose)
    # every worker evaluates (collective ops again), each on the whole held-out set
    eval_loss, eval_acc = model.evaluate(x_eval, y_eval, batch_size=global_batch_size, verbose=0)
    elapsed = time.time() - t0

    hist = {k: [round(float(v), 4) for v in vs] for k, vs in history.history.items()}
    initial = InitialEpoch.first if InitialEpoch.first is not None else FLAGS.epochs
    summary = {"epochs": FLAGS.epochs, "initial_epoch": initial, "history": hist,
               "eval_loss": round(float(eval_loss), 4), "accuracy": round(float(eval_acc), 4),
               "workers": num_workers, "seconds": round(elapsed, 1)}
    if chief and done_file:
        with open(done_file, "w") as f:
            json.dump(summary, f)
    log(f"done: epochs={FLAGS.epochs} loss={eval_loss:.4f} accuracy={eval_acc:.4f} "
        f"initial_epoch={initial} ({elapsed:.1f}s) {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    app.run(main)
