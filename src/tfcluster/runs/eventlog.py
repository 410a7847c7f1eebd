"""The event log of a run: ``<run_dir>/events.jsonl`` and ``<run_dir>/launcher.log``.

Every event is one JSON object on one line of ``events.jsonl``::

    {"time": 1764522337.12, "event": "task_exited", "task": "worker:1",
     "exit_code": null, "signal": "SIGKILL", "exit": "SIGKILL", "state": "failed"}

``time`` (unix seconds, float), ``event`` (a name) and ``task`` (``"worker:1"``, or null for an
event of the run) are always there; the other keys depend on the event (:data:`EVENTS` lists
them; docs/LAUNCH.md says what they mean). The same events, and the launcher's own messages,
are written as timestamped human lines to ``launcher.log``. Both files are readable by their
owner only and flushed line by line, so a launcher killed with SIGKILL leaves at most a
truncated last line, which :func:`read_events` skips.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

from tfcluster.core.rules import exit_words
from tfcluster.errors import UserError
from tfcluster.safe_files import open_regular, read_bytes
from tfcluster.safe_files import shown as _shown
from tfcluster.safe_files import size_text as _size

EVENTS_FILE = "events.jsonl"
PROGRESS_INTERVAL = 1.0   # seconds: at most one progress event per task this often
LAUNCHER_LOG = "launcher.log"

#: The events the drivers and the run machine write, and the keys each one has beyond
#: time/event/task (tests/unit/test_events.py holds the writers to it).
EVENTS = {
    "run_started": ("run_id", "file", "backend", "tasks", "chief"),
    "task_started": ("pid", "attempt", "host"),
    "task_exited": ("exit_code", "signal", "exit", "state"),
    "task_restarting": ("reason", "attempt", "delay"),
    "task_stalled": ("step", "silent"),
    "task_resumed": ("step",),
    "task_ending": ("step", "total"),
    "run_stalling": ("step", "silent"),
    "cluster_restarting": ("node", "reason", "attempt"),
    "cluster_moved": ("node", "old", "new"),
    "cluster_restarted": ("node", "attempt"),
    "run_shrunk": ("node", "reason", "workers", "min_workers"),
    "run_grew": ("node", "workers", "min_workers", "attempt"),
    "watchdog": ("reason", "action"),
    # elastic.scale (tfcluster.core.policies.sizing): the rate (global steps/s) measured with
    # measured_workers, and the base it was compared with; workers: the workers after it
    "scaled_up": ("workers", "measured_workers", "rate", "base_workers", "base_rate", "reason"),
    "scaled_down": ("workers", "measured_workers", "rate", "base_workers", "base_rate", "reason"),
    "scale_held": ("workers", "measured_workers", "rate", "base_workers", "base_rate", "reason"),
    "spare_placed": ("node",),          # a spare worker placed late (Ray), which scale may add
    "stop_sent": ("signal",),
    "progress": ("step", "total", "metrics", "local_step"),
    "decision": ("result", "rule", "exit_code", "reason"),
    "run_ended": ("result", "exit_code"),
    # what came in to the run machine (tfcluster.core.machine.input_fields): for a replay, not
    # shown; the first of a run (input "begin") has the time it began (now) instead of data
    "input": ("input", "data", "now"),
}


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become null (JSON has no NaN), tuples lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def _open_private(path: str):
    """Append to ``path`` (0600), relative to the open run folder, following no link."""
    from tfcluster import safe_files
    return safe_files.append_text(path)


class EventLog:
    """Appends events to ``events.jsonl`` and human lines to ``launcher.log`` in ``run_dir``.

    Thread-safe; each line is flushed when written. The folder must exist. A write that fails
    (disk full, folder removed) does not raise: the first error is kept in :attr:`error` and
    the run goes on without its log.
    """

    def __init__(self, run_dir: str, clock=time.time, buffered: bool = False,
                 events_file: str = EVENTS_FILE, log_file: Optional[str] = LAUNCHER_LOG):
        """``events_file`` and ``log_file`` (None: no human log): the files in ``run_dir`` (a
        Slurm node writes its task's events to a file of its own, merged into events.jsonl by
        the launcher at the end)."""
        self.run_dir = run_dir
        self.clock = clock
        self.files = {"_events": events_file, "_log": log_file}
        #: lines are flushed by :meth:`flush` (the launcher's loop, every turn) instead of one
        #: write a line (a start wave of 512 tasks: 1,500 lines)
        self.buffered = buffered
        self.error: Optional[str] = None
        self._lock = threading.Lock()
        self._events = None
        self._log = None
        self._closed = False
        self._progress_at: Dict[str, float] = {}
        self._held: Dict[str, Dict[str, Any]] = {}

    # -------------------------------------------------------------- writing
    def emit(self, event: str, task: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
        """Write one event (and its human line); return the event as written.

        ``time`` defaults to now; pass ``time=`` to date an event that happened earlier.
        """
        when = fields.pop("time", None)
        record: Dict[str, Any] = {"time": float(self.clock() if when is None else when),
                                  "event": event, "task": task}
        record.update(_clean(fields))
        line = json.dumps(record, separators=(", ", ": "), allow_nan=False)
        human = f"{_stamp(record['time'])} {format_event(record)}"
        with self._lock:
            self._write("_events", line)
            if event != "input":     # the machine's input log is for replays, not for people
                self._write("_log", human)
        return record

    def progress(self, task: str, step: int, total: Optional[int] = None,
                 metrics: Optional[Dict[str, float]] = None, when: Optional[float] = None,
                 local_step: Optional[int] = None) -> bool:
        """A ``progress`` event for ``task``, at most one per PROGRESS_INTERVAL seconds per task
        (``local_step``, when the task reported it: the steps it ran itself, its own rate).

        A report that comes sooner is held back (only the latest is kept): a report after the
        interval replaces it, and :meth:`flush_due` (call it from the launcher's loop) or
        :meth:`flush_progress` (on the task's exit) writes it. Returns whether an event was written.
        """
        now = self.clock() if when is None else when
        fields = {"time": now, "step": step, "total": total, "metrics": dict(metrics or {})}
        if local_step is not None:
            fields["local_step"] = local_step
        with self._lock:
            last = self._progress_at.get(task)
            if last is not None and now - last < PROGRESS_INTERVAL:
                self._held[task] = fields
                return False
            self._progress_at[task] = now
            self._held.pop(task, None)
        self.emit("progress", task, **fields)
        return True

    def flush_progress(self, task: str) -> None:
        """Write the progress report of ``task`` that was held back, if any (call it when the
        task exits, so the log ends at the task's last step)."""
        with self._lock:
            fields = self._held.pop(task, None)
            if fields is not None:
                self._progress_at[task] = fields["time"]
        if fields is not None:
            self.emit("progress", task, **fields)

    def flush_due(self, now: Optional[float] = None) -> None:
        """Write every held-back progress report whose task has had no event for the interval
        (a task that stopped reporting: its last step is then on record within a second)."""
        now = self.clock() if now is None else now
        with self._lock:
            due = [t for t in self._held if now - self._progress_at.get(t, now) >= PROGRESS_INTERVAL]
        for task in due:
            self.flush_progress(task)

    def log(self, line: str, when: Optional[float] = None) -> None:
        """Write one of the launcher's own messages to ``launcher.log`` (not an event)."""
        stamp = _stamp(self.clock() if when is None else when)
        with self._lock:
            for part in str(line).splitlines() or [""]:
                self._write("_log", f"{stamp} {part}")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for name in ("_events", "_log"):
                f = getattr(self, name)
                if f is not None:
                    try:
                        f.close()
                    except OSError:   # the last flush failed: self.error has the first failure
                        pass
                    setattr(self, name, None)

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write(self, attr: str, line: str) -> None:
        filename = self.files[attr]
        if self._closed or filename is None:
            return
        try:
            f = getattr(self, attr)
            if f is None:
                f = _open_private(os.path.join(self.run_dir, filename))
                setattr(self, attr, f)
            f.write(line + "\n")
            if not self.buffered:
                f.flush()
        except OSError as e:
            if self.error is None:
                self.error = f"{os.path.join(self.run_dir, filename)}: {e}"

    def flush(self) -> None:
        """Write out what :attr:`buffered` lines are held."""
        with self._lock:
            for name, filename in self.files.items():
                f = getattr(self, name)
                if f is None:
                    continue
                try:
                    f.flush()
                except OSError as e:
                    if self.error is None:
                        self.error = f"{os.path.join(self.run_dir, filename)}: {e}"
                except ValueError:      # closed
                    pass


class NullEventLog:
    """Where a driver's events go before its run has a folder (and so an :class:`EventLog`):
    nowhere."""

    error = None

    def emit(self, event: str, task: Optional[str] = None, **fields: Any) -> None:
        pass

    def progress(self, *args: Any, **kwargs: Any) -> None:
        pass

    def flush_progress(self, task: str) -> None:
        pass

    def flush_due(self, now: Optional[float] = None) -> None:
        pass

    def flush(self) -> None:
        pass

    def log(self, line: str, when: Optional[float] = None) -> None:
        pass

    def close(self) -> None:
        pass


# ------------------------------------------------------------------ reading
# Records are read defensively: ``tfcluster status``, ``runs`` and ``report`` may be pointed at a
# folder someone else filled (a shared logdir, a copied run). A record file must be a regular file
# (a FIFO or a device is refused, never waited on), of bounded size; JSON is parsed with non-finite
# numbers (NaN, Infinity, 1e400) turned into null and nesting bounded; times are checked for range.
MAX_LINE = 1 << 20            # bytes: the longest events.jsonl line read
MAX_DEPTH = 32                # nesting of a record or an event (launchers write 4 at most)
MAX_TIME = 32503680000.0      # 3000-01-01: a later "time" is not a time a run had


def read_limited(path: str, limit: int) -> Optional[bytes]:
    """The bytes of regular file ``path`` (None when it does not exist; no link followed); a
    file larger than ``limit`` bytes is a UserError, and is not read."""
    return read_bytes(path, limit)


def _finite(text: str) -> Optional[float]:
    value = float(text)
    return value if math.isfinite(value) else None


def parse_json(data: bytes) -> Any:
    """JSON from bytes, as records are read: NaN, Infinity and numbers too large for a float
    become null; nesting deeper than MAX_DEPTH is refused. Raises ValueError with the reason."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=lambda _: None,
                           parse_float=_finite)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 ({e.reason} at byte {e.start})")
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        check_depth(value)
    return value


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """ValueError when ``value`` nests lists/objects deeper than ``limit`` (checked without
    recursion)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > limit:
                raise ValueError(f"nested more than {limit} levels deep")
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))


def is_time(x: Any) -> bool:
    """A unix time a run could have: a finite number from 0 to the year 3000."""
    return (isinstance(x, (int, float)) and not isinstance(x, bool)
            and 0 <= x <= MAX_TIME)


def iter_events(run_dir: str) -> Iterator[Dict[str, Any]]:
    """The events of a run, in file order, one at a time (a report of a long run never holds
    them all); nothing when the run has no ``events.jsonl``.

    A last line without its newline that is not JSON (a launcher killed mid-write) is skipped.
    Any other line that is longer than MAX_LINE, is not a JSON object, or has no ``event``
    string, no ``time`` in range or a ``task`` that is not a string is bad input (UserError,
    naming the file and line). The other keys are left as they are: readers check what they use.
    """
    path = os.path.join(run_dir, EVENTS_FILE)
    f = open_regular(path)
    if f is None:
        return
    where = _shown(path)
    with f:
        number = 0
        while True:
            try:
                raw = f.readline(MAX_LINE + 1)
            except OSError as e:
                raise UserError(f"{where}: cannot be read ({e.strerror or e})")
            if not raw:
                return
            number += 1
            complete = raw.endswith(b"\n")
            if not complete and len(raw) > MAX_LINE:
                raise UserError(f"{where}: line {number}: longer than {_size(MAX_LINE)}")
            if not raw.strip():
                continue
            try:
                ev = parse_json(raw)
            except ValueError as e:
                if not complete:
                    return   # the last line, cut by a crash mid-write
                raise UserError(f"{where}: line {number}: not valid JSON ({e})")
            if not isinstance(ev, dict):
                raise UserError(f"{where}: line {number}: not a JSON object")
            if not isinstance(ev.get("event"), str):
                raise UserError(f"{where}: line {number}: event: missing or not a string")
            if not is_time(ev.get("time")):
                raise UserError(f"{where}: line {number}: time: missing, not a number or out of "
                                f"range")
            task = ev.get("task")
            if task is not None and not isinstance(task, str):
                raise UserError(f"{where}: line {number}: task: not a string")
            yield ev


def read_events(run_dir: str) -> List[Dict[str, Any]]:
    """All the events of a run as a list, oldest first (see :func:`iter_events`; use that for
    a run whose log may be long)."""
    return list(iter_events(run_dir))


# ------------------------------------------------------------------ human lines
_last_second: Any = (None, "")     # the second last stamped, and its text (one tuple: threads)


def _stamp(t: float) -> str:
    global _last_second
    second = math.floor(t)
    last = _last_second
    if last[0] != second:      # one strftime a second, not one a line
        last = _last_second = (second, datetime.datetime.fromtimestamp(second).strftime("%Y-%m-%d %H:%M:%S"))
    return f"{last[1]}.{int((t - second) * 1000):03d}"


def _num(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def format_event(ev: Dict[str, Any]) -> str:
    """One event as a human line, without the timestamp ('worker:1 exited (SIGKILL), failed')."""
    name, task = ev.get("event"), ev.get("task")
    who = task or "run"
    g = ev.get
    if name == "run_started":
        tasks = ", ".join(str(t) for t in g("tasks") or [])
        return (f"run {g('run_id')} started: file {g('file')}, backend {g('backend')}, "
                f"tasks {tasks}; chief {g('chief')}")
    if name == "task_started":
        attempt = g("attempt") or 0
        return (f"{who} started: pid {g('pid')}" + (f" on {g('host')}" if g("host") else "")
                + (f", restart {attempt}" if attempt else ""))
    if name == "task_exited":
        return f"{who} exited ({g('exit') or exit_words(g('exit_code'), g('signal'))})" + (
            f", {g('state')}" if g("state") else "")
    if name == "task_restarting":
        return (f"{who} restarting (restart {g('attempt')}, in {_num(g('delay'))}s)"
                + (f": {g('reason')}" if g("reason") else ""))
    if name == "watchdog":
        return f"watchdog: {who}: {g('reason')} -> {g('action')}"
    if name == "stop_sent":
        return f"{who}: sent {g('signal')}"
    if name == "progress":
        total = g("total")
        metrics = g("metrics") or {}
        extra = "".join(f" {k}={_num(v)}" for k, v in metrics.items()) if isinstance(metrics, dict) else ""
        return f"{who} step {g('step')}" + (f"/{total}" if total else "") + extra
    if name == "decision":
        return (f"decision: {g('result')} (rule {g('rule')}, exit code {g('exit_code')})"
                + (f": {g('reason')}" if g("reason") else ""))
    if name in ("run_shrunk", "run_grew"):       # a worker that left here has no node
        node = g("node") if g("node") and str(g("node")) not in str(g("reason") or "") else ""
        on = f" on {node}" if node else ""
        what = (f"left the run{on}: {g('reason')}" if name == "run_shrunk"
                else f"back in the run{on} (restart {g('attempt')})")
        n = g("workers")
        return f"{who} {what}; {n} worker{'' if n == 1 else 's'} in the run, min {g('min_workers')}"
    if name == "run_ended":
        return f"run ended: {g('result')}, exit code {g('exit_code')}"
    if name == "spare_placed":
        return f"{who} placed on {g('node')}"
    if name in ("scaled_up", "scaled_down", "scale_held"):
        verb = {"scaled_up": f"added {who}", "scaled_down": f"removed {who}", "scale_held": "holding"}[name]
        return (f"elastic.scale: {g('rate')} steps/s with {g('measured_workers')} workers: {verb}, "
                f"{g('workers')} workers" + (f" ({g('reason')})" if g("reason") else ""))
    rest = ", ".join(f"{k}={v}" for k, v in ev.items() if k not in ("time", "event", "task"))
    return f"{name} {who}" + (f": {rest}" if rest else "")


