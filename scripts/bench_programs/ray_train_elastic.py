"""The benchmark ``elastic``'s baseline (scripts/bench_elastic.py): Ray Train's
``TensorflowTrainer``, 2 workers spread over the nodes (``placement_strategy="SPREAD"``), with
``FailureConfig(max_failures=1)``, on the Ray cluster at ``RAY_ADDRESS``.

Each worker runs MultiWorkerMirroredStrategy (``TF_CONFIG`` from Ray Train) on trainer.py's model
and data: the same MLP (2 hidden layers of ``--hidden`` units, ReLU), Adam 0.01, batch 64 per
worker, trainer.py's synthetic data (tfcluster.runtime.data.synthetic), each worker its shard;
a custom loop (tf_keras layers and optimizer). Every ``--ckpt_steps`` steps it saves a
``tf.train.Checkpoint`` and reports it (``ray.train.report``); on a start after a failure it
restores Ray Train's latest checkpoint (``ray.train.get_checkpoint``) and goes on from its step.
Each worker appends ``<time.time()> <step>`` after each step to
``<steps_dir>/rank<r>-<node ip>-<pid>.steps``: the benchmark's own record of training; rank 0
appends the same to ``<steps_dir>/checkpoints.log`` once ``ray.train.report`` has returned with a
checkpoint.

    python ray_train_elastic.py --steps=N --ckpt_steps=C --steps_dir=D --storage=S --name=R
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def arg(name, default):
    for a in sys.argv[1:]:
        if a.startswith(f"--{name}="):
            return type(default)(a.split("=", 1)[1])
    return default


def loop(config):
    import tempfile
    import time

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import ray.train
    import tensorflow as tf
    import tf_keras as keras

    from tfcluster.runtime import data as rt_data

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    data = rt_data.synthetic(seed=config["seed"])
    batch, hidden = config["batch"], config["hidden"]

    def dataset(ictx):
        ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
        ds = ds.shard(ictx.num_input_pipelines, ictx.input_pipeline_id)
        return ds.shuffle(4096, seed=config["seed"] + ictx.input_pipeline_id).repeat().batch(batch).prefetch(2)

    with strategy.scope():
        init = keras.initializers.GlorotUniform(seed=config["seed"])
        model = keras.Sequential([keras.layers.Dense(hidden, activation="relu", kernel_initializer=init),
                                  keras.layers.Dense(hidden, activation="relu", kernel_initializer=init),
                                  keras.layers.Dense(data.num_classes, kernel_initializer=init)])
        model.build((None, data.num_features))
        opt = keras.optimizers.Adam(config["lr"])
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    restored = ray.train.get_checkpoint()
    if restored:
        with restored.as_directory() as d:
            ckpt.read(os.path.join(d, "model")).expect_partial()  # slots: restored when created
    it = iter(strategy.distribute_datasets_from_function(dataset))
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                          reduction=keras.losses.Reduction.NONE)

    @tf.function
    def train_step(iterator):
        def step_fn(x, y):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_obj(y, model(x, training=True)),
                                                  global_batch_size=batch * world)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        x, y = next(iterator)
        strategy.run(step_fn, args=(x, y))

    step = int(opt.iterations.numpy())
    host = ray.util.get_node_ip_address()
    out = open(os.path.join(config["steps_dir"], f"rank{rank}-{host}-{os.getpid()}.steps"), "a", buffering=1)
    print(f"rank {rank} of {world} on {host}: from step {step}" + (" (restored)" if restored else ""), flush=True)
    while step < config["steps"]:
        train_step(it)
        step = int(opt.iterations.numpy())
        out.write(f"{time.time():.4f} {step}\n")
        if step % config["ckpt_steps"] == 0 or step >= config["steps"]:
            with tempfile.TemporaryDirectory() as d:
                # every worker writes (MWMS); rank 0's copy is the one reported
                ckpt.write(os.path.join(d, "model"))
                ray.train.report({"step": step}, checkpoint=ray.train.Checkpoint.from_directory(d) if rank == 0 else None)
            if rank == 0:   # report has returned: the checkpoint is in Ray Train's storage
                with open(os.path.join(config["steps_dir"], "checkpoints.log"), "a") as f:
                    f.write(f"{time.time():.4f} {step}\n")
    out.close()


def main():
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    env = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    # the driver on the head node (Ray Train puts its controller on the driver's node): the
    # node lost is the other one
    ray.init(runtime_env={"env_vars": env}, logging_level="ERROR", _node_ip_address=arg("node_ip", "127.0.0.2"))
    config = {"steps": arg("steps", 2000), "ckpt_steps": arg("ckpt_steps", 200), "steps_dir": arg("steps_dir", "/tmp"),
              "seed": arg("seed", 1234), "batch": arg("batch", 64), "hidden": arg("hidden", 64), "lr": arg("lr", 0.01)}
    trainer = TensorflowTrainer(
        loop, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}, placement_strategy="SPREAD"),
        run_config=RunConfig(storage_path=arg("storage", "/tmp"), name=arg("name", "tfc-elastic"),
                             failure_config=FailureConfig(max_failures=1)))
    result = trainer.fit()
    print(f"ray train: done, error={result.error!r}", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
