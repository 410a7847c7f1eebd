"""tfcluster profile: which tasks of a run record it traces, and where it asks.
No TensorFlow, no processes (tests/system/test_profile.py traces a real run)."""
from __future__ import annotations

import os

import pytest

from tfcluster.errors import UserError
from tfcluster.runs.profile import task_address, traceable_tasks

RECORD = {"run_id": "r1", "tasks": [
    {"task": "ps:0", "host": "localhost", "state": "running", "profiler_port": 12222},
    {"task": "worker:0", "host": "10.0.0.2", "state": "running", "profiler_port": 12223},
    {"task": "worker:1", "host": "localhost", "state": "succeeded", "profiler_port": 12224},
    {"task": "evaluator:0", "host": "localhost", "state": "running", "profiler_port": None},
]}


@pytest.mark.parametrize("only, expect", [
    ((), ["ps:0", "worker:0"]),                       # running, with a port
    (("worker:0",), ["worker:0"]),
    (("worker:1",), []),                             # not running
])
def test_only_running_tasks_with_a_profiler_port_are_traced(only, expect):
    assert [t["task"] for t in traceable_tasks(RECORD, only)] == expect


def test_a_task_that_is_not_the_runs_is_a_one_line_error():
    with pytest.raises(UserError, match=r"--tasks: worker:9: not a task of run r1"):
        traceable_tasks(RECORD, ["worker:9"])


@pytest.mark.parametrize("row, expect", [
    ({"host": "localhost", "profiler_port": 12222}, "localhost:12222"),
    ({"host": "::1", "profiler_port": 5}, "127.0.0.1:5"),      # TensorFlow's client reads no [::1]
    ({"host": "[::1]", "profiler_port": 5}, "127.0.0.1:5"),
    ({"host": None, "profiler_port": 5}, "localhost:5"),
    ({"host": "fd00::7", "profiler_port": 5}, "fd00::7:5"),     # another host's: through a relay
])
def test_task_address(row, expect):
    assert task_address(row) == expect


def test_a_run_without_the_profiler_says_how_to_turn_it_on(tmp_path):
    from tfcluster.runs.profile import profile_run
    rec = {"run_id": "r1", "result": "running", "launcher_pid": os.getppid(), "tasks": [
        {"task": "ps:0", "host": "localhost", "state": "running", "profiler_port": None}]}
    with pytest.raises(UserError, match="launched without the profiler: launch it with --profiler "
                       r"\(or profiler: true in the file\)"):
        profile_run(str(tmp_path), rec, seconds=1)
