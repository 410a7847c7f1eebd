"""``tfcluster report``: one self-contained HTML page that shows what happened in a run.

The page is built from ``run.json`` and ``events.jsonl`` (docs/LAUNCH.md describes both) with
inline SVG and inline CSS only: no script, no style sheet, no font or image from anywhere else,
so it opens offline and can be mailed or attached to a ticket. It shows

- a timeline of every task: each attempt as a bar (coloured by how it ended, labelled with the
  exit code or signal), restarts (marker and backoff gap), watchdog actions, stop signals, and
  stalls (gaps between progress reports longer than :func:`stall_threshold`);
- the global step each task reported over time, with steps/s per task (a straggler's line lags
  and its rate is flagged);
- the task table of run.json and the run's events.

A run without ``events.jsonl`` (recorded before tfcluster wrote event logs) still gets a page:
one bar per task from its last start to its end, its restart count, its last progress report.
"""
from __future__ import annotations

import datetime
import html
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .errors import UserError
from .events import format_event, read_events
from .runrecord import (HEADER, derive_result, format_duration, last_update, read_run,
                        task_rows)

REPORT_FILE = "report.html"
STALL_MIN_S = 10.0        # a gap between progress reports is a stall if at least this long ...
STALL_FACTOR = 5.0        # ... and this many times the task's median gap
STRAGGLER_RATIO = 0.8     # a task below this fraction of the fastest task's steps/s is flagged
MAX_POINTS = 1500         # progress points drawn per task (evenly thinned beyond)

WIDTH, LEFT, RIGHT = 1000, 120, 70
ROW_H, BAR_H = 30, 14
# line colours of the step chart: none of them the reds, oranges and yellows of failures,
# restarts and stalls
PALETTE = ["#1c7ed6", "#0c8599", "#7048e8", "#5c940d", "#c2255c", "#364fc7", "#087f5b",
           "#862e9c", "#495057", "#1864ab"]


@dataclass
class Attempt:
    start: float
    end: Optional[float] = None
    attempt: int = 0
    pid: Optional[int] = None
    host: Optional[str] = None
    exit: str = ""
    state: str = ""
    open: bool = False


@dataclass
class TaskView:
    name: str
    attempts: List[Attempt] = field(default_factory=list)
    restarts: List[Dict[str, Any]] = field(default_factory=list)   # task_restarting events
    watchdog: List[Dict[str, Any]] = field(default_factory=list)
    stops: List[Dict[str, Any]] = field(default_factory=list)
    points: List[Tuple[float, int]] = field(default_factory=list)  # (time, step)
    stalls: List[Tuple[float, float]] = field(default_factory=list)
    restart_count: int = 0
    rate: Optional[float] = None
    last_step: Optional[int] = None
    total: Optional[int] = None


# ------------------------------------------------------------------ the model
def stall_threshold(gaps: List[float]) -> float:
    """How long a gap between two progress reports of a task must be to count as a stall."""
    if not gaps:
        return STALL_MIN_S
    return max(STALL_MIN_S, STALL_FACTOR * statistics.median(gaps))


def _stalls(points: List[Tuple[float, int]], attempts: List[Attempt]) -> List[Tuple[float, float]]:
    """Gaps in progress, within one attempt: between reports, and from the last report to the
    end of the attempt (a task that hangs, then is killed) or to now (a task hanging now)."""
    out: List[Tuple[float, float]] = []
    for a in attempts:
        end = a.end if a.end is not None else a.start
        ts = [t for t, _ in points if a.start <= t <= end]
        if not ts:
            continue
        gaps = [b - x for x, b in zip(ts, ts[1:])]
        limit = stall_threshold(gaps)
        for x, b in zip(ts, ts[1:]):
            if b - x >= limit:
                out.append((x, b))
        if end - ts[-1] >= limit:
            out.append((ts[-1], end))
    return out


def _rate(points: List[Tuple[float, int]]) -> Optional[float]:
    if len(points) < 2:
        return None
    (t0, s0), (t1, s1) = points[0], points[-1]
    return (s1 - s0) / (t1 - t0) if t1 > t0 else None


