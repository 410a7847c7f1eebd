"""A shared machine (docs/SECURITY.md), where another local user writes files where tfcluster reads them
(a shared logdir, /tmp, the current folder). Each test plants what that user would and shows the
attack fails: the record, the log, the cluster file, the terminal. (Process-level attacks --
stop, completion, planted modules -- are in tests/integration/test_shared_machine_processes.py.)
"""
from __future__ import annotations

import json
import os
import time

import pytest

from helpers.records import good_record, make
from tfcluster import safe_files
from tfcluster.core.output_patterns import clean_segment
from tfcluster.errors import UserError
from tfcluster.terminal import decode, printable, terminal_text

# What a terminal acts on (finding 7): none of these may reach it raw.
HOSTILE = {
    "reset": "\x1bc",
    "line drawing": "\x1b(0",
    "save cursor": "\x1b7",
    "restore cursor": "\x1b8",
    "screen alignment": "\x1b#8",
    "C1 CSI": "\x9b2J",
    "OSC title": "\x1b]0;pwned\x07",
    "OSC with ST": "\x1b]8;;http://evil\x1b\\",
    "NUL": "\x00",
    "bidi override": "\u202e",
    "DCS": "\x1bPq#0;2;0;0;0\x1b\\",
}


def raw_control(text):
    """The first byte a terminal would act on in ``text`` (tabs and newlines are fine)."""
    for ch in text:
        if ch in "\t\n":
            continue
        if ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f or ch in "\u202e\u2066\u2028":
            return ch
    return None


# ------------------------------------------------------------------ finding 7: the terminal
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_task_output_reaches_the_console_as_printable_text_only(name):
    seq = HOSTILE[name]
    shown = clean_segment(f"before {seq} after")
    assert raw_control(shown) is None, (name, shown)
    assert shown.startswith("before") and shown.endswith("after")
    assert raw_control(terminal_text(f"x{seq}y")) is None


def test_colours_and_tabs_are_kept_readable():
    assert clean_segment("\x1b[1;31mred\x1b[0m\tcol") == "red\tcol"
    assert clean_segment("plain text  ") == "plain text"
    assert printable("a\nb\x1b") == "a\\nb\\x1b"


def test_metric_names_in_progress_reports_are_printable():
    from tfcluster.plan.progress import parse_progress
    p = parse_progress('@tfcluster progress {"step": 3, "\\u001bc\\u009b2J\\u001b]0;t\\u0007": 1.5}')
    assert p is not None and p.step == 3
    (key,) = p.metrics
    assert raw_control(key) is None


def test_the_reader_shows_and_logs_hostile_output_as_printable_text(tmp_path):
    import threading

    from tfcluster.core.task_output import OutputReader, Seen
    shown = []
    log = tmp_path / "w.log"
    r = OutputReader("worker:0", None, str(log), Seen(), threading.RLock(), lambda s: s,
                     time.time, lambda text, p: shown.append(text), open_log=safe_files.open_append_fd)
    r.begin()
    r.feed("".join(f"{n}:{s}end\n" for n, s in HOSTILE.items()).encode())
    r.feed(b"\x1bc\r\x1b]0;t\x07bar\n")
    r.end()
    r.finish()
    assert len(shown) == len(HOSTILE) + 1
    for line in shown:
        assert raw_control(line) is None, line
    assert raw_control(log.read_text()) is None


def test_invalid_utf8_does_not_make_a_log_larger_than_the_output(tmp_path):
    import random
    import threading

    from tfcluster.core.task_output import OutputReader, Seen
    rnd = random.Random(14)
    # what a program writes when it prints binary: printable ASCII and bytes that are no UTF-8
    data = bytes(rnd.choice((rnd.randrange(0x20, 0x7f), rnd.randrange(0x80, 0x100)))
                 for _ in range(200_000)) + b"\n"
    log = tmp_path / "w.log"
    r = OutputReader("worker:0", None, str(log), Seen(), threading.RLock(), lambda s: s,
                     time.time, lambda text, p: None, open_log=safe_files.open_append_fd)
    r.begin()
    r.feed(data)
    r.end()
    r.finish()
    assert log.stat().st_size <= len(data) + 100, log.stat().st_size   # U+FFFD made it ~2x
    assert decode(b"ok \xff\xfe done") == "ok ?? done"
    assert len(decode(b"\xff" * 9).encode()) <= 9


