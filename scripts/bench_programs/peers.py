"""One model, one data set, one batch, four ways to train it on a cluster (benchmark ``peers``):

* ``--variant=runtime``: tfcluster's runtime, the TensorFlow guide's between-graph replication
  (every worker runs this program; ``start_server``, ``Placement``, ``TrainingSession``, async);
  1 ps + 2 workers;
* ``--variant=pss_loop``: TensorFlow 2's ``ParameterServerStrategy`` + ``ClusterCoordinator``, the
  custom loop as TensorFlow's "Parameter server training" tutorial writes it (``dataset_fn`` ->
  ``create_per_worker_dataset``, a ``tf.function`` step run with ``strategy.run``,
  ``coordinator.schedule`` per step, ``coordinator.join`` per epoch); the chief runs this
  program, 1 ps + 2 workers serve (``python -m tfcluster.runtime.serve``);
* ``--variant=pss_fit``: the same strategy with Keras ``Model.fit`` (tf_keras,
  ``TF_USE_LEGACY_KERAS=1``), a ``DatasetCreator``, ``steps_per_epoch``;
* ``--variant=mwms``: ``MultiWorkerMirroredStrategy`` and Keras ``Model.fit`` on every worker
  (2 workers; each step is 2 batches, one per worker).

Model: an MLP 256 -> 512 -> 512 -> 10 (glorot-uniform kernels, zero biases; 399k parameters,
1.6 MB), softmax cross-entropy, plain SGD (learning rate 0.01), batch 128 per worker and step,
synthetic data (4,096 rows of 256 features, labels from a fixed linear teacher), shuffled and
repeated. The same in every variant: the TF1 variant builds the same layers by hand.

Every variant prints ``@peers first_step`` once its first step has finished (PSS fit: a one-step
``fit`` before the measured one, as PSS rejects batch-level callbacks), then
``@tfcluster progress {"step": N, "total": T}`` lines per epoch (``--epoch_steps``; the runtime:
every 0.25 s), N being global steps (PSS: scheduled steps that have finished). The benchmark's
throughput window runs from the first progress line to the last before the end.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FEATURES, HIDDEN, CLASSES = 256, 512, 10
BATCH = 128
ROWS = 4096
SEED = 7
LR = 0.01


def arg(name, default):
    for a in sys.argv[1:]:
        if a.startswith("--%s=" % name):
            return type(default)(a.split("=", 1)[1])
    return default


def progress(step, total):
    print("@tfcluster progress " + json.dumps({"step": int(step), "total": int(total)}), flush=True)


def first_step():
    print("@peers first_step", flush=True)


def data():
    import numpy as np

    rng = np.random.RandomState(SEED)
    x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    teacher = rng.normal(size=(FEATURES, CLASSES)).astype("float32")
    y = np.argmax(x @ teacher, axis=1).astype("int64")
    return x, y


def dataset(tf, shard=0):
    x, y = data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(ROWS, seed=SEED + shard)
    return ds.repeat().batch(BATCH, drop_remainder=True).prefetch(2)


# ------------------------------------------------------------------ TF1, tfcluster's runtime
def runtime(total):
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import loop

    import tfcluster.runtime as rt

    ctx = rt.task_context()
    server = rt.start_server(ctx)
    if ctx.is_ps:
        rt.exit_now(rt.serve_until_done(ctx, server))
    placement = rt.Placement(ctx, strategy="greedy")
    with tf.Graph().as_default(), placement.scope():
        gs = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.device(ctx.device + "/device:CPU:0"):
            x, y = tf.compat.v1.data.make_one_shot_iterator(dataset(tf, max(ctx.worker_index, 0))).get_next()
        init = tf.compat.v1.glorot_uniform_initializer()
        h = x
        for i, (a, b) in enumerate(((FEATURES, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES))):
            w = tf.compat.v1.get_variable(f"dense_{i}/kernel", [a, b], initializer=init)
            bias = tf.compat.v1.get_variable(f"dense_{i}/bias", [b], initializer=tf.zeros_initializer())
            h = tf.matmul(h, w) + bias
            if i < 2:
                h = tf.nn.relu(h)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(loss, global_step=gs)
        state = {"first": True, "last": time.monotonic()}

        def on_step(step):
            now = time.monotonic()
            if state["first"]:
                state["first"] = False
                first_step()
            if now - state["last"] >= 0.25:
                state["last"] = now
                progress(step, total)

        last = loop.train(rt, ctx, server, total, train_op, gs, None, on_step)
        progress(last, total)
    rt.exit_now(0)


# ------------------------------------------------------------------ TF2 / Keras
def keras_model(tf):
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
        tf.keras.layers.Dense(HIDDEN, activation="relu"),
        tf.keras.layers.Dense(HIDDEN, activation="relu"),
        tf.keras.layers.Dense(CLASSES),
    ])


def pss_strategy(tf):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.ParameterServerStrategy(resolver)


def pss_loop(total, epoch_steps):
    """The tutorial's custom training loop."""
    import tensorflow as tf

    strategy = pss_strategy(tf)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    def dataset_fn(_=None):
        return dataset(tf)

    with strategy.scope():
        model = keras_model(tf)
        optimizer = tf.keras.optimizers.SGD(learning_rate=LR)
        loss_metric = tf.keras.metrics.Mean()

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    @tf.function
    def step_fn(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            loss_metric.update_state(loss)
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    coordinator.schedule(step_fn, args=(per_worker_iterator,)).fetch()  # the first step
    first_step()
    done = 1
    while done < total:
        n = min(epoch_steps - done % epoch_steps, total - done)
        for _ in range(n):
            coordinator.schedule(step_fn, args=(per_worker_iterator,))
        coordinator.join()
        done += n
        progress(done, total)
    print("peers: loss %.4f" % float(loss_metric.result()), flush=True)


def progress_callback(tf, total, epoch_steps, worker_index=0, first=False):
    """Keras callback: progress per epoch (worker 0 only); with ``first``, also the first step
    (its result fetched: it has finished). PSS rejects any callback with batch-level methods."""

    class EpochProgress(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if worker_index == 0:
                progress(min((epoch + 1) * epoch_steps, total), total)

    class FirstStepAndEpochProgress(EpochProgress):
        def __init__(self):
            super().__init__()
            self.first = True

        def on_train_batch_end(self, batch, logs=None):
            if self.first and worker_index == 0:
                self.first = False
                for v in (logs or {}).values():
                    if hasattr(v, "numpy"):
                        v.numpy()
                    break
                first_step()

    return FirstStepAndEpochProgress() if first else EpochProgress()


def pss_fit(total, epoch_steps):
    import tensorflow as tf

    strategy = pss_strategy(tf)
    with strategy.scope():
        model = keras_model(tf)
        model.compile(tf.keras.optimizers.SGD(learning_rate=LR),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    creator = tf.keras.utils.experimental.DatasetCreator(lambda ctx: dataset(tf))
    # the first step: ParameterServerStrategy rejects batch-level callbacks, so a one-step fit
    # comes first (not part of the throughput window, which starts at the first epoch's end)
    model.fit(creator, epochs=1, steps_per_epoch=1, verbose=0)
    first_step()
    model.fit(creator, epochs=max(1, total // epoch_steps), steps_per_epoch=epoch_steps, verbose=0,
              callbacks=[progress_callback(tf, total, epoch_steps)])


def mwms_setup(tf):
    """MWMS from TF_CONFIG: (the model compiled in the strategy's scope, the dataset with BATCH
    per worker, this worker's index, the number of workers); also bench_programs/ray_mwms.py's."""
    tf_config = json.loads(os.environ["TF_CONFIG"])
    index = tf_config["task"]["index"]
    workers = len(tf_config["cluster"]["worker"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras_model(tf)
        model.compile(tf.keras.optimizers.SGD(learning_rate=LR),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(ROWS, seed=SEED)
    ds = ds.repeat().batch(BATCH * workers, drop_remainder=True)  # global batch: BATCH per worker
    return model, ds, index, workers


def mwms(total, epoch_steps):
    import tensorflow as tf

    model, ds, index, _ = mwms_setup(tf)
    model.fit(ds, epochs=max(1, total // epoch_steps), steps_per_epoch=epoch_steps, verbose=0,
              callbacks=[progress_callback(tf, total, epoch_steps, index, first=True)])


def main():
    variant = arg("variant", "runtime")
    total = arg("steps", 600)
    epoch_steps = arg("epoch_steps", 100)
    if variant == "runtime":
        runtime(total)
    elif variant == "pss_loop":
        pss_loop(total, epoch_steps)
    elif variant == "pss_fit":
        pss_fit(total, epoch_steps)
    elif variant == "mwms":
        mwms(total, epoch_steps)
    else:
        sys.exit(f"peers.py: --variant: unknown {variant!r}")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
