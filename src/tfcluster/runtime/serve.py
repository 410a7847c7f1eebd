"""The built-in "just serve" program: start this task's server and block until told to stop.

For tasks that only host a TensorFlow server: ps and workers of in-graph replication
(``examples/in_graph.py``), and the ps/worker tasks of a TF2 ``ParameterServerStrategy``
coordinator. The cluster and task come from ``TF_CONFIG`` or from the seed's flags::

    python -m tfcluster.runtime.serve                        # TF_CONFIG set by tfcluster launch
    python -m tfcluster.runtime.serve --ps_hosts=h:2222 --worker_hosts=h:2223,h:2224 \\
        --job_name=worker --task_index=1

No device filters are set (a coordinator or in-graph client must see every task); thread
pools are sized for the tasks on this machine. SIGTERM or SIGINT ends it with exit 0.
A taken port ends it with a one-line error and exit 2 (``EXIT_PORT_IN_USE``).
``--until_done`` ends it instead once every replica has called ``signal_done``.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import List, Optional


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfcluster serve",
        description="Start this task's TensorFlow server (from TF_CONFIG or the task flags) "
                    "and serve until SIGTERM/SIGINT.")
    for job in ("ps", "worker", "chief"):
        p.add_argument(f"--{job}_hosts", default="", help=f"comma-separated host:port of job {job}")
    p.add_argument("--job_name", default="", help="this task's job (default: from TF_CONFIG)")
    p.add_argument("--task_index", type=int, default=None, help="this task's index")
    p.add_argument("--intra_op_threads", type=int, default=None,
                   help="intra-op thread pool size (default: cores / tasks on this machine)")
    p.add_argument("--inter_op_threads", type=int, default=None, help="inter-op thread pool size")
    p.add_argument("--device_filters", default="",
                   help="comma-separated device filters for sessions on this server (default: none)")
    p.add_argument("--until_done", action="store_true",
                   help="end once every chief/worker replica has signalled done (ps tasks run by hand)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Serve this task until SIGTERM/SIGINT (exit 0). Exit 2 on bad input or a taken port."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args, unknown = _parser().parse_known_args(argv)
    from tfcluster.errors import UserError, print_error
    from tfcluster.runtime.context import task_context

    def err(e: UserError) -> int:
        print_error(e)
        return getattr(e, "exit_code", 2)

    try:
        ctx = task_context(ps_hosts=args.ps_hosts or None, worker_hosts=args.worker_hosts or None,
                           chief_hosts=args.chief_hosts or None, job_name=args.job_name or None,
                           task_index=args.task_index)
    except UserError as e:
        return err(e)
    if not ctx.in_cluster:
        return err(UserError(f"{ctx.task_id} is not in the cluster: it has no server to serve"))

    from tfcluster.runtime.server import serve_until_done, start_server

    filters = [f for f in args.device_filters.split(",") if f.strip()]
    try:
        server = start_server(ctx, exit_on_error=False, device_filters=filters,
                              intra_op=args.intra_op_threads, inter_op=args.inter_op_threads)
    except UserError as e:
        return err(e)

    # SIGTERM/SIGINT set an event that the main thread waits on (server.join() would ignore
    # SIGINT and never return).
    stop = threading.Event()
    received: List[int] = []

    def on_signal(signum, frame):
        received.append(signum)
        stop.set()

    main_thread = threading.current_thread() is threading.main_thread()
    # an ignored SIGTERM stays ignored (a Slurm node's ps: its node agent stops it with SIGHUP)
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
           if signal.getsignal(s) != signal.SIG_IGN} if main_thread else {}
    try:
        print(f"{ctx.task_id}: serving at {ctx.address} ({ctx.target()}); "
              "stop with SIGTERM or Ctrl-C", flush=True)
        if args.until_done:
            threading.Thread(target=lambda: (serve_until_done(ctx, server), stop.set()),
                             name="tfcluster-until-done", daemon=True).start()
        while not stop.wait(1.0):
            pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if received:
        name = signal.Signals(received[0]).name
        print(f"{ctx.task_id}: {name} received; stopping", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # the server cannot be stopped; end without interpreter teardown of its threads
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
