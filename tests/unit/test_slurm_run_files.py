"""The Slurm launcher's own files in the run folder go through tfcluster.safe_files: the batch
script it writes (job.sbatch), the job's output it follows (slurm-JOB.out), the exit code the
batch script leaves (exit_code) and the failed task's log it summarises. A link planted under
any of these names is refused, never written or read through; reads are bounded by a window.
Pure: no process is started (a refused job.sbatch never reaches sbatch)."""
from __future__ import annotations

import os
import textwrap
import tracemalloc

import pytest

from helpers import attack
from helpers.attack import mode as _mode
from helpers.attack import untouched as _untouched
from tfcluster.backends.agent.folder import FolderChannel
from tfcluster.backends.slurm import follower
from tfcluster.backends.slurm.batch import plan_data, write_batch_script
from tfcluster.backends.slurm.follower import LOG_TAIL_WINDOW, Follower, _read_exit_file, _Tail, log_tail
from tfcluster.clusterfile import config
from tfcluster.errors import UserError
from tfcluster.plan.runplan import LaunchOptions, build_plan

logdir, victim = attack.logdir, attack.victim     # the fixtures, shared with tests/unit/test_safe_files.py


@pytest.fixture
def said(monkeypatch):
    lines = []
    monkeypatch.setattr(follower, "info", lambda line, *a, **k: lines.append(line))
    return lines


@pytest.fixture
def run_dir(logdir):
    d = logdir / "r1"
    d.mkdir(mode=0o700)
    return d


def _follower(tmp_path, run_dir):
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent("cluster: {ps: 1, worker: 1}\nprogram: {command: [python, t.py]}\n"))
    plan = build_plan(config.load(str(p)), LaunchOptions(backend="slurm", logdir=str(run_dir.parent),
                                                         run_id=run_dir.name))
    return Follower(plan_data(plan), str(run_dir), quiet=True)


# ---- job.sbatch
@pytest.mark.parametrize("target", ["bashrc", "new-file"])
def test_a_link_planted_at_job_sbatch_is_refused_and_not_written_through(tmp_path, run_dir, victim,
                                                                         target):
    """A link at job.sbatch (to an existing file, or dangling: it would make one) is refused
    with one line before sbatch runs; the file it points to is neither written nor made."""
    os.symlink(victim / target, run_dir / "job.sbatch")
    with pytest.raises(UserError, match=r"^--backend slurm: .*job\.sbatch exists already"):
        _follower(tmp_path, run_dir).run_sbatch("tfcluster-r1")   # no process: sbatch not reached
    _untouched(victim)
    assert os.path.islink(run_dir / "job.sbatch")


def test_a_file_planted_at_job_sbatch_is_refused_not_truncated(run_dir):
    (run_dir / "job.sbatch").write_text("#!/bin/sh\necho planted\n")
    with pytest.raises(UserError, match="exists already"):
        write_batch_script(str(run_dir / "job.sbatch"), "#!/bin/bash\n")
    assert (run_dir / "job.sbatch").read_text() == "#!/bin/sh\necho planted\n"


def test_the_batch_script_is_a_new_private_file(run_dir):
    write_batch_script(str(run_dir / "job.sbatch"), "#!/bin/bash\nexit 0\n")
    assert (run_dir / "job.sbatch").read_text() == "#!/bin/bash\nexit 0\n"
    assert _mode(run_dir / "job.sbatch") == 0o600


# ---- slurm-JOB.out
def test_the_job_output_is_followed_in_lines(run_dir, said):
    out = run_dir / "slurm-7.out"
    tail = _Tail(str(out))
    assert list(tail.read()) == []                       # not made yet
    out.write_bytes(b"[worker:0] one\n[worker:0] tw")
    assert list(tail.read()) == ["[worker:0] one"]
    with open(out, "ab") as f:
        f.write(b"o\nlast")
    assert list(tail.read()) == ["[worker:0] two"]
    assert list(tail.read(final=True)) == ["last"]
    assert said == []


def test_a_link_planted_at_the_job_output_is_not_read(run_dir, victim, said):
    os.symlink(victim / "bashrc", run_dir / "slurm-7.out")
    tail = _Tail(str(run_dir / "slurm-7.out"))
    assert list(tail.read()) == [] and list(tail.read(final=True)) == []
    assert len(said) == 1 and "symbolic link; not followed" in said[0], said   # said once
    _untouched(victim)


