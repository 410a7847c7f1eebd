"""run.json: the record of a run, kept up to date while it goes; and ``tfcluster status``."""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional

from .errors import UserError

RUN_FILE = "run.json"


def write_json_private(path: str, data: Any) -> None:
    """Write JSON atomically, readable by its owner only."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def read_run(run_dir: str) -> Dict[str, Any]:
    path = os.path.join(run_dir, RUN_FILE)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise UserError(f"{run_dir}: no {RUN_FILE} here (not a run folder?)")
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot be read ({e})")


def latest_run(logdir: str) -> str:
    """The most recently started run folder under ``logdir``."""
    try:
        entries = [os.path.join(logdir, d) for d in os.listdir(logdir)]
    except FileNotFoundError:
        raise UserError(f"{logdir}: no runs yet (folder does not exist)")
    runs = [d for d in entries if os.path.isfile(os.path.join(d, RUN_FILE))]
    if not runs:
        raise UserError(f"{logdir}: no runs yet")
    return max(runs, key=lambda d: (os.path.getmtime(os.path.join(d, RUN_FILE)), d))


def resolve_run_dir(run_dir: Optional[str], file: Optional[str]) -> str:
    if run_dir:
        if os.path.isfile(os.path.join(run_dir, RUN_FILE)):
            return run_dir
        if os.path.isdir(run_dir):
            return latest_run(run_dir)
        raise UserError(f"{run_dir}: no such run folder")
    path = file or "cluster.yaml"
    if os.path.exists(path):
        from .config import load
        return latest_run(load(path).logdir)
    return latest_run("runs")


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


def print_status(run_dir: Optional[str], file: Optional[str]) -> int:
    run = resolve_run_dir(run_dir, file)
    record = read_run(run)
    print(f"run {record.get('run_id')} ({run}): {record.get('result')}"
          + (f", exit code {record['exit_code']}" if record.get("exit_code") is not None else ""))
    if record.get("root_cause"):
        print(f"root cause: {record['root_cause']}")
    print(format_table(HEADER, task_rows(record, record.get("ended"))))
    return 0
