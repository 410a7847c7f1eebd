"""The report of an elastic run draws what happened (issue 48, item 7): a worker that left the
run is ``left`` -- its own colour and words, not a failure and not orange --, its speed cell
does not call it failed. From a run folder in the documented formats (tests/helpers/runs.py: elastic_run)."""
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
    # the run succeeded: nothing on the page calls worker:2 a failure but its process's exit
    assert 'id="result">succeeded<' in page
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
