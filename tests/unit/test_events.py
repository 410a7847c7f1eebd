"""The event log: events.jsonl (one JSON object a line) and launcher.log (the same, for people)."""
from __future__ import annotations

import ast
import json
import os
import re
import threading

import pytest

import helpers
from tfcluster.core.machine import Tick, input_fields
from tfcluster.core.rules import exit_fields
from tfcluster.errors import UserError
from tfcluster.runs.eventlog import EVENTS, EVENTS_FILE, LAUNCHER_LOG, EventLog, format_event, read_events


def test_emit_writes_one_json_line_and_one_human_line(tmp_path):
    with EventLog(str(tmp_path)) as log:
        ev = log.emit("task_exited", "worker:1", exit_code=None, signal="SIGKILL", exit="SIGKILL",
                      state="failed", time=1000.5)
        log.emit("run_started", run_id="r1", file="/x/cluster.yaml", backend="local",
                 tasks=["ps:0", "worker:0"], chief="worker:0")
        log.log("stopping ps:0 (SIGTERM)")
    assert ev == {"time": 1000.5, "event": "task_exited", "task": "worker:1", "exit_code": None,
                  "signal": "SIGKILL", "exit": "SIGKILL", "state": "failed"}
    lines = (tmp_path / EVENTS_FILE).read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["task_exited", "run_started"]
    assert json.loads(lines[1])["task"] is None and isinstance(json.loads(lines[1])["time"], float)
    human = (tmp_path / LAUNCHER_LOG).read_text().splitlines()
    assert len(human) == 3
    assert human[0].endswith("worker:1 exited (SIGKILL), failed")
    assert human[0][:4].isdigit() and human[0][4] == "-"          # a timestamp first
    assert "run r1 started" in human[1] and "chief worker:0" in human[1]
    assert human[2].endswith("stopping ps:0 (SIGTERM)")
    for name in (EVENTS_FILE, LAUNCHER_LOG):
        assert os.stat(tmp_path / name).st_mode & 0o077 == 0


def test_each_line_is_on_disk_before_emit_returns(tmp_path):
    log = EventLog(str(tmp_path))
    log.emit("task_started", "worker:0", pid=12, attempt=0, host="localhost")
    # not closed: another process (status, report) must already see the line
    assert read_events(str(tmp_path))[0]["pid"] == 12
    assert "worker:0 started: pid 12 on localhost" in (tmp_path / LAUNCHER_LOG).read_text()
    log.close()


def test_non_finite_metrics_become_null(tmp_path):
    with EventLog(str(tmp_path)) as log:
        log.emit("progress", "worker:0", step=3, total=10, metrics={"loss": float("nan"), "acc": 0.5})
    ev = read_events(str(tmp_path))[0]
    assert ev["metrics"] == {"loss": None, "acc": 0.5}


def test_threads_never_interleave_lines(tmp_path):
    log = EventLog(str(tmp_path))

    def writer(n):
        for i in range(200):
            log.emit("progress", f"worker:{n}", step=i, total=200, metrics={"loss": 1.0 / (i + 1)})

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    log.close()
    events = read_events(str(tmp_path))
    assert len(events) == 800
    for n in range(4):
        assert [e["step"] for e in events if e["task"] == f"worker:{n}"] == list(range(200))
    assert len((tmp_path / LAUNCHER_LOG).read_text().splitlines()) == 800


def test_a_truncated_last_line_is_skipped(tmp_path):
    with EventLog(str(tmp_path)) as log:
        log.emit("task_started", "worker:0", pid=1, attempt=0, host="h")
        log.emit("task_started", "worker:1", pid=2, attempt=0, host="h")
    with open(tmp_path / EVENTS_FILE, "a") as f:
        f.write('{"time": 5.0, "event": "task_ex')      # the launcher was killed mid-write
    assert [e["task"] for e in read_events(str(tmp_path))] == ["worker:0", "worker:1"]


@pytest.mark.parametrize("line, words", [
    ('{"time": 1, "event": "x"\n', "line 2: not valid JSON"),
    ('[1, 2]\n', "line 2: not a JSON object"),
    ('{"time": "noon", "event": "x"}\n', "line 2: time"),
    ('{"time": 1.0}\n', "line 2: event"),
    ('{"time": 1.0, "event": "x", "task": 3}\n', "line 2: task"),
])
def test_a_broken_line_is_bad_input_naming_the_line(tmp_path, line, words):
    (tmp_path / EVENTS_FILE).write_text('{"time": 1.0, "event": "run_started", "task": null}\n'
                                        + line + '{"time": 2.0, "event": "run_ended"}\n')
    with pytest.raises(UserError) as e:
        read_events(str(tmp_path))
    assert words in e.value.message and EVENTS_FILE in e.value.message
    assert "\n" not in e.value.message


def test_a_run_without_events_has_none(tmp_path):
    assert read_events(str(tmp_path)) == []


def test_a_failed_write_is_kept_not_raised(tmp_path):
    log = EventLog(str(tmp_path / "gone"))
    log.emit("run_ended", result="failed", exit_code=1)
    assert log.error and "gone" in log.error


