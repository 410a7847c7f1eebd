"""Run folders that cannot be redirected (tfcluster.safe_files): a run folder swapped for a symlink,
unsafe log folders, run ids that never collide. Pure: no TensorFlow, no process
(tests/integration/test_safe_files_processes.py has the launches)."""
import json
import os

import pytest

from helpers.attack import logdir, victim  # noqa: F401 (fixtures)
from helpers.attack import mode as _mode
from helpers.attack import untouched as _untouched
from tfcluster import safe_files
from tfcluster.errors import UserError
from tfcluster.runs.eventlog import EventLog
from tfcluster.safe_files import write_json


def test_run_folder_and_its_files_are_private(logdir):
    with safe_files.make_run_folder(str(logdir), "r1") as f:
        assert f.path == str(logdir / "r1") and _mode(f.path) == 0o700
        with f.open_log("worker-0.log") as log:
            log.write(b"line\n")
        f.write_json("run.json", {"a": 1})
        with f.create("job.sbatch") as s:
            s.write("#!/bin/sh\n")
        with pytest.raises(FileExistsError):
            f.create("job.sbatch")
    for name in ("worker-0.log", "run.json", "job.sbatch"):
        assert _mode(logdir / "r1" / name) == 0o600, name
    assert sorted(os.listdir(logdir / "r1")) == ["job.sbatch", "run.json", "worker-0.log"]


def test_the_review_symlink_swap_redirects_no_write(logdir, victim):
    """Another user replaces the run folder with a link (during a restart backoff, between two
    opens): the task log, run.json and the event log still go to the folder that was made."""
    run = logdir / "r1"
    folder = safe_files.make_run_folder(str(logdir), "r1")
    events = EventLog(str(run))
    events.emit("run_started", run_id="r1")
    write_json(str(run / "run.json"), {"result": "running"})
    with safe_files.open_log(str(run / "worker-0.log")) as log:
        log.write(b"first attempt\n")

    moved = logdir / "moved-away"
    os.rename(run, moved)
    os.symlink(victim, run)                           # the swap
    os.symlink(victim / "bashrc", victim / "worker-0.log")
    os.unlink(victim / "worker-0.log")               # (a link there would be followed by path)

    with safe_files.open_log(str(run / "worker-0.log")) as log:   # the restarted task's output
        log.write(b"second attempt\n")
    with folder.open_log("worker-1.log") as log:
        log.write(b"another task\n")
    write_json(str(run / "run.json"), {"result": "succeeded"})
    events.emit("run_ended", result="succeeded", exit_code=0)
    events.close()
    assert events.error is None

    _untouched(victim)
    assert (moved / "worker-0.log").read_text() == "first attempt\nsecond attempt\n"
    assert (moved / "worker-1.log").read_text() == "another task\n"
    assert json.loads((moved / "run.json").read_text()) == {"result": "succeeded"}
    assert [json.loads(x)["event"] for x in (moved / "events.jsonl").read_text().splitlines()] \
        == ["run_started", "run_ended"]
    assert not [n for n in os.listdir(moved) if ".tmp" in n]
    folder.close()

    # Without the open folder (another process: a Slurm task), writes by path refuse the link.
    with pytest.raises(OSError):
        safe_files.open_log(str(run / "worker-0.log"))
    with pytest.raises(OSError):
        write_json(str(run / "run.json"), {"result": "x"})
    _untouched(victim)


def test_links_and_fifos_inside_the_run_folder_are_not_followed(logdir, victim):
    with safe_files.make_run_folder(str(logdir), "r1") as f:
        os.symlink(victim / "bashrc", os.path.join(f.path, "worker-0.log"))
        with pytest.raises(OSError):
            f.open_log("worker-0.log")
        os.symlink(victim / "bashrc", os.path.join(f.path, "run.json"))
        f.write_json("run.json", {"ok": True})      # replaces the link, does not write through it
        assert not os.path.islink(os.path.join(f.path, "run.json"))
        os.mkfifo(os.path.join(f.path, "events.jsonl"))
        with pytest.raises(OSError):                 # refused at once, does not block
            f.append("events.jsonl")
        os.link(victim / "bashrc", os.path.join(f.path, "launcher.log"))
        with pytest.raises(OSError):
            f.append("launcher.log")
    _untouched(victim)


