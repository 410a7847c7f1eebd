"""The tf.data service, started with the cluster: ``python -I -m tfcluster.runtime.data_service
dispatcher|worker [--work_dir DIR]``.

tfcluster runs this built-in program as the tasks of the jobs ``tfdata_dispatcher`` and
``tfdata_worker`` that a file's ``data_service:`` adds. It reads its own address from
``TF_CONFIG`` (a data-service task sees the whole layout) and the dispatcher's from
``TFCLUSTER_DATA_SERVICE``, starts TensorFlow's ``DispatchServer`` or ``WorkerServer`` on that
port (bound on every interface, as TensorFlow's servers are) and serves until SIGTERM/SIGINT
(exit 0), like a ps. A taken port: one line and exit 2.

Training tasks read through it with :func:`distribute`::

    import tfcluster.runtime as rt
    dataset = rt.distribute(dataset)          # one distributed_epoch job shared by all workers
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any, List, Optional

from tfcluster.plan.contract import DATA_SERVICE as DATA_SERVICE_ENV

DEFAULT_JOB_NAME = "tfcluster"


def address(env=None) -> Optional[str]:
    """``grpc://host:port`` of the cluster's tf.data service dispatcher, or None."""
    value = (os.environ if env is None else env).get(DATA_SERVICE_ENV, "")
    return value or None


def distribute(dataset: Any, job_name: str = DEFAULT_JOB_NAME,
               processing_mode: str = "distributed_epoch", service: Optional[str] = None,
               **kwargs: Any) -> Any:
    """``dataset`` read through the cluster's tf.data service (``TFCLUSTER_DATA_SERVICE``).

    With ``processing_mode="distributed_epoch"`` (the default) and one ``job_name`` for every
    training task, the tasks share one job: each element of the epoch goes to exactly one of
    them. Without a data service (the variable unset, ``service`` None) the dataset is returned
    as it is, so the same program runs with or without one. ``kwargs`` go to
    ``tf.data.experimental.service.distribute``."""
    import tensorflow as tf

    service = service or address()
    if not service:
        return dataset
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=processing_mode, service=service, job_name=job_name, **kwargs))


def _own_address() -> tuple:
    """(host, port) of this task, from TF_CONFIG."""
    try:
        config = json.loads(os.environ["TF_CONFIG"])
        job, index = config["task"]["type"], int(config["task"]["index"])
        host, _, port = config["cluster"][job][index].rpartition(":")
        return host.strip("[]"), int(port)
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise SystemExit(f"tfcluster.runtime.data_service: error: TF_CONFIG does not give this "
                         f"task's address ({type(e).__name__}: {e})")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfcluster.runtime.data_service",
                                description="Serve the cluster's tf.data service (dispatcher or worker).")
    p.add_argument("role", choices=("dispatcher", "worker"))
    p.add_argument("--work_dir", default=None, help="dispatcher: journal folder (fault tolerance)")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    host, port = _own_address()
    dispatcher = address()
    if args.role == "worker" and not dispatcher:
        print(f"tfcluster.runtime.data_service: error: {DATA_SERVICE_ENV} is not set (the "
              f"dispatcher's address)", file=sys.stderr)
        return 2
    stop = threading.Event()
    received: List[int] = []

    def on_signal(signum, frame):
        received.append(signum)
        stop.set()

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    import tensorflow as tf
    service = tf.data.experimental.service
    try:
        if args.role == "dispatcher":
            kwargs = {"port": port}
            if args.work_dir:
                kwargs.update(work_dir=args.work_dir, fault_tolerant_mode=True)
            server = service.DispatchServer(service.DispatcherConfig(**kwargs))
        else:
            server = service.WorkerServer(service.WorkerConfig(
                dispatcher_address=dispatcher.split("://", 1)[-1], worker_address=f"{host}:%port%",
                port=port))
    except Exception as e:  # TensorFlow's errors: a taken port, a bad folder
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"tfcluster.runtime.data_service: error: cannot start the {args.role} on port {port}: "
              f"{text}", file=sys.stderr)
        return 2
    print(f"tf.data service {args.role} serving at {host}:{port}"
          + (f" (dispatcher {dispatcher})" if args.role == "worker" else "")
          + "; stop with SIGTERM", flush=True)
    while not stop.wait(1.0):
        pass
    print(f"tf.data service {args.role}: {signal.Signals(received[0]).name} received; stopping", flush=True)
    del server
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)        # gRPC threads: end without interpreter teardown (as the ps does)
