"""MultiWorkerMirroredStrategy and Keras ``Model.fit`` for the benchmark ``ray`` (tf_keras,
``TF_USE_LEGACY_KERAS=1``): the model, data and batch of bench_programs/peers.py's ``mwms``
variant, with wall-clock stamps, so that the same code can be measured the same way under
``tfcluster launch --backend ray`` (run as a program, ``TF_CONFIG`` from tfcluster) and under
Ray Train's ``TensorflowTrainer`` (:func:`train`, ``TF_CONFIG`` from Ray Train).

Worker 0 prints ``@raybench {"event": "first_step", "t": T}`` once its first step has finished
and ``@raybench {"event": "epoch", "step": N, "t": T}`` at each epoch's end (T: time.time()).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # the model and the data


def stamp(event, **more):
    print("@raybench " + json.dumps({"event": event, "t": time.time(), **more}), flush=True)


def train(total, epoch_steps):
    import tensorflow as tf

    model, ds, index, workers = peers.mwms_setup(tf)

    class Stamps(tf.keras.callbacks.Callback):
        first = True

        def on_train_batch_end(self, batch, logs=None):
            if self.first and index == 0:
                self.first = False
                for v in (logs or {}).values():
                    if hasattr(v, "numpy"):
                        v.numpy()      # the step has finished
                    break
                stamp("first_step")

        def on_epoch_end(self, epoch, logs=None):
            if index == 0:
                stamp("epoch", step=(epoch + 1) * epoch_steps, workers=workers)

    model.fit(ds, epochs=max(1, total // epoch_steps), steps_per_epoch=epoch_steps, verbose=0,
              callbacks=[Stamps()])


if __name__ == "__main__":
    train(peers.arg("steps", 480), peers.arg("epoch_steps", 80))
    sys.stdout.flush()
    os._exit(0)
