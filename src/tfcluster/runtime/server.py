"""Start a task's ``tf.compat.v1.train.Server``; let ps tasks serve until the workers are done.

Pitfalls handled here (see docs/RUNTIME.md):

* thread pools: each TensorFlow process sizes its pools to every core; several tasks on
  one machine oversubscribe it. The pools are fixed when the server starts, so the
  server gets ``intra_op``/``inter_op`` sizes of ``cores // tasks on this machine``
  (at least 1; ``TFCLUSTER_INTRA_OP_THREADS`` / ``TFCLUSTER_INTER_OP_THREADS`` override),
  and the pools of tasks that share a machine do not spin while they wait for work
  (:func:`thread_spinning`; ``TFCLUSTER_THREAD_SPINNING`` overrides).
* ``device_filters``: without them a worker's CreateSession waits for every task of
  the cluster. Workers see ``/job:ps`` and themselves; ps and "just serve" tasks see
  everything (a TF2 ``ParameterServerStrategy`` coordinator needs workers to see ps).
* a taken port: TensorFlow raises ``UnknownError: Could not start gRPC server``; we say
  which task and which port (and which process holds it when it can be found) and exit
  with :data:`EXIT_PORT_IN_USE`.
* ``Server.join()`` never returns and there is no remote shutdown. A ps started by hand
  must still end: :func:`serve_until_done` waits on a "done queue" on the ps that every
  replica signals (:func:`signal_done`) at its end; SIGTERM ends it at any time.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import List, NoReturn, Optional, Sequence

from tfcluster.core.rules import EXIT_BAD_INPUT
from tfcluster.errors import UserError, print_error
from tfcluster.runtime.context import ContextError, TaskContext

#: exit code of a task whose port is taken (a user error: the cluster file's port is busy)
EXIT_PORT_IN_USE = EXIT_BAD_INPUT
#: exit code of a task given a bad TF_CONFIG or bad task flags
EXIT_BAD_CONTEXT = EXIT_BAD_INPUT

DONE_QUEUE_NAME = "tfcluster_done_ps{}"


class PortInUseError(UserError):
    """The task's port is already bound by another process."""

    exit_code = EXIT_PORT_IN_USE

    def __init__(self, task_id: str, port: Optional[int], detail: str, holder: str = ""):
        self.task_id, self.port, self.holder = task_id, port, holder
        held = f", held by {holder}" if holder else ""
        msg = f"{task_id}: port {port} is already in use{held} ({detail})"
        super().__init__(msg)


class ServerStartError(UserError):
    """The server could not start for another reason (e.g. an address that does not resolve)."""


def fail(error: UserError) -> "NoReturn":  # type: ignore[name-defined]
    """Print ``tfcluster: error: <message>`` to stderr and exit with the error's code."""
    print_error(error)
    raise SystemExit(getattr(error, "exit_code", 2))


# --- configuration ------------------------------------------------------------------

def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def thread_pool_sizes(ctx: TaskContext, intra_op: Optional[int] = None,
                      inter_op: Optional[int] = None):
    """``(intra_op, inter_op)`` for this task: cores shared by the tasks on this machine.

    Explicit arguments win, then ``TFCLUSTER_INTRA_OP_THREADS`` / ``TFCLUSTER_INTER_OP_THREADS``.
    The inter-op pool gets at least 2 threads (blocking kernels and sends/receives).
    """
    per_task = max(1, available_cores() // ctx.local_task_count())
    if intra_op is None:
        intra_op = int(os.environ.get("TFCLUSTER_INTRA_OP_THREADS") or per_task)
    if inter_op is None:
        inter_op = int(os.environ.get("TFCLUSTER_INTER_OP_THREADS") or max(2, per_task))
    return max(1, intra_op), max(1, inter_op)


_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def thread_spinning(ctx: TaskContext, spinning: Optional[bool] = None) -> bool:
    """Whether this task's thread pools spin while they wait for work (TensorFlow's default).

    A thread that spins keeps its core busy for a while after its work is done, to start the
    next op sooner. That pays only when the core would be idle anyway: tasks that share a
    machine take those cycles from each other (1 ps + 2 workers on 2 cores: 6-29% more
    examples/s without spinning, docs/BENCHMARKS.md). So a task that shares its machine with
    other tasks of the cluster does not spin; a task alone on its machine keeps TensorFlow's
    default. The argument wins, then ``TFCLUSTER_THREAD_SPINNING`` (1/0).
    """
    if spinning is not None:
        return bool(spinning)
    told = os.environ.get("TFCLUSTER_THREAD_SPINNING", "").strip().lower()
    if told in _ON:
        return True
    if told in _OFF:
        return False
    return ctx.local_task_count() <= 1


def default_device_filters(ctx: TaskContext) -> List[str]:
    """Device filters for this task's sessions: replicas see ps and themselves; others all."""
    if ctx.is_worker:
        filters = ["/job:ps", ctx.device]
        return filters
    return []


def session_config(ctx: TaskContext, *, device_filters: Optional[Sequence[str]] = None,
                   operation_timeout_ms: Optional[int] = None, intra_op: Optional[int] = None,
                   inter_op: Optional[int] = None, log_device_placement: bool = False,
                   spinning: Optional[bool] = None):
    """A ``tf.compat.v1.ConfigProto`` for this task's server and sessions.

    ``device_filters=None`` means :func:`default_device_filters`; ``[]`` means no filter.
    ``operation_timeout_ms`` bounds every blocking op of a session (0 or None: no bound).
    ``spinning``: see :func:`thread_spinning`.
    """
    import tensorflow as tf

    intra, inter = thread_pool_sizes(ctx, intra_op, inter_op)
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra,
        inter_op_parallelism_threads=inter,
        log_device_placement=log_device_placement,
    )
    filters = default_device_filters(ctx) if device_filters is None else list(device_filters)
    if filters:
        config.device_filters.extend(filters)
    if operation_timeout_ms:
        config.operation_timeout_in_ms = int(operation_timeout_ms)
    config.gpu_options.allow_growth = True  # several tasks may share a GPU
    if not thread_spinning(ctx, spinning):
        config.experimental.disable_thread_spinning = True
    return config


