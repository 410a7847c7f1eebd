"""Unit tests of tfcluster.core.keras_hints (no TensorFlow) and of tfcluster.runtime.keras's lazy import.
(Asking a real interpreter for tf_keras: tests/integration/test_keras_interpreters.py.)"""
import pytest

from tfcluster.core.keras_hints import keras_failure_hint, python_interpreter
from tfcluster.core.output_patterns import latest_bar_state

# ------------------------------------------------------------------ python_interpreter

@pytest.mark.parametrize("argv, python", [
    (["/usr/bin/python3", "prog.py"], "/usr/bin/python3"), (["python3.11", "-m", "x"], "python3.11"),
    (["/venv/bin/python"], "/venv/bin/python"), (["bash", "run.sh"], None), (["./trainer"], None),
    ([], None), (["/opt/pythonista/tool"], None)])
def test_python_interpreter_of_a_task(argv, python):
    assert python_interpreter(argv) == python


# ------------------------------------------------------------------ keras_failure_hint

# the last lines of a worker's log on TF 2.21 / Keras 3.15, MWMS model.fit (numpy or tf.data)
MWMS_KERAS3_TAIL = """\
         [-1.93968725e+00, -2.69012421e-01,  1.98352730e+00,
          -7.45039344e-01, -1.52197443e-02,  7.59318054e-01,
          -1.02261081e-01]], dtype=float32)>
  }) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.
""".splitlines()

# the coordinator's log, PSS model.fit on a tf.data.Dataset with Keras 3
PSS_DATASET_KERAS3_TAIL = """\
Traceback (most recent call last):
  File "/work/prog.py", line 59, in <module>
    history = model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
  File "/usr/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler
    raise e.with_traceback(filtered_tb) from None
  File "/usr/lib/python3.11/site-packages/tensorflow/python/distribute/input_lib.py", line 984, in __iter__
    raise ValueError("To use this dataset, you need to pass this dataset to "
ValueError: To use this dataset, you need to pass this dataset to ClusterCoordinator.create_per_worker_dataset.
""".splitlines()

# the coordinator's log, PSS model.fit the tutorial's way (DatasetCreator) with Keras 3
PSS_CREATOR_KERAS3_TAIL = """\
Traceback (most recent call last):
  File "/work/prog.py", line 55, in <module>
    data = tf.keras.utils.experimental.DatasetCreator(dataset_fn)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
AttributeError: module 'keras.utils' has no attribute 'experimental'
""".splitlines()


@pytest.mark.parametrize("tail, what", [
    (MWMS_KERAS3_TAIL, "MultiWorkerMirroredStrategy"),
    (PSS_DATASET_KERAS3_TAIL, "ParameterServerStrategy"),
    (PSS_CREATOR_KERAS3_TAIL, "ParameterServerStrategy"),
])
def test_known_keras3_failures_get_one_line_naming_the_fix(tail, what):
    hint = keras_failure_hint(tail)
    assert hint is not None and "\n" not in hint, hint
    assert what in hint and "Keras 3" in hint
    assert "pip install 'tf_keras~=" in hint and 'TF_USE_LEGACY_KERAS: "1"' in hint
    assert ".[keras2]" not in hint       # works outside tfcluster's checkout too


def test_the_pss_dataset_error_outside_keras3_gets_no_hint():
    # a custom loop iterating a dataset without create_per_worker_dataset: not a Keras matter
    tail = [ln.replace("keras/src", "tf_keras/src") for ln in PSS_DATASET_KERAS3_TAIL]
    assert keras_failure_hint(tail) is None
    assert keras_failure_hint([ln for ln in PSS_DATASET_KERAS3_TAIL if "keras" not in ln]) is None


def test_legacy_keras_without_tf_keras_in_the_log():
    hint = keras_failure_hint(["W tensorflow: Your environment has TF_USE_LEGACY_KERAS set to True, but "
                         "you do not have the tf_keras package installed. You must install it"])
    assert hint and "pip install 'tf_keras~=" in hint


@pytest.mark.parametrize("tail", [
    [], ["Traceback (most recent call last):", "ValueError: bad value"],
    ["UnavailableError: Collective ops is aborted by: worker:1 is gone"],
    ["keras_tutorial: done: {}"],
])
def test_other_failures_get_no_hint(tail):
    assert keras_failure_hint(tail) is None


# ------------------------------------------------------------------ latest_bar_state

