"""Whether the launcher that writes a run's record still runs: a ``running`` record whose
launcher is gone (its pid no longer exists, or belongs to a process started at another time
than ``launcher_started``) was left by a launcher killed before it could close the record."""
from __future__ import annotations

import os
import socket
from typing import Any, Dict, List, Optional

STARTED_SLACK = 1.0  # seconds: psutil create_time() is exact to the clock tick; allow for rounding


def launcher_alive(record: Dict[str, Any]) -> Optional[bool]:
    """Whether the launcher that writes this record still runs; None when that cannot be told
    from here (no pid recorded, or the launcher ran on another host)."""
    if record.get("record_missing"):
        return False            # no run.json: its launcher never wrote one (missing_record)
    pid = record.get("launcher_pid")
    if not pid:
        return None
    host = record.get("launcher_host")
    if host and host != socket.gethostname():
        return None
    import psutil
    try:
        proc = psutil.Process(pid)
        created = proc.create_time()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return None
    expected = record.get("launcher_started")
    if expected is not None:
        return abs(created - expected) <= STARTED_SLACK
    # Older records have no launcher_started: the launcher started before the run did, and is a
    # tfcluster process (pid 1, or any process older than the run, is not the launcher).
    started = record.get("started")
    if started is None or created > started + STARTED_SLACK:
        return False
    try:
        return looks_like_tfcluster(proc.cmdline())
    except psutil.Error:
        return None


def looks_like_tfcluster(argv: List[str]) -> bool:
    """Whether a command line runs tfcluster (``tfcluster launch``, ``python -m tfcluster``)."""
    return any(os.path.basename(a) in ("tfcluster", "tfcluster.exe") or a == "tfcluster"
               for a in argv[:4])
