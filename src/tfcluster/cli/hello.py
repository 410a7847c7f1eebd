"""The guide's "Hello distributed TensorFlow!", with real servers."""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Optional

from tfcluster.errors import UserError

MESSAGE = "Hello, distributed TensorFlow!"


def _quiet_tf() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@contextlib.contextmanager
def folded_stderr():
    """TensorFlow's known-harmless lines (absl's pre-init warning, oneDNN, no GPU found, cuInit:
    written by its C++ code straight to descriptor 2) folded out of this process's stderr by the
    launcher's NoiseFold; every other line goes through. The greeting then comes first."""
    from tfcluster.core.task_output import NoiseFold
    fold = NoiseFold()
    sys.stderr.flush()
    saved = os.dup(2)
    r, w = os.pipe()
    os.dup2(w, 2)
    os.close(w)

    def pump() -> None:
        with os.fdopen(r, "rb") as pipe:
            for raw in pipe:
                if not fold.fold(raw.decode("utf-8", "replace").rstrip("\n"))[0]:
                    os.write(saved, raw)

    t = threading.Thread(target=pump, name="hello-stderr", daemon=True)
    t.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)        # the pipe's last writer closes: the pump reads to its end
        t.join(timeout=5.0)
        os.close(saved)


def hello(path: Optional[str] = None) -> int:
    """Without a file: a single-process cluster (``Server.create_local_server()``) and a
    session on it that evaluates a string constant. With a file of local tasks: start every
    task's server in this process and run an op placed on the second task from a session on
    the first."""
    cluster = None
    if path:
        from tfcluster.clusterfile.config import load
        from tfcluster.net.addresses import is_local
        from tfcluster.net.ports import describe_port_holder, port_in_use
        cluster = load(path)
        if not cluster.resolved:
            from tfcluster.plan.runplan import assign_local_ports
            cluster = assign_local_ports(cluster)
        tasks = [t for t in cluster.tasks if t.job != "evaluator"]
        if len(tasks) < 2:
            raise UserError(f"{path}: cluster: hello needs at least two tasks (it runs an op on the "
                            f"second from a session on the first)")
        for t in tasks:
            if not is_local(t.endpoint.host):
                raise UserError(f"{path}: cluster.{t.job}[{t.index}]: {t.endpoint} is not this "
                                f"machine; hello starts every task here")
            if port_in_use(t.endpoint.port):
                raise UserError(f"{path}: cluster.{t.job}[{t.index}]: port {t.endpoint.port} is "
                                f"already in use{describe_port_holder(t.endpoint.port)}")
    _quiet_tf()
    with folded_stderr():
        return _hello(cluster, tasks if cluster is not None else [])


def _hello(cluster, tasks) -> int:
    import tensorflow as tf
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    if cluster is None:
        server = v1.train.Server.create_local_server()
        c = v1.constant(MESSAGE)
        with v1.Session(server.target) as sess:
            print(sess.run(c).decode())
        return 0
    spec = cluster.cluster_spec()
    servers = [v1.train.Server(spec, job_name=t.job, task_index=t.index, start=True) for t in tasks]
    first, second = tasks[0], tasks[1]
    with tf.device(f"/job:{second.job}/task:{second.index}"):
        c = v1.constant(MESSAGE)
        where = v1.constant(f" (computed on /job:{second.job}/task:{second.index})")
        out = v1.strings.join([c, where])
    with v1.Session(servers[0].target) as sess:
        print(sess.run(out).decode())
    print(f"{len(servers)} servers: " + ", ".join(f"{t.name}@{t.endpoint}" for t in tasks)
          + f"; session on {first.name}", file=sys.stderr)
    return 0