def build_model(run_dir: str) -> Dict[str, Any]:
    """Everything the page shows, from run.json and events.jsonl."""
    record = read_run(run_dir)
    events = sorted(read_events(run_dir), key=lambda e: e["time"])
    result = derive_result(record)
    seen = last_update(run_dir)
    times = [e["time"] for e in events]
    starts = [x for x in [record.get("started")] + times[:1] if x is not None]
    t0 = min(starts) if starts else (seen or time.time())
    if record.get("ended") is not None:
        end_candidates = [record["ended"]]
    elif result == "running":
        end_candidates = [time.time()]
    else:
        end_candidates = [seen or t0]
    t1 = max(end_candidates + times + [t0 + 1.0])

    order: List[str] = []
    for e in events:
        if e["event"] == "run_started":
            order.extend(t for t in e.get("tasks") or [] if isinstance(t, str))
    order.extend(t["task"] for t in record.get("tasks", []))
    order.extend(e["task"] for e in events if e.get("task"))
    views: Dict[str, TaskView] = {}
    for name in order:
        views.setdefault(name, TaskView(name))

    by_task = {t["task"]: t for t in record.get("tasks", [])}
    if events:
        for e in events:
            v = views.get(e.get("task") or "")
            if v is None:
                continue
            kind = e["event"]
            if kind == "task_started":
                if v.attempts and v.attempts[-1].open:   # a start without its exit: close it
                    v.attempts[-1].open, v.attempts[-1].end = False, e["time"]
                v.attempts.append(Attempt(e["time"], None, int(e.get("attempt") or 0),
                                          e.get("pid"), e.get("host"), open=True))
            elif kind == "task_exited":
                if not v.attempts or not v.attempts[-1].open:
                    v.attempts.append(Attempt(t0, attempt=len(v.attempts), open=True))
                a = v.attempts[-1]
                a.end, a.open = e["time"], False
                a.exit = e.get("exit") or _exit_words(e.get("exit_code"), e.get("signal"))
                a.state = e.get("state") or ""
            elif kind == "task_restarting":
                v.restarts.append(e)
            elif kind == "watchdog":
                v.watchdog.append(e)
            elif kind == "stop_sent":
                v.stops.append(e)
            elif kind == "progress" and isinstance(e.get("step"), (int, float)):
                v.points.append((e["time"], int(e["step"])))
                if isinstance(e.get("total"), (int, float)):
                    v.total = int(e["total"])
        for v in views.values():
            for a in v.attempts:
                if a.open:
                    a.end = t1
                    a.state = "lost" if result == "lost" else (a.state or "running")
            v.restart_count = max(len(v.restarts), sum(1 for a in v.attempts if a.attempt > 0))
    else:
        for name, t in by_task.items():
            v = views[name]
            v.restart_count = int(t.get("restarts") or 0)
            if t.get("started") is not None:
                open_ = t.get("ended") is None
                v.attempts.append(Attempt(t["started"], t.get("ended") if not open_ else t1,
                                          v.restart_count, t.get("pid"), t.get("host"),
                                          t.get("exit") or "", t.get("state") or "",
                                          open=open_))
            p = t.get("progress") or {}
            if isinstance(p.get("step"), (int, float)):
                v.points.append((p.get("at") or t.get("ended") or t1, int(p["step"])))
                if isinstance(p.get("total"), (int, float)):
                    v.total = int(p["total"])
    for v in views.values():
        v.points.sort()
        v.stalls = _stalls(v.points, v.attempts) if events else []
        v.rate = _rate(v.points)
        v.last_step = v.points[-1][1] if v.points else None
    rates = [v.rate for v in views.values() if v.rate]
    fastest = max(rates) if rates else None
    decision = next((e for e in reversed(events) if e["event"] == "decision"), None)
    chief = next((e.get("chief") for e in events if e["event"] == "run_started"), None)
    return {"record": record, "events": events, "result": result, "t0": t0, "t1": t1,
            "tasks": list(views.values()), "fastest": fastest, "decision": decision,
            "chief": chief, "run_dir": run_dir, "has_events": bool(events)}


