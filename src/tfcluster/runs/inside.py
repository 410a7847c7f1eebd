"""Inside a run's private network: ``tfcluster exec RUN -- CMD`` and the helpers that need it.

A run launched in a private network (:mod:`tfcluster.drivers.network`) is reachable only from
inside that network. Its launcher holds it; this module checks the launcher as ``stop`` does
(the caller's own run and the caller's process, started when the record says, holding the run
folder open, pinned by a pidfd), opens that process's namespaces, checks the process is still
the same one, and moves this process in (:func:`tfcluster.net.private.enter_namespaces`). Then
``exec`` runs the user's own client there (a TF1 session on the ps, ``curl``, a notebook kernel),
with ``TFCLUSTER_CLUSTER`` (the run's ClusterSpec as JSON) and ``TFCLUSTER_RUN_DIR`` set.
"""
from __future__ import annotations

import json
import os
import select
import sys
from typing import Dict, Optional, Sequence

from tfcluster.errors import UserError
from tfcluster.terminal import printable

CLUSTER_ENV = "TFCLUSTER_CLUSTER"


def network_of(record: Dict) -> str:
    """``private`` or ``host``: the network a run's record says it used (``host`` for records
    written before there was a choice)."""
    net = record.get("network")
    return net.get("mode", "host") if isinstance(net, dict) else "host"


def enter_run_network(run_dir: str, what: str) -> Dict:
    """Move this process into the private network of the caller's live run in ``run_dir``
    and return its record. ``what``: the command, for the messages (``exec``, ``profile``).
    A run in the host network needs no entering: its record comes back as it is."""
    from tfcluster.net import private
    from tfcluster.runs.control import open_launcher, read_own_run
    from tfcluster.runs.result import derive_result
    record, folder = read_own_run(run_dir, nothing=f"nothing run ({what})")
    run_id = printable(record.get("run_id") or os.path.basename(run_dir))
    result = derive_result(record, run_dir=run_dir)
    if result != "running":
        raise UserError(f"{what}: run {run_id} is not running (result: {printable(result)}); its "
                        f"network ended with it")
    if network_of(record) != "private":
        return record
    fd = open_launcher(record, folder, command=what, nothing=f"nothing run ({what})")
    try:
        pid = int(record["launcher_pid"])
        try:
            private.enter_namespaces(pid, still_alive=lambda: not _ended(fd))
        except private.PrivateNetworkError as e:
            raise UserError(f"{what}: run {run_id}'s network cannot be entered: {e}")
    finally:
        os.close(fd)
    return record


def _ended(pidfd: int) -> bool:
    return bool(select.select([pidfd], [], [], 0)[0])


def exec_in_run(run_dir: str, argv: Sequence[str]) -> int:
    """``tfcluster exec RUN -- CMD ARGS``: CMD in the run's network (this process becomes it)."""
    if not argv:
        raise UserError("exec: give the command after '--': tfcluster exec RUN -- python client.py")
    record = enter_run_network(run_dir, "exec")
    env = dict(os.environ)
    cluster = _cluster_of(record)
    if cluster:
        env[CLUSTER_ENV] = json.dumps(cluster, separators=(",", ":"))
    env["TFCLUSTER_RUN_DIR"] = str(record.get("run_dir") or run_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], list(argv), env)
    except OSError as e:
        raise UserError(f"exec: cannot run {printable(argv[0])}: {e.strerror or e}")
    return 127   # not reached: exec replaced this process


def _cluster_of(record: Dict) -> Optional[Dict]:
    jobs: Dict[str, list] = {}
    for t in record.get("tasks") or ():
        if not isinstance(t, dict) or not isinstance(t.get("task"), str):
            continue
        job, _, index = t["task"].partition(":")
        endpoint = t.get("endpoint")
        if job == "evaluator" or not isinstance(endpoint, str) or not index.isdigit():
            continue
        jobs.setdefault(job, []).append((int(index), endpoint))
    return {job: [e for _, e in sorted(eps)] for job, eps in jobs.items()} or None
