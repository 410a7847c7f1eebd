"""One writer for a run's record (``run.json``) on every backend.

The supervised launcher (the local, ssh and Ray backends, per-host agents) and the Slurm
launcher describe a run the same way: :func:`run_record` builds the whole record from the plan, the run machine's
verdict and one row per task, and :func:`write_record` writes it. ``tfcluster status``, ``runs``
and ``report`` read what this writes (:mod:`tfcluster.runs.status`).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from tfcluster import safe_files
from tfcluster.plan.contract import proc_stat
from tfcluster.safe_files import RUN_FILE


def launcher_start_time() -> Optional[float]:
    """This process's start time (with its pid, how ``status`` tells a live launcher from a
    dead one whose pid was reused)."""
    try:   # what psutil's create_time() computes, without importing psutil (~15 ms a launch)
        ticks = int(proc_stat()[19])                                 # field 22: starttime
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):   # no /proc here: ask psutil
        pass
    try:
        import psutil
    except ImportError:   # unknown: status then trusts the pid alone
        return None
    try:
        return psutil.Process().create_time()
    except (OSError, psutil.Error):   # unknown: status then trusts the pid alone
        return None


def task_row(name: str, *, host: Optional[str], endpoint: str, chief: bool, state: str,
             pid: Optional[int] = None, exit_code: Optional[int] = None, exit: str = "",
             restarts: int = 0, started: Optional[float] = None,
             first_started: Optional[float] = None, ended: Optional[float] = None,
             log: Optional[str] = None, **more: Any) -> Dict[str, Any]:
    """One task of the record."""
    row = {"task": name, "host": host, "endpoint": endpoint, "chief": chief, "pid": pid,
           "state": state, "exit_code": exit_code, "exit": exit, "restarts": restarts,
           "started": started, "first_started": first_started, "ended": ended, "log": log}
    row.update(more)
    return row


def run_record(plan, *, backend: str, started: float, ended: Optional[float], result: str,
               exit_code: Optional[int], decision: Optional[str], root_cause: Optional[str],
               total_restarts: int, tasks: List[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
    """The record of a run of ``plan`` (a :class:`tfcluster.plan.runplan.RunPlan`)."""
    data = {
        "run_id": plan.run_id,
        "file": os.path.abspath(plan.source) if plan.source else None,
        "run_dir": plan.run_dir, "launcher_pid": os.getpid(),
        "launcher_started": launcher_start_time(), "backend": backend,
        "success_rule": plan.success, "chief": plan.chief,
        "started": started, "ended": ended, "result": result,
        "exit_code": exit_code if ended else None,
        "decision": decision or None, "root_cause": root_cause,
        "total_restarts": total_restarts, "tasks": tasks,
    }
    data.update(extra)
    return data


def workers_fields(live: int, of: int, least: int, left: Dict[str, str], most: Optional[int] = None,
                   sizing: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """run.json's ``workers`` (elastic runs): in the run now, of the file's (and those the
    sizing added), the least the run goes on with, and those that left (why); sized runs also
    ``max`` (elastic.max_workers) and ``sizing`` (the rates measured and the decisions:
    :meth:`tfcluster.core.run_view.RunView.sizing_fields`)."""
    out = {"in": live, "of": of, "min": least, "left": dict(left)}
    if most is not None:
        out.update({"max": most, "sizing": sizing})
    return out


def network_fields(plan) -> Dict[str, Any]:
    """run.json's ``network``: which one, and (private) whether tasks reach other hosts."""
    out: Dict[str, Any] = {"mode": plan.network}
    if plan.network == "private":
        out["outbound"] = plan.outbound or None
        if plan.namespaces:
            out["namespaces"] = plan.namespaces
    elif plan.network_why:
        out["why"] = plan.network_why
    return out


#: spaces kept after a record's JSON until it is closed: on a full disk the closed record, a little
#: longer (its end, its result, and per task an exit, an end time, its reason), is written over it
#: in place (tfcluster.safe_files.write_json_at)
RESERVE = 1024
RESERVE_PER_TASK = 128


def reserve_for(data: Dict[str, Any]) -> int:
    """The spaces a record not yet closed keeps for its closed self (running, or its result
    decided while the launcher still stops tasks: ``ended`` null): grows with the tasks."""
    if data.get("result") != "running" and data.get("ended") is not None:
        return 0
    return RESERVE + RESERVE_PER_TASK * len(data.get("tasks") or ())


def write_record(run_dir: str, data: Dict[str, Any]) -> None:
    """Write ``run.json`` atomically (owner-only, no link followed). Raises OSError."""
    safe_files.write_json(os.path.join(run_dir, RUN_FILE), data, reserve=reserve_for(data))
