"""run.json: the record of a run, kept up to date while it goes; ``tfcluster status`` and
``tfcluster runs``.

run.json's ``result`` is what the launcher wrote: ``running`` while it goes, then ``succeeded``,
``failed`` or ``interrupted``. A ``running`` record whose launcher is gone (its pid no longer
exists, or belongs to a process started at another time than ``launcher_started``) is reported as
``lost``: the launcher was killed (SIGKILL, OOM killer, a lost session) before it could close the
record.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .errors import UserError

RUN_FILE = "run.json"
RESULTS = ("running", "succeeded", "failed", "interrupted")
#: Exit code of ``tfcluster status`` per result (2 is bad input, as everywhere in tfcluster).
STATUS_EXIT = {"succeeded": 0, "failed": 1, "running": 3, "interrupted": 4, "lost": 5}
STARTED_SLACK = 1.0  # seconds: psutil create_time() is exact to the clock tick; allow for rounding


def write_json_private(path: str, data: Any) -> None:
    """Write JSON atomically, readable by its owner only, following no link (relative to the
    open run folder; tfcluster.runfs). A failed write (disk full) leaves no temporary file."""
    from . import runfs
    runfs.write_json(path, data)


def read_run(run_dir: str) -> Dict[str, Any]:
    """run.json of ``run_dir``, checked: a broken record is a UserError naming the file and field."""
    path = os.path.join(run_dir, RUN_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{run_dir}: no {RUN_FILE} here (not a run folder?)")
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror or e})")
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})")
    problem = _check_record(record)
    if problem:
        raise UserError(f"{path}: {problem}")
    return record


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_record(record: Any) -> Optional[str]:
    """The first thing wrong with a run record, or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    result = record.get("result")
    if result not in RESULTS:
        return f"result: {result!r} is not one of {', '.join(RESULTS)}"
    for key in ("started", "ended", "launcher_started"):
        if record.get(key) is not None and not _is_num(record[key]):
            return f"{key}: not a number"
    pid = record.get("launcher_pid")
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
        return "launcher_pid: not a process id"
    for key in ("run_id", "file", "launcher_host"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"{key}: not a string"
    tasks = record.get("tasks", [])
    if not isinstance(tasks, list):
        return "tasks: not a list"
    for i, t in enumerate(tasks):
        if not isinstance(t, dict):
            return f"tasks[{i}]: not an object"
        for key in ("task", "state"):
            if not isinstance(t.get(key), str):
                return f"tasks[{i}].{key}: missing or not a string"
        for key in ("started", "ended"):
            if t.get(key) is not None and not _is_num(t[key]):
                return f"tasks[{i}].{key}: not a number"
        if t.get("progress") is not None and not isinstance(t["progress"], dict):
            return f"tasks[{i}].progress: not an object"
    return None


# ------------------------------------------------------------------ is the launcher alive?
def launcher_alive(record: Dict[str, Any]) -> Optional[bool]:
    """Whether the launcher that writes this record still runs; None when that cannot be told
    from here (no pid recorded, or the launcher ran on another host)."""
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
    # Older records have no launcher_started: the launcher started before the run did.
    started = record.get("started")
    return started is None or created <= started + STARTED_SLACK


def derive_result(record: Dict[str, Any], alive: Optional[bool] = None) -> str:
    """The run's result as status reports it: the record's, or ``lost`` for a ``running`` record
    whose launcher is gone. ``alive`` overrides the check (for callers that already did it)."""
    result = record.get("result")
    if result == "running":
        if alive is None:
            alive = launcher_alive(record)
        if alive is False:
            return "lost"
    return result


def last_update(run_dir: str) -> Optional[float]:
    """When run.json was last written (the last moment a lost run is known to have lived)."""
    try:
        return os.path.getmtime(os.path.join(run_dir, RUN_FILE))
    except OSError:
        return None


def run_duration(run_dir: str, record: Dict[str, Any], result: str,
                 now: Optional[float] = None) -> Optional[float]:
    started = record.get("started")
    if started is None:
        return None
    if record.get("ended") is not None:
        return record["ended"] - started
    if result == "lost":
        seen = last_update(run_dir)
        return None if seen is None else seen - started
    return (now or time.time()) - started


# ------------------------------------------------------------------ finding runs
def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def scan_runs(logdir: str, file: Optional[str] = None
              ) -> Tuple[List[Tuple[str, Dict[str, Any]]], List[str]]:
    """The runs under ``logdir`` (of cluster file ``file`` when given), newest first, and one
    message per run folder whose run.json cannot be read (those are left out)."""
    try:
        names = os.listdir(logdir)
    except FileNotFoundError:
        raise UserError(f"{logdir}: no runs yet (folder does not exist)")
    except OSError as e:
        raise UserError(f"{logdir}: cannot be read ({e.strerror or e})")
    want = _real(file) if file else None
    runs, problems = [], []
    for name in names:
        d = os.path.join(logdir, name)
        if not os.path.isfile(os.path.join(d, RUN_FILE)):
            continue
        try:
            record = read_run(d)
        except UserError as e:
            problems.append(e.message)
            continue
        if want is not None and (not record.get("file") or _real(record["file"]) != want):
            continue
        runs.append((d, record))
    runs.sort(key=lambda r: (r[1].get("started") or last_update(r[0]) or 0.0, r[0]), reverse=True)
    return runs, problems


def _default_place(file: Optional[str]) -> Tuple[str, Optional[str]]:
    """(logdir, cluster file) for ``--file FILE``, or ./cluster.yaml, or ./runs of any file."""
    if file:
        if not os.path.isfile(file):
            raise UserError(f"--file: {file}: no such file")
        from .config import load
        return load(file).logdir, os.path.abspath(file)
    if os.path.isfile("cluster.yaml"):
        from .config import load
        return load("cluster.yaml").logdir, os.path.abspath("cluster.yaml")
    return "runs", None


def _warn(messages: List[str]) -> None:
    for m in messages:
        print(f"tfcluster: warning: {m} (skipped)", file=sys.stderr)


def find_run(run_dir: Optional[str], file: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    """The run folder and record ``status``/``report`` look at: RUN_DIR itself; else the latest
    run of the cluster file (``--file``, default ./cluster.yaml) in its logdir (or in RUN_DIR
    when that is a logdir)."""
    if run_dir:
        if os.path.isfile(os.path.join(run_dir, RUN_FILE)):
            return run_dir, read_run(run_dir)
        if not os.path.isdir(run_dir):
            raise UserError(f"{run_dir}: no such run folder")
        logdir, want = run_dir, (os.path.abspath(file) if file else None)
    else:
        logdir, want = _default_place(file)
    runs, problems = scan_runs(logdir, want)
    _warn(problems)
    if not runs:
        of = f" of {want}" if want else ""
        raise UserError(f"{logdir}: no runs{of} yet")
    return runs[0]


def format_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def task_rows(record: Dict[str, Any], now: Optional[float] = None) -> List[List[str]]:
    now = now or time.time()
    rows = []
    for t in record.get("tasks", []):
        start, end = t.get("started"), t.get("ended")
        dur = (end or now) - start if start else None
        step = t.get("progress", {}).get("step") if t.get("progress") else None
        rows.append([t["task"], t.get("endpoint") or "", str(t.get("pid") or ""), t["state"],
                     t.get("exit") or "", str(t.get("restarts", 0)), format_duration(dur),
                     "" if step is None else str(step)])
    return rows


HEADER = ["task", "endpoint", "pid", "state", "exit", "restarts", "time", "step"]


def format_table(header: List[str], rows: List[List[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths)).rstrip()]
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _when(t: Optional[float]) -> str:
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def status_record(run_dir: str, record: Dict[str, Any]) -> Dict[str, Any]:
    """The record as ``status --json`` prints it: ``result`` derived (``lost`` included), plus
    ``launcher_alive`` (true, false, or null when it cannot be checked) and ``run_dir``."""
    alive = launcher_alive(record) if record.get("result") == "running" else None
    out = dict(record)
    out["result"] = derive_result(record, alive)
    out["launcher_alive"] = alive
    out["run_dir"] = os.path.abspath(run_dir)
    return out


def print_status(run_dir: Optional[str], file: Optional[str], as_json: bool = False) -> int:
    """``tfcluster status``: exit code per STATUS_EXIT (0 only for a run that succeeded)."""
    run, record = find_run(run_dir, file)
    shown = status_record(run, record)
    result = shown["result"]
    if as_json:
        print(json.dumps(shown, indent=2))
        return STATUS_EXIT[result]
    head = f"run {record.get('run_id')} ({run}): {result}"
    if record.get("exit_code") is not None:
        head += f", exit code {record['exit_code']}"
    print(head)
    if record.get("file"):
        print(f"file: {record['file']}")
    duration = run_duration(run, record, result)
    started = f"started {_when(record.get('started'))}" if record.get("started") else ""
    if started:
        took = {"running": "running for", "lost": "last seen after"}.get(result, "took")
        print(started + (f", {took} {format_duration(duration)}" if duration is not None else ""))
    pid = record.get("launcher_pid")
    if result == "lost":
        print(f"the launcher (pid {pid}) is gone and never closed the record; run.json was last "
              f"written at {_when(last_update(run))}. Task states below are as last recorded.")
    elif result == "running" and shown["launcher_alive"] is None and pid:
        where = record.get("launcher_host") or "another host"
        print(f"launcher pid {pid} on {where}: not checked from here")
    if record.get("root_cause"):
        print(f"root cause: {record['root_cause']}")
    now = record.get("ended")
    if now is None and result == "lost":
        now = last_update(run)
    print(format_table(HEADER, task_rows(record, now)))
    return STATUS_EXIT[result]


RUNS_HEADER = ["run", "result", "started", "duration", "tasks", "restarts", "file"]


def run_summary(run_dir: str, record: Dict[str, Any], now: Optional[float] = None) -> Dict[str, Any]:
    """One row of ``tfcluster runs --json``."""
    result = derive_result(record)
    tasks = record.get("tasks") or []
    restarts = record.get("total_restarts")
    if not isinstance(restarts, int):
        restarts = sum(int(t.get("restarts") or 0) for t in tasks)
    return {"run_id": record.get("run_id") or os.path.basename(run_dir),
            "run_dir": os.path.abspath(run_dir),
            "file": record.get("file"), "result": result, "exit_code": record.get("exit_code"),
            "started": record.get("started"), "ended": record.get("ended"),
            "duration": run_duration(run_dir, record, result, now),
            "tasks": [t["task"] for t in tasks], "restarts": restarts}


def _show_path(path: Optional[str]) -> str:
    if not path:
        return ""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def print_runs(logdir: Optional[str], file: Optional[str], as_json: bool = False) -> int:
    """``tfcluster runs``: past runs, newest first."""
    if logdir:
        if not os.path.isdir(logdir):
            raise UserError(f"{logdir}: no such folder")
        want = os.path.abspath(file) if file else None
    else:
        logdir, want = _default_place(file)
    runs, problems = scan_runs(logdir, want)
    _warn(problems)
    now = time.time()
    rows = [run_summary(d, r, now) for d, r in runs]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        of = f" of {want}" if want else ""
        print(f"no runs{of} in {logdir}")
        return 0
    table = [[r["run_id"], r["result"], _when(r["started"]), format_duration(r["duration"]),
              str(len(r["tasks"])), str(r["restarts"]), _show_path(r["file"])] for r in rows]
    print(format_table(RUNS_HEADER, table))
    return 0
