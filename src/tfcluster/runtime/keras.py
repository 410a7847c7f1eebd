"""Keras ``Model.fit`` progress in tfcluster's progress format.

::

    from tfcluster.runtime.keras import ProgressCallback
    model.fit(data, epochs=5, steps_per_epoch=100, callbacks=[ProgressCallback()])

reports ``@tfcluster progress {"step": 230, "total": 500, "epoch": 3, "loss": 0.31, ...}``
(:mod:`tfcluster.plan.progress`) on the launcher's progress pipe under ``tfcluster launch`` (so
they never get glued to Keras' own bar on stdout), else as lines on stdout: ``step`` counts batches across epochs (epoch x steps per epoch +
batch), ``total`` is epochs x steps per epoch when Keras knows the steps, ``local_step`` the
batches this process ran itself (across every ``fit``: its own rate, which the launcher shows
per task), the metrics are those Keras logs. At most ``max_per_second`` lines a second, and one at every epoch's end.
Every worker may report (MultiWorkerMirroredStrategy runs ``fit`` on each); the launcher
keeps the best step.

Importing this module does not import TensorFlow: the class is built on first use, on the
Keras that ``tf.keras`` is (``tf_keras`` when ``TF_USE_LEGACY_KERAS`` is set, else Keras 3).
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, Mapping, Optional, TextIO

from tfcluster.plan.progress import report_progress

__all__ = ["ProgressCallback"]

# built on first access by the module's __getattr__ (an annotation binds no value)
ProgressCallback: type


def _number(value: Any) -> Optional[float]:
    """A float for a logged metric (a Python/NumPy number, an eager tensor, a PSS RemoteValue),
    or None when it is not a finite scalar."""
    try:
        if hasattr(value, "fetch"):  # ParameterServerStrategy: a RemoteValue
            value = value.fetch()
        if hasattr(value, "numpy"):
            value = value.numpy()
        number = float(value)
    except Exception:  # noqa: BLE001 - a metric we cannot show is left out, never fatal
        return None
    return number if math.isfinite(number) else None


class ProgressReporter:
    """The callback's logic, free of Keras (tested without TensorFlow): call ``begin`` with
    Keras' ``params``, ``batch_end``/``epoch_end`` as Keras calls its callbacks."""

    def __init__(self, max_per_second: float = 2.0, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.min_interval = 1.0 / max_per_second if max_per_second > 0 else 0.0
        self.stream = stream
        self.clock = clock
        self.epochs: Optional[int] = None
        self.steps: Optional[int] = None
        self.epoch = 0
        self.seen = 0          # batches seen in this fit (for an unknown steps per epoch)
        self.own = 0           # batches this process ran, every fit: its local_step
        self._own_base = 0     # ``own`` when this epoch began (batch numbers restart at 0)
        self.last_report: Optional[float] = None

    def begin(self, params: Mapping[str, Any]) -> None:
        self.epochs = params.get("epochs")
        self.steps = params.get("steps")
        self.seen = 0
        self.last_report = None

    @property
    def total(self) -> Optional[int]:
        if self.epochs and self.steps:
            return int(self.epochs) * int(self.steps)
        return None

    def epoch_begin(self, epoch: int) -> None:
        self.epoch = epoch
        self._own_base = self.own

    def _step(self, batch: int) -> int:
        if self.steps:
            return self.epoch * int(self.steps) + batch + 1
        return self.seen

    def batch_end(self, batch: int, logs: Optional[Mapping[str, Any]]) -> None:
        self.seen += 1
        # from the batch number: with steps_per_execution Keras calls every Nth batch only
        self.own = max(self.own, self._own_base + batch + 1)
        now = self.clock()
        if self.last_report is not None and now - self.last_report < self.min_interval:
            return
        self._report(self._step(batch), logs, now)

    def epoch_end(self, epoch: int, logs: Optional[Mapping[str, Any]]) -> None:
        self.epoch = epoch
        step = (epoch + 1) * int(self.steps) if self.steps else self.seen
        self._report(step, logs, self.clock())

    def _report(self, step: int, logs: Optional[Mapping[str, Any]], now: float) -> None:
        metrics: Dict[str, float] = {}
        if hasattr(logs, "fetch"):  # ParameterServerStrategy: the step's logs are a RemoteValue
            try:
                logs = logs.fetch()
            except Exception:  # noqa: BLE001 - e.g. the step's worker was lost; report the step
                logs = None
        for key, value in (logs if isinstance(logs, Mapping) else {}).items():
            if key in ("batch", "size", "step", "total", "epoch"):
                continue
            number = _number(value)
            if number is not None:
                metrics[key] = number
        metrics["epoch"] = self.epoch + 1  # as Keras prints it: "Epoch 3/5"
        # stream None: the launcher's progress pipe when it gave one, else stdout
        report_progress(step, self.total, stream=self.stream, local_step=self.own, **metrics)
        self.last_report = now


def _build_callback_class():
    import tensorflow as tf  # the user's program has imported it already

    base = tf.keras.callbacks.Callback  # tf_keras under TF_USE_LEGACY_KERAS, else Keras 3

    class ProgressCallback(base):
        """Reports ``fit``'s progress as ``@tfcluster progress`` lines (see tfcluster.runtime.keras)."""

        def __init__(self, max_per_second: float = 2.0, stream: Optional[TextIO] = None):
            super().__init__()
            self._reporter = ProgressReporter(max_per_second=max_per_second, stream=stream)
            # tf_keras: hand us the logs as they are (no per-batch sync to NumPy, which would
            # block every step under ParameterServerStrategy); converted only when reported
            self._supports_tf_logs = True

        def on_train_begin(self, logs=None):
            self._reporter.begin(self.params or {})

        def on_epoch_begin(self, epoch, logs=None):
            self._reporter.epoch_begin(epoch)

        def on_train_batch_end(self, batch, logs=None):
            self._reporter.batch_end(batch, logs)

        def on_epoch_end(self, epoch, logs=None):
            self._reporter.epoch_end(epoch, logs)

    ProgressCallback.__module__ = __name__
    return ProgressCallback


_built: Dict[str, type] = {}


def __dir__():
    return sorted([*globals(), "ProgressCallback"])


def __getattr__(name: str):
    if name == "ProgressCallback":
        if name not in _built:
            _built[name] = _build_callback_class()
        return _built[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
