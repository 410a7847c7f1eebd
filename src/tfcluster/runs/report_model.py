"""The report's model: what ``tfcluster report`` shows, read from a run folder.

:func:`build_model` reads ``run.json`` and streams ``events.jsonl`` (docs/LAUNCH.md describes
both) into plain data: one :class:`TaskView` per task with its attempts, restarts, watchdog
actions, stop signals, progress points (thinned: :class:`Thinned`), stalls (gaps between
progress reports longer than :func:`stall_threshold`), where its step line holds flat (its
stalls and the time between its attempts: :func:`_holds`) and its own steps/s (from the
``local_step`` of its reports: the steps it ran itself; a task that reports only the global step
has no rate of its own); for a failed run, the failed task's cause, hint and log tail as the
console said them (:func:`tfcluster.runs.failure.read_failure`). Whatever the run's length the
model is bounded: MAX_POINTS progress points, MAX_HOLDS flat stretches and MAX_MARKS marks per
task, MAX_TASKS tasks, MAX_ROWS event rows, every value cut to TEXT_LIMIT characters.

A run without ``events.jsonl`` (recorded before tfcluster wrote event logs) still gets a model:
one attempt per task from its last start to its end, its restart count, its last progress
report. :mod:`tfcluster.runs.report` draws the model.
"""
from __future__ import annotations

import collections
import heapq
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Tuple

from tfcluster.core.rules import exit_words
from tfcluster.runs.eventlog import iter_events
from tfcluster.runs.failure import log_tail, read_failure, root_task
from tfcluster.runs.result import derive_result, last_update
from tfcluster.runs.run_file import read_run
from tfcluster.terminal import printable

STALL_MIN_S = 10.0        # a gap between progress reports is a stall if at least this long ...
STALL_FACTOR = 5.0        # ... and this many times the task's median gap
STRAGGLER_RATIO = 0.8     # a task below this fraction of the fastest task's steps/s is flagged
CHIEF_EXEMPT = "the chief: checkpoints and summaries are work besides its steps"
MAX_POINTS = 1500         # progress points kept per task (thinned evenly as they stream in)
EXACT_GAPS = 4096         # gaps per attempt kept exactly for the median; beyond, a histogram
MAX_STALLS = 200          # stall candidates kept per attempt (the longest)
MAX_MARKS = 400           # attempts / restarts / watchdog / stop marks kept per task
MAX_HOLDS = MAX_POINTS // 2   # flat stretches of a step line kept per task (the longest)
MAX_TASKS = 1000          # task lanes drawn
MAX_ROWS = 2000           # rows of the event table (the first and the last half)
TEXT_LIMIT = 300          # characters of any one value written into the page
LINE_LIMIT = 2000         # ... of a failure's hint or of a line of its log's tail
STATE_CLASSES = ("succeeded", "failed", "stopped", "stopping", "running", "lost", "restarting",
                 "pending", "left", "unknown")
LEFT_WORDS = "left the run"   # elastic: a worker the run went on without (not a failure)


class GapStats:
    """Gaps between a task's progress reports within one attempt, seen one at a time: exact up
    to EXACT_GAPS (then the median is exact), else a histogram with 2**(1/16) wide buckets; and
    the longest gaps of at least STALL_MIN_S, which may be stalls."""

    def __init__(self):
        self.exact: Optional[List[float]] = []
        self.hist: Dict[int, int] = {}
        self.n = 0
        self.long: List[Tuple[float, float, float, float]] = []  # a heap of (gap, from, to, step at from)

    def add(self, a: float, b: float, step: float = 0.0) -> None:
        gap = b - a
        self.n += 1
        if self.exact is not None:
            self.exact.append(gap)
            if len(self.exact) > EXACT_GAPS:
                for g in self.exact:
                    self._bucket(g)
                self.exact = None
        else:
            self._bucket(gap)
        if gap >= STALL_MIN_S:
            item = (gap, a, b, step)
            if len(self.long) < MAX_STALLS:
                heapq.heappush(self.long, item)
            elif item > self.long[0]:
                heapq.heapreplace(self.long, item)

    def _bucket(self, gap: float) -> None:
        k = -10**6 if gap <= 0 else math.floor(16 * math.log2(gap))
        self.hist[k] = self.hist.get(k, 0) + 1

    def median(self) -> Optional[float]:
        if self.exact is not None:
            return statistics.median(self.exact) if self.exact else None
        half, seen = self.n / 2.0, 0
        for k in sorted(self.hist):
            seen += self.hist[k]
            if seen >= half:
                return 0.0 if k == -10**6 else 2 ** ((k + 0.5) / 16)
        return None