def _exit_words(code: Any, sig: Any) -> str:
    if sig:
        return str(sig)
    return "" if code is None else f"exit {code}"


# ------------------------------------------------------------------ drawing
def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _rel(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    m, s = divmod(seconds, 60)
    if m < 60:
        return f"{m}m{s:02d}s" if s else f"{m}m"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _ticks(span: float, target: int = 8) -> float:
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
                 43200, 86400):
        if span / step <= target:
            return float(step)
    return 86400.0 * math.ceil(span / 86400.0 / target)


class _X:
    """Time -> x coordinate."""

    def __init__(self, t0: float, t1: float):
        self.t0, self.span = t0, max(t1 - t0, 1e-9)

    def __call__(self, t: float) -> float:
        return round(LEFT + (WIDTH - LEFT - RIGHT) * (t - self.t0) / self.span, 2)


def _axis(x: _X, t0: float, t1: float, top: float, bottom: float) -> List[str]:
    out = []
    step = _ticks(t1 - t0)
    k = 0
    while t0 + k * step <= t1 + 1e-9:
        xx = x(t0 + k * step)
        out.append(f'<line class="grid" x1="{xx}" y1="{top}" x2="{xx}" y2="{bottom}"/>')
        out.append(f'<text class="tick" x="{xx}" y="{bottom + 14}" text-anchor="middle">'
                   f'+{_rel(k * step)}</text>')
        k += 1
    return out


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)


def timeline_svg(m: Dict[str, Any]) -> str:
    x = _X(m["t0"], m["t1"])
    tasks = m["tasks"]
    height = 20 + ROW_H * len(tasks) + 30
    parts = [f'<svg id="timeline" class="chart" viewBox="0 0 {WIDTH} {height}" '
             f'width="{WIDTH}" height="{height}" role="img" aria-label="timeline of every task">']
    parts += _axis(x, m["t0"], m["t1"], 10, 20 + ROW_H * len(tasks))
    for i, v in enumerate(tasks):
        y = 20 + i * ROW_H
        mid = y + ROW_H / 2
        label = v.name + (" (chief)" if v.name == m["chief"] else "")
        parts.append(f'<text class="task-label" x="{LEFT - 8}" y="{mid + 4}" '
                     f'text-anchor="end">{_e(label)}</text>')
        parts.append(f'<line class="lane" x1="{LEFT}" y1="{mid}" x2="{WIDTH - RIGHT}" y2="{mid}"/>')
        for a in v.attempts:
            x0, x1 = x(a.start), x(a.end if a.end is not None else a.start)
            state = a.state or "running"
            tip = (f"{v.name} attempt {a.attempt}: pid {a.pid}, +{_rel(a.start - m['t0'])}"
                   f" to +{_rel((a.end or a.start) - m['t0'])}"
                   + (f", {a.exit}" if a.exit else "") + f", {state}")
            parts.append(f'<rect class="attempt att-{_e(_slug(state))}" x="{x0}" y="{mid - BAR_H / 2}" '
                         f'width="{max(x1 - x0, 1.5)}" height="{BAR_H}" rx="2">'
                         f'<title>{_e(tip)}</title></rect>')
            if a.exit:
                parts.append(f'<text class="exit-label" x="{x1 + 3}" y="{mid - BAR_H / 2 - 2}">'
                             f'{_e(a.exit)}</text>')
        if not m["has_events"] and v.restart_count and v.attempts:
            n = v.restart_count
            parts.append(f'<text class="restart-label" x="{x(v.attempts[0].start) + 3}" '
                         f'y="{mid + BAR_H / 2 + 10}">{n} restart{"s" if n > 1 else ""} before '
                         f'(time not recorded)</text>')
        for s0, s1 in v.stalls:
            parts.append(f'<rect class="stall" x="{x(s0)}" y="{mid - BAR_H / 2 - 3}" '
                         f'width="{max(x(s1) - x(s0), 1.5)}" height="{BAR_H + 6}">'
                         f'<title>{_e(f"{v.name}: no progress for {format_duration(s1 - s0)} (stall)")}'
                         f'</title></rect>')
        for n, r in enumerate(v.restarts, 1):
            rx = x(r["time"])
            attempt = r.get("attempt") or n
            nxt = next((a.start for a in v.attempts if a.start >= r["time"]), None)
            if nxt is not None and x(nxt) > rx:
                parts.append(f'<line class="backoff" x1="{rx}" y1="{mid}" x2="{x(nxt)}" y2="{mid}"/>')
            tip = (f"{v.name} restart {attempt}" + (f" after {_num(r.get('delay'))}s backoff"
                                                    if r.get("delay") is not None else "")
                   + (f": {r.get('reason')}" if r.get("reason") else ""))
            parts.append(f'<path class="restart-marker" id="restart-{_slug(v.name)}-{attempt}" '
                         f'd="M{rx} {mid - 10} L{rx + 7} {mid} L{rx} {mid + 10} L{rx - 7} {mid} Z">'
                         f'<title>{_e(tip)}</title></path>')
            parts.append(f'<text class="restart-label" x="{rx + 8}" y="{mid + BAR_H / 2 + 10}">'
                         f'restart {_e(attempt)}</text>')
        for w in v.watchdog:
            wx = x(w["time"])
            tip = f"watchdog: {v.name}: {w.get('reason')} -> {w.get('action')}"
            parts.append(f'<circle class="watchdog-marker" cx="{wx}" cy="{mid}" r="6">'
                         f'<title>{_e(tip)}</title></circle>')
        for s in v.stops:
            sx = x(s["time"])
            tip = f"{v.name}: sent {s.get('signal')}"
            parts.append(f'<line class="stop-marker" x1="{sx}" y1="{mid - 11}" x2="{sx}" '
                         f'y2="{mid + 11}"><title>{_e(tip)}</title></line>')
    d = m["decision"]
    if d is not None:
        dx = x(d["time"])
        parts.append(f'<line class="decision" x1="{dx}" y1="10" x2="{dx}" y2="{20 + ROW_H * len(tasks)}">'
                     f'<title>{_e(format_event(d))}</title></line>')
    parts.append("</svg>")
    return "\n".join(parts)