BS = "\b"
# what tf_keras 2.21 writes for verbose=1 (to a pipe: posix makes its display "dynamic")
TF_KERAS_EPOCH = ("1/4 [======>.......................] - ETA: 1s - loss: 0.5000" + BS * 62 + "\r"
                  "2/4 [==============>...............] - ETA: 0s - loss: 0.4000" + BS * 62 + "\r"
                  "4/4 [==============================] - 0s 5ms/step - loss: 0.3000  ")
# Keras 3.15: the same with ANSI bold/colour sequences and a Unicode bar
KERAS3_EPOCH = ("\x1b[1m1/4\x1b[0m \x1b[32m━━━━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━━\x1b[0m \x1b[1m0s\x1b[0m "
                "277ms/step - loss: 0.5000" + BS * 60 + "\r"
                "\x1b[1m4/4\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m \x1b[1m0s\x1b[0m "
                "8ms/step - loss: 0.3000  ")


def test_tf_keras_bar_shows_its_last_state():
    assert latest_bar_state(TF_KERAS_EPOCH) == \
        "4/4 [==============================] - 0s 5ms/step - loss: 0.3000"


def test_keras3_bar_shows_its_last_state_without_escape_sequences():
    assert latest_bar_state(KERAS3_EPOCH) == "4/4 ━━━━━━━━━━━━━━━━━━━━ 0s 8ms/step - loss: 0.3000"


def test_a_line_split_at_each_redraw_is_cleaned_too():
    # a reader that splits on \r as well as \n gets each state with its trailing backspaces
    assert latest_bar_state("1/4 [===>....] - loss: 0.5" + BS * 25) == "1/4 [===>....] - loss: 0.5"


def test_plain_lines_are_unchanged():
    for line in ["", "Epoch 1/3", "  indented  ", "@tfcluster progress {\"step\": 1}"]:
        assert latest_bar_state(line) == line


def test_blank_last_segments_and_erase_sequences_are_skipped():
    assert latest_bar_state("step 3/3\r\x1b[K\r   ") == "step 3/3"
    assert latest_bar_state("\r\r") == ""
    # backspaces move the cursor; what follows overwrites
    assert latest_bar_state("abc" + BS * 2 + "X") == "aXc"


# ------------------------------------------------------------------ tfcluster.runtime.keras


def test_unknown_attribute_of_tfcluster_keras_is_an_attribute_error():
    import tfcluster.runtime.keras as k

    with pytest.raises(AttributeError):
        _ = k.NoSuchThing


def _reports(text):
    from tfcluster.plan.progress import parse_progress

    return [parse_progress(ln) for ln in text.splitlines()]


def test_progress_reporter_counts_steps_across_epochs_and_throttles():
    import io

    from tfcluster.runtime.keras import ProgressReporter

    now = [0.0]
    out = io.StringIO()
    rep = ProgressReporter(max_per_second=2, stream=out, clock=lambda: now[0])
    rep.begin({"epochs": 3, "steps": 10, "verbose": 1})
    rep.epoch_begin(1)  # resumed by BackupAndRestore: the first epoch is 1
    for batch in range(10):
        now[0] += 0.1   # 10 batches a second: at most one line per 0.5 s gets through
        rep.batch_end(batch, {"loss": 1.0 - batch / 20, "accuracy": batch / 10})
    rep.epoch_end(1, {"loss": 0.5, "accuracy": 0.9, "val_loss": float("nan")})
    got = _reports(out.getvalue())
    assert [p.step for p in got] == [11, 16, 20], out.getvalue()
    # resumed at epoch 1: the global step counts from 10, this process ran 1, 6, 10 batches
    assert [p.local_step for p in got] == [1, 6, 10]
    assert all(p.total == 30 for p in got)
    assert got[0].metrics == {"loss": 1.0, "accuracy": 0.0, "epoch": 2}
    # the epoch's end always reports; a NaN metric is left out
    assert got[-1].metrics == {"loss": 0.5, "accuracy": 0.9, "epoch": 2}


def test_progress_reporter_without_known_steps_counts_batches():
    import io

    from tfcluster.runtime.keras import ProgressReporter

    out = io.StringIO()
    rep = ProgressReporter(max_per_second=0, stream=out)
    rep.begin({"epochs": 2, "steps": None})
    for epoch in range(2):
        rep.epoch_begin(epoch)
        for batch in range(3):
            rep.batch_end(batch, {"loss": 0.5, "size": 32, "note": "text"})
        rep.epoch_end(epoch, {"loss": 0.25})
    got = _reports(out.getvalue())
    assert [p.step for p in got] == [1, 2, 3, 3, 4, 5, 6, 6]
    # local_step: the batches this process ran itself (its own rate)
    assert [p.local_step for p in got] == [1, 2, 3, 3, 4, 5, 6, 6]
    assert all(p.total is None for p in got)
    assert got[0].metrics == {"loss": 0.5, "epoch": 1}


