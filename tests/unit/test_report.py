"""tfcluster report: one self-contained HTML page per run, checked as text (in a real headless
browser: tests/integration/test_report_browser.py)."""
from __future__ import annotations

import os
import re

import pytest

from tfcluster.cli import main
from tfcluster.report import build_model

from helpers.runs import T0, make_run


def test_the_model_sees_attempts_restarts_stalls_and_rates(tmp_path):
    m = build_model(str(make_run(tmp_path)))
    tasks = {v.name: v for v in m["tasks"]}
    assert list(tasks) == ["ps:0", "worker:0", "worker:1"] and m["chief"] == "worker:0"
    w1 = tasks["worker:1"]
    assert [(a.attempt, a.exit, a.state) for a in w1.attempts] == [(0, "SIGKILL", "failed"),
                                                                   (1, "SIGTERM", "stopped")]
    assert w1.restart_count == 1 and w1.restarts[0]["delay"] == 2.0
    assert w1.stalls == [(T0 + 40, T0 + 61)]        # last report +40 s, stopped at +61 s
    assert tasks["worker:0"].stalls == []
    assert tasks["worker:0"].rate == pytest.approx(10.0)
    assert tasks["worker:1"].rate < 0.8 * m["fastest"]


def test_report_draws_the_restart_and_is_self_contained(tmp_path, capsys):
    d = make_run(tmp_path)
    assert main(["report", str(d)]) == 0
    path = capsys.readouterr().out.strip()
    assert path == str(d / "report.html") and os.stat(path).st_mode & 0o077 == 0
    page = open(path, encoding="utf-8").read()
    assert re.search(r'<path class="restart-marker" id="restart-worker-1-1"', page)
    assert "restart 1" in page and "SIGKILL" in page and "exit 3" in page
    assert 'class="stall"' in page and 'class="watchdog-marker"' in page
    assert page.count('class="stop-marker"') == 2 and 'class="decision"' in page
    assert 'id="steps-worker-0"' in page and 'id="steps-worker-1"' in page
    assert "straggler" in page and "worker:0 (chief)" in page
    assert "exit-code policy: SIGKILL is retried &lt;&amp;&gt;" in page   # escaped
    assert "<boom>" not in page
    assert "progress reports are drawn in the chart" in page
    assert_self_contained(page)


def assert_self_contained(page):
    """Nothing that a browser would fetch: no script, no linked style, no remote URL."""
    low = page.lower()
    assert "<script" not in low and "<link" not in low and "@import" not in low
    assert not re.search(r'(src|href)\s*=', low)
    assert not re.search(r'url\(', low)
    assert "http://" not in low and "https://" not in low


def test_a_run_without_events_degrades_to_its_record(tmp_path, capsys):
    d = make_run(tmp_path, events=False)
    assert main(["report", str(d)]) == 0
    page = (d / "report.html").read_text()
    assert "no events.jsonl" in page and 'class="restart-marker"' not in page
    assert "1 restart before (time not recorded)" in page
    m = build_model(str(d))
    w1 = {v.name: v for v in m["tasks"]}["worker:1"]
    assert w1.restart_count == 1 and [a.exit for a in w1.attempts] == ["SIGTERM"]
    assert w1.last_step == 300
    assert_self_contained(page)


def test_a_broken_event_log_is_one_line_exit_2(tmp_path, capsys):
    d = make_run(tmp_path)
    with open(d / "events.jsonl", "r+") as f:
        lines = f.readlines()
        lines[3] = "{oops\n"
        f.seek(0)
        f.writelines(lines)
    rc = main(["report", str(d)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "events.jsonl: line 4: not valid JSON" in err
    assert not (d / "report.html").exists()


def test_report_of_a_lost_run_and_output_option(tmp_path, capsys):
    d = make_run(tmp_path, result="running")          # launcher pid 999999 does not exist
    out = tmp_path / "elsewhere.html"
    assert main(["report", str(d), "-o", str(out)]) == 0
    page = out.read_text()
    assert 'id="result">lost<' in page and "died without closing the record" in page


def test_a_task_hanging_now_shows_its_stall(tmp_path):
    d = make_run(tmp_path, result="running")
    lines = (d / "events.jsonl").read_text().splitlines()
    keep = [x for x in lines if '"worker:0"' in x and '"progress"' in x or '"task_started"' in x]
    (d / "events.jsonl").write_text("\n".join(keep) + "\n")   # no exits: every task runs
    os.utime(d / "run.json", (T0 + 120, T0 + 120))
    tasks = {v.name: v for v in build_model(str(d))["tasks"]}
    w0 = tasks["worker:0"]
    assert [a.state for a in w0.attempts] == ["lost"]
    assert w0.stalls == [(T0 + 59, T0 + 120)]          # last report at +59 s, seen until +120 s


def test_report_finds_the_latest_run_of_the_file(tmp_path, capsys, monkeypatch):
    (tmp_path / "cluster.yaml").write_text("cluster: {worker: [localhost:2223]}\nlogdir: runs\n")
    d = make_run(tmp_path / "runs", file=tmp_path / "cluster.yaml")
    make_run(tmp_path / "runs", run_id="newer-of-another-file", t0=T0 + 100)
    monkeypatch.chdir(tmp_path)
    assert main(["report"]) == 0
    assert capsys.readouterr().out.strip() == str(d / "report.html")


