"""The supervisor loop (fake backend, fake clock) with the watchdogs' view of life: a task that
shows progress is not killed for its port; one that shows none still is. No processes.
(The fake backend: tests/helpers/fake.py.)"""
from __future__ import annotations

from helpers.fake import make

CLUSTER = """\
    cluster: {ps: [localhost:3000], worker: [localhost:3001, localhost:3002]}
    program: {command: [python, t.py]}
    grace: 2
"""


def test_a_task_that_reports_progress_is_not_killed_for_its_port(tmp_path):
    body = CLUSTER + "    watchdog: {startup_timeout: 3}\n"
    report = '@tfcluster progress {"step": 1, "total": 10}'
    sup, be, clock, out, err = make(tmp_path, body, {
        "ps:0": [(None, None, [])],
        "worker:0": [(0, 10.0, ["loading data", report])],      # never opens its port
        "worker:1": [(0, 10.0, ["Epoch 1/3"])]})                 # nor this one: a Keras header
    be.up = {3000}
    assert sup.run() == 0, err.getvalue()
    assert "did not open port" not in err.getvalue()


def test_a_server_that_shows_nothing_is_still_killed_naming_the_setting(tmp_path):
    body = CLUSTER + "    watchdog: {startup_timeout: 3}\n"
    sup, be, clock, out, err = make(tmp_path, body, {"worker:0": [(0, 60.0, ["starting"])]})
    be.up = {3001, 3002}
    assert sup.run() == 1
    e = err.getvalue()
    assert "ps:0 (SIGKILL) — watchdog: its server did not open port 3000 within 3s" in e
    assert "watchdog.startup_timeout: 3" in e
