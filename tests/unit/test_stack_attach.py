"""tfcluster stack and attach, their pure parts: which tasks' stacks may be read, the table."""
import os

import pytest

from tfcluster.errors import UserError
from tfcluster.runs import stack
from tfcluster.runs.attach import LineFollower, table_text


def record(**kw):
    r = {"run_id": "r1", "backend": "local", "launcher_pid": os.getppid(), "tasks": [
        {"task": "ps:0", "host": "localhost", "state": "running", "pid": os.getpid()},
        {"task": "worker:0", "host": "localhost", "state": "succeeded", "pid": 12},
        {"task": "worker:1", "host": "far.example", "state": "running", "pid": 13},
    ]}
    r.update(kw)
    return r


def test_a_task_the_run_does_not_have_is_bad_input_naming_the_tasks():
    with pytest.raises(UserError, match="worker:7: no such task in run r1 .*worker:1"):
        stack.targets(record(), ["worker:7"])


def test_only_live_local_children_of_the_launcher_are_read():
    got = {t: why for t, _, why in stack.targets(record(), ["ps", "worker"])}
    assert got["ps:0"] == ""                        # this process: a child of its parent
    assert "not running (succeeded)" in got["worker:0"]
    assert "runs on far.example" in got["worker:1"]


def test_a_pid_that_is_not_the_launchers_child_is_refused():
    [(_, _, why)] = stack.targets(record(launcher_pid=1), ["ps:0"])
    assert "no longer a task of the run's launcher" in why


def test_without_tasks_every_running_task_is_read():
    assert [t for t, _, _ in stack.targets(record(), [])] == ["ps:0", "worker:1"]


def test_dump_argv_reads_subprocesses_and_native_frames_on_request():
    assert stack.dump_argv("py-spy", 7) == ["py-spy", "dump", "--pid", "7", "--subprocesses"]
    assert stack.dump_argv("py-spy", 7, native=True)[-1] == "--native"


def test_the_attach_table_shows_last_progress_and_output_and_the_global_step():
    r = {"tasks": [{"task": "worker:0", "state": "running", "started": 100.0, "life_at": 188.0,
                    "output_at": 150.0, "progress": {"step": 40, "total": 80}},
                   {"task": "ps:0", "state": "running", "started": 100.0, "life_at": "x"}]}
    text = table_text(r, 200.0)
    head, w0, ps = text.splitlines()[:3]
    assert head.split()[-2:] == ["progress", "output"]
    assert "12.0s ago" in w0 and "50.0s ago" in w0
    assert "ago" not in ps                          # no time, or not a time: nothing shown
    assert text.endswith("global step 40/80")


def test_the_line_follower_reads_whole_new_lines_of_the_callers_file(tmp_path):
    p = tmp_path / "launcher.log"
    p.write_text("old\n")
    f = LineFollower(str(p))
    f.skip_to_end()
    with open(p, "a") as out:
        out.write("one\ntw")
    assert f.read() == ["one"]
    with open(p, "a") as out:
        out.write("o\n")
    assert f.read() == ["two"]
    os.symlink(p, tmp_path / "link")
    assert LineFollower(str(tmp_path / "link")).read() == []     # no link followed


def test_a_record_naming_another_live_process_as_its_launcher_reads_no_stack(tmp_path, monkeypatch):
    """A record of the caller's own that names pid 1 (or any live process) with that process's
    own start time: the launcher check of ``stop`` applies (it must hold the run folder open),
    so py-spy is never run on it."""
    import json
    import socket

    import psutil
    run = tmp_path / "r1"
    run.mkdir(mode=0o700)
    target = os.getppid()               # a live process that does not hold this folder open
    rec = record(launcher_pid=target, launcher_started=psutil.Process(target).create_time(),
                 launcher_host=socket.gethostname(), result="running", run_dir=str(run),
                 tasks=[{"task": "ps:0", "host": "localhost", "state": "running", "pid": target}])
    (run / "run.json").write_text(json.dumps(rec))
    ran = []
    monkeypatch.setattr(stack, "py_spy", lambda: ran.append(1) or "/bin/true")
    with pytest.raises(UserError, match="is not the launcher of this run folder .*no stack read"):
        stack.show_stacks(str(run), ["ps:0"])
    assert not ran


def test_attach_follows_a_decided_run_until_its_launcher_has_ended_it(tmp_path):
    """The launcher writes a decided run's result while it still stops the other tasks (no end,
    no exit code yet): attach goes on until the record is closed, then prints the exit code."""
    import io

    import psutil

    from tfcluster.runs.attach import attach
    from tfcluster.runs.record import write_record
    me = psutil.Process()
    rec = record(launcher_pid=me.pid, launcher_started=me.create_time(), result="running",
                 started=1.0, ended=None, exit_code=None)
    write_record(str(tmp_path), rec)
    steps = [dict(result="succeeded"), dict(result="succeeded", ended=9.0, exit_code=0)]
    looks = []

    def sleep(_):
        looks.append(1)
        rec.update(steps.pop(0))
        write_record(str(tmp_path), rec)

    out = io.StringIO()
    assert attach(str(tmp_path), out=out, sleep=sleep, live=False, every=1e9) == 0
    assert len(looks) == 2 and not steps          # the decided record alone did not end it
    assert "ended: succeeded (exit code 0)" in out.getvalue()