# ------------------------------------------------------------------ finding 6: cluster files
def _plant_fifo(path):
    os.mkfifo(path)


def _plant_dev_zero(path):
    path.symlink_to("/dev/zero")


def _plant_sparse_gb(path):
    with open(path, "wb") as f:
        f.truncate(1 << 30)


@pytest.mark.parametrize("plant,words", [(_plant_fifo, "FIFO, not a regular file"),
                                         (_plant_dev_zero, "a device, not a regular file"),
                                         (_plant_sparse_gb, "more than the 4.0 MiB")])
def test_a_cluster_file_that_is_no_file_is_refused_at_once_unread(tmp_path, plant, words):
    from tfcluster.clusterfile import config
    path = tmp_path / "cluster.yaml"
    plant(path)
    t = time.time()
    with pytest.raises(UserError, match=words):
        config.load(str(path))
    assert time.time() - t < 5


def test_status_and_completion_do_not_hang_on_a_fifo_cluster_yaml(tmp_path, capsys, monkeypatch):
    from tfcluster.cli.main import main
    os.mkfifo(tmp_path / "cluster.yaml")
    monkeypatch.chdir(tmp_path)
    t = time.time()
    assert main(["completion", "--values", "tasks"]) == 0
    assert capsys.readouterr().out.strip() == ""
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    os.unlink("cluster.yaml")
    with open("cluster.yaml", "wb") as f:       # a 1 GB sparse file: refused unread
        f.truncate(1 << 30)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "more than the 4.0 MiB" in err, err
    assert time.time() - t < 10


