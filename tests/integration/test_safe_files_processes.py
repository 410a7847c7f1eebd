"""Run folders that cannot be redirected (tfcluster.safe_files), with real processes: a live
launcher whose run folder is swapped for a link, another user acting on a sticky logdir, launches
refused for an unsafe logdir, four simultaneous launches. No TensorFlow."""
import json
import os
import subprocess
import sys

import pytest

from helpers.attack import logdir, victim  # noqa: F401 (fixtures)
from helpers.attack import untouched as _untouched
from tfcluster import safe_files
from tfcluster.cli import main as cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))



@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_in_a_sticky_logdir_another_user_cannot_swap_the_run_folder(logdir, victim):
    os.chmod(logdir, 0o1777)
    folder = safe_files.make_run_folder(str(logdir), "r1")
    pid = os.fork()
    if pid == 0:   # the other user
        code = 0
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.rename(folder.path, os.path.join(str(logdir), "stolen"))
            code = 1
        except PermissionError:
            code = 0
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.listdir(logdir) == ["r1"]
    folder.close()


def test_launch_refuses_a_world_writable_logdir_in_one_line(tmp_path, ports, capsys):
    (port,) = ports(1)
    logdir = tmp_path / "shared"
    logdir.mkdir()
    os.chmod(logdir, 0o777)
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: ['localhost:{port}']}}\n"
                 f"program: {{command: [{sys.executable}, -c, 'print(1)']}}\n"
                 f"logdir: {logdir}\n")
    assert cli.main(["launch", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert f"logdir: {logdir} is group- and world-writable without the sticky bit (mode 0777)" in err
    assert os.listdir(logdir) == []


def test_launch_with_logdir_dev_null_gives_a_true_message(tmp_path, ports, capsys):
    (port,) = ports(1)
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: ['localhost:{port}']}}\n"
                 f"program: {{command: [{sys.executable}, -c, 'print(1)']}}\nlogdir: /dev/null\n")
    assert cli.main(["launch", str(f)]) == 2
    err = capsys.readouterr().err
    assert "logdir: /dev/null is not a folder" in err and "exists already" not in err


# --------------------------------------------------------------------- run ids
def test_four_simultaneous_launches_of_one_file_never_collide(tmp_path, ports):
    """Four real launchers of one file, started together: no two share a run folder. Each one
    either runs to the end in a run folder of its own, or is refused before anything starts
    (exit 2) because the file's run is already live, naming that run (the guard against launching a live run's file twice)."""
    (base,) = ports(1)
    logdir = tmp_path / "runs"
    f = tmp_path / "cluster.yaml"
    # a count job: each launcher picks its port at start (they may pick the same one: ports of
    # count jobs are not reserved across launchers, docs/SECURITY.md; this program binds none)
    f.write_text(f"cluster: {{worker: 1}}\nbase_port: {base}\n"
                 f"program: {{command: [{sys.executable}, -c, 'import time; time.sleep(1); print(42)']}}\n"
                 f"logdir: {logdir}\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    procs = [subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", "--quiet", str(f)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
             for _ in range(4)]
    outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    codes = [p.returncode for p in procs]
    assert set(codes) <= {0, 2} and codes.count(0) >= 1, outs
    for code, out in zip(codes, outs):
        if code == 2:
            assert "a run of this file is live" in out, out
            assert "Traceback" not in out and "exists already" not in out, out
    runs = sorted(os.listdir(logdir))
    assert len(runs) == codes.count(0), (runs, outs)
    for r in runs:
        record = json.loads((logdir / r / "run.json").read_text())
        assert record["result"] == "succeeded" and record["run_id"] == r
        assert (logdir / r / "worker-0.log").read_text().strip().endswith("42")


SWAP_PROGRAM = """\
import os, sys
n = os.environ["TFCLUSTER_RESTART_COUNT"]
print("attempt", n, flush=True)
sys.exit(3 if n == "0" else 0)
"""


def test_a_live_run_swapped_for_a_link_during_a_restart_backoff_writes_nothing_there(
        tmp_path, ports, victim):
    """The review's attack on a real launcher: during the restart backoff the run folder is
    replaced by a link; the restarted task's output, the events and run.json still go to the
    folder the launcher made."""
    import time
    (port,) = ports(1)
    (tmp_path / "prog.py").write_text(SWAP_PROGRAM)
    logdir = tmp_path / "runs"
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: ['localhost:{port}']}}\n"
                 f"program: {{command: [{sys.executable}, prog.py]}}\n"
                 f"restart: {{policy: on-failure, max_restarts: 1, backoff: 3, min_uptime: 0}}\n"
                 f"logdir: {logdir}\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", "--quiet", str(f),
                             "--run-id", "r1"], cwd=str(tmp_path), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        run, moved = logdir / "r1", logdir / "moved"
        deadline = time.time() + 60
        while time.time() < deadline:
            events = run / "events.jsonl"
            if events.exists() and "task_restarting" in events.read_text():
                break
            time.sleep(0.05)
        else:
            pytest.fail("no restart seen")
        os.rename(run, moved)
        os.symlink(victim, run)                 # the swap, during the 3 s backoff
        out = proc.communicate(timeout=60)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    _untouched(victim)
    assert "attempt 1" in (moved / "worker-0.log").read_text()
    assert json.loads((moved / "run.json").read_text())["result"] == "succeeded"
    assert "run_ended" in (moved / "events.jsonl").read_text()
