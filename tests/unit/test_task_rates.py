"""A task's steps/s is its own: the global step moves with every worker's steps, so
its rate is the run's. The live table, the piped progress lines and the report's "of fastest"
column use the steps a task reports it ran itself (``local_step``); a task that reports only
the global step is marked, never given the global rate as its own."""
from __future__ import annotations

import io
import re

import pytest

from helpers.runs import T0, make_run
from tfcluster.plan.progress import format_progress, parse_progress
from tfcluster.runs.eventlog import EventLog
from tfcluster.runs.report import build_model, render_html


def test_local_step_travels_in_the_report_line_and_is_no_metric():
    line = format_progress(120, 1000, local_step=40, loss=0.5)
    p = parse_progress(line)
    assert (p.step, p.total, p.local_step, p.metrics) == (120, 1000, 40, {"loss": 0.5})
    assert parse_progress('@tfcluster progress {"step": 5}').local_step is None
    for bad in ('"x"', "true", "-1", "1.5"):
        p = parse_progress('@tfcluster progress {"step": 5, "local_step": %s}' % bad)
        assert p.step == 5 and p.local_step is None and "local_step" not in p.metrics


def test_two_workers_on_one_global_step_get_their_own_rates(tmp_path):
    """Async workers share the global step: worker:1 ran 1 step/s of the 4 the run made; with
    only the global step both would show 4 steps/s, and neither would be a straggler."""
    d = make_run(tmp_path)
    log = EventLog(str(d))
    for t in ("worker:2", "worker:3"):
        log.emit("task_started", t, time=T0 + 0.1, pid=300, attempt=0, host="localhost")
    for s in range(2, 60):
        g = 4 * s                                          # the global step both report
        log.emit("progress", "worker:2", time=T0 + s, step=g, total=1000, local_step=3 * s)
        log.emit("progress", "worker:3", time=T0 + s + 0.5, step=g, total=1000, local_step=s)
    log.close()
    m = build_model(str(d))
    tasks = {v.name: v for v in m["tasks"]}
    assert tasks["worker:2"].rate == pytest.approx(3.0) and tasks["worker:3"].rate == pytest.approx(1.0)
    assert m["fastest"] == pytest.approx(10.0)              # worker:0's own 10 steps/s
    page = render_html(m)
    assert re.search(r'id="rate-worker-3">.*<td>1\.00</td><td>10% &mdash; straggler', page)


def test_a_task_that_reports_only_the_global_step_has_no_rate_of_its_own(tmp_path):
    d = make_run(tmp_path)
    log = EventLog(str(d))
    log.emit("task_started", "worker:2", time=T0 + 0.1, pid=300, attempt=0, host="localhost")
    for s in range(2, 60):                                 # 50 global steps/s: not its own
        log.emit("progress", "worker:2", time=T0 + s, step=50 * s, total=5000)
    log.close()
    m = build_model(str(d))
    w2 = {v.name: v for v in m["tasks"]}["worker:2"]
    assert w2.rate is None and w2.last_step == 50 * 59
    assert m["fastest"] == pytest.approx(10.0)              # not 50: the global rate is nobody's
    row = re.search(r'id="rate-worker-2">(.*?)</tr>', render_html(m)).group(1)
    assert "global step only: no rate of its own, not compared" in row and "%" not in row


def test_a_run_without_events_compares_no_rates(tmp_path):
    """run.json keeps each task's last global step only: no task gets a rate from it."""
    m = build_model(str(make_run(tmp_path, events=False)))
    assert all(v.rate is None for v in m["tasks"]) and m["fastest"] is None


def test_the_tf1_progress_reporter_sends_the_sessions_own_step_count():
    """runtime.training.ProgressReporter(session=TrainingSession): each report carries the
    steps this worker ran (TrainingSession.local_step), beside the global step."""
    from types import SimpleNamespace

    from tfcluster.runtime.training import ProgressReporter
    out = io.StringIO()
    sess = SimpleNamespace(local_step=7)
    report = ProgressReporter(total=100, every_secs=0, stream=out, session=sess)
    assert report(40, loss=0.5)
    sess.local_step = 9
    assert report(52, local_step=None)
    p1, p2 = [parse_progress(x) for x in out.getvalue().splitlines()]
    assert (p1.step, p1.local_step, p1.metrics) == (40, 7, {"loss": 0.5})
    assert (p2.step, p2.local_step) == (52, 9)
    # without a session, a report says only the global step
    out2 = io.StringIO()
    ProgressReporter(every_secs=0, stream=out2)(3)
    assert parse_progress(out2.getvalue()).local_step is None