def test_progress_reporter_fetches_remote_logs_only_when_it_reports():
    """ParameterServerStrategy hands batch-end callbacks a RemoteValue of the logs; fetching
    it waits for the step, so it is fetched only for the lines that are printed."""
    import io

    from tfcluster.runtime.keras import ProgressReporter

    class Remote:
        fetched = 0

        def __init__(self, value):
            self.value = value

        def fetch(self):
            Remote.fetched += 1
            if isinstance(self.value, Exception):
                raise self.value
            return self.value

    class Tensor:  # an eager tensor's numpy()
        def numpy(self):
            return 0.25

    now = [0.0]
    out = io.StringIO()
    rep = ProgressReporter(max_per_second=1, stream=out, clock=lambda: now[0])
    rep.begin({"epochs": 1, "steps": 20})
    rep.epoch_begin(0)
    for batch in range(4, 20, 5):  # steps_per_execution=5: called every 5th batch
        now[0] += 0.3
        rep.batch_end(batch, Remote({"loss": Remote(Tensor()), "accuracy": 0.5}))
    now[0] += 1.0  # a step whose worker was lost: its step is reported, without metrics
    rep.batch_end(19, Remote(RuntimeError("worker lost")))
    got = _reports(out.getvalue())
    assert [p.step for p in got] == [5, 20], out.getvalue()
    assert [p.local_step for p in got] == [5, 20]    # every 5th batch called: still 5 and 20
    assert got[0].metrics == {"loss": 0.25, "accuracy": 0.5, "epoch": 1}
    assert got[1].metrics == {"epoch": 1}
    assert Remote.fetched == 3  # two printed lines' logs and their loss; none for the others


def test_progress_reporter_divides_what_keras_summed_over_the_workers():
    """Under MultiWorkerMirroredStrategy tf_keras logs a step's metrics summed over
    the workers (accuracy 1.29 for 0.64 with 2); the epoch's end hands the metrics' own
    results. Every line shows the model's metric: a step's values divided by the workers."""
    import io

    from tfcluster.runtime.keras import ProgressReporter

    out = io.StringIO()
    rep = ProgressReporter(max_per_second=0, stream=out)
    rep.begin({"epochs": 2, "steps": 2}, summed_over=2, replicas=2,
              metric_names=lambda: ["loss", "accuracy"])
    rep.epoch_begin(0)
    rep.batch_end(0, {"loss": 2.8, "accuracy": 0.5})
    rep.batch_end(1, {"loss": 2.5691, "accuracy": 0.8281})
    rep.epoch_end(0, {"loss": 1.28455, "accuracy": 0.41405, "val_loss": 3.0})
    got = _reports(out.getvalue())
    assert [p.step for p in got] == [1, 2, 2]
    assert got[0].metrics == {"loss": 1.4, "accuracy": 0.25, "epoch": 1}
    assert got[1].metrics == {"loss": 1.28455, "accuracy": 0.41405, "epoch": 1}
    # the epoch's values are the metrics' own (the step's logs were exactly the model's
    # metrics, so Keras replaced them): reported as Keras gives them
    assert got[2].metrics == {"loss": 1.28455, "accuracy": 0.41405, "val_loss": 3.0, "epoch": 1}
    assert rep.summed_over == 2       # measured at the epoch's end: the step's values over them


def test_progress_reporter_learns_from_the_epoch_end_what_keras_summed():
    """The count of summed values first comes from the Keras source's rule; each epoch's end
    measures it (the last step's values over the metrics' own results), so a Keras that stops
    summing is read right from the next epoch on."""
    import io

    from tfcluster.runtime.keras import ProgressReporter

    out = io.StringIO()
    rep = ProgressReporter(max_per_second=0, stream=out)
    rep.begin({"epochs": 2, "steps": 1}, summed_over=2, replicas=2,
              metric_names=lambda: ["loss", "accuracy"])
    rep.epoch_begin(0)
    rep.batch_end(0, {"loss": 0.8, "accuracy": 0.0})
    rep.epoch_end(0, {"loss": 0.8, "accuracy": 0.0})   # not summed after all
    assert rep.summed_over == 1
    rep.epoch_begin(1)
    rep.batch_end(0, {"loss": 0.6, "accuracy": 0.5})
    got = _reports(out.getvalue())
    assert [p.metrics["loss"] for p in got] == [0.4, 0.8, 0.6]

    # a ratio that is no whole number of replicas (or no metric to divide by) changes nothing
    rep.begin({"epochs": 1, "steps": 1}, summed_over=2, replicas=2,
              metric_names=lambda: ["loss"])
    rep.epoch_begin(0)
    rep.batch_end(0, {"loss": 3.0})
    rep.epoch_end(0, {"loss": 1.0})
    assert rep.summed_over == 2
    rep.batch_end(0, {"loss": 0.0})
    rep.epoch_end(0, {"loss": 0.0})
    assert rep.summed_over == 2


