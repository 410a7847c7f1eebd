"""tfcluster profile: which tasks of a run record it traces, and where it asks.
No TensorFlow, no processes (tests/system/test_profile.py traces a real run)."""
from __future__ import annotations

import json
import os
import time

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


PAUSES: list = []   # the seconds the tracing child paused between tries (run_trace_child)


def run_trace_child(tmp_path, monkeypatch, capsys, empty_tries, retry):
    """The tracing child (profile._TRACE) with a TensorFlow whose traces of port 7002 come
    back without data ``empty_tries`` times (as a process that has just started gives)."""
    import sys
    import types

    from tfcluster.runs import profile
    calls = []
    pauses = PAUSES
    pauses.clear()

    def trace(addrs, logdir, ms, num_tracing_attempts, options):
        calls.append(addrs)
        for addr in addrs.split(","):
            port = addr.rpartition(":")[2]
            d = os.path.join(logdir, "plugins", "profile", "t")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"127.0.0.1_{port}.xplane.pb"), "wb") as f:
                f.write(b"" if port == "7002" and len(calls) <= empty_tries else b"data")
        if "7002" in addrs and len(calls) <= empty_tries:
            raise RuntimeError("UNAVAILABLE: No trace event was collected because there were no "
                               "responses from clients or the responses did not have trace data.")

    experimental = types.SimpleNamespace(ProfilerOptions=lambda **kw: kw,
                                         client=types.SimpleNamespace(trace=trace))
    fake = types.SimpleNamespace(profiler=types.SimpleNamespace(experimental=experimental))
    monkeypatch.setattr(sys, "argv", ["-c", "grpc://127.0.0.1:7001,grpc://127.0.0.1:7002",
                                      str(tmp_path), "10", str(retry)])
    # The child's `import tensorflow` finds the fake; the context puts back what was there before
    # (nothing in the unit layer alone; the real TensorFlow in a full run, where system tests that
    # import it in-process ran before the unit layer).
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "tensorflow", fake)
        m.setattr(time, "sleep", pauses.append)         # the child's pause between quick answers
        exec(compile(profile._TRACE, "trace", "exec"), {"__name__": "__main__"})
    return calls, [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("try ")]


def test_profile_traces_again_until_every_trace_has_data(tmp_path, monkeypatch, capsys):
    """`profile` within seconds of a run's start: the first captures come back empty; it asks
    the tasks without data again until each gave one, and says on which try."""
    from tfcluster.runs.profile import tries_words
    calls, tries = run_trace_child(tmp_path, monkeypatch, capsys, empty_tries=3, retry=30)
    assert calls == ["grpc://127.0.0.1:7001,grpc://127.0.0.1:7002"] + ["grpc://127.0.0.1:7002"] * 3
    assert tries[0].startswith("try 1: 1 with data; UNAVAILABLE: No trace event was collected")
    assert tries[-1] == "try 4: 1 with data" and len(tries) == 4
    assert PAUSES == [0.5] * 3            # an empty answer at once: a pause, not a busy loop
    assert tries_words(4, 9.2, []) == ("every trace has data on try 4 (9 s: the first captures of "
                                       "a process that has just started come back empty)")
    assert tries_words(1, 3.0, []) == "every trace has data"


def test_profile_says_when_its_time_is_up(tmp_path, monkeypatch, capsys):
    from tfcluster.runs.profile import tries_words
    calls, tries = run_trace_child(tmp_path, monkeypatch, capsys, empty_tries=100, retry=0)
    assert len(calls) == 1 and len(tries) == 1
    assert tries_words(1, 32.4, ["worker:1"], "UNAVAILABLE: No trace event was collected") == (
        "time is up after 1 try in 32 s: no trace with data from worker:1 (last: UNAVAILABLE: "
        "No trace event was collected)")


def test_a_tracer_that_does_not_end_in_time_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """On a loaded machine the tracing child (TensorFlow's import, then the traces) can outlast
    its time limit: profile says so in one line and exits 1, never a TimeoutExpired traceback
    (seen side by side in the suite)."""
    import subprocess

    from tfcluster.runs import profile
    rec = {"run_id": "r1", "result": "running", "launcher_pid": os.getppid(), "network": {"mode": "host"},
           "tasks": [{"task": "ps:0", "host": "localhost", "state": "running", "profiler_port": 12222}]}

    def too_slow(argv, **kw):
        raise subprocess.TimeoutExpired(argv, kw["timeout"], output=b"", stderr=b"")

    monkeypatch.setattr(profile.subprocess, "run", too_slow)
    (tmp_path / "run.json").write_text(json.dumps(rec))
    monkeypatch.setattr("tfcluster.runs.result.derive_result", lambda record, run_dir=None: "running")
    assert profile.profile_run(str(tmp_path), rec, seconds=1, timeout=5, retry_for=2) == 1
    err = capsys.readouterr()
    said = err.out + err.err
    assert "the tracer did not end within 8s" in said and "Traceback" not in said, said
