"""run.json read back: checked field by field (a broken record is one line naming the file and
the field), and a run folder that has no run.json yet read from what its launcher left there.
The one writer is :mod:`tfcluster.runs.record`."""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from tfcluster.errors import UserError
from tfcluster.safe_files import RUN_FILE
from tfcluster.terminal import printable

RESULTS = ("running", "succeeded", "failed", "interrupted")
RUN_FILE_LIMIT = 64 << 20   # bytes: a run.json larger than this is not read (10,000 tasks take ~5 MiB)
MAX_COUNT = 1 << 31         # pids, restarts, exit codes, steps: larger is not a record's number
MAX_STEP = 1 << 62


def read_run(run_dir: str) -> Dict[str, Any]:
    """run.json of ``run_dir``, checked: a broken record is a UserError naming the file and field.

    Read defensively (see :mod:`tfcluster.runs.eventlog`): a regular file only, at most
    RUN_FILE_LIMIT bytes, NaN/Infinity/overflowing numbers as null, nesting bounded, and every
    field that status, runs and report use checked for its type and range."""
    from tfcluster.runs.eventlog import _shown, parse_json, read_limited
    path = os.path.join(run_dir, RUN_FILE)
    data = read_limited(path, RUN_FILE_LIMIT)
    if data is None:
        record = missing_record(run_dir)
        if record is None:
            raise UserError(f"{_shown(run_dir)}: no {RUN_FILE} here (not a run folder?)")
        return record
    try:
        record = parse_json(data)
    except ValueError as e:
        raise UserError(f"{_shown(path)}: not valid JSON ({e})")
    problem = _check_record(record)
    if problem:
        raise UserError(f"{_shown(path)}: {problem}")
    return record


#: files a launcher makes in its run folder before its first run.json
RUN_TRACES = ("events.jsonl", "launcher.log", "console.log", "detached.json")


def is_run_folder(run_dir: str) -> bool:
    """Whether ``run_dir`` is a run folder: it holds run.json, or what a launcher writes before
    its first run.json (a launcher killed in its start wave, a disk full before the record)."""
    return any(os.path.lexists(os.path.join(run_dir, n)) for n in (RUN_FILE,) + RUN_TRACES)


def missing_record(run_dir: str) -> Optional[Dict[str, Any]]:
    """The record of a run folder that has no run.json (see :func:`is_run_folder`), from what
    its launcher left: its tasks and start from events.jsonl's ``run_started`` when readable.
    Its result is ``lost`` (:func:`tfcluster.runs.liveness.launcher_alive` says False): a
    launcher writes run.json as soon as its folder is made, so one that never did was killed or
    could not write. None when the folder is no run folder."""
    if not any(os.path.lexists(os.path.join(run_dir, n)) for n in RUN_TRACES):
        return None
    record: Dict[str, Any] = {"run_id": os.path.basename(os.path.normpath(run_dir)),
                              "result": "running", "record_missing": True, "tasks": [],
                              "root_cause": f"no {RUN_FILE}: the launcher was killed before it "
                                            f"wrote its record, or could not write it (disk full?)"}
    try:
        from tfcluster.runs.eventlog import iter_events
        for ev in iter_events(run_dir):
            if ev.get("event") == "run_started":
                record["started"] = ev["time"]
                tasks = ev.get("tasks")
                if isinstance(tasks, list):
                    record["tasks"] = [{"task": t, "state": "unknown"} for t in tasks[:100000]
                                       if isinstance(t, str)]
                break
    except UserError:   # events.jsonl a link, a FIFO or a bad line: still lost, without its tasks
        pass
    return record


def is_number(x: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any, low: int = 0, high: int = MAX_COUNT) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and low <= x < high


def _check_record(record: Any) -> Optional[str]:
    """The first thing wrong with a run record, or None."""
    from tfcluster.runs.eventlog import is_time
    if not isinstance(record, dict):
        return "not a JSON object"
    result = record.get("result")
    if result not in RESULTS:
        return f"result: {_short(result)} is not one of {', '.join(RESULTS)}"
    for key in ("started", "ended", "launcher_started"):
        if record.get(key) is not None and not is_time(record[key]):
            return (f"{key}: not a number" if not is_number(record[key])
                    else f"{key}: {record[key]!r} is not a time (seconds since 1970, before 3000)")
    pid = record.get("launcher_pid")
    if pid is not None and not _is_int(pid, 1):
        return "launcher_pid: not a process id"
    for key in ("run_id", "file", "launcher_host", "backend", "root_cause", "run_dir",
                "success_rule"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"{key}: not a string"
    job = record.get("slurm_job")
    if job is not None and not isinstance(job, str) and not _is_int(job):
        return "slurm_job: not a job id"
    if record.get("exit_code") is not None and not _is_int(record["exit_code"], -MAX_COUNT):
        return "exit_code: not a whole number"
    if record.get("total_restarts") is not None and not _is_int(record["total_restarts"]):
        return "total_restarts: not a whole number, 0 or more"
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
            if t.get(key) is not None and not is_time(t[key]):
                return (f"tasks[{i}].{key}: not a number" if not is_number(t[key])
                        else f"tasks[{i}].{key}: {t[key]!r} is not a time")
        for key in ("endpoint", "exit", "host"):
            if t.get(key) is not None and not isinstance(t[key], str):
                return f"tasks[{i}].{key}: not a string"
        if t.get("pid") is not None and not _is_int(t["pid"], 1):
            return f"tasks[{i}].pid: not a process id"
        if t.get("restarts") is not None and not _is_int(t["restarts"]):
            return f"tasks[{i}].restarts: not a whole number, 0 or more"
        if t.get("exit_code") is not None and not _is_int(t["exit_code"], -MAX_COUNT):
            return f"tasks[{i}].exit_code: not a whole number"
        p = t.get("progress")
        if p is not None:
            if not isinstance(p, dict):
                return f"tasks[{i}].progress: not an object"
            for key in ("step", "total"):
                v = p.get(key)
                if v is not None and not (is_number(v) and abs(v) < MAX_STEP):
                    return f"tasks[{i}].progress.{key}: not a number in range"
            if p.get("at") is not None and not is_time(p["at"]):
                return f"tasks[{i}].progress.at: not a time"
    return None


def _short(x: Any, limit: int = 60) -> str:
    text = printable(repr(x))
    return text if len(text) <= limit else text[:limit - 3] + "..."
