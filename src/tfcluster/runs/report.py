"""``tfcluster report``: one self-contained HTML page that shows what happened in a run.

The page is built from ``run.json`` and ``events.jsonl`` (docs/LAUNCH.md describes both) with
inline SVG and inline CSS only: no script, no style sheet, no font or image from anywhere else,
so it opens offline and can be mailed or attached to a ticket. It shows

- a timeline of every task: each attempt as a bar (coloured by how it ended -- a worker that
  left an elastic run is ``left``, not failed --, labelled with the exit code or signal),
  restarts (marker and backoff gap), watchdog actions, stop signals, and stalls (gaps between
  progress reports longer than :func:`tfcluster.runs.report_model.stall_threshold`);
- the global step each task reported over time (each line labelled at its end, the labels
  laid out apart: :func:`spread_labels`; flat where no progress was reported, across a stall
  or between two attempts: :func:`held`), with each task's own steps/s (from the
  ``local_step`` of its reports: the steps it ran itself; the global step's rate is every
  worker's together, so a task that reports only the global step has no rate of its own and is
  not compared) and its share of the fastest task's (a straggler's rate is flagged; a task
  that restarted, failed, left an elastic run or is the chief is not compared:
  :attr:`tfcluster.runs.report_model.TaskView.straggler_exempt`);
- for a failed run, the failed task's one-line cause, hint and log tail, as the console said
  them (:func:`tfcluster.runs.failure.read_failure`);
- the task table of run.json and the run's events.

The model (what happened, read from the run folder) is :mod:`tfcluster.runs.report_model`;
this module draws it. A run without ``events.jsonl`` (recorded before tfcluster wrote event
logs) still gets a page: one bar per task from its last start to its end, its restart count,
its last progress report.
"""
from __future__ import annotations

import bisect
import datetime
import html
import math
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from tfcluster.core.rules import format_duration
from tfcluster.errors import UserError
from tfcluster.runs.eventlog import format_event
from tfcluster.runs.report_model import (
    LEFT_WORDS,
    LINE_LIMIT,
    MAX_POINTS,
    MAX_ROWS,
    MAX_TASKS,
    STRAGGLER_RATIO,
    TEXT_LIMIT,
    _int,
    _number,
    _state,
    _text,
    build_model,
)
from tfcluster.runs.report_sizing import sizing_html
from tfcluster.runs.table import HEADER, task_rows
from tfcluster.terminal import printable

REPORT_FILE = "report.html"

WIDTH, LEFT, RIGHT = 1000, 120, 150   # RIGHT: room for the end labels
ROW_H, BAR_H = 30, 14

# Colours by meaning, from the Okabe-Ito palette (told apart with the common colour-vision
# deficiencies); planned stops are neutral grey. docs/LAUNCH.md has the legend.
COLOURS = {
    "succeeded": "#009E73",   # bluish green
    "failed": "#D55E00",      # vermillion
    "stopped": "#BBBBBB",     # neutral: stopped by tfcluster, as planned
    "running": "#0072B2",     # blue
    "left": "#A9B8CC",        # pale slate, dashed outline: elastic, the run went on without it
    "lost": "#000000",        # black: the launcher died, the end is unknown
    "restart": "#56B4E9",     # sky blue (diamond marker; dashes: backoff)
    "watchdog": "#CC79A7",    # reddish purple (circle marker)
    "stall": "#F0E442",       # yellow band
    "stop": "#555555",        # stop signal tick
    "interrupted": "#6C6C6C", # the run was interrupted (Ctrl-C, SIGTERM): a planned stop
    "unknown": "#999999",
}
# Lines of the step chart: 7 Okabe-Ito colours (yellow is too light on white) x 4 dash patterns,
# so 28 tasks get distinct lines; each line is also labelled with its task at its end.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000"]
DASHES = ["", "7 3", "2 3", "9 3 2 3"]