# ------------------------------------------------------------------ finding 8: logs
def _logs(capsys, *args):
    from tfcluster.cli.main import main
    rc = main(["logs", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("planted", ["/etc/passwd", "../../../../../../../etc/passwd",
                                     "/etc/hostname"])
def test_logs_prints_no_file_outside_the_run_folder(tmp_path, capsys, planted):
    rec = good_record("r1")
    rec["tasks"][0]["log"] = planted
    d = make(tmp_path, record=rec)
    rc, out, err = _logs(capsys, d, "worker:0")
    assert rc == 0 and out == "", (out, err)
    with open("/etc/passwd") as f:
        first = f.readline()
    assert first.strip() not in out
    # the task's own log in the run folder is what it shows
    with open(os.path.join(d, "worker-0.log"), "w") as f:
        f.write("mine\n")
    rc, out, err = _logs(capsys, d, "worker:0")
    assert out == "mine\n"


def test_logs_does_not_follow_a_link_or_hang_on_a_fifo_or_read_a_device(tmp_path, capsys):
    d = make(tmp_path)
    os.symlink("/etc/passwd", os.path.join(d, "worker-0.log"))
    os.mkfifo(os.path.join(d, "worker-1.log"))
    rc, out, err = _logs(capsys, d, "worker:0")
    assert rc == 2 and out == "" and "symbolic link; not followed" in err
    t = time.time()
    rc, out, err = _logs(capsys, d, "worker:1")
    assert rc == 2 and out == "" and "FIFO, not a regular file" in err
    assert time.time() - t < 5
    os.unlink(os.path.join(d, "worker-1.log"))
    os.symlink("/dev/zero", os.path.join(d, "worker-1.log"))
    rc, out, err = _logs(capsys, d, "worker:1", "-f")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1


def test_logs_of_a_hard_link_is_refused(tmp_path, capsys):
    d = make(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root's secret\n")
    os.link(secret, os.path.join(d, "worker-0.log"))
    rc, out, err = _logs(capsys, d, "worker:0")
    assert rc == 2 and "secret" not in out and "hard link" in err


def test_logs_shows_hostile_log_text_as_printable_text(tmp_path, capsys):
    d = make(tmp_path)
    with open(os.path.join(d, "worker-0.log"), "wb") as f:
        f.write("".join(f"{s}\n" for s in HOSTILE.values()).encode() + b"\xff\xfe\n")
    rc, out, err = _logs(capsys, d, "worker:0")
    assert rc == 0 and raw_control(out) is None, out


def test_follow_reads_a_window_at_a_time(tmp_path):
    from tfcluster.runs import logs
    d = make(tmp_path)
    with open(os.path.join(d, "worker-0.log"), "wb") as f:
        f.write(b"a\n" + b"z" * (3 * safe_files.WINDOW) + b"\nend")

    class Out:
        def __init__(self):
            self.parts = []

        def write(self, s):
            self.parts.append(s)

        def flush(self):
            pass
    out = Out()
    calls = iter([True, False])
    assert logs.follow(d, good_record(), "worker:0", lambda: next(calls), out=out,
                       sleep=lambda s: None) == 0
    assert max(len(p) for p in out.parts) <= safe_files.WINDOW + 1
    text = "".join(out.parts)
    assert text.startswith("a\n") and text.endswith("end\n") and text.count("z") == 3 * safe_files.WINDOW


# ------------------------------------------------------------------ finding 3: report
def test_report_writes_through_no_planted_link(tmp_path, capsys):
    from helpers.records import good_events
    from tfcluster.cli.main import main
    d = make(tmp_path, events=good_events())
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    os.chmod(victim, 0o600)
    for pid in range(os.getpid() - 5, os.getpid() + 50):     # every temporary name report may use
        for name in (f"report.html.tmp{pid}", f".report.html.tmp{pid}"):
            os.symlink(victim, os.path.join(d, name))
    os.symlink(victim, os.path.join(d, "report.html"))
    assert main(["report", d]) == 0
    capsys.readouterr()
    assert victim.read_text() == "root's file\n"
    report = os.path.join(d, "report.html")
    assert not os.path.islink(report) and open(report).read().startswith("<!DOCTYPE html>")
    assert oct(os.stat(report).st_mode & 0o777) == "0o600"


def test_report_is_not_written_into_another_users_run_folder(tmp_path, capsys):
    from tfcluster.cli.main import main
    d = make(tmp_path)
    os.chown(d, 65534, 65534)
    os.chown(os.path.join(d, "run.json"), 65534, 65534)
    assert main(["report", d]) == 2
    assert "another user's run folder" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(d, "report.html"))
    out = tmp_path / "mine.html"
    assert main(["report", d, "-o", str(out)]) == 0 and out.read_text().startswith("<!DOCTYPE")


def test_a_failed_report_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    from tfcluster.runs import report
    d = make(tmp_path)
    real = os.fdopen

    def full(fd, *a, **k):
        f = real(fd, *a, **k)
        if a[:1] != ("wb",):
            return f

        class Full:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def write(self, data):
                raise OSError(28, "No space left on device")
        return Full()
    monkeypatch.setattr(safe_files.os, "fdopen", full)
    with pytest.raises(UserError, match="No space left"):
        report.write_report(d)
    monkeypatch.undo()
    assert sorted(os.listdir(d)) == ["run.json"]


# ------------------------------------------------------------------ finding 4: --save
def test_launch_save_refuses_a_planted_dangling_link(tmp_path, capsys, monkeypatch):
    from tfcluster.cli.main import main
    monkeypatch.chdir(tmp_path)
    os.symlink(tmp_path / "where-the-attacker-wants-it", "saved.yaml")
    rc = main(["launch", "--workers", "1", "--save", "saved.yaml", "--dry-run", "--", "python", "t.py"])
    assert rc == 2 and "exists already" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "where-the-attacker-wants-it")


def test_launch_save_runs_the_text_it_wrote_not_the_file_read_again(tmp_path, monkeypatch):
    from tfcluster.cli import main as cli
    from tfcluster.cli.launching import _quick_cluster
    from tfcluster.clusterfile import config
    monkeypatch.chdir(tmp_path)
    reads = []
    real = config.load
    monkeypatch.setattr(config, "load", lambda p: reads.append(p) or real(p))
    args = cli.build_parser().parse_args(["launch", "--workers", "1", "--save", "s.yaml"])
    request = cli.launch_request(args, program=["python", "t.py"])
    cluster, text = _quick_cluster(request)
    assert reads == [] and open("s.yaml").read() == text
    assert [t.name for t in cluster.tasks] == ["worker:0"]


# ------------------------------------------------------------------ findings 9-11: launch
@pytest.mark.parametrize("flag", [["--workers", "1000000000"], ["--ps", "100001", "--workers", "1"]])
def test_a_huge_quick_cluster_is_one_line(flag, capsys):
    from tfcluster.cli.main import main
    assert main(["launch", *flag, "--dry-run", "--", "python", "t.py"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_no_free_ports_is_one_line(capsys, monkeypatch):
    from tfcluster.cli.main import main
    from tfcluster.net import ports

    def none(n):
        raise OSError(f"could not find {n} free ports")
    monkeypatch.setattr(ports, "free_ports", none)
    assert main(["launch", "--workers", "1000", "--dry-run", "--", "python", "t.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tfcluster: error: --ps/--workers: could not find 1000 free ports")


def test_detach_checks_the_logdir_before_it_makes_anything(tmp_path, capsys, monkeypatch):
    from tfcluster.cli.main import main
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.chdir(tmp_path)
    rc = main(["launch", "-d", "--workers", "1", "--logdir", str(shared), "--", "python", "t.py"])
    assert rc == 2 and "without the sticky bit" in capsys.readouterr().err
    assert os.listdir(shared) == []


@pytest.mark.parametrize("argv,want", [
    (["launch", "-qd", "f.yaml"], ["launch", "-q", "f.yaml"]),
    (["launch", "-dq", "f.yaml"], ["launch", "-q", "f.yaml"]),
    (["launch", "-d", "f.yaml", "--", "-d"], ["launch", "f.yaml", "--", "-d"]),
    (["launch", "--detach", "-q", "f.yaml"], ["launch", "-q", "f.yaml"])])
def test_detach_is_stripped_from_bundled_short_flags(argv, want):
    from tfcluster.runs.control import strip_detach
    assert strip_detach(argv) == want


# ------------------------------------------------------------------ finding 12: secrets
def test_a_secret_quoted_inside_another_variable_is_masked_everywhere(tmp_path, capsys):
    from tfcluster.cli.main import main
    from tfcluster.clusterfile import config
    f = tmp_path / "cluster.yaml"
    f.write_text("cluster: {worker: [localhost:2223]}\nprogram:\n  command: [python, t.py]\n"
                 "  env: {HF_TOKEN: hf_abcdefgh12345, "
                 "CURL_ARGS: \"-H 'Authorization: Bearer hf_abcdefgh12345'\", OTHER: plain}\n")
    assert "CURL_ARGS" in config.load(str(f)).secret_names
    for cmd in (["validate", "--file-only", str(f)], ["validate", "--file-only", str(f), "--json"],
                ["launch", str(f), "--dry-run"], ["render", "slurm", str(f)],
                ["render", "k8s", str(f), "--image", "x"]):
        assert main(cmd) == 0, cmd
        out = capsys.readouterr().out
        assert "hf_abcdefgh12345" not in out, (cmd, out)
        assert "OTHER" in out and "CURL_ARGS" in out


# ------------------------------------------------------------------ finding 13: no run.json
def test_a_run_folder_without_run_json_is_lost_and_reportable(tmp_path, capsys):
    from helpers.records import good_events
    from tfcluster.cli.main import main
    d = tmp_path / "runs" / "20260101-000000"
    d.mkdir(parents=True)
    from helpers.records import write_events
    write_events(str(d), good_events()[:3])
    (d / "launcher.log").write_text("tfcluster: started worker:0\n")
    assert main(["status", str(d)]) == 5
    out = capsys.readouterr().out
    assert "lost" in out and "worker:0" in out and "no run.json" in out
    assert main(["report", str(d)]) == 0
    capsys.readouterr()
    assert (d / "report.html").read_text().count("lost") >= 1
    assert main(["runs", str(tmp_path / "runs")]) == 0
    assert "20260101-000000" in capsys.readouterr().out
    # a folder with nothing a launcher writes is still not a run
    (tmp_path / "runs" / "other").mkdir()
    assert main(["status", str(tmp_path / "runs" / "other")]) == 2


# ------------------------------------------------------------------ the Slurm node's files
def test_the_slurm_node_files_go_through_safe_files(tmp_path):
    from tfcluster.backends.agent.folder import FolderChannel
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("theirs\n")
    folder = FolderChannel(str(d))
    os.symlink(victim, d / "worker-0.exit.json")          # a planted link at an exit record
    os.mkfifo(d / "worker-1.exit.json")                     # a FIFO: never waited on
    os.mkfifo(d / ".kill-worker-1")
    t = time.time()
    folder.write_exit("worker:0", {"task": "worker:0", "state": "succeeded"})
    assert victim.read_text() == "theirs\n" and not os.path.islink(d / "worker-0.exit.json")
    assert folder.exits() == {"worker:0": {"task": "worker:0", "state": "succeeded"}}
    assert folder.take_kill_request("worker:1") is None
    os.mkfifo(d / "run_over-0")
    folder.mark_over()
    assert time.time() - t < 5


def test_stop_and_tensorboard_print_record_strings_as_printable_text(tmp_path, capsys):
    from tfcluster.cli.main import main
    rec = good_record("r1\x1bc\x1b]0;t\x07", result="succeeded")
    rec["tasks"][0]["argv"] = ["python", "t.py", "--logdir=/tmp/\x1b(0x"]
    d = make(tmp_path, record=rec)
    assert main(["stop", d]) == 0
    assert main(["tensorboard", d, "--print"]) == 0
    out = capsys.readouterr()
    assert "r1" in out.err and raw_control(out.out + out.err) is None, out


# ---- a ./cluster.yaml another user planted (a shared folder) runs only when named
PLANTED = "cluster: {worker: [localhost:2222]}\nprogram: {command: [python, t.py]}\n"


@pytest.mark.parametrize("cmd", [["launch", "--dry-run"], ["doctor"]])
def test_a_world_writable_default_file_is_not_run_unless_named(tmp_path, monkeypatch, capsys, cmd):
    from tfcluster.cli.main import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    f = tmp_path / "cluster.yaml"
    f.write_text(PLANTED)
    os.chmod(f, 0o666)
    assert main(cmd) == 2
    err = capsys.readouterr().err
    assert err.startswith("tfcluster: error: ./cluster.yaml can be written by every user (mode 0666): "
                          "it is not run unless you name it (tfcluster launch ./cluster.yaml)"), err
    assert main(["status"]) in (0, 2) and "not run unless" not in capsys.readouterr().err  # reading is fine
    if cmd[0] == "launch":
        assert main(["launch", "cluster.yaml", "--dry-run"]) == 0      # named: the caller chose it


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_default_file_another_user_owns_is_not_launched(tmp_path, monkeypatch, capsys):
    from tfcluster.cli.main import main
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "cluster.yaml"
    f.write_text(PLANTED)
    os.chown(f, 65534, 65534)
    assert main(["launch", "--dry-run"]) == 2
    assert "./cluster.yaml belongs to another user (uid 65534)" in capsys.readouterr().err


def test_a_default_file_in_the_callers_private_group_is_run(tmp_path, monkeypatch):
    from tfcluster.cli.launching import foreign_file
    f = tmp_path / "cluster.yaml"
    f.write_text(PLANTED)
    os.chmod(f, 0o644)
    assert foreign_file(str(f)) is None


# ---- tfcluster import: only regular files read; -o writes only a new file of the caller's
def _tfjob():
    import helpers
    return os.path.join(helpers.ROOT, "tests", "data", "tfjob", "simple.yaml")


def test_import_of_a_fifo_is_refused_at_once(tmp_path, capsys):
    from tfcluster.cli.main import main
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    assert main(["import", str(fifo)]) == 2           # no writer: reading it would hang
    err = capsys.readouterr().err
    assert "is a FIFO" in err and "not a regular file" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("kind", ["planted", "fifo", "link"])
def test_import_o_never_writes_into_an_existing_file(tmp_path, capsys, kind):
    from tfcluster.cli.main import main
    out = tmp_path / "cluster.yaml"
    target = tmp_path / "elsewhere"
    target.write_text("mine\n")
    if kind == "planted":           # another user's file, made first and world-writable
        out.write_text("# mallory's\n")
        os.chmod(out, 0o666)
        if os.geteuid() == 0:
            os.chown(out, 65534, 65534)
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        out.symlink_to(target)
    assert main(["import", _tfjob(), "-o", str(out)]) == 2
    assert "exists already" in capsys.readouterr().err
    assert target.read_text() == "mine\n"
    if kind == "planted":
        assert out.read_text() == "# mallory's\n"
    fresh = tmp_path / "new.yaml"
    assert main(["import", _tfjob(), "-o", str(fresh)]) == 0 and fresh.stat().st_uid == os.geteuid()


def test_a_secret_program_argument_is_masked_inside_other_values_too(tmp_path, capsys):
    """``--db-password=VALUE`` in the program's args, and the same value inside a variable
    that does not look secret: masked there too, in validate, the dry run and the Slurm
    script (where the variable is held back and carried to the job)."""
    from tfcluster.cli.main import main
    f = tmp_path / "cluster.yaml"
    (tmp_path / "t.py").write_text("")
    f.write_text("cluster: {worker: [localhost:2223]}\nprogram:\n  command: [python, t.py]\n"
                 "  args: [--db-password=s3cr3t-pw-8842]\n"
                 "  env: {DSN: 'postgres://app:s3cr3t-pw-8842@db/app', OTHER: plain}\n")
    for cmd in (["validate", "--file-only", str(f), "--json"], ["validate", "--file-only", str(f)],
                ["launch", str(f), "--dry-run"], ["render", "slurm", str(f)]):
        assert main(cmd) == 0, cmd
        out = capsys.readouterr().out
        assert "s3cr3t-pw-8842" not in out, (cmd, out)
        assert "OTHER" in out and "DSN" in out, (cmd, out)


# ---- tensorboard and profile on records of others, or with hostile strings
def _record(folder, run_id="r1", **more):
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    rec = {"run_id": run_id, "result": "succeeded", "run_dir": str(folder), "tasks": [
        {"task": "worker:0", "state": "succeeded", "argv": ["python", "t.py", "--logdir", "/root"]}]}
    rec.update(more)
    (folder / "run.json").write_text(json.dumps(rec))
    return folder


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a run folder to another user")
def test_tensorboard_serves_only_the_callers_own_runs(tmp_path, capsys):
    from tfcluster.cli.main import main
    theirs = _record(tmp_path / "runs" / "r1")
    for p in (theirs, theirs / "run.json"):
        os.chown(p, 65534, 65534)
    assert main(["tensorboard", str(theirs), "--print"]) == 2
    err = capsys.readouterr().err
    assert "owned by another user (uid 65534)" in err and len(err.strip().splitlines()) == 1


def test_profile_and_tensorboard_print_a_hostile_run_id_as_printable_text(tmp_path, capsys):
    from tfcluster.cli.main import main
    hostile = "r1\x1b]0;owned\x07\x1b[2J\x1bc"
    run = _record(tmp_path / "runs" / "r1", run_id=hostile)
    assert main(["tensorboard", str(run), "--profile"]) == 2
    assert main(["profile", str(run), "--seconds", "1"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "r1" in err


def test_tensorboard_says_who_else_can_open_its_port(tmp_path, capsys, monkeypatch):
    from tfcluster.runs import control
    run = _record(tmp_path / "runs" / "r1")
    ran = []

    def no_exec(path, argv):
        ran.append(argv)
        raise SystemExit(0)
    monkeypatch.setattr(control.os, "execv", no_exec)
    monkeypatch.setattr(control, "tensorboard_installed", lambda: True)
    with pytest.raises(SystemExit):
        control.tensorboard(str(run), json.loads((run / "run.json").read_text()), port=6123)
    err = capsys.readouterr().err
    assert ran and "note: TensorBoard has no login: every user of this machine can open http://localhost:6123/" in err
