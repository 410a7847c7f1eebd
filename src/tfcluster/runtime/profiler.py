"""Start TensorFlow's profiler server in a task, so ``tfcluster profile RUN`` can trace it.

With the run's profiler on (``profiler: true`` in the file, ``launch --profiler``), the launcher
gives every task a profiler port chosen with the task ports (``TFCLUSTER_PROFILER_PORT``, the
plan's ``TaskPlan.profiler_port``) and records it in run.json; off (the default), there is none
and no port is opened. :func:`tfcluster.runtime.start_server` starts the profiler server there; any other
program does the same with one line::

    import tfcluster.runtime as rt; rt.start_profiler()          # or, without tfcluster:
    tf.profiler.experimental.server.start(int(os.environ["TFCLUSTER_PROFILER_PORT"]))

The server captures the whole process: TF1 graph-mode sessions (host traces of every op and
RPC) and TF2 eager and ``tf.function`` programs alike. It costs nothing until a trace is asked
for. Without ``TFCLUSTER_PROFILER_PORT`` (a task not started by tfcluster) nothing starts.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

from tfcluster.plan.contract import PROFILER_PORT

_started: Optional[int] = None


def profiler_port_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """The task's profiler port from its environment, or None (not given, 0, not a number)."""
    value = (os.environ if environ is None else environ).get(PROFILER_PORT, "").strip()
    return int(value) if value.isdigit() and 0 < int(value) < 65536 else None


def start_profiler(port: Optional[int] = None) -> Optional[int]:
    """Start TensorFlow's profiler server on ``port`` (default: ``TFCLUSTER_PROFILER_PORT``)
    once per process; return the port, or None when there is none to start on.

    A taken port does not stop the task: TensorFlow logs "Unable to bind" and the task runs
    on, untraceable."""
    global _started
    if _started is not None:
        return _started
    port = profiler_port_from_env() if port is None else int(port)
    if not port:
        return None
    import tensorflow as tf

    tf.profiler.experimental.server.start(port)
    _started = port
    return port
