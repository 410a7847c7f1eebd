"""Keras ``Model.fit`` progress in tfcluster's progress format.

::

    from tfcluster.runtime.keras import ProgressCallback
    model.fit(data, epochs=5, steps_per_epoch=100, callbacks=[ProgressCallback()])

reports ``@tfcluster progress {"step": 230, "total": 500, "epoch": 3, "loss": 0.31, ...}``
(:mod:`tfcluster.plan.progress`) on the launcher's progress pipe under ``tfcluster launch`` (so
they never get glued to Keras' own bar on stdout), else as lines on stdout: ``step`` counts
batches across epochs (epoch x steps per epoch + batch), ``total`` is epochs x steps per epoch
when Keras knows the steps, ``local_step`` the batches this process ran itself (across every
``fit``: its own rate, which the launcher shows per task), the metrics are the model's metrics
(below). At most ``max_per_second`` lines a second, and one at every epoch's end.
Every worker may report (MultiWorkerMirroredStrategy runs ``fit`` on each); the launcher
keeps the best step.

**A step's metrics under MultiWorkerMirroredStrategy are summed over the workers by Keras.** In
a replica a metric's ``result()`` is already the global value (tf_keras'
``metrics_utils.result_wrapper`` reads its variables across the replicas), and ``fit`` then
reduces each value of the step's logs over the replicas with the model's
``distribute_reduction_method`` (``training.reduce_per_replica``), whose ``"auto"`` is
``"sum"`` (:func:`reduction_sums`); with several workers that is an all-reduce SUM across them.
So a step's loss and accuracy reach the callbacks multiplied by the number of workers: 2
workers log ``accuracy 1.29`` for 0.64, and Keras' own ``verbose=1`` bar shows that sum too.
At the epoch's end Keras replaces them with the metrics' results read across the replicas
(``get_metrics_result``): the true values, what its epoch line prints. This callback reports
the model's metric both times: a step's value under the name of one of ``model.metrics``
divided by the number of values Keras added, never a sum over workers. That number is first
the workers' count where the Keras in use sums (as its source says), then what each epoch's
end shows: the last step's logged value over the metric's own. A custom ``train_step``'s other
outputs are reported as Keras logs them.

Importing this module does not import TensorFlow: the class is built on first use, on the
Keras that ``tf.keras`` is (``tf_keras`` when ``TF_USE_LEGACY_KERAS`` is set, else Keras 3).
"""
from __future__ import annotations

import math
import sys
import time
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, TextIO, Tuple

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
    except Exception:  # a metric we cannot show is left out, never fatal
        return None
    return number if math.isfinite(number) else None


def reduction_sums(library: str, version: Tuple[int, ...], reduction: Optional[str],
                   tpu: bool = False) -> bool:
    """Whether ``fit`` sums a step's logged values over the replicas: ``reduction`` is the
    model's ``distribute_reduction_method`` (None: that Keras has none and takes the first
    replica's value), ``library`` the package ``tf.keras`` is (``tf_keras``, ``keras``, or
    ``tensorflow`` for TensorFlow's own old copy), ``version`` its version. ``"auto"`` as each
    version's ``reduce_per_replica`` resolves it: ``"sum"`` in keras 2.11-2.15 and every
    tf_keras (``"first"`` under a TPUStrategy), ``"sum"`` in Keras 3.0-3.2, ``"mean"`` from
    Keras 3.3 (``"first"`` on TPUs)."""
    if reduction == "sum":
        return True
    if reduction != "auto":
        return False
    if library == "keras" and version[:1] >= (3,):
        return version[:2] < (3, 3)
    return not tpu


def version_tuple(text: str) -> Tuple[int, ...]:
    """``(2, 21, 0)`` for ``"2.21.0"``; ``(3, 3)`` for ``"3.3rc1"``; ``()`` when unknown."""
    parts = []
    for piece in str(text).split(".")[:3]:
        digits = ""
        for c in piece:
            if not c.isdigit():
                break
            digits += c
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) < len(piece):
            break
    return tuple(parts)


