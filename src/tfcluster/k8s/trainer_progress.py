"""``@tfcluster progress`` lines -> Kubeflow Trainer v2's TrainJob status (``status.trainerStatus``).

Trainer v2 (with its ``TrainJobStatus`` feature gate) gives the pods of a TrainJob's trainer job
an HTTPS endpoint for progress (kubeflow/trainer docs/user-guides/trainjob-progress.md):

==================================== ===========================================================
``KUBEFLOW_TRAINER_SERVER_URL``      where to POST ``{"trainerStatus": {...}}``
``KUBEFLOW_TRAINER_SERVER_CA_CERT``  the CA file that signs the server's certificate
``KUBEFLOW_TRAINER_SERVER_TOKEN``    a file holding the bearer token (re-read: it rotates)
==================================== ===========================================================

Where all three are set, :mod:`tfcluster.k8s.pod` runs tfcluster's chief task (``chief:0``, or
``worker:0`` without a chief) under a :class:`Bridge`: the program's output passes through
unchanged and each progress line (:mod:`tfcluster.plan.progress`) becomes ``progressPercentage``
(from ``step``/``total``), ``estimatedRemainingSeconds`` (from the rate of steps) and
``metrics`` -- at most every :data:`MIN_INTERVAL` seconds, the first at once and the last when
the program ends. A failed post is reported once on stderr and never stops the program.
Anywhere else (no endpoint: JobSet, TFJob, ``tfcluster launch``, a TrainJob without the
feature gate) nothing here runs.
"""
from __future__ import annotations

import json
import ssl
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from tfcluster.plan.progress import Progress, parse_progress

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
MIN_INTERVAL = 5.0     # seconds between posts (the Kubeflow SDK's throttle)
MAX_METRICS = 256      # the CRD's limits on status.trainerStatus.metrics
MAX_TEXT = 64
MAX_LINE = 1 << 16     # longer lines pass through but are not parsed


def endpoint(env: Mapping[str, str]) -> Optional[Tuple[str, str, str]]:
    """(url, CA file, token file) when Trainer gave this pod its status endpoint, else None."""
    values = tuple(env.get(k, "") for k in (URL_ENV, CA_ENV, TOKEN_ENV))
    return values if all(values) else None  # type: ignore[return-value]


def trainer_status(p: Progress, eta: Optional[float], now: float) -> Dict[str, Any]:
    """The ``trainerStatus`` object for a progress report (the TrainJob CRD's shape)."""
    status: Dict[str, Any] = {}
    if p.total:
        status["progressPercentage"] = max(0, min(100, int(100 * p.step / p.total)))
    if eta is not None:
        status["estimatedRemainingSeconds"] = max(0, min(2 ** 31 - 1, int(round(eta))))
    metrics = [{"name": k[:MAX_TEXT], "value": f"{v:.6g}"[:MAX_TEXT]}
               for k, v in list(p.metrics.items())[:MAX_METRICS] if k]
    if metrics:
        status["metrics"] = metrics
    status["lastUpdatedTime"] = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return status


def post(where: Tuple[str, str, str], body: Dict[str, Any], timeout: float = 5.0) -> None:
    """POST ``body`` to the endpoint, TLS checked against its CA, with a fresh token."""
    url, ca, token_file = where
    with open(token_file) as f:
        token = f.read().strip()
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=ca)
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        response.read()


class Bridge:
    """Feeds on the program's output lines; posts progress, throttled, one post in flight at a
    time on a background thread (``background`` False: inline), so a slow endpoint never holds
    up the program's output. ``send`` and ``clock`` are injectable (tests); ``send`` raising is
    reported once on ``err`` and otherwise ignored."""

    def __init__(self, where: Tuple[str, str, str], send: Optional[Callable[..., None]] = None,
                 clock: Callable[[], float] = time.time, err=None, interval: float = MIN_INTERVAL,
                 background: bool = True):
        self.where, self.clock, self.interval, self.background = where, clock, interval, background
        self.send = send or post
        self.err = err if err is not None else sys.stderr
        self.first: Optional[Tuple[float, int]] = None      # (time, step) of the first report
        self.pending: Optional[Dict[str, Any]] = None
        self.last_sent = float("-inf")
        self.sent = 0
        self.failed = False
        self._thread: Optional[threading.Thread] = None

    def line(self, text: str) -> None:
        p = parse_progress(text)
        if p is None:
            return
        now = self.clock()
        eta = None
        if self.first is None:
            self.first = (now, p.step)
        elif p.total and p.step > self.first[1] and now > self.first[0]:
            rate = (p.step - self.first[1]) / (now - self.first[0])
            eta = max(0.0, (p.total - p.step) / rate)
        self.pending = {"trainerStatus": trainer_status(p, eta, now)}
        busy = self._thread is not None and self._thread.is_alive()
        if now - self.last_sent >= self.interval and not busy:
            body, self.pending = self.pending, None
            self.last_sent = now
            if self.background:
                self._thread = threading.Thread(target=self._send, args=(body,), daemon=True)
                self._thread.start()
            else:
                self._send(body)

    def close(self, timeout: float = 10.0) -> None:
        """At the program's end: wait for a post in flight, then post what is left."""
        if self._thread is not None:
            self._thread.join(timeout)
        if self.pending is not None:
            body, self.pending = self.pending, None
            self._send(body)

    def _send(self, body: Dict[str, Any]) -> None:
        try:
            self.send(self.where, body)
            self.sent += 1
        except Exception as e:  # reporting must never break training
            if not self.failed:
                self.failed = True
                print(f"tfcluster.k8s.pod: progress not posted to the TrainJob status "
                      f"({type(e).__name__}: {e}); training goes on", file=self.err, flush=True)