def line_style(i: int) -> Tuple[str, str]:
    """(colour, dash pattern) of the i-th line of the step chart."""
    return PALETTE[i % len(PALETTE)], DASHES[(i // len(PALETTE)) % len(DASHES)]


# Every value from a record goes through _e() where it is written: markup escaped, quotes
# included (attributes), and its length bounded. Numbers drawn as coordinates are floats
# computed here. The page has a Content-Security-Policy that forbids every script.
CSP = ("default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


def _e(x: Any, limit: int = TEXT_LIMIT) -> str:
    return html.escape(_text(x, limit), quote=True)


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
    """A name as part of an id or class: ASCII letters, digits and _ only, others as -."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "-" for c in _text(name))


#: What the label after an attempt's bar says, per state.
STATE_WORDS = {"succeeded": "succeeded", "failed": "failed", "stopped": "stopped (planned)",
               "stopping": "stopping", "running": "running", "lost": "lost",
               "restarting": "restarting", "pending": "pending", "left": LEFT_WORDS,
               "unknown": "state unknown"}


def _text_width(words: str) -> float:
    """About how wide an 11px exit label is (the chart's font; digits and letters alike)."""
    return 6.2 * len(words)


def _watchdog_in(marks, a) -> bool:
    """Whether a watchdog acted on the task during attempt ``a`` (its kill ended it)."""
    end = a.end if a.end is not None else float("inf")
    return any(isinstance(w.get("time"), (int, float)) and a.start <= w["time"] <= end + 1.0
               for w in marks)


#: What a decision's rule means, for people (events name the rule only).
RULE_WORDS = {"chief": "the chief's exit decides (success: chief)",
              "all-workers": "every worker's exit decides (success: all-workers)",
              "restart": "a task failed and its restart rule or the run's budget allowed no restart",
              "signal": "the launcher got a signal"}


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
        slug = _slug(v.name)
        label = _text(v.name) + (" (chief)" if v.name == m["chief"] else "")
        parts.append(f'<text class="task-label" x="{LEFT - 8}" y="{mid + 4}" '
                     f'text-anchor="end">{_e(label)}</text>')
        parts.append(f'<line class="lane" x1="{LEFT}" y1="{mid}" x2="{WIDTH - RIGHT}" y2="{mid}"/>')
        for k, a in enumerate(v.attempts):
            x0, x1 = x(a.start), x(a.end if a.end is not None else a.start)
            state = a.state or "running"
            said = STATE_WORDS.get(state, "")
            if state == "stopped" and _watchdog_in(v.watchdog, a):
                said = "stopped by the watchdog"       # not a planned stop
            tip = (f"{_text(v.name)} attempt {'?' if a.attempt is None else a.attempt}: pid {a.pid}, "
                   f"+{_rel(a.start - m['t0'])} to +{_rel((a.end or a.start) - m['t0'])}"
                   + (f", {a.exit}" if a.exit else "") + f", {said or state}")
            parts.append(f'<rect class="attempt att-{_e(state)}" id="attempt-{slug}-{k}" '
                         f'data-state="{_e(state)}" x="{x0}" y="{mid - BAR_H / 2}" '
                         f'width="{max(x1 - x0, 1.5)}" height="{BAR_H}" rx="2">'
                         f'<title>{_e(tip)}</title></rect>')
            words = " ".join(w for w in (a.exit, said) if w and
                             not (state == "running" and not a.exit))
            nxt = v.attempts[k + 1].start if k + 1 < len(v.attempts) else None
            room = (x(nxt) - x1 - 6) if nxt is not None else None
            if words and not a.open and (room is None or room >= _text_width(words)):
                # (a label that would run into the next attempt is left to the bar's tooltip;
                # one that would run off the chart ends at its edge)
                lx, anchor = x1 + 3, ""
                if lx + _text_width(words) > WIDTH - 2:
                    lx, anchor = WIDTH - 2, ' text-anchor="end"'
                parts.append(f'<text class="exit-label exit-{_e(state)}" x="{lx}"{anchor} '
                             f'y="{mid - BAR_H / 2 - 2}">{_e(words)}</text>')
            elif state == "lost":
                parts.append(f'<text class="exit-label exit-lost" x="{min(x1 + 3, WIDTH - RIGHT + 2)}" '
                             f'y="{mid - BAR_H / 2 - 2}">lost</text>')
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
            attempt = _int(r.get("attempt")) or n
            nxt = next((a.start for a in v.attempts if a.start >= r["time"]), None)
            if nxt is not None and x(nxt) > rx:
                parts.append(f'<line class="backoff" x1="{rx}" y1="{mid}" x2="{x(nxt)}" y2="{mid}"/>')
            delay = _number(r.get("delay"))
            tip = (f"{_text(v.name)} restart {attempt}" + (f" after {_num(delay)}s backoff"
                                                           if delay is not None else "")
                   + (f": {_text(r.get('reason'))}" if r.get("reason") else ""))
            parts.append(f'<path class="restart-marker" id="restart-{slug}-{n}" '
                         f'd="M{rx} {mid - 10} L{rx + 7} {mid} L{rx} {mid + 10} L{rx - 7} {mid} Z">'
                         f'<title>{_e(tip)}</title></path>')
            parts.append(f'<text class="restart-label" x="{rx + 8}" y="{mid + BAR_H / 2 + 10}">'
                         f'restart {attempt}</text>')
        for n, w in enumerate(v.watchdog, 1):
            wx = x(w["time"])
            tip = f"watchdog: {_text(v.name)}: {_text(w.get('reason'))} -> {_text(w.get('action'))}"
            parts.append(f'<circle class="watchdog-marker" id="watchdog-{slug}-{n}" cx="{wx}" '
                         f'cy="{mid}" r="6"><title>{_e(tip)}</title></circle>')
            parts.append(f'<text class="watchdog-label" x="{wx + 8}" y="{mid + BAR_H / 2 + 10}">'
                         f'watchdog: {_e(w.get("action"))}</text>')
        for s in v.stops:
            sx = x(s["time"])
            tip = f"{_text(v.name)}: sent {_text(s.get('signal'))}"
            parts.append(f'<line class="stop-marker" x1="{sx}" y1="{mid - 11}" x2="{sx}" '
                         f'y2="{mid + 11}"><title>{_e(tip)}</title></line>')
        if v.dropped:
            parts.append(f'<text class="note-label" x="{LEFT}" y="{mid + BAR_H / 2 + 10}">'
                         f'{v.dropped} more marks not drawn</text>')
    d = m["decision"]
    if d is not None:
        dx = x(d["time"])
        parts.append(f'<line class="decision" x1="{dx}" y1="10" x2="{dx}" y2="{20 + ROW_H * len(tasks)}">'
                     f'<title>{_e(_describe(d))}</title></line>')
    parts.append("</svg>")
    return "\n".join(parts)


def _num(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _thin(points: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    k = math.ceil(len(points) / MAX_POINTS)
    return points[::k] + [points[-1]]


def _step_text(x: Optional[float]) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


def held(points: List[Tuple[float, float]],
         holds: List[Tuple[float, float, float]]) -> List[Tuple[float, float]]:
    """The points of a step line with each hold (from, to, step) drawn flat: the step at
    ``from`` until ``to``, where the line rises (or falls) to the next report -- a gap with no
    progress is no slope."""
    if not holds:
        return points
    times = [t for t, _ in points]
    marked = [(t, 1, s) for t, s in points]
    marked += [(t, 0, s) for t0, t1, s in holds for t in (t0, t1)    # before the report at t1
               if bisect.bisect_right(times, t0) == bisect.bisect_left(times, t1)]   # none between
    out: List[Tuple[float, float]] = []
    for t, _, s in sorted(marked):
        if not out or out[-1] != (t, s):      # (a hold starts at a report drawn already)
            out.append((t, s))
    return out


LABEL_GAP = 14.0     # px between the baselines of two end labels (11px text is about 12px tall)


def spread_labels(ys: List[float], gap: float = LABEL_GAP, low: float = 0.0,
                  high: float = float("inf")) -> List[float]:
    """Baselines for labels that want to sit at ``ys``: as near as they can, at least ``gap``
    apart (in the order of ``ys``), none below ``high`` when they fit between ``low`` and
    ``high``, none above ``low`` ever (what does not fit goes below ``high``: the chart grows).
    Two lines that end at the same point get labels one above the other, never one on the
    other."""
    order = sorted(range(len(ys)), key=lambda i: (ys[i], i))
    out = list(ys)
    prev = None
    for i in order:                      # down: each at least gap below the one above it
        out[i] = max(out[i], low) if prev is None else max(out[i], prev + gap)
        prev = out[i]
    nxt = None
    for i in reversed(order):            # up from the bottom, where they went past it
        out[i] = min(out[i], high) if nxt is None else min(out[i], nxt - gap)
        nxt = out[i]
    if order and out[order[0]] < low:    # too many to fit: from low down, past high
        shift = low - out[order[0]]
        for i in order:
            out[i] += shift
    return out


def steps_svg(m: Dict[str, Any]) -> str:
    drawn = [v for v in m["tasks"] if v.points]
    if not drawn:
        return ('<p class="note">No task reported progress (see docs/LAUNCH.md, "Reporting '
                'progress"): no progress event in events.jsonl and no last report in run.json.</p>')
    x = _X(m["t0"], m["t1"])
    h_plot, top = 260, 10
    totals = [v.total for v in drawn if v.total]
    ymin = min([0.0] + [min(p[1] for p in v.points) for v in drawn])
    ymax = max([v.last_step or 0 for v in drawn] + [max(p[1] for p in v.points) for v in drawn]
               + totals + [ymin + 1])
    span = (ymax - ymin) or 1.0

    def y(step: float) -> float:
        return round(top + h_plot * (1 - (step - ymin) / span), 2)
    labelled = len(drawn) <= 28          # a direct label at the end of each line
    ends = [v.points[-1] for v in drawn]
    wanted = [y(s) + 4 for _, s in ends]
    placed = spread_labels(wanted, LABEL_GAP, top + 4, top + h_plot + 4) if labelled else wanted
    height = max(h_plot + 40, math.ceil(max(placed, default=0) + 30))
    parts = [f'<svg id="steps" class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
             f'height="{height}" role="img" aria-label="global step over time per task">']
    parts += _axis(x, m["t0"], m["t1"], top, top + h_plot)
    for frac in (0, 0.5, 1):
        yy = y(ymin + span * frac)
        parts.append(f'<text class="tick" x="{LEFT - 8}" y="{yy + 4}" text-anchor="end">'
                     f'{_step_text(round(ymin + span * frac))}</text>')
    if totals:
        ty = y(max(totals))
        parts.append(f'<line class="total" x1="{LEFT}" y1="{ty}" x2="{WIDTH - RIGHT}" y2="{ty}">'
                     f'<title>target step {_e(_step_text(max(totals)))}</title></line>')
    for i, v in enumerate(drawn):
        color, dash = line_style(i)
        pts = " ".join(f"{x(t)},{y(s)}" for t, s in held(_thin(v.points), v.holds))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<polyline class="step-line" id="steps-{_slug(v.name)}" points="{pts}" '
                     f'stroke="{color}"{dash_attr}><title>{_e(v.name)}</title></polyline>')
        t, s = v.points[-1]
        parts.append(f'<circle cx="{x(t)}" cy="{y(s)}" r="3" fill="{color}"/>')
        if labelled:        # its label, moved off another's: a leader from the line's end
            ly = round(placed[i], 2)
            if abs(ly - wanted[i]) > 0.5:
                parts.append(f'<line class="label-leader" x1="{x(t)}" y1="{y(s)}" x2="{x(t) + 5}" '
                             f'y2="{round(ly - 4, 2)}" stroke="{color}"/>')
            parts.append(f'<text class="line-label" id="label-{_slug(v.name)}" x="{x(t) + 6}" '
                         f'y="{ly}" fill="{color}">{_e(v.name)}</text>')
    parts.append("</svg>")
    rows = []
    for i, v in enumerate(drawn):
        color, dash = line_style(i)
        exempt = v.straggler_exempt
        slow = bool(not exempt and v.rate and m["fastest"]
                    and v.rate < STRAGGLER_RATIO * m["fastest"])
        rel = f"{100 * v.rate / m['fastest']:.0f}%" if v.rate and m["fastest"] else ""
        note = " &mdash; straggler" if slow else (f"{' &mdash; ' if rel else ''}{_e(exempt)}, not compared"
                                                   if exempt else "")
        if v.rate is None and not v.own:
            note = "global step only: no rate of its own, not compared"
        sample = (f'<svg class="sample" width="28" height="10" viewBox="0 0 28 10"><line x1="0" y1="5" '
                  f'x2="28" y2="5" stroke="{color}" stroke-width="2"'
                  + (f' stroke-dasharray="{dash}"' if dash else "") + "/></svg>")
        cls = "straggler" if slow else ("exempt" if exempt else "")
        rows.append(f'<tr class="{cls}" id="rate-{_slug(v.name)}"><td>{sample}{_e(v.name)}</td>'
                    f'<td>{_e(_step_text(v.last_step))}'
                    + (f" / {_e(_step_text(v.total))}" if v.total else "") + "</td>"
                    f'<td>{"" if v.rate is None else f"{v.rate:.2f}"}</td><td>{rel}{note}</td></tr>')
    legend = ('<table class="legend"><tr><th>task</th><th>last step</th><th>steps/s</th>'
              '<th>of fastest</th></tr>' + "".join(rows) + "</table>")
    return "\n".join(parts) + legend


def _when(t: Optional[float]) -> str:
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _describe(e: Dict[str, Any]) -> str:
    """format_event, or for an event whose values have unexpected types, its keys as text."""
    try:
        return format_event(e)
    except (TypeError, ValueError, AttributeError):
        rest = ", ".join(f"{_text(k)}={_text(v)}" for k, v in e.items() if k not in ("time", "event", "task"))
        return f"{_text(e.get('event'))} {_text(e.get('task') or 'run')}: {rest}"


def _row_class(e: Dict[str, Any], left: bool = False) -> str:
    """The row's classes; ``left``: the exit of a worker that then left an elastic run (its
    process failed, the run did not: marked as the worker's leaving, its words kept)."""
    kind = e.get("event")
    cls = "ev-" + _slug(kind)
    if kind == "task_exited":
        cls += " ev-state-" + ("left" if left else _state(e.get("state")) or "unknown")
    return cls


def _exits_before_leaving(events: List[Dict[str, Any]]) -> set:
    """The rows (indexes) of the exits that a ``run_shrunk`` of the same task follows."""
    last: Dict[Any, int] = {}
    out = set()
    for i, e in enumerate(events):
        if e.get("event") == "task_exited":
            last[e.get("task")] = i
        elif e.get("event") == "run_shrunk" and e.get("task") in last:
            out.add(last.pop(e.get("task")))
    return out


def events_table(m: Dict[str, Any]) -> str:
    if not m["has_events"]:
        return ('<p class="note">This run has no events.jsonl (it was recorded before tfcluster '
                'wrote event logs): the timeline shows what run.json has, each task\'s last start '
                'and end and its restart count.</p>')
    progress = m["progress_count"]
    rows = []
    half = MAX_ROWS - MAX_ROWS // 2
    left = _exits_before_leaving(m["events"])
    for i, e in enumerate(m["events"]):
        if i == half and m["rows_left_out"]:
            rows.append(f'<tr class="gap"><td colspan="5">&hellip; {m["rows_left_out"]} more '
                        f'events not listed &hellip;</td></tr>')
        clock = datetime.datetime.fromtimestamp(e["time"]).strftime("%H:%M:%S.%f")[:-3]
        rows.append(f'<tr class="{_row_class(e, i in left)}"><td>+{e["time"] - m["t0"]:.1f}s</td>'
                    f'<td>{clock}</td><td>{_e(e.get("task") or "")}</td><td>{_e(e["event"])}</td>'
                    f'<td>{_e(_describe(e))}</td></tr>')
    note = (f'<p class="note">{progress} progress reports are drawn in the chart above, not '
            f'listed.</p>' if progress else "")
    return (note + '<table class="events"><tr><th>time</th><th>clock</th><th>task</th>'
            '<th>event</th><th>what</th></tr>' + "".join(rows) + "</table>")


C = COLOURS
CSS = f"""
body{{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#212529;background:#fff}}
h1{{font-size:20px;margin:0 0 4px}}h2{{font-size:16px;margin:28px 0 8px}}
.meta{{color:#495057}}.meta b{{color:#212529}}
.result{{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600}}
.result-succeeded{{background:{C['succeeded']}}}.result-failed{{background:{C['failed']}}}
.result-interrupted{{background:{C['interrupted']}}}.result-lost{{background:{C['lost']}}}
.result-running{{background:{C['running']}}}.result-unknown{{background:{C['unknown']}}}
.chart{{max-width:100%;height:auto;display:block}}
.grid{{stroke:#e9ecef;stroke-width:1}}.lane{{stroke:#dee2e6;stroke-width:1}}
.tick{{font-size:11px;fill:#868e96}}.task-label{{font-size:13px;fill:#212529}}
.attempt{{stroke:none}}.att-succeeded{{fill:{C['succeeded']}}}.att-failed{{fill:{C['failed']}}}
.att-stopped,.att-stopping{{fill:{C['stopped']}}}.att-running{{fill:{C['running']}}}
.att-lost{{fill:{C['lost']}}}
.att-left{{fill:{C['left']};stroke:#3F5573;stroke-width:1;stroke-dasharray:3 2}}
.att-restarting,.att-pending,.att-unknown{{fill:{C['unknown']}}}
.exit-label{{font-size:11px;fill:#212529}}.exit-failed{{fill:#A04000;font-weight:600}}
.exit-succeeded{{fill:#006B4F}}.exit-left{{fill:#3F5573}}.exit-lost{{fill:#000;font-weight:600}}
.stall{{fill:{C['stall']};fill-opacity:.6;stroke:#8a7f00;stroke-dasharray:3 2}}
.restart-marker{{fill:{C['restart']};stroke:#000;stroke-width:1}}
.restart-label{{font-size:11px;fill:#1f6f99;font-weight:600}}
.backoff{{stroke:{C['restart']};stroke-width:2.5;stroke-dasharray:4 3}}
.watchdog-marker{{fill:{C['watchdog']};stroke:#000;stroke-width:1}}
.watchdog-label{{font-size:11px;fill:#8f3f6f;font-weight:600}}
.stop-marker{{stroke:{C['stop']};stroke-width:2}}
.decision{{stroke:#212529;stroke-width:1.5;stroke-dasharray:6 3}}
.total{{stroke:#adb5bd;stroke-dasharray:5 4}}
.step-line{{fill:none;stroke-width:2}}.line-label{{font-size:11px;font-weight:600}}
.label-leader{{stroke-width:1}}
.note-label{{font-size:11px;fill:#495057;font-style:italic}}
table{{border-collapse:collapse;margin:6px 0}}
td,th{{padding:3px 10px;border-bottom:1px solid #e9ecef;text-align:left;vertical-align:top}}
th{{font-weight:600;background:#f8f9fa}}
.sample{{margin-right:6px;vertical-align:middle}}
tr.straggler td{{color:{C['failed']};font-weight:600}}tr.exempt td:last-child{{color:#495057;font-style:italic}}
.events td:first-child{{border-left:4px solid transparent}}
.ev-state-succeeded td:first-child{{border-left-color:{C['succeeded']}}}
.ev-state-failed td:first-child{{border-left-color:{C['failed']}}}.ev-state-failed td{{color:#A04000}}
.ev-state-stopped td:first-child,.ev-stop_sent td:first-child{{border-left-color:{C['stopped']}}}
.ev-state-lost td:first-child{{border-left-color:{C['lost']}}}
.ev-state-left td:first-child{{border-left-color:{C['left']}}}.ev-state-left td{{color:#3F5573}}
.ev-watchdog td:first-child{{border-left-color:{C['watchdog']}}}.ev-watchdog td{{color:#8f3f6f}}
.ev-task_restarting td:first-child{{border-left-color:{C['restart']}}}
.ev-decision td,.ev-run_ended td{{font-weight:600}}
.note{{color:#495057;font-style:italic}}
.hint{{border-left:4px solid {C['failed']};padding-left:8px}}
pre.tail{{background:#f8f9fa;padding:8px;white-space:pre-wrap;font-size:12px;margin:4px 0}}
.key span{{margin-right:14px;white-space:nowrap}}
.key i{{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}}
.key .k-restart{{transform:rotate(45deg);width:8px;height:8px;border:1px solid #000}}
.key .k-watchdog{{border-radius:50%;border:1px solid #000}}
"""

#: The legend of the timeline: (class, colour, words). Checked by tests/integration/test_report_browser.py.
LEGEND = [
    ("k-succeeded", COLOURS["succeeded"], "succeeded (exit 0)"),
    ("k-failed", COLOURS["failed"], "failed"),
    ("k-stopped", COLOURS["stopped"], "stopped by tfcluster (planned)"),
    ("k-running", COLOURS["running"], "running"),
    ("k-lost", COLOURS["lost"], "lost (launcher died; end unknown)"),
    ("k-left", COLOURS["left"], f"{LEFT_WORDS} (elastic: the run went on without it)"),
    ("k-restart", COLOURS["restart"], "restart (dashes: backoff)"),
    ("k-watchdog", COLOURS["watchdog"], "watchdog"),
    ("k-stall", COLOURS["stall"], "stall (no progress)"),
    ("k-stop", COLOURS["stop"], "stop signal"),
]


def failure_html(m: Dict[str, Any]) -> str:
    """The failed task's story as the console told it (tfcluster.runs.failure): its one-line
    cause (where the record's root cause does not say it already), the hint naming the fix and
    the last lines of its log."""
    f, task = m.get("failure"), m.get("failed_task")
    if f is None:
        return ""
    out = []
    if f.cause and f.cause not in (m["record"].get("root_cause") or ""):
        out.append(f'<p id="failure-cause"><b>{_e(task)} failed</b>: {_e(f.cause, LINE_LIMIT)}</p>')
    if f.hint:
        words = f.hint[len("hint: "):] if f.hint.startswith("hint: ") else f.hint
        out.append(f'<p class="hint" id="failure-hint"><b>hint</b>: {_e(words, LINE_LIMIT)}</p>')
    if f.tail:
        out.append(f'<p class="tail-head">last lines of {_e(task)} (the whole log: tfcluster logs '
                   f'{_e(m["record"].get("run_id") or m["run_dir"])} {_e(task)}):</p>'
                   f'<pre class="tail" id="failure-tail">'
                   + "\n".join(_e(line, LINE_LIMIT) for line in f.tail) + "</pre>")
    return "".join(out)


def render_html(m: Dict[str, Any]) -> str:
    r = m["record"]
    result = m["result"]
    dur = (r.get("ended") or m["t1"]) - m["t0"]
    restarts = r.get("total_restarts")
    if restarts is None:
        restarts = sum(v.restart_count for v in m["tasks"])
    meta = [f"<b>file</b> {_e(r.get('file') or '')}",
            f"<b>backend</b> {_e(r.get('backend') or '')}",
            f"<b>started</b> {_e(_when(r.get('started') or m['t0']))}",
            f"<b>{'ran' if result != 'running' else 'running for'}</b> {_e(format_duration(dur))}",
            f"<b>restarts</b> {_e(restarts)}"]
    if m["chief"]:
        meta.append(f"<b>chief</b> {_e(m['chief'])}")
    why = []
    d = m["decision"]
    if d is not None:
        rule = _text(d.get("rule"))
        why.append(f"<p><b>decision</b>: {_e(d.get('result'))}"
                   + (f": {_e(d.get('reason'))}" if d.get("reason") else "")
                   + f" ({_e(RULE_WORDS.get(rule, 'rule ' + rule))})</p>")
    if r.get("root_cause"):
        why.append(f"<p><b>root cause</b>: {_e(r['root_cause'])}</p>")
    why.append(failure_html(m))
    if result == "lost":
        why.append("<p><b>lost</b>: the launcher died without closing the record; the run is "
                   f"drawn up to the last update of run.json ({_e(_when(m['t1']))}).</p>")
    if m.get("tasks_left_out"):
        why.append(f'<p class="note">{m["tasks_left_out"]} events of tasks beyond the first '
                   f'{MAX_TASKS} are not drawn.</p>')
    exit_code = r.get("exit_code")
    key = ('<p class="key">' + "".join(f'<span class="{cls}-key"><i class="{cls}" '
                                       f'style="background:{colour}"></i>{_e(words)}</span>'
                                       for cls, colour, words in LEGEND) + "</p>")
    task_table = ("<table class=\"tasks\"><tr>" + "".join(f"<th>{_e(h)}</th>" for h in HEADER)
                  + "</tr>" + "".join(
                      f'<tr class="task-state-{_e(_state(row[3]) or "unknown")}">'
                      + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>"
                      for row in task_rows(r, r.get("ended") or m["t1"])[:MAX_TASKS])
                  + "</table>")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tfcluster run {_e(r.get('run_id') or os.path.basename(m['run_dir']))}: {_e(result)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>run {_e(r.get('run_id') or '')} <span class="result result-{_e(_slug(result))}" id="result">{_e(result)}</span>
{'' if exit_code is None else f'<span class="meta">exit code {_e(exit_code)}</span>'}</h1>
<p class="meta">{' &middot; '.join(meta)}</p>
{''.join(why)}
<h2>Timeline</h2>
{key}
{timeline_svg(m)}
<h2>Global step per task</h2>
{steps_svg(m)}
{sizing_html(r, m["t0"])}
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
    return its absolute path. The file is readable by its owner only, like the run folder.

    Written as run files are (:func:`tfcluster.safe_files.write_new_at`): a temporary file made with
    ``O_EXCL | O_NOFOLLOW`` in the folder opened without following a link, renamed over the
    report (a link planted at either name is never written through, only replaced); removed
    when the write fails (a full disk). Into a run folder only when it is the caller's: a run
    folder another user made is theirs to fill with links."""
    from tfcluster import safe_files
    page = render_html(build_model(run_dir)).encode("utf-8")
    path = os.path.abspath(output or os.path.join(run_dir, REPORT_FILE))
    try:
        if output:
            safe_files.write_file(path, page)
        else:
            fd = safe_files.open_run_dir(run_dir, own=False)
            try:
                safe_files.check_own(run_dir, os.fstat(fd), "the report is not written into another "
                                "user's run folder; give --output FILE")
                safe_files.write_new_at(fd, REPORT_FILE, page)
            finally:
                os.close(fd)
    except OSError as e:
        raise UserError(f"{_e_path(path)}: cannot be written ({e.strerror or e})")
    return path


def _e_path(path: str) -> str:
    return printable(path)