def _logged(logs: Any) -> Tuple[frozenset, Dict[str, float]]:
    """The keys of Keras' ``logs`` (fetched first when they are a PSS RemoteValue) and their
    finite numbers."""
    if hasattr(logs, "fetch"):  # ParameterServerStrategy: the step's logs are a RemoteValue
        try:
            logs = logs.fetch()
        except Exception:  # e.g. the step's worker was lost; report the step
            logs = None
    if not isinstance(logs, Mapping):
        return frozenset(), {}
    metrics: Dict[str, float] = {}
    for key, value in logs.items():
        if key in ("batch", "size", "step", "total", "epoch"):
            continue
        number = _number(value)
        if number is not None:
            metrics[key] = number
    return frozenset(logs.keys()), metrics


def summed_over(step: Mapping[str, float], own: Mapping[str, float],
                most: int) -> Optional[int]:
    """How many times the model's metrics were added in a step's logged values (``step``)
    compared with the metrics' own results after that step (``own``): the one whole number
    from 1 to ``most`` that every non-zero value shares, else None."""
    ratios = [step[k] / v for k, v in own.items() if k in step and abs(v) > 1e-12]
    if not ratios:
        return None
    n = round(ratios[0])
    if not 1 <= n <= most:
        return None
    for k, v in own.items():
        if k in step and abs(step[k] - n * v) > 1e-4 * max(1.0, abs(step[k])):
            return None
    return n


class ProgressReporter:
    """The callback's logic, free of Keras (tested without TensorFlow): call ``begin`` with
    Keras' ``params``, ``batch_end``/``epoch_end`` as Keras calls its callbacks.

    ``begin(params, summed_over=N, replicas=R, metric_names=f)``: Keras logs each step's
    metrics added ``N`` times (the module's docstring); ``f()`` names the model's metrics
    (asked when a line is sent, and at each epoch's end). A step's value under one of those
    names is divided by ``N``. At an epoch's end Keras hands the metrics' own results when the
    step's logs had exactly the metrics' names (its ``get_metrics_result``): reported as they
    are, and ``N`` becomes the last step's value over them (a whole number up to ``R``); else
    Keras kept the last step's values, divided as a step's are."""

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
        self.summed_over = 1   # how many times Keras added the metrics in a step's logs
        self.replicas = 1
        self.metric_names: Optional[Callable[[], Iterable[str]]] = None
        self._last_logs: Any = None   # the last step's logs as Keras handed them (a reference)

    def begin(self, params: Mapping[str, Any], summed_over: int = 1, replicas: int = 1,
              metric_names: Optional[Callable[[], Iterable[str]]] = None) -> None:
        self.epochs = params.get("epochs")
        self.steps = params.get("steps")
        self.seen = 0
        self.last_report = None
        self.summed_over = max(1, int(summed_over or 1))
        self.replicas = max(self.summed_over, int(replicas or 1))
        self.metric_names = metric_names
        self._last_logs = None

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
        self._last_logs = logs     # not read here: no wait for the step (PSS: a RemoteValue)
        now = self.clock()
        if self.last_report is not None and now - self.last_report < self.min_interval:
            return
        _, metrics = _logged(logs)
        if self.summed_over > 1:
            for key in self._names() & metrics.keys():
                metrics[key] /= self.summed_over
        self._report(self._step(batch), metrics, now)

    def epoch_end(self, epoch: int, logs: Optional[Mapping[str, Any]]) -> None:
        self.epoch = epoch
        step = (epoch + 1) * int(self.steps) if self.steps else self.seen
        _, metrics = _logged(logs)
        names = self._names()
        # (ParameterServerStrategy's last step, a RemoteValue, may have run before others:
        # nothing to measure by; a step there runs on one worker, and nothing is summed)
        if names and self._last_logs is not None and not hasattr(self._last_logs, "fetch"):
            keys, last = _logged(self._last_logs)
            if keys == names:
                # Keras replaced the step's values with the metrics' own results: shown as
                # they are; how many times the step's values held them is measured here
                n = summed_over(last, {k: v for k, v in metrics.items() if k in names},
                                self.replicas)
                if n is not None:
                    self.summed_over = n
            elif self.summed_over > 1:
                for key in names & metrics.keys():   # Keras kept the last step's values
                    metrics[key] /= self.summed_over
        self._report(step, metrics, self.clock())

    def _names(self) -> frozenset:
        """The names of the model's metrics (none when unknown)."""
        if self.metric_names is None:
            return frozenset()
        try:
            return frozenset(self.metric_names())
        except Exception:  # no names: nothing is divided
            return frozenset()

    def _report(self, step: int, metrics: Dict[str, float], now: float) -> None:
        metrics["epoch"] = self.epoch + 1  # as Keras prints it: "Epoch 3/5"
        # stream None: the launcher's progress pipe when it gave one, else stdout
        report_progress(step, self.total, stream=self.stream, local_step=self.own, **metrics)
        self.last_report = now


