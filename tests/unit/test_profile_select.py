"""tfcluster profile: which tasks of a run record it traces, and where it asks.
No TensorFlow, no processes (tests/system/test_profile.py traces a real run)."""
from __future__ import annotations

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
    ({"host": "::1", "profiler_port": 5}, "[::1]:5"),
    ({"host": None, "profiler_port": 5}, "localhost:5"),
])
def test_task_address(row, expect):
    assert task_address(row) == expect