@pytest.mark.parametrize("event, fields, text", [
    ("task_restarting", {"reason": "exit-code policy: SIGKILL is retried", "attempt": 1, "delay": 2.0},
     "worker:1 restarting (restart 1, in 2s): exit-code policy: SIGKILL is retried"),
    ("watchdog", {"reason": "global step stuck for 60s", "action": "kill"},
     "watchdog: worker:1: global step stuck for 60s -> kill"),
    ("stop_sent", {"signal": "SIGTERM"}, "worker:1: sent SIGTERM"),
    ("progress", {"step": 30, "total": 100, "metrics": {"loss": 0.25}}, "worker:1 step 30/100 loss=0.25"),
    ("task_started", {"pid": 9, "attempt": 2, "host": "h1"}, "worker:1 started: pid 9 on h1, restart 2"),
    ("something_new", {"k": 1}, "something_new worker:1: k=1"),
])
def test_human_lines(event, fields, text):
    assert format_event({"time": 0.0, "event": event, "task": "worker:1", **fields}) == text


def test_human_lines_of_run_events():
    assert format_event({"event": "decision", "task": None, "result": "failed", "rule": "chief",
                         "exit_code": 1, "reason": "worker:0 exit 3"}) == \
        "decision: failed (rule chief, exit code 1): worker:0 exit 3"
    assert format_event({"event": "run_ended", "task": None, "result": "succeeded",
                         "exit_code": 0}) == "run ended: succeeded, exit code 0"


def test_progress_is_throttled_per_task_and_the_last_report_kept(tmp_path):
    clock = [100.0]
    log = EventLog(str(tmp_path), clock=lambda: clock[0])
    written = []
    for i in range(30):                              # 8 reports a second, two tasks
        written.append(log.progress("worker:0", i, 30, {"loss": 1.0 / (i + 1)}))
        log.progress("worker:1", i)
        clock[0] += 0.125
    log.flush_progress("worker:0")
    log.flush_progress("worker:0")                   # nothing held back any more: no-op
    log.close()
    events = read_events(str(tmp_path))
    w0 = [(e["time"], e["step"]) for e in events if e["task"] == "worker:0"]
    assert written.count(True) == 4 and len(w0) == 5
    assert [s for _, s in w0] == [0, 8, 16, 24, 29]  # the held-back last step is not lost
    assert all(b - a >= 0.6 for (a, _), (b, _) in zip(w0, w0[1:]))
    assert all(b - a >= 1.0 for (a, _), (b, _) in zip(w0[:-1], w0[1:-1]))
    assert len([e for e in events if e["task"] == "worker:1"]) == 4
    assert events[0]["metrics"] == {"loss": 1.0} and events[0]["total"] == 30


def test_exit_fields():
    assert exit_fields(-9) == {"exit_code": None, "signal": "SIGKILL", "exit": "SIGKILL"}
    assert exit_fields(3) == {"exit_code": 3, "signal": None, "exit": "exit 3"}
    assert exit_fields(0)["exit"] == "exit 0"


def test_a_held_back_report_is_written_once_its_interval_is_over(tmp_path):
    clock = [0.0]
    log = EventLog(str(tmp_path), clock=lambda: clock[0])
    log.progress("worker:0", 1)
    clock[0] = 0.5
    log.progress("worker:0", 2)                      # held back; then the task goes quiet
    log.flush_due()
    assert [e["step"] for e in read_events(str(tmp_path))] == [1]
    clock[0] = 1.2
    log.flush_due()
    events = read_events(str(tmp_path))
    assert [(e["step"], e["time"]) for e in events] == [(1, 0.0), (2, 0.5)]
    log.close()


def _written(path, call):
    """(event, keys) of each call ``call("event", ..., key=...)`` in the module at ``path``; the
    keys of ``**exit_fields(...)`` and ``**input_fields(...)`` counted in, other ``**`` not."""
    spread = {"exit_fields": set(exit_fields(0)), "input_fields": {"input", "data"}}
    tree = ast.parse(open(os.path.join(helpers.SRC, "tfcluster", path)).read())
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            continue
        f = node.func
        if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) != call:
            continue
        keys = {k.arg for k in node.keywords if k.arg not in (None, "task", "time")}
        for k in node.keywords:
            if k.arg is None and isinstance(k.value, ast.Call):
                keys |= spread.get(getattr(k.value.func, "id", None), set())
        yield node.args[0].value, keys


def test_every_event_the_machine_and_the_supervisor_write_is_listed_with_its_keys():
    written = list(_written("core/machine.py", "log_event")) + list(
        _written("drivers/supervisor.py", "emit"))
    assert {name for name, _ in written} >= {"task_exited", "decision", "run_started", "input"}
    for name, keys in written:
        assert name in EVENTS and keys <= set(EVENTS[name]), (name, keys)
    assert set(input_fields(Tick(1.0))) <= set(EVENTS["input"])


def test_docs_launch_lists_every_event_with_its_keys():
    """docs/LAUNCH.md's table of events.jsonl has a row for every event, naming each of its keys."""
    with open(os.path.join(helpers.DOCS, "LAUNCH.md")) as f:
        page = f.read()
    table = page[page.index("| event | task | other keys |"):]
    table = table[: table.index("\n\n")]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \|[^|]*\|(.*)\|$", table, re.M)}
    assert set(rows) == set(EVENTS)
    for name, keys in EVENTS.items():
        assert all(f"`{k}`" in rows[name] for k in keys), (name, keys, rows[name])
