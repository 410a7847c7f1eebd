"""The text ``status`` shows, and the live view and ``attach`` borrow: the task table, times
said as ago and as dates, and how to stop a run."""
from __future__ import annotations

import datetime
import shlex
import time
from typing import Any, Dict, List, Optional

from tfcluster.core.rules import format_duration
from tfcluster.runs.run_file import is_number
from tfcluster.terminal import printable

HEADER = ["task", "endpoint", "pid", "state", "exit", "restarts", "time", "step"]
#: the table of a running run: each task's last progress and last output too
LIVE_HEADER = HEADER + ["progress", "output"]


def task_rows(record: Dict[str, Any], now: Optional[float] = None,
              live: bool = False) -> List[List[str]]:
    """The task table (raw text: callers escape for their medium). ``live``: a running run,
    with each running task's last sign of progress and last output (LIVE_HEADER)."""
    now = now or time.time()
    rows = []
    for t in record.get("tasks", []):
        start, end = t.get("started"), t.get("ended")
        dur = (end or now) - start if start else None
        step = t.get("progress", {}).get("step") if t.get("progress") else None
        row = [t["task"], t.get("endpoint") or "", str(t.get("pid") or ""), t["state"],
               t.get("exit") or "", str(t.get("restarts") or 0), format_duration(dur),
               "" if step is None else str(step)]
        if live:
            row += [ago(t.get(k), now) if t.get("state") == "running" else ""
                    for k in ("life_at", "output_at")]
        rows.append(row)
    return rows


def ago(at: Any, now: float) -> str:
    """'12s ago' for a recorded time, '' when there is none (or it is not a time)."""
    if not is_number(at) or at != at:
        return ""
    return f"{format_duration(now - at)} ago"


def format_table(header: List[str], rows: List[List[str]]) -> str:
    """A plain text table; every cell is escaped for a terminal (no control character)."""
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths)).rstrip()]
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def when(t: Optional[float]) -> str:
    """A recorded time as a local date and time, '' when there is none."""
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def stop_hint(run_dir: str, pid: Any) -> str:
    """How to stop a running run, for people."""
    return (f"stop it: tfcluster stop {shlex_quote(run_dir)}"
            + (f"  (or: kill -TERM {pid})" if pid else ""))


def shlex_quote(text: str) -> str:
    """``text`` as one shell word, made printable."""
    return printable(shlex.quote(text))