def _build_callback_class():
    import tensorflow as tf  # the user's program has imported it already

    base = tf.keras.callbacks.Callback  # tf_keras under TF_USE_LEGACY_KERAS, else Keras 3
    # the package tf.keras is, and its version: what its "auto" reduction does
    library = base.__module__.partition(".")[0]
    version = version_tuple(getattr(sys.modules.get(library), "__version__", ""))

    def is_tpu(strategy) -> bool:
        # as Keras decides it (backend.is_tpu_strategy): a TPUStrategy class among its bases
        return any(cls.__name__.startswith("TPUStrategy") for cls in type(strategy).__mro__)

    collective = [getattr(tf.distribute, "MultiWorkerMirroredStrategy", None)]
    try:
        collective.append(tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy)
    except AttributeError:
        pass
    collective_classes = tuple(c for c in collective if isinstance(c, type))

    class ProgressCallback(base):
        """Reports ``fit``'s progress as ``@tfcluster progress`` lines (see tfcluster.runtime.keras).

        Args:
            max_per_second: at most this many reports a second (the last step is always said).
            stream: where to write them (default: the launcher's pipe, else stdout).

        Raises:
            ImportError: TensorFlow (and Keras) is not installed.
        """

        def __init__(self, max_per_second: float = 2.0, stream: Optional[TextIO] = None):
            super().__init__()
            self._reporter = ProgressReporter(max_per_second=max_per_second, stream=stream)
            # tf_keras: hand us the logs as they are (no per-batch sync to NumPy, which would
            # block every step under ParameterServerStrategy); converted only when reported
            self._supports_tf_logs = True

        def on_train_begin(self, logs=None):
            summed, replicas = self._summed_over()
            self._reporter.begin(self.params or {}, summed_over=summed, replicas=replicas,
                                 metric_names=self._metric_names)

        def _summed_over(self):
            """How many times Keras adds the metrics in a step's logs, as its source says,
            and the replicas in sync (the most it can be)."""
            try:
                strategy = self.model.distribute_strategy
                replicas = max(1, int(strategy.num_replicas_in_sync))
                local = max(1, len(strategy.extended.worker_devices))
                reduction = getattr(self.model, "distribute_reduction_method", None)
            except Exception:  # no strategy to read: the logs as Keras gives them
                return 1, 1
            # MultiWorkerMirroredStrategy with several workers (as Keras' reduce_per_replica
            # tells them): Keras' sum is an all-reduce across the workers of each one's value
            # (the metrics' results); on one machine the replicas' values are one tensor
            workers = replicas // local
            if (workers > 1 and isinstance(strategy, collective_classes)
                    and reduction_sums(library, version, reduction, is_tpu(strategy))):
                return workers, replicas
            return 1, replicas

        def _metric_names(self):
            names = []
            for metric in self.model.metrics:
                inner = getattr(metric, "metrics", None) or []
                if inner:
                    # Keras 3's compiled metrics: one container whose result is its metrics'
                    names.extend(m.name for m in inner)
                else:
                    names.append(metric.name)
            return names

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