# --- starting the server --------------------------------------------------------------

def port_holder(port: Optional[int]) -> str:
    """``"pid 123 (python trainer.py ...)"`` for the process listening on ``port``, or ''."""
    if not port:
        return ""
    try:
        import psutil

        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid is None:
                    return ""
                try:
                    cmd = " ".join(psutil.Process(conn.pid).cmdline())[:80]
                except psutil.Error:
                    cmd = "?"
                return f"pid {conn.pid} ({cmd})"
    except Exception:  # psutil missing, or not allowed to list sockets
        return ""
    return ""


def _port_taken(port: Optional[int]) -> bool:
    from tfcluster.net.ports import port_in_use

    return bool(port) and port_in_use(port)


def start_server(ctx: TaskContext, config=None, *, protocol: Optional[str] = None,
                 exit_on_error: bool = True, **config_kwargs):
    """Start this task's ``tf.compat.v1.train.Server`` and return it; start TensorFlow's
    profiler server too when the task was given a port for it (``TFCLUSTER_PROFILER_PORT``).

    ``config`` defaults to :func:`session_config` (``config_kwargs`` go to it). A taken port
    raises :class:`PortInUseError` (``exit_on_error=False``) or prints
    ``tfcluster: error: worker:1: port 2224 is already in use (...)`` to stderr and exits
    with :data:`EXIT_PORT_IN_USE` (default).
    """
    import tensorflow as tf

    if not ctx.in_cluster:
        raise ContextError(f"{ctx.task_id} is not in the cluster; it has no server to start")
    if config is None:
        config = session_config(ctx, **config_kwargs)
    try:
        server = tf.compat.v1.train.Server(ctx.cluster_spec(), job_name=ctx.job_name,
                                           task_index=ctx.task_index, config=config,
                                           protocol=protocol or ctx.rpc_layer, start=True)
    except tf.errors.OpError as e:
        text = (e.message or str(e) or type(e).__name__).strip()
        detail = text.splitlines()[0]
        if _port_taken(ctx.port):
            err: UserError = PortInUseError(ctx.task_id, ctx.port, detail, port_holder(ctx.port))
        else:
            err = ServerStartError(f"{ctx.task_id}: could not start the server on "
                                   f"{ctx.address} ({detail})")
        if exit_on_error:
            fail(err)
        raise err from None
    from tfcluster.runtime.profiler import start_profiler

    start_profiler()   # TFCLUSTER_PROFILER_PORT: `tfcluster profile RUN` traces this task
    return server


# --- ps: serve until done --------------------------------------------------------------

def _done_queue(tf, ps_index: int, capacity: int = 1000):
    with tf.compat.v1.device(f"/job:ps/task:{ps_index}/device:CPU:0"):
        return tf.queue.FIFOQueue(capacity, [tf.int32], shapes=[[]],
                                  shared_name=DONE_QUEUE_NAME.format(ps_index),
                                  name=f"tfcluster_done_ps{ps_index}")