def test_progress_reporter_divides_a_kept_step_at_the_epoch_end():
    """A custom train_step whose logs are not exactly the model's metrics: Keras keeps the last
    step's (summed) values for the epoch, so they are divided as a step's are; outputs that
    are no metric of the model are reported as logged."""
    import io

    from tfcluster.runtime.keras import ProgressReporter

    out = io.StringIO()
    rep = ProgressReporter(max_per_second=0, stream=out)
    rep.begin({"epochs": 1, "steps": 1}, summed_over=2, replicas=2,
              metric_names=lambda: ["loss", "accuracy"])
    rep.epoch_begin(0)
    rep.batch_end(0, {"loss": 1.5, "grad_norm": 4.0})
    rep.epoch_end(0, {"loss": 1.5, "grad_norm": 4.0})
    got = _reports(out.getvalue())
    assert [p.metrics for p in got] == [{"loss": 0.75, "grad_norm": 4.0, "epoch": 1}] * 2
    assert rep.summed_over == 2


def test_progress_reporter_keeps_unsummed_logs_and_fetches_remote_logs_only_to_report():
    """Nothing summed (one worker, one machine's MirroredStrategy, PSS): the logs as Keras
    gives them. A PSS step's logs (a RemoteValue) are fetched only for a line that is sent,
    not at the epoch's end either (its last step may have run before others)."""
    import io

    from tfcluster.runtime.keras import ProgressReporter

    class Remote:
        fetched = 0

        def __init__(self, value):
            self.value = value

        def fetch(self):
            Remote.fetched += 1
            return self.value

    now = [0.0]
    out = io.StringIO()
    rep = ProgressReporter(max_per_second=2, stream=out, clock=lambda: now[0])
    rep.begin({"epochs": 1, "steps": 10}, metric_names=lambda: ["loss"])
    rep.epoch_begin(0)
    for batch in range(10):
        now[0] += 0.1
        rep.batch_end(batch, Remote({"loss": 1.0 - batch / 10}))
    assert Remote.fetched == 2            # batches 0 and 5 (0.5 s apart)
    rep.epoch_end(0, {"loss": 0.1})
    assert Remote.fetched == 2
    got = _reports(out.getvalue())
    assert [p.metrics["loss"] for p in got] == [1.0, 0.5, 0.1]
    assert rep.summed_over == 1


@pytest.mark.parametrize("library, version, reduction, tpu, sums", [
    ("tf_keras", (2, 21, 0), "auto", False, True),     # reduce_per_replica: "auto" is "sum"
    ("tf_keras", (2, 14, 1), "auto", False, True),
    ("tf_keras", (2, 21, 0), "auto", True, False),     # ... but "first" on TPUs
    ("keras", (2, 11, 0), "auto", False, True),
    ("keras", (3, 1, 1), "auto", False, True),         # Keras 3.0-3.2: "sum", TPUs too
    ("keras", (3, 1, 1), "auto", True, True),
    ("keras", (3, 3, 3), "auto", False, False),        # Keras 3.3+: "mean"
    ("keras", (3, 15, 1), "auto", False, False),
    ("tf_keras", (2, 21, 0), "first", False, False),
    ("keras", (3, 15, 1), "sum", False, True),
    ("tensorflow", (2, 5, 0), None, False, False),      # no distribute_reduction_method
])
def test_which_keras_sums_a_steps_metrics(library, version, reduction, tpu, sums):
    from tfcluster.runtime.keras import reduction_sums

    assert reduction_sums(library, version, reduction, tpu) is sums


def test_keras_version_numbers():
    from tfcluster.runtime.keras import version_tuple

    assert version_tuple("2.21.0") == (2, 21, 0)
    assert version_tuple("3.3rc1") == (3, 3)
    assert version_tuple("3.10.0.dev2025") == (3, 10, 0)
    assert version_tuple("") == () and version_tuple("unknown") == ()