def test_a_fifo_planted_at_the_job_output_does_not_block(run_dir, said):
    os.mkfifo(run_dir / "slurm-7.out")
    assert list(_Tail(str(run_dir / "slurm-7.out")).read(final=True)) == []
    assert "FIFO" in said[0]


def test_a_line_without_end_in_the_job_output_comes_in_window_pieces(run_dir):
    out = run_dir / "slurm-7.out"
    out.write_bytes(b"x" * 10_000 + b"\nshort\n")
    tail = _Tail(str(out), window=1024)
    got = list(tail.read())
    assert max(len(line) for line in got) <= 1024 + 1024      # rest + one window, at most
    assert "".join(got[:-1]) == "x" * 10_000 and got[-1] == "short"


# ---- exit_code
def test_the_exit_code_file_is_read_as_a_plain_small_file(run_dir, victim):
    assert _read_exit_file(str(run_dir)) is None
    (run_dir / "exit_code").write_text("3\n")
    assert _read_exit_file(str(run_dir)) == 3
    (run_dir / "exit_code").write_text("0" * 100 + "1\n")       # over the limit: not read
    assert _read_exit_file(str(run_dir)) is None
    os.unlink(run_dir / "exit_code")
    (victim / "code").write_text("0\n")
    os.symlink(victim / "code", run_dir / "exit_code")          # a link: Slurm's code is used
    assert _read_exit_file(str(run_dir)) is None
    os.unlink(run_dir / "exit_code")
    os.mkfifo(run_dir / "exit_code")                            # a FIFO: no wait
    assert _read_exit_file(str(run_dir)) is None


# ---- the failed task's log
def test_a_huge_task_log_is_read_in_a_bounded_window(run_dir):
    """The failure summary reads only the end of the log: an 8 GiB log (sparse) costs the
    window, not its size, and its last lines are what is shown."""
    log = run_dir / "worker-0.log"
    with open(log, "wb") as f:
        f.truncate(8 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b"".join(b"line %d\n" % i for i in range(20)))
    tracemalloc.start()
    try:
        lines = log_tail(str(log), 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == [f"line {i}" for i in range(10, 20)]
    assert peak < 4 * LOG_TAIL_WINDOW, peak


def test_the_cut_first_line_of_the_window_is_left_out(run_dir):
    log = run_dir / "worker-0.log"
    log.write_bytes(b"a" * 100 + b"\nend one\nend two\n")
    assert log_tail(str(log), 10, window=30) == ["end one", "end two"]
    log.write_bytes(b"b" * 100)                       # one line longer than the window: its end
    assert log_tail(str(log), 10, window=30) == ["b" * 30]
    assert log_tail(str(run_dir / "none.log")) == []


def test_the_failure_summary_does_not_read_a_planted_link(tmp_path, run_dir, victim, said):
    os.symlink(victim / "bashrc", run_dir / "worker-0.log")
    FolderChannel(str(run_dir)).write_exit("worker:0", {"task": "worker:0", "failed": True,
                                                    "reason": "exited with code 1", "host": "n1"})
    assert _follower(tmp_path, run_dir)._result(1, "srun exited with 1") != 0
    assert any("first failure: worker:0" in line for line in said), said
    assert any("its log is not shown" in line and "symbolic link" in line for line in said), said
    assert not any("victim's ~/.bashrc" in line for line in said), said
    _untouched(victim)


def test_the_failure_summary_shows_the_end_of_the_log_as_printable_text(tmp_path, run_dir, said):
    (run_dir / "worker-0.log").write_bytes(b"early\n" * 50 + b"Boom\x1b[2J here\n")
    FolderChannel(str(run_dir)).write_exit("worker:0", {"task": "worker:0", "failed": True,
                                                    "reason": "exited with code 1", "host": "n1"})
    _follower(tmp_path, run_dir)._result(1, "srun exited with 1")
    shown = [line for line in said if line.startswith("  | ")]
    assert len(shown) == 10 and shown[-1] == "  | Boom here", shown