@dataclass
class Attempt:
    start: float
    end: Optional[float] = None
    attempt: Optional[int] = 0
    pid: Optional[int] = None
    host: Optional[str] = None
    exit: str = ""
    state: str = ""
    open: bool = False
    first: Optional[Tuple[float, float]] = None    # first and last progress report (time, step)
    last: Optional[Tuple[float, float]] = None
    # first and last report of the steps this task ran itself (time, local_step): its own rate
    own_first: Optional[Tuple[float, float]] = None
    own_last: Optional[Tuple[float, float]] = None
    gaps: GapStats = field(default_factory=GapStats)


class Thinned:
    """Up to ``cap`` points of a series that streams in: every k-th point, k doubling whenever
    the kept points reach ``cap``; the last point is always kept."""

    def __init__(self, cap: int = MAX_POINTS):
        self.half = max(2, cap // 2)
        self.kept: List[Tuple[float, float]] = []
        self.stride, self.n = 1, 0
        self.last: Optional[Tuple[float, float]] = None

    def add(self, point: Tuple[float, float]) -> None:
        if self.n % self.stride == 0:
            self.kept.append(point)
            if len(self.kept) >= 2 * self.half:
                self.kept = self.kept[::2]
                self.stride *= 2
        self.n += 1
        self.last = point

    def points(self) -> List[Tuple[float, float]]:
        pts = list(self.kept)
        if self.last is not None and (not pts or pts[-1] is not self.last):
            pts.append(self.last)
        pts.sort()
        return pts


@dataclass
class TaskView:
    name: str
    attempts: List[Attempt] = field(default_factory=list)
    restarts: List[Dict[str, Any]] = field(default_factory=list)   # task_restarting events
    watchdog: List[Dict[str, Any]] = field(default_factory=list)
    stops: List[Dict[str, Any]] = field(default_factory=list)
    points: List[Tuple[float, float]] = field(default_factory=list)  # (time, step), thinned
    stalls: List[Tuple[float, float]] = field(default_factory=list)
    # (from, to, step): no progress from one report to the next (a stall, or the time between
    # two attempts): the step chart holds the step reported at ``from`` until ``to``
    holds: List[Tuple[float, float, float]] = field(default_factory=list)
    left: str = ""            # elastic: why it left the run (run_shrunk), "" while in it
    restart_count: int = 0
    rate: Optional[float] = None        # its own steps/s (local_step), None when not reported
    own: bool = False                   # some report carried local_step
    last_step: Optional[float] = None
    total: Optional[float] = None
    series: Thinned = field(default_factory=Thinned)
    dropped: int = 0          # marks left out beyond MAX_MARKS
    restart_events: int = 0
    restarted_attempts: int = 0
    chief: bool = False       # the run's chief

    @property
    def outcome(self) -> str:
        """How the task's last attempt ended: a state word (succeeded, failed, stopped, ...)."""
        return self.attempts[-1].state if self.attempts else ""

    @property
    def straggler_exempt(self) -> str:
        """Why this task is not compared with the others' speed ('' when it is): a task that
        restarted or whose last attempt failed or was lost lags because it crashed, not
        because it is slow; a worker that left an elastic run is out of it; the chief does
        work besides its steps (trainer.py's, like a Supervisor's or MonitoredTrainingSession's
        chief, saves the checkpoints and writes the summaries), so its fewer steps are not
        slowness either."""
        if self.restart_count:
            return f"restarted {self.restart_count}x"
        if self.outcome == "left":
            return LEFT_WORDS
        if self.outcome in ("failed", "lost"):
            return self.outcome
        if self.chief:
            return CHIEF_EXEMPT
        return ""


def _keep(marks: List[Any], item: Any, view: "TaskView") -> None:
    marks.append(item)
    if len(marks) > MAX_MARKS:       # keep the first and the latest; drop from the middle
        del marks[MAX_MARKS // 2]
        view.dropped += 1


# ------------------------------------------------------------------ the model
def stall_threshold(gaps: List[float]) -> float:
    """How long a gap between two progress reports of a task must be to count as a stall."""
    if not gaps:
        return STALL_MIN_S
    return max(STALL_MIN_S, STALL_FACTOR * statistics.median(gaps))


def _threshold(median: Optional[float]) -> float:
    return STALL_MIN_S if median is None else max(STALL_MIN_S, STALL_FACTOR * median)


def _stalls(attempts: List[Attempt], total: Optional[float] = None) -> List[Tuple[float, float]]:
    """Gaps in progress, within one attempt: between reports, and from the last report to the
    end of the attempt (a task that hangs, then is killed) or to now (a task hanging now). The
    end of an attempt that ended by itself with exit 0, or whose last report was its final
    step (``total``), is no stall: the program was finishing (saving, evaluating, saying
    goodbye to its peers), which Keras and other programs that report per epoch or at
    intervals do without a report."""
    out: List[Tuple[float, float]] = []
    for a in attempts:
        if a.last is None:
            continue
        limit = _threshold(a.gaps.median())
        out.extend((x, b) for x, b, _ in _long_gaps(a))
        if a.state == "succeeded" or (total and a.last[1] >= total):
            continue
        end = a.end if a.end is not None else a.start
        if end - a.last[0] >= limit:
            out.append((a.last[0], end))
    return out


def _long_gaps(a: Attempt) -> List[Tuple[float, float, float]]:
    """The stalls between two reports of attempt ``a``: (from, to, the step reported at from)."""
    limit = _threshold(a.gaps.median())
    return sorted((x, b, step) for gap, x, b, step in a.gaps.long if gap >= limit)


def _holds(attempts: List[Attempt]) -> List[Tuple[float, float, float]]:
    """Where the step chart holds a step flat (from, to, step): across a stall between two
    reports, and from the last report of an attempt to the first of the next (a restart, a
    worker back in an elastic run): no progress was reported there, so none is drawn."""
    out: List[Tuple[float, float, float]] = []
    for k, a in enumerate(attempts):
        out.extend(_long_gaps(a))
        nxt = attempts[k + 1] if k + 1 < len(attempts) else None
        if a.last is not None and nxt is not None and nxt.first is not None and nxt.first[0] > a.last[0]:
            out.append((a.last[0], nxt.first[0], a.last[1]))
    if len(out) > MAX_HOLDS:
        out = sorted(heapq.nlargest(MAX_HOLDS, out, key=lambda h: h[1] - h[0]))
    return out


def _rate(a: Attempt) -> Optional[float]:
    """The attempt's own steps per second (its local_step reports), None without two of them."""
    if a.own_first is None or a.own_last is None:
        return None
    (t0, s0), (t1, s1) = a.own_first, a.own_last
    return (s1 - s0) / (t1 - t0) if t1 > t0 else None


def _int(x: Any, low: int = 0, high: int = 1 << 31) -> Optional[int]:
    """``x`` when it is a whole number in [low, high), else None (hostile or broken values)."""
    return x if isinstance(x, int) and not isinstance(x, bool) and low <= x < high else None


def _number(x: Any, limit: float = 1e18) -> Optional[float]:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < limit
    return x if ok and math.isfinite(x) else None


def _text(x: Any, limit: int = TEXT_LIMIT) -> str:
    """Any value as bounded text (escaped later, where it is written)."""
    if x is None:
        return ""
    text = x if isinstance(x, str) else str(x)
    if len(text) > limit:
        text = text[:limit] + "\u2026"
    return printable(text)   # control characters and bidi overrides as visible escapes


def _state(x: Any) -> str:
    return x if isinstance(x, str) and x in STATE_CLASSES else ("unknown" if x else "")



class _EventReader:
    """Streams one run's events into task views: at most MAX_TASKS views (the names beyond are
    counted in ``extra_tasks``), the first and last MAX_ROWS // 2 rows of the event table, the
    time span of the events, the run's decision, chief and task list."""

    def __init__(self) -> None:
        self.views: Dict[str, TaskView] = {}
        self.extra_tasks = 0
        self.head: List[Dict[str, Any]] = []
        self.tail: Deque[Dict[str, Any]] = collections.deque(maxlen=MAX_ROWS // 2)
        self.n_rows = self.n_progress = self.n_events = 0
        self.tmin: Optional[float] = None
        self.tmax: Optional[float] = None
        self.decision: Optional[Dict[str, Any]] = None
        self.chief: Optional[str] = None
        self.run_tasks: List[str] = []

    def view(self, name: Any) -> Optional[TaskView]:
        """The view of task ``name`` (made on first sight), None for a bad name or one too many."""
        if not isinstance(name, str) or not name:
            return None
        v = self.views.get(name)
        if v is None:
            if len(self.views) >= MAX_TASKS:
                self.extra_tasks += 1
                return None
            v = self.views[name] = TaskView(name)
        return v

    def read(self, run_dir: str) -> None:
        for e in iter_events(run_dir):
            if e.get("event") != "input":   # the run machine's input log (for replays)
                self.event(e)

    def event(self, e: Dict[str, Any]) -> None:
        self.n_events += 1
        t = float(e["time"])
        self.tmin = t if self.tmin is None or t < self.tmin else self.tmin
        self.tmax = t if self.tmax is None or t > self.tmax else self.tmax
        kind = e["event"]
        if kind == "progress":
            self.n_progress += 1
            self._progress(e, t)
            return
        self._row(e)
        if kind == "run_started":
            tasks = e.get("tasks")
            if isinstance(tasks, list) and not self.run_tasks:
                self.run_tasks = [x for x in tasks[:MAX_TASKS] if isinstance(x, str)]
            if self.chief is None and isinstance(e.get("chief"), str):
                self.chief = e["chief"]
        elif kind == "decision":
            self.decision = e
        else:
            v = self.view(e.get("task"))
            if v is not None:
                self._task_event(kind, v, e, t)

    def _row(self, e: Dict[str, Any]) -> None:
        self.n_rows += 1
        if len(self.head) < MAX_ROWS - MAX_ROWS // 2:
            self.head.append(e)
        else:
            self.tail.append(e)

    def _progress(self, e: Dict[str, Any], t: float) -> None:
        step = _number(e.get("step"))
        v = self.view(e.get("task"))
        if v is None or step is None:
            return
        point = (t, step)
        v.series.add(point)
        total = _number(e.get("total"))
        if total is not None:
            v.total = total
        a = v.attempts[-1] if v.attempts else None
        if a is not None and t >= a.start and (a.open or (a.end is not None and t <= a.end)):
            _progress_in(v, a, point, _number(e.get("local_step")))

    def _task_event(self, kind: str, v: TaskView, e: Dict[str, Any], t: float) -> None:
        if kind == "task_started":
            if v.attempts and v.attempts[-1].open:   # a start without its exit: close it
                v.attempts[-1].open, v.attempts[-1].end = False, t
            n = _int(e.get("attempt"))
            if n:
                v.restarted_attempts += 1
            _keep(v.attempts, Attempt(t, None, n, _int(e.get("pid"), 1), _text(e.get("host")) or None,
                                      open=True), v)
        elif kind == "task_exited":
            if not v.attempts or not v.attempts[-1].open:
                _keep(v.attempts, Attempt(self.tmin, attempt=None, open=True), v)
            a = v.attempts[-1]
            a.end, a.open = t, False
            a.exit = _text(e.get("exit")) or exit_words(_int(e.get("exit_code"), -(1 << 31)),
                                                         _text(e.get("signal")), unknown="")
            a.state = _state(e.get("state"))
        elif kind == "run_shrunk":
            _left(v, e, t)
        elif kind == "task_restarting":
            v.restart_events += 1
            _keep(v.restarts, e, v)
        elif kind == "watchdog":
            _keep(v.watchdog, e, v)
        elif kind == "stop_sent":
            _keep(v.stops, e, v)

    def ordered(self) -> Dict[str, TaskView]:
        """The views in run_started's order, then in order of first sight; a task of run_started
        that has no event (yet) gets an empty view."""
        ordered: Dict[str, TaskView] = {}
        for name in self.run_tasks + list(self.views):
            if name in self.views and name not in ordered:
                ordered[name] = self.views[name]
        for name in self.run_tasks:
            if name not in ordered and len(ordered) < MAX_TASKS:
                ordered[name] = TaskView(name)
        return ordered


def _progress_in(v: TaskView, a: Attempt, point: Tuple[float, float],
                 own: Optional[float]) -> None:
    """A progress report that falls within attempt ``a``: its gaps, first and last reports."""
    t = point[0]
    if a.last is not None and t >= a.last[0]:
        a.gaps.add(a.last[0], t, a.last[1])
    if a.first is None:
        a.first = point
    if a.last is None or t >= a.last[0]:
        a.last = point
    if own is not None:
        v.own = True
        if a.own_first is None:
            a.own_first = (t, own)
        if a.own_last is None or t >= a.own_last[0]:
            a.own_last = (t, own)


def _left(v: TaskView, e: Dict[str, Any], t: float) -> None:
    """Elastic: the worker left the run (``run_shrunk``), which went on without it. Its last
    attempt is ``left``, not failed (its exit, logged just before, was the process's own end);
    one with no exit logged (lost with its node) ends here."""
    v.left = _text(e.get("reason")) or LEFT_WORDS
    if not v.attempts:
        return
    a = v.attempts[-1]
    if a.open:
        a.end, a.open = t, False
    if a.state in ("", "failed", "unknown"):
        a.state = "left"


def _span(record: Dict[str, Any], result: str, reader: _EventReader, seen: Optional[float],
          now: float) -> Tuple[float, float]:
    """The time span (t0, t1) the charts draw: the run's start to its end, or to now while it
    runs, and at least a second long."""
    starts = [x for x in (record.get("started"), reader.tmin) if x is not None]
    t0 = min(starts) if starts else (seen or now)
    if record.get("ended") is not None:
        end_candidates = [record["ended"]]
    elif result == "running":
        end_candidates = [now]
    else:
        end_candidates = [seen or t0]
    tmax = [reader.tmax] if reader.tmax is not None else []
    return t0, max(end_candidates + tmax + [t0 + 1.0])


def _close_open(ordered: Dict[str, TaskView], t1: float, result: str) -> None:
    """Attempts still open at the end of the events run to t1: running, or lost with the run."""
    for v in ordered.values():
        for a in v.attempts:
            if a.open:
                a.end = t1
                a.state = "lost" if result == "lost" else (a.state or "running")
        v.restart_count = max(v.restart_events, v.restarted_attempts)


def _add_last_report(v: TaskView, p: Dict[str, Any], at: Any) -> None:
    v.series.add((at, p["step"]))
    if _number(p.get("total")) is not None:
        v.total = p["total"]


def _from_record(ordered: Dict[str, TaskView], record: Dict[str, Any],
                 by_task: Dict[str, Dict[str, Any]], t1: float, result: str) -> None:
    """Without events: one attempt per task from run.json (its last start to its end), its
    restart count and its last progress report."""
    workers = record.get("workers") if isinstance(record.get("workers"), dict) else {}
    gone = workers.get("left") if isinstance(workers.get("left"), dict) else {}
    for name, t in by_task.items():
        v = ordered.get(name)
        if v is None:
            continue
        v.restart_count = int(t.get("restarts") or 0)
        if t.get("started") is not None:
            open_ = t.get("ended") is None
            state = _state(t.get("state"))
            if state == "failed" and name in gone:    # (launchers before the state "left")
                state = "left"
            if open_ and result == "lost":
                state = "lost"
            v.attempts.append(Attempt(t["started"], t.get("ended") if not open_ else t1,
                                      v.restart_count, _int(t.get("pid"), 1),
                                      _text(t.get("host")) or None, _text(t.get("exit")),
                                      state, open=open_))
        p = t.get("progress") or {}
        if _number(p.get("step")) is not None:
            _add_last_report(v, p, p.get("at") or t.get("ended") or t1)


def _finish(v: TaskView, task: Dict[str, Any], has_events: bool, t1: float) -> None:
    """A view's points, stalls, own rate and last step, once every event is read."""
    p = task.get("progress")
    if has_events and v.series.last is None and isinstance(p, dict) \
            and _number(p.get("step")) is not None:
        # no progress event (an older launcher, a log cut short): run.json's last report
        at = _number(p.get("at")) or (task.get("ended") if _number(task.get("ended")) is not None
                                      else t1)
        _add_last_report(v, p, at)
    v.points = v.series.points()
    v.stalls = _stalls(v.attempts, v.total) if has_events else []
    v.holds = _holds(v.attempts) if has_events else []
    rated = [a for a in v.attempts if _rate(a) is not None]
    v.rate = _rate(rated[-1]) if rated else None   # the global step's rate is not the task's
    v.last_step = v.series.last[1] if v.series.last else None


def build_model(run_dir: str, now: Optional[float] = None) -> Dict[str, Any]:
    """Everything the page shows, from run.json and events.jsonl. events.jsonl is streamed: the
    model holds at most MAX_POINTS progress points, MAX_MARKS marks per task and MAX_ROWS table
    rows however long the run was."""
    now = time.time() if now is None else now
    record = read_run(run_dir)
    result = derive_result(record, run_dir=run_dir)
    seen = last_update(run_dir)
    reader = _EventReader()
    for t in record.get("tasks", []):
        reader.view(t["task"])
    by_task = {t["task"]: t for t in record.get("tasks", [])}
    reader.read(run_dir)
    events = reader.head + list(reader.tail)
    ordered = reader.ordered()
    t0, t1 = _span(record, result, reader, seen, now)
    has_events = reader.n_events > 0
    if has_events:
        _close_open(ordered, t1, result)
    else:
        _from_record(ordered, record, by_task, t1, result)
    chief = reader.chief or (record.get("chief") if isinstance(record.get("chief"), str) else None)
    for v in ordered.values():
        v.chief = v.name == chief
        _finish(v, by_task.get(v.name) or {}, has_events, t1)
    rates = [v.rate for v in ordered.values() if v.rate and v.rate > 0]
    fastest = max(rates) if rates else None
    failed = root_task(record) if result in ("failed", "interrupted", "lost") else None
    failure = None
    if failed is not None:   # what the console's failure line and summary said, from its log
        failure = read_failure(log_tail(run_dir, record, failed), record, failed)
    return {"record": record, "events": events, "result": result, "t0": t0, "t1": t1,
            "failed_task": failed, "failure": failure,
            "tasks": list(ordered.values()), "fastest": fastest, "decision": reader.decision,
            "chief": chief, "run_dir": run_dir, "has_events": has_events,
            "rows_left_out": max(0, reader.n_rows - len(events)),
            "progress_count": reader.n_progress, "tasks_left_out": reader.extra_tasks}
