"""Keras ``Model.fit`` under ParameterServerStrategy (TensorFlow's "Parameter server training"
tutorial, its ``Model.fit`` part): this program is the coordinator (the ``chief`` task).

The ps and worker tasks only serve (``python -m tfcluster.runtime.serve`` in the cluster file);
the coordinator creates the model's variables on the ps tasks (``strategy.scope()``), and
``model.fit`` over a ``DatasetCreator`` dispatches the steps to the workers through a
``ClusterCoordinator`` that Keras creates. Run it from its cluster file::

    pip install -e '.[keras2]'            # tf_keras: Keras 3 has no Model.fit under PSS
    tfcluster launch examples/keras_pss.yaml

- ``steps_per_execution`` runs several steps per scheduled function (the tutorial's advice).
- ``BackupAndRestore(--backup_dir)`` saves the training state at every epoch's end: a
  coordinator restarted by the launcher (``restart: on-failure``, after a ps or coordinator
  loss) resumes ``fit`` from the epoch after the last backup. A lost worker needs nothing:
  the coordinator reschedules its steps and uses it again once the launcher restarts it.
- ``tfcluster.runtime.keras.ProgressCallback`` reports the step, epoch and metrics to the live table.
- At the end the coordinator evaluates the model on held-out data (reading the ps variables)
  and prints ``keras_pss: done: epochs=5 loss=0.35 accuracy=0.93 initial_epoch=0 {...}``.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags

flags.DEFINE_integer("epochs", 5, "Epochs")
flags.DEFINE_integer("steps_per_epoch", 40, "Steps per epoch")
flags.DEFINE_integer("steps_per_execution", 5, "Steps per function the coordinator schedules")
flags.DEFINE_integer("global_batch_size", 64, "Batch size over all workers")
flags.DEFINE_string("backup_dir", "runs/keras_pss-backup", "BackupAndRestore's folder; "
                    "empty: no backups")
flags.DEFINE_integer("verbose", 2, "Keras' fit verbosity")
FLAGS = flags.FLAGS


def synthetic_data(num_examples, seed):
    """A learnable 4-class task: the label is the argmax of a fixed linear map of x."""
    import numpy as np

    teacher = np.random.default_rng(1234).normal(size=(16, 4)).astype("float32")
    x = np.random.default_rng(seed).normal(size=(num_examples, 16)).astype("float32")
    return x, np.argmax(x @ teacher, axis=1).astype("int64")


def main(argv):
    del argv
    import tensorflow as tf
    from absl import logging as absl_logging

    from tfcluster.runtime.keras import ProgressCallback

    tf.get_logger().setLevel("ERROR")
    absl_logging.set_verbosity(absl_logging.WARNING)
    cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster = cluster_resolver.cluster_spec().as_dict()
    if cluster_resolver.task_type != "chief" or "ps" not in cluster:
        print("keras_pss: error: run it as the chief of a cluster with ps and worker tasks: "
              "`tfcluster launch examples/keras_pss.yaml`", file=sys.stderr)
        return 2
    if not hasattr(tf.keras.utils, "experimental"):
        print("keras_pss: error: tf.keras is Keras 3, which has no Model.fit under "
              "ParameterServerStrategy: `pip install 'tf_keras~=2.X.0'` (your TensorFlow's 2.X) and set "
              "TF_USE_LEGACY_KERAS=1 (examples/keras_pss.yaml does)", file=sys.stderr)
        return 2

    num_ps = len(cluster["ps"])
    variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=(256 << 10), max_shards=num_ps)
    strategy = tf.distribute.ParameterServerStrategy(
        cluster_resolver, variable_partitioner=variable_partitioner)

    x_train, y_train = synthetic_data(4096, 1)
    x_eval, y_eval = synthetic_data(1024, 2)

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(FLAGS.global_batch_size)
        dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(4096).repeat()
        dataset = dataset.shard(input_context.num_input_pipelines,
                                input_context.input_pipeline_id)
        return dataset.batch(batch_size).prefetch(2)

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(16,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(4),
        ])
        model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=FLAGS.steps_per_execution)

    first_epoch = []

    class InitialEpoch(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if not first_epoch:
                first_epoch.append(epoch)
                print(f"keras_pss: initial epoch {epoch}", flush=True)

    callbacks = [InitialEpoch(), ProgressCallback()]
    if FLAGS.backup_dir:
        callbacks.insert(0, tf.keras.callbacks.BackupAndRestore(backup_dir=FLAGS.backup_dir))

    t0 = time.time()
    history = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn),
                        epochs=FLAGS.epochs, steps_per_epoch=FLAGS.steps_per_epoch,
                        callbacks=callbacks, verbose=FLAGS.verbose)
    elapsed = time.time() - t0

    # held-out accuracy, computed here from the variables on the ps tasks
    logits = model(tf.constant(x_eval), training=False)
    accuracy = float(tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1), y_eval),
                                            tf.float32)))
    loss = float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y_eval, logits=logits)))
    hist = {k: [round(float(v), 4) for v in vs] for k, vs in history.history.items()}
    initial = first_epoch[0] if first_epoch else FLAGS.epochs
    summary = {"epochs": FLAGS.epochs, "initial_epoch": initial, "history": hist,
               "eval_loss": round(loss, 4), "accuracy": round(accuracy, 4),
               "workers": len(cluster.get("worker", [])), "seconds": round(elapsed, 1)}
    print(f"keras_pss: done: epochs={FLAGS.epochs} loss={loss:.4f} accuracy={accuracy:.4f} "
          f"initial_epoch={initial} ({elapsed:.1f}s) {json.dumps(summary)}", flush=True)
    return 0


if __name__ == "__main__":
    app.run(main)
