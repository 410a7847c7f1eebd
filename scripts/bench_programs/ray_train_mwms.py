"""The benchmark ``ray``'s baseline: Ray Train's ``TensorflowTrainer`` with 2 workers running
bench_programs/ray_mwms.py's ``train`` (the same model, data, batch and stamps as under
``tfcluster launch --backend ray``), on the Ray cluster at ``RAY_ADDRESS``. Ray Train builds each
worker's ``TF_CONFIG``; the stamps come back on this driver's output."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def loop(config):
    sys.path.insert(0, config["here"])
    import ray_mwms
    ray_mwms.train(config["steps"], config["epoch_steps"])


def main():
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    sys.path.insert(0, HERE)
    import peers
    steps, epoch_steps = peers.arg("steps", 480), peers.arg("epoch_steps", 80)
    ray.init(runtime_env={"env_vars": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                                       "PYTHONUNBUFFERED": "1"}}, logging_level="ERROR")
    trainer = TensorflowTrainer(
        loop, train_loop_config={"here": HERE, "steps": steps, "epoch_steps": epoch_steps},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(storage_path=peers.arg("storage", "/tmp"), name=peers.arg("name", "tfc-bench")))
    trainer.fit()
    ray.shutdown()


if __name__ == "__main__":
    main()
