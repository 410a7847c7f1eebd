"""Model.fit under MirroredStrategy on 2 logical CPU devices (one process, two replicas), with
tfcluster's ProgressCallback reporting every step: prints one JSON line, ``keras_mirrored:
{"replicas": 2, "logs": [...], "history": {...}, "reports": [...]}``: the logs Keras hands
its callbacks after each step, its epochs' values, and the metrics ProgressCallback reported.
Keras is tf.keras: tf_keras under TF_USE_LEGACY_KERAS=1, else Keras 3."""
import io
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tfcluster.plan.progress import parse_progress
from tfcluster.runtime.keras import ProgressCallback

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 16)).astype("float32")
y = np.argmax(x @ rng.normal(size=(16, 4)), axis=1)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(4)])
    model.compile(optimizer="sgd", metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
seen = []


class Logs(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        seen.append({k: float(v) for k, v in logs.items()})


out = io.StringIO()
history = model.fit(x, y, batch_size=64, epochs=2, steps_per_epoch=4, verbose=0,
                    callbacks=[Logs(), ProgressCallback(max_per_second=0, stream=out)])
reports = [parse_progress(ln) for ln in out.getvalue().splitlines()]
print("keras_mirrored: " + json.dumps({
    "replicas": strategy.num_replicas_in_sync, "logs": seen,
    "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
    "reports": [{"step": p.step, **p.metrics} for p in reports]}), flush=True)