def test_a_failed_run_json_write_leaves_no_temporary_file(logdir, monkeypatch):
    with safe_files.make_run_folder(str(logdir), "r1") as f:
        f.write_json("run.json", {"n": 1})

        def full(*a, **k):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(safe_files.os, "replace", full)
        with pytest.raises(OSError, match="No space"):     # longer than the old one: no room
            f.write_json("run.json", {"n": 1, "more": "x" * 100})
        f.write_json("run.json", {"n": 2})                 # as long: written in place
        monkeypatch.undo()
        assert os.listdir(f.path) == ["run.json"]
        assert json.loads(open(os.path.join(f.path, "run.json")).read()) == {"n": 2}


# --------------------------------------------------------------------- unsafe log folders
@pytest.mark.parametrize("mode,words", [(0o777, "world-writable"), (0o770, "group-writable"),
                                        (0o772, "world-writable")])
def test_a_logdir_others_can_change_is_refused(logdir, mode, words):
    os.chmod(logdir, mode)
    with pytest.raises(UserError) as e:
        safe_files.make_run_folder(str(logdir), "r1")
    msg = e.value.message
    assert msg.startswith(f"logdir: {logdir} is ") and words in msg and "sticky" in msg
    assert "\n" not in msg and e.value.exit_code == 2
    assert os.listdir(logdir) == []


def test_a_sticky_world_writable_logdir_is_accepted(logdir):
    os.chmod(logdir, 0o1777)
    with safe_files.make_run_folder(str(logdir), "r1") as f:
        assert os.path.isdir(f.path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_logdir_owned_by_another_user_is_refused(logdir):
    os.chown(logdir, 65534, 65534)
    with pytest.raises(UserError, match=r"^logdir: .* is owned by another user \(uid 65534\)"):
        safe_files.make_run_folder(str(logdir), "r1")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a link another user owns")
def test_a_logdir_link_another_user_planted_is_not_followed(tmp_path, victim):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)                 # /tmp-style: anyone may add a name
    link = shared / "runs"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)            # planted by another user
    with pytest.raises(UserError, match=r"^logdir: .*/shared/runs is a link made by another "
                       r"user \(uid 65534\); not followed"):
        safe_files.make_run_folder(str(link), "r1", explicit=False)
    with pytest.raises(UserError, match="a link made by another user"):
        safe_files.make_run_folder(str(link / "deeper"), "r1", explicit=False)
    _untouched(victim)


def test_a_logdir_link_of_ones_own_is_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "mine").symlink_to(real)
    with safe_files.make_run_folder(str(tmp_path / "mine"), "r1") as f:
        assert os.path.isdir(real / "r1") and f.path.endswith("r1")


def test_under_umask_000_a_new_logdir_is_0700_at_every_level(tmp_path):
    old = os.umask(0)
    try:
        with safe_files.make_run_folder(str(tmp_path / "a" / "b" / "runs"), "r1"):
            pass
    finally:
        os.umask(old)
    for p in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "runs"):
        assert _mode(p) == 0o700, p


def test_logdir_dev_null_says_it_is_not_a_folder(tmp_path):
    with pytest.raises(UserError) as e:
        safe_files.make_run_folder("/dev/null", "r1", explicit=False)
    assert e.value.message == "logdir: /dev/null is not a folder"
    f = tmp_path / "plain"
    f.write_text("")
    with pytest.raises(UserError, match="is not a folder"):
        safe_files.make_run_folder(str(f / "sub"), "r1", explicit=False)


def test_a_dangling_link_at_the_default_run_id_is_stepped_over(logdir, victim):
    os.symlink(victim / "nothing-here", logdir / "20260101-000000")
    with safe_files.make_run_folder(str(logdir), "20260101-000000", explicit=False) as f:
        assert f.path == str(logdir / "20260101-000000-2")
    assert not os.path.exists(victim / "nothing-here")
    with pytest.raises(UserError, match="--run-id: .* exists already"):
        safe_files.make_run_folder(str(logdir), "20260101-000000", explicit=True)


