"""A third-party program shaped like TensorFlow's "Multi-worker training with Keras" tutorial.

It knows nothing of tfcluster: it reads TF_CONFIG, builds and compiles a Keras model in
``MultiWorkerMirroredStrategy().scope()`` and calls ``model.fit`` on every worker. The data is
a small synthetic, learnable task (the tutorial's MNIST would need a download). Options pick
the variants measured by tests/system/test_keras.py:

    --input numpy|dataset        fit on numpy arrays or on a tf.data.Dataset
    --model sequential|functional  tf.keras.Sequential, or a model built with tf.keras.Input
    --epochs N --steps_per_epoch N --backup_dir DIR
    --verbose 0|1|2              Model.fit's verbose (default 2, one line per epoch)
    --tfcluster_callback         add tfcluster.runtime.keras.ProgressCallback (the only tfcluster use)
    --finish_seconds S           take S seconds after fit before it ends (saving, evaluating: no
                                 progress is reported meanwhile)

It prints one line at the end: ``keras_tutorial: done: {"loss": [...], "accuracy": [...]}``
(the per-epoch history on this worker).
"""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--input", choices=["numpy", "dataset"], default="dataset")
parser.add_argument("--model", choices=["sequential", "functional"], default="sequential")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps_per_epoch", type=int, default=20)
parser.add_argument("--backup_dir", default="")
parser.add_argument("--verbose", type=int, default=2)
parser.add_argument("--tfcluster_callback", action="store_true")
parser.add_argument("--finish_seconds", type=float, default=0.0)
args = parser.parse_args()

per_worker_batch_size = 32
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
global_batch_size = per_worker_batch_size * num_workers

strategy = tf.distribute.MultiWorkerMirroredStrategy()

rng = np.random.default_rng(0)
teacher = rng.normal(size=(16, 4)).astype("float32")
x_train = rng.normal(size=(4096, 16)).astype("float32")
y_train = np.argmax(x_train @ teacher, axis=1).astype("int64")


def build_and_compile_model():
    if args.model == "sequential":
        model = tf.keras.Sequential([
            tf.keras.layers.InputLayer(input_shape=(16,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(4),
        ])
    else:
        inputs = tf.keras.Input(shape=(16,))
        hidden = tf.keras.layers.Dense(32, activation="relu")(inputs)
        model = tf.keras.Model(inputs, tf.keras.layers.Dense(4)(hidden))
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
        metrics=["accuracy"])
    return model


with strategy.scope():
    multi_worker_model = build_and_compile_model()

callbacks = []
if args.backup_dir:
    callbacks.append(tf.keras.callbacks.BackupAndRestore(backup_dir=args.backup_dir))
if args.tfcluster_callback:
    from tfcluster.runtime.keras import ProgressCallback
    callbacks.append(ProgressCallback())

if args.input == "numpy":
    history = multi_worker_model.fit(x_train, y_train, batch_size=global_batch_size,
                                     epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                                     callbacks=callbacks, verbose=args.verbose)
else:
    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
    dataset = dataset.shuffle(4096, seed=0).repeat().batch(global_batch_size)
    history = multi_worker_model.fit(dataset, epochs=args.epochs,
                                     steps_per_epoch=args.steps_per_epoch,
                                     callbacks=callbacks, verbose=args.verbose)

time.sleep(args.finish_seconds)
print("keras_tutorial: done: " + json.dumps(
    {k: [round(float(v), 4) for v in vs] for k, vs in history.history.items()}), flush=True)
