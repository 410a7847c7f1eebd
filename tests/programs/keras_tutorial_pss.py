"""A third-party coordinator shaped like TensorFlow's "Parameter server training" tutorial
(its ``Model.fit`` part).

It knows nothing of tfcluster: it reads TF_CONFIG through ``TFConfigClusterResolver``, creates a
``ParameterServerStrategy``, builds and compiles a Keras model in its scope and calls
``model.fit`` on a ``DatasetCreator`` (``--input creator``, the tutorial's way) or on a
``tf.data.Dataset`` (``--input dataset``). The ps and worker tasks only serve (tfcluster's
built-in serve program). The data is a small synthetic, learnable task.

It prints one line at the end: ``keras_tutorial_pss: done: {"loss": [...], "accuracy": [...]}``.
"""
import argparse
import json

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--input", choices=["creator", "dataset"], default="creator")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps_per_epoch", type=int, default=20)
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
NUM_PS = len(cluster_resolver.cluster_spec().as_dict().get("ps", []))
variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
    min_shard_bytes=(256 << 10), max_shards=NUM_PS)
strategy = tf.distribute.ParameterServerStrategy(
    cluster_resolver, variable_partitioner=variable_partitioner)

rng = np.random.default_rng(0)
teacher = rng.normal(size=(16, 4)).astype("float32")
x_train = rng.normal(size=(4096, 16)).astype("float32")
y_train = np.argmax(x_train @ teacher, axis=1).astype("int64")


def dataset_fn(input_context):
    global_batch_size = 64
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(4096).repeat()
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset.batch(batch_size).prefetch(2)


with strategy.scope():
    model = tf.keras.models.Sequential([
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(4),
    ])
    model.compile(tf.keras.optimizers.SGD(learning_rate=0.1),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=5)

if args.input == "creator":
    data = tf.keras.utils.experimental.DatasetCreator(dataset_fn)
else:
    data = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(4096).repeat().batch(64)

history = model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)

print("keras_tutorial_pss: done: " + json.dumps(
    {k: [round(float(v), 4) for v in vs] for k, vs in history.history.items()}), flush=True)