def _num(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _thin(points: List[Tuple[float, int]]) -> List[Tuple[float, int]]:
    if len(points) <= MAX_POINTS:
        return points
    k = math.ceil(len(points) / MAX_POINTS)
    return points[::k] + [points[-1]]


def steps_svg(m: Dict[str, Any]) -> str:
    drawn = [v for v in m["tasks"] if v.points]
    if not drawn:
        return '<p class="note">No task reported progress (see docs/LAUNCH.md, "Reporting progress").</p>'
    x = _X(m["t0"], m["t1"])
    h_plot, top = 260, 10
    totals = [v.total for v in drawn if v.total]
    ymax = max([v.last_step or 0 for v in drawn] + [max(p[1] for p in v.points) for v in drawn]
               + totals + [1])
    def y(step: float) -> float:
        return round(top + h_plot * (1 - step / ymax), 2)
    parts = [f'<svg id="steps" class="chart" viewBox="0 0 {WIDTH} {h_plot + 40}" width="{WIDTH}" '
             f'height="{h_plot + 40}" role="img" aria-label="global step over time per task">']
    parts += _axis(x, m["t0"], m["t1"], top, top + h_plot)
    for frac in (0, 0.5, 1):
        yy = y(ymax * frac)
        parts.append(f'<text class="tick" x="{LEFT - 8}" y="{yy + 4}" text-anchor="end">'
                     f'{int(ymax * frac)}</text>')
    if totals:
        ty = y(max(totals))
        parts.append(f'<line class="total" x1="{LEFT}" y1="{ty}" x2="{WIDTH - RIGHT}" y2="{ty}">'
                     f'<title>target step {max(totals)}</title></line>')
    for i, v in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{x(t)},{y(s)}" for t, s in _thin(v.points))
        parts.append(f'<polyline class="step-line" id="steps-{_slug(v.name)}" points="{pts}" '
                     f'stroke="{color}"><title>{_e(v.name)}</title></polyline>')
        t, s = v.points[-1]
        parts.append(f'<circle cx="{x(t)}" cy="{y(s)}" r="3" fill="{color}"/>')
    parts.append("</svg>")
    rows = []
    for i, v in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        slow = bool(v.rate and m["fastest"] and v.rate < STRAGGLER_RATIO * m["fastest"])
        rel = f"{100 * v.rate / m['fastest']:.0f}%" if v.rate and m["fastest"] else ""
        rows.append(f'<tr class="{"straggler" if slow else ""}"><td><span class="swatch" '
                    f'style="background:{color}"></span>{_e(v.name)}</td>'
                    f'<td>{_e(v.last_step)}' + (f" / {v.total}" if v.total else "") + "</td>"
                    f'<td>{"" if v.rate is None else f"{v.rate:.2f}"}</td><td>{rel}'
                    + (" &mdash; straggler" if slow else "") + "</td></tr>")
    legend = ('<table class="legend"><tr><th>task</th><th>last step</th><th>steps/s</th>'
              '<th>of fastest</th></tr>' + "".join(rows) + "</table>")
    return "\n".join(parts) + legend


def _when(t: Optional[float]) -> str:
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def events_table(m: Dict[str, Any]) -> str:
    if not m["has_events"]:
        return ('<p class="note">This run has no events.jsonl (it was recorded before tfcluster '
                'wrote event logs): the timeline shows what run.json has, each task\'s last start '
                'and end and its restart count.</p>')
    progress = sum(1 for e in m["events"] if e["event"] == "progress")
    rows = []
    for e in m["events"]:
        if e["event"] == "progress":
            continue
        clock = datetime.datetime.fromtimestamp(e["time"]).strftime("%H:%M:%S.%f")[:-3]
        rows.append(f'<tr class="ev-{_e(e["event"])}"><td>+{e["time"] - m["t0"]:.1f}s</td>'
                    f'<td>{clock}</td><td>{_e(e.get("task") or "")}</td><td>{_e(e["event"])}</td>'
                    f'<td>{_e(format_event(e))}</td></tr>')
    note = (f'<p class="note">{progress} progress reports are drawn in the chart above, not '
            f'listed.</p>' if progress else "")
    return (note + '<table class="events"><tr><th>time</th><th>clock</th><th>task</th>'
            '<th>event</th><th>what</th></tr>' + "".join(rows) + "</table>")


CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#212529;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.meta{color:#495057}.meta b{color:#212529}
.result{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600}
.result-succeeded{background:#2f9e44}.result-failed{background:#e03131}
.result-interrupted{background:#f08c00}.result-lost{background:#862e9c}.result-running{background:#1c7ed6}
.chart{max-width:100%;height:auto;display:block}
.grid{stroke:#e9ecef;stroke-width:1}.lane{stroke:#dee2e6;stroke-width:1}
.tick{font-size:11px;fill:#868e96}.task-label{font-size:13px;fill:#212529}
.attempt{stroke:none}.att-succeeded{fill:#2f9e44}.att-failed{fill:#e03131}
.att-stopped,.att-stopping{fill:#adb5bd}.att-running{fill:#1c7ed6}.att-lost{fill:#862e9c}
.att-restarting,.att-pending{fill:#ffa8a8}
.exit-label{font-size:11px;fill:#212529}
.stall{fill:#fcc419;fill-opacity:.55;stroke:#f08c00;stroke-dasharray:3 2}
.restart-marker{fill:#d9480f;stroke:#fff;stroke-width:1}
.restart-label{font-size:11px;fill:#d9480f;font-weight:600}
.backoff{stroke:#d9480f;stroke-width:2;stroke-dasharray:4 3}
.watchdog-marker{fill:#9c36b5;stroke:#fff}
.stop-marker{stroke:#343a40;stroke-width:2}
.decision{stroke:#212529;stroke-width:1.5;stroke-dasharray:6 3}
.total{stroke:#adb5bd;stroke-dasharray:5 4}
.step-line{fill:none;stroke-width:2}
table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 10px;border-bottom:1px solid #e9ecef;text-align:left;vertical-align:top}
th{font-weight:600;background:#f8f9fa}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
tr.straggler td{color:#c92a2a;font-weight:600}
.ev-task_exited td,.ev-watchdog td{color:#c92a2a}.ev-task_restarting td{color:#d9480f}
.ev-decision td,.ev-run_ended td{font-weight:600}
.note{color:#495057;font-style:italic}
.key span{margin-right:14px;white-space:nowrap}.key i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
"""


def render_html(m: Dict[str, Any]) -> str:
    r = m["record"]
    result = m["result"]
    dur = (r.get("ended") or m["t1"]) - m["t0"]
    meta = [f"<b>file</b> {_e(r.get('file') or '')}",
            f"<b>backend</b> {_e(r.get('backend') or '')}",
            f"<b>started</b> {_e(_when(r.get('started') or m['t0']))}",
            f"<b>{'ran' if result != 'running' else 'running for'}</b> {_e(format_duration(dur))}",
            f"<b>restarts</b> {_e(r.get('total_restarts', sum(v.restart_count for v in m['tasks'])))}"]
    if m["chief"]:
        meta.append(f"<b>chief</b> {_e(m['chief'])}")
    why = []
    d = m["decision"]
    if d is not None:
        why.append(f"<p><b>decision</b>: {_e(d.get('result'))} by rule {_e(d.get('rule'))}"
                   + (f": {_e(d.get('reason'))}" if d.get("reason") else "") + "</p>")
    if r.get("root_cause"):
        why.append(f"<p><b>root cause</b>: {_e(r['root_cause'])}</p>")
    if result == "lost":
        why.append("<p><b>lost</b>: the launcher died without closing the record; the run is "
                   f"drawn up to the last update of run.json ({_e(_when(m['t1']))}).</p>")
    exit_code = r.get("exit_code")
    key = ('<p class="key"><span><i style="background:#2f9e44"></i>succeeded</span>'
           '<span><i style="background:#e03131"></i>failed</span>'
           '<span><i style="background:#adb5bd"></i>stopped by tfcluster</span>'
           '<span><i style="background:#1c7ed6"></i>running</span>'
           '<span><i style="background:#d9480f"></i>restart (dashes: backoff)</span>'
           '<span><i style="background:#fcc419"></i>stall (no progress)</span>'
           '<span><i style="background:#9c36b5"></i>watchdog</span>'
           '<span><i style="background:#343a40"></i>stop signal</span></p>')
    task_table = ("<table class=\"tasks\"><tr>" + "".join(f"<th>{_e(h)}</th>" for h in HEADER)
                  + "</tr>" + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>"
                                      for row in task_rows(r, r.get("ended") or m["t1"]))
                  + "</table>")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tfcluster run {_e(r.get('run_id') or os.path.basename(m['run_dir']))}: {_e(result)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>run {_e(r.get('run_id') or '')} <span class="result result-{_e(result)}" id="result">{_e(result)}</span>
{'' if exit_code is None else f'<span class="meta">exit code {_e(exit_code)}</span>'}</h1>
<p class="meta">{' &middot; '.join(meta)}</p>
{''.join(why)}
<h2>Timeline</h2>
{key}
{timeline_svg(m)}
<h2>Global step per task</h2>
{steps_svg(m)}
<h2>Tasks</h2>
{task_table}
<h2>Events</h2>
{events_table(m)}
<p class="note">Written by tfcluster report from {_e(m['run_dir'])} at {_e(_when(time.time()))}.</p>
</body>
</html>
"""


def write_report(run_dir: str, output: Optional[str] = None) -> str:
    """Write the report of ``run_dir`` (to ``<run_dir>/report.html`` unless ``output``) and
    return its absolute path. The file is readable by its owner only, like the run folder."""
    page = render_html(build_model(run_dir))
    path = os.path.abspath(output or os.path.join(run_dir, REPORT_FILE))
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, path)
    except OSError as e:
        raise UserError(f"{path}: cannot be written ({e.strerror or e})")
    return path