def test_two_default_runs_in_one_second_get_two_folders(logdir):
    a = safe_files.make_run_folder(str(logdir), "20260101-000000", explicit=False)
    b = safe_files.make_run_folder(str(logdir), "20260101-000000", explicit=False)
    assert a.path != b.path and os.path.basename(b.path) == "20260101-000000-2"
    a.close()
    b.close()




def test_a_full_disk_rewrites_run_json_in_place_within_its_reserve(tmp_path, monkeypatch):
    """No room for a temporary file: the record is written over the old one, whose blocks (and
    the spaces reserved after a running record) exist already; a record that would grow past
    them raises, leaving the old one whole."""
    import errno as _errno
    import json as _json

    from tfcluster import safe_files as sf
    from tfcluster.runs import record
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    record.write_record(str(d), {"result": "running", "ended": None})
    size = (d / "run.json").stat().st_size
    assert size >= record.RESERVE

    def full(*a, **k):
        raise OSError(_errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(sf, "_write_replace", full)
    record.write_record(str(d), {"result": "succeeded", "ended": 1764500000.25, "exit_code": 0})
    assert _json.loads((d / "run.json").read_text()) == {
        "result": "succeeded", "ended": 1764500000.25, "exit_code": 0}
    with pytest.raises(OSError):
        record.write_record(str(d), {"result": "succeeded", "big": "x" * (2 * size)})
    assert _json.loads((d / "run.json").read_text())["result"] == "succeeded"


def test_a_decided_record_not_yet_closed_keeps_its_reserve_so_the_closed_one_fits_a_full_disk(
        tmp_path, monkeypatch):
    """The launcher writes the run's result before its end (``result: succeeded``, ``ended:
    null``) while it still stops tasks; the disk fills up meanwhile (a task's log): the closed
    record, longer, must still fit over it. Seen side by side in CI: ``ended`` stayed null."""
    import errno as _errno
    import json as _json

    from tfcluster import safe_files as sf
    from tfcluster.runs import record
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    record.write_record(str(d), {"result": "running", "ended": None, "tasks": [{"t": 0}]})
    record.write_record(str(d), {"result": "succeeded", "ended": None, "tasks": [{"t": 0}]})
    assert (d / "run.json").stat().st_size >= record.RESERVE

    def full(*a, **k):
        raise OSError(_errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(sf, "_write_replace", full)
    closed = {"result": "succeeded", "ended": 1764500000.25, "exit_code": 0,
              "tasks": [{"t": 0, "exit": "exited 0", "ended": 1764500000.25}]}
    record.write_record(str(d), closed)
    assert _json.loads((d / "run.json").read_text()) == closed


def test_the_reserve_grows_with_the_tasks_so_a_closed_512_task_record_fits_on_a_full_disk(
        tmp_path, monkeypatch):
    """At 512 tasks the closed record is kilobytes longer than the running one (an exit, an end
    time and a state per task): the running record keeps room for that."""
    import errno as _errno
    import json as _json

    from tfcluster import safe_files as sf
    from tfcluster.runs import record

    def rows(state, ended, exit_code, exit):
        return [record.task_row(f"worker:{i}", host="localhost", endpoint=f"localhost:{20000 + i}",
                                chief=i == 0, state=state, pid=100000 + i, exit_code=exit_code,
                                exit=exit, started=1764500000.125, first_started=1764500000.125,
                                ended=ended, log=f"/runs/r/worker-{i}.log", note="")
                for i in range(512)]
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    record.write_record(str(d), {"result": "running", "ended": None,
                                 "tasks": rows("running", None, None, "")})
    monkeypatch.setattr(sf, "_write_replace",
                        lambda *a, **k: (_ for _ in ()).throw(OSError(_errno.ENOSPC, "full")))
    closed = {"result": "failed", "ended": 1764500100.5, "exit_code": 1,
              "tasks": rows("stopped", 1764500100.25, -15, "SIGTERM")}
    record.write_record(str(d), closed)
    assert _json.loads((d / "run.json").read_text()) == closed
