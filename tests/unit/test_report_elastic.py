"""The report of an elastic run draws what happened (issue 48, item 7): a worker that left the
run is ``left`` -- its own colour and words, not a failure and not orange --, its speed cell
does not call it failed, and a worker stopped (SIGSTOP) for 22 s is flat across its gap, not a
slope. From a run folder in the documented formats (tests/helpers/runs.py: elastic_run)."""
from __future__ import annotations

import re

import pytest

from helpers.runs import T0, elastic_run
from tfcluster.runs.report import COLOURS, build_model, render_html


def tasks(m):
    return {v.name: v for v in m["tasks"]}


@pytest.mark.parametrize("recorded", ["left", "failed"])   # failed: run.json of older launchers
def test_a_worker_that_left_is_drawn_as_left_not_failed(tmp_path, recorded):
    m = build_model(str(elastic_run(tmp_path, left_state=recorded)))
    w2 = tasks(m)["worker:2"]
    assert [a.state for a in w2.attempts] == ["left"]
    assert w2.attempts[0].end == pytest.approx(T0 + 20.5)
    page = render_html(m)
    bar = re.search(r'<rect class="attempt att-(\w+)" id="attempt-worker-2-0" data-state="(\w+)"', page)
    assert bar.groups() == ("left", "left"), bar.group(0)
    assert COLOURS["left"] != COLOURS["failed"]
    fill = re.search(r"\.att-left\{fill:(#[0-9A-Fa-f]{6})", page).group(1)
    assert fill.upper() not in (COLOURS["failed"].upper(), "#E69F00"), fill   # not orange
    label = re.search(r'<text class="exit-label exit-left"[^>]*>([^<]*)</text>', page).group(1)
    assert label == "SIGKILL left the run", label
    assert 'class="exit-label exit-failed"' not in page
    assert re.search(r'<span class="k-left-key"><i class="k-left" style="background:#[0-9A-Fa-f]{6}">'
                     r'</i>left the run', page)
    # the run succeeded: nothing on the page calls worker:2 a failure but its process's exit,
    # whose row in the event log is marked as its leaving (its words kept: what was logged)
    assert 'id="result">succeeded<' in page
    exit_row = re.search(r'<tr class="([\w -]+)">(?:(?!</tr>).)*worker:2 exited \(SIGKILL\), failed', page)
    assert exit_row.group(1) == "ev-task_exited ev-state-left", exit_row.group(0)
    assert 'class="ev-task_exited ev-state-failed"' not in page
    # without events.jsonl, from run.json alone (its workers.left names worker:2)
    d = elastic_run(tmp_path / "no-events", left_state=recorded)
    (d / "events.jsonl").unlink()
    m = build_model(str(d))
    assert not m["has_events"] and [a.state for a in tasks(m)["worker:2"].attempts] == ["left"]
    assert re.search(r'id="attempt-worker-2-0" data-state="left"', render_html(m))


def test_the_speed_of_a_worker_that_left_is_not_called_failed(tmp_path):
    m = build_model(str(elastic_run(tmp_path)))
    assert tasks(m)["worker:2"].straggler_exempt == "left the run"
    row = re.search(r'<tr class="(\w*)" id="rate-worker-2">(.*?)</tr>', render_html(m))
    assert row.group(1) == "exempt" and "failed" not in row.group(2), row.group(0)
    assert "54% &mdash; left the run, not compared" in row.group(2), row.group(0)


def polyline(page, name):
    pts = re.search(rf'<polyline class="step-line" id="steps-{name}" points="([^"]+)"', page).group(1)
    return [tuple(float(c) for c in p.split(",")) for p in pts.split()]


def test_a_worker_stopped_for_22s_is_flat_across_its_gap(tmp_path):
    """worker:1 reported step 600 at +30 s, then nothing until +52 s (SIGSTOP), then 1040: the
    line holds 600 until +52 s and rises there, as a step -- no slope across the gap."""
    m = build_model(str(elastic_run(tmp_path)))
    w1 = tasks(m)["worker:1"]
    assert w1.stalls == [(pytest.approx(T0 + 30.01), pytest.approx(T0 + 52.01))]
    pts = polyline(render_html(m), "worker-1")
    xs = [x for x, _ in pts]
    assert xs == sorted(xs)
    gap = [(x, y) for x, y in pts if x_at(m, T0 + 30.01) - 0.01 <= x <= x_at(m, T0 + 52.01) + 0.01]
    # the line enters the gap at step 600's height and stays there until the report after it
    assert len({y for x, y in gap[:-1]}) == 1, gap
    assert gap[-2][0] == pytest.approx(gap[-1][0]) and gap[-1][1] < gap[-2][1], gap   # up at +52 s


def x_at(m, t):
    from tfcluster.runs.report import _X
    return _X(m["t0"], m["t1"])(t)


def test_a_task_is_flat_while_it_is_away_between_two_attempts(tmp_path):
    """make_run's worker:1 reported step 95 at +19 s, was killed at +20 s, started again at
    +22 s and reported 220 at +24 s: no progress was reported from +19 s to +24 s, so none is
    drawn."""
    from helpers.runs import make_run
    m = build_model(str(make_run(tmp_path)))
    pts = polyline(render_html(m), "worker-1")
    at = [(x, y) for x, y in pts if x_at(m, T0 + 19) - 0.01 <= x <= x_at(m, T0 + 24) + 0.01]
    assert [x for x, _ in at] == [x_at(m, T0 + 19), x_at(m, T0 + 24), x_at(m, T0 + 24)], at
    assert at[0][1] == at[1][1] > at[2][1], at           # held at 95, then up to 220


def test_the_flat_stretches_of_a_line_are_bounded_the_longest_kept():
    from tfcluster.runs.report_model import MAX_HOLDS, Attempt, _holds
    attempts = [Attempt(10.0 * k, first=(10.0 * k + 1, k), last=(10.0 * k + 2 + k % 3, k))
                for k in range(3 * MAX_HOLDS)]
    holds = _holds(attempts)
    assert len(holds) == MAX_HOLDS and holds == sorted(holds)
    assert all(t1 - t0 == 9.0 for t0, t1, _ in holds)       # the gaps of 9 s, not of 8 or 7


def test_the_event_log_of_a_run_recorded_with_an_empty_node_says_no_node(tmp_path):
    """Launchers before this one wrote ``"node": ""`` for a worker that left here: the report's
    event log reads it without ``node=``, as launcher.log now does."""
    d = elastic_run(tmp_path)
    lines = (d / "events.jsonl").read_text().replace('"event": "run_shrunk", "task": "worker:2"',
                                                     '"event": "run_shrunk", "task": "worker:2", "node": ""')
    assert '"node": ""' in lines
    (d / "events.jsonl").write_text(lines)
    page = render_html(build_model(str(d)))
    row = re.search(r'<tr class="ev-run_shrunk">(.*?)</tr>', page).group(1)
    assert "node" not in row and ("worker:2 left the run: not restarted: restart policy is never; "
                                  "2 workers in the run, min 2") in row, row