def serve_until_done(ctx: TaskContext, server, num_done: Optional[int] = None,
                     log=None, linger_secs: float = 1.0) -> int:
    """Serve (this ps task's server keeps running) until ``num_done`` replicas (default: all
    of ``chief`` and ``worker``) have called :func:`signal_done`; return 0.

    This is how a ps started by hand ends by itself. SIGTERM (the default action) ends the
    process at any time; Ctrl-C ends it too (exit 130).
    """
    import tensorflow as tf

    n = ctx.num_workers if num_done is None else int(num_done)
    log = log or (lambda msg: print(f"{ctx.task_id}: {msg}", flush=True))
    graph = tf.Graph()
    with graph.as_default():
        queue = _done_queue(tf, ctx.task_index)
        dequeue = queue.dequeue()
    config = session_config(ctx, device_filters=[ctx.device])
    finished = threading.Event()
    state = {"error": None, "seen": []}

    def wait() -> None:
        try:
            with tf.compat.v1.Session(server.target, graph=graph, config=config) as sess:
                while len(state["seen"]) < n:
                    state["seen"].append(int(sess.run(dequeue)))
        except BaseException as e:  # reported by the main thread
            state["error"] = e
        finally:
            finished.set()

    log(f"serving; will end after {n} replica(s) signal done (or on SIGTERM)")
    t = threading.Thread(target=wait, name="tfcluster-done-wait", daemon=True)
    t.start()
    try:
        while not finished.wait(0.5):
            pass
    except KeyboardInterrupt:
        sys.stdout.flush()
        os._exit(130)
    if state["error"] is not None:
        log(f"done queue failed ({state['error']!r}); serving until stopped")
        join_forever(server)
    log(f"all {n} replica(s) done; exiting")
    # let the replicas' last calls (closing their sessions) complete before the server goes
    time.sleep(linger_secs)
    return 0


def signal_done(ctx: TaskContext, target: Optional[str] = None, timeout_s: float = 20.0) -> bool:
    """Tell every ps task that this replica is done (see :func:`serve_until_done`).

    Best effort: returns False (after at most ``timeout_s``) when a ps could not be reached,
    e.g. because the launcher has already stopped it.
    """
    if ctx.num_ps == 0:
        return True
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        token = tf.constant(max(ctx.worker_index, 0), tf.int32)
        ops = [_done_queue(tf, i).enqueue([token]) for i in range(ctx.num_ps)]
        with tf.compat.v1.device(ctx.device):
            signal = tf.group(*ops)
    config = session_config(ctx, device_filters=["/job:ps", ctx.device],
                            operation_timeout_ms=int(timeout_s * 1000))
    result = {"ok": False}

    def run() -> None:
        try:
            with tf.compat.v1.Session(target or ctx.target(), graph=graph, config=config) as sess:
                sess.run(signal)
            result["ok"] = True
        except Exception:  # ps gone already: nothing to tell
            pass

    t = threading.Thread(target=run, name="tfcluster-signal-done", daemon=True)
    t.start()
    t.join(timeout_s)
    return result["ok"]


def join_forever(server=None) -> None:
    """Block until the process is signalled. Unlike ``server.join()``, Ctrl-C works (exit 130)
    and SIGTERM (or SIGHUP) ends the process with exit 0. A SIGTERM that was ignored when the
    process started stays ignored: a ps on a Slurm node starts so, to outlive Slurm's SIGTERM
    until its chief has saved, and its node agent stops it with SIGHUP."""
    import signal

    stop = threading.Event()

    def on_term(signum, frame):
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) != signal.SIG_IGN:
                signal.signal(sig, on_term)
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        exit_now(130)
    exit_now(0)


def exit_now(code: int = 0) -> "NoReturn":  # type: ignore[name-defined]
    """Flush stdio and end the process at once with ``code``.

    A TensorFlow server cannot be stopped, and interpreter teardown with gRPC threads (or a
    daemon thread inside a session call) may hang or crash; ``os._exit`` avoids both.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken stream: the process ends anyway
            pass
    os._exit(code)


def wait_for_ports(addresses: Sequence[str], timeout_s: float = 30.0) -> bool:
    """Wait until every ``host:port`` accepts TCP connections (True) or the timeout passes."""
    import socket

    deadline = time.time() + timeout_s
    pending = list(addresses)
    while pending and time.time() < deadline:
        addr = pending[0]
        host, port = addr.rsplit(":", 1)
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                pending.pop(0)
        except OSError:
            time.sleep(0.1)
    return not pending
