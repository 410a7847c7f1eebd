"""A shared machine (docs/SECURITY.md), with real processes: another local user (uid 65534 stands in, through chown and
setuid, as root) plants files where tfcluster reads them. ``stop`` signals nothing that is not
the caller's own launcher; TAB completion runs nothing named in a record; no module planted in
the current folder runs (detach, the reaper, tensorboard, the Slurm node command); ``logs``
memory stays bounded. No TensorFlow."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from helpers.completion import complete as complete_as_bash
from tfcluster.cli import main as cli
from tfcluster.runs import index

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
OTHER = 65534        # nobody: "another user"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


@pytest.fixture
def state(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(d))
    return d


@pytest.fixture
def victim_process():
    """A process of the caller's that is not a tfcluster launcher (their editor, say)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p
    p.kill()
    p.wait()


def planted_record(d, pid, **extra):
    os.makedirs(d, exist_ok=True)
    record = {"run_id": os.path.basename(d), "result": "running", "launcher_pid": pid,
              "launcher_started": psutil.Process(pid).create_time(), "started": time.time(),
              "tasks": [{"task": "worker:0", "state": "running"}]}
    record.update(extra)
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(record, f)
    return d


def chown_tree(d, uid=OTHER):
    os.chown(d, uid, uid)
    for name in os.listdir(d):
        os.chown(os.path.join(d, name), uid, uid, follow_symlinks=False)


def stop(capsys, *args):
    rc = cli.main(["stop", *args])
    return rc, capsys.readouterr().err


# ------------------------------------------------------------------ finding 2: stop
@as_root
def test_stop_refuses_a_record_another_user_planted(tmp_path, capsys, state, victim_process):
    d = planted_record(str(tmp_path / "evil"), victim_process.pid)
    chown_tree(d)
    rc, err = stop(capsys, d)
    assert rc == 2 and "owned by another user" in err, err
    assert victim_process.poll() is None


def test_stop_signals_no_process_that_is_not_the_runs_launcher(tmp_path, capsys, state,
                                                               victim_process):
    # the caller's own record, naming the caller's own process with its true start time
    d = planted_record(str(tmp_path / "mine"), victim_process.pid)
    rc, err = stop(capsys, d)
    assert rc == 2 and "is not the launcher of this run folder" in err, err
    assert victim_process.poll() is None


@as_root
def test_stop_signals_no_process_of_another_user(tmp_path, capsys, state):
    p = subprocess.Popen(["sleep", "120"], cwd="/",
                         preexec_fn=lambda: (os.setgid(OTHER), os.setuid(OTHER)))
    try:
        d = planted_record(str(tmp_path / "mine"), p.pid)
        rc, err = stop(capsys, d)
        assert rc == 2 and "belongs to another user" in err, err
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_a_record_without_launcher_started_is_never_pid_1(tmp_path, capsys, state):
    d = planted_record(str(tmp_path / "old"), 1, launcher_started=None, started=time.time())
    rc, err = stop(capsys, d)
    assert rc == 1 and "is lost" in err and "nothing signalled" in err, err
    assert cli.main(["status", d]) == 5


@as_root
def test_a_bare_run_id_is_looked_up_in_the_callers_index_first(tmp_path, capsys, state,
                                                                monkeypatch, victim_process):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    evil = planted_record(str(shared / "nightly"), victim_process.pid)
    chown_tree(evil)
    monkeypatch.chdir(shared)
    # not in the index: the folder here is another user's, and is not acted on
    rc, err = stop(capsys, "nightly")
    assert rc == 2 and "owned by another user" in err, err
    # in the index: the caller's own run of that id is the one meant
    mine = tmp_path / "runs" / "nightly"
    mine.mkdir(parents=True)
    (mine / "run.json").write_text(json.dumps({"run_id": "nightly", "result": "succeeded",
                                               "tasks": []}))
    assert index.register(str(mine), "nightly") is None
    rc, err = stop(capsys, "nightly")
    assert rc == 0 and "not running (result: succeeded)" in err, err
    assert victim_process.poll() is None


@as_root
def test_a_plain_stop_never_picks_a_record_planted_in_a_shared_logdir(tmp_path, capsys, state,
                                                                       monkeypatch, victim_process):
    work = tmp_path / "work"
    work.mkdir()
    logdir = tmp_path / "shared"
    logdir.mkdir()
    os.chmod(logdir, 0o1777)
    (work / "cluster.yaml").write_text(f"cluster: {{worker: [localhost:2223]}}\n"
                                       f"program: {{command: [python, t.py]}}\nlogdir: {logdir}\n")
    # the attacker's record: the victim's own cluster file, a start in the future
    evil = planted_record(str(logdir / "zzz"), victim_process.pid,
                          file=str(work / "cluster.yaml"), started=time.time() + 3600)
    chown_tree(evil)
    monkeypatch.chdir(work)
    rc, err = stop(capsys)
    assert rc == 2 and "of other users left out" in err, err
    assert victim_process.poll() is None


# ------------------------------------------------------------------ finding 1: completion
bash = shutil.which("bash")


def complete(line, cwd, env):
    from tfcluster.cli.completion import bash_script
    return complete_as_bash(bash_script(cli.build_parser()), line, cwd, env)


@pytest.mark.skipif(bash is None, reason="bash is not installed")
def test_tab_completion_runs_nothing_named_in_a_record(tmp_path, state):
    pwn = tmp_path / "PWN"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "tfcluster"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m tfcluster \"$@\"\n")
    exe.chmod(0o755)
    env = dict(os.environ, XDG_STATE_HOME=str(state), PATH=f"{bindir}:{os.environ['PATH']}",
               PYTHONPATH=SRC)
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    hostile = [f"$(touch {pwn}1)", f"`touch {pwn}2`", f"w:0;touch {pwn}3"]
    (run / "run.json").write_text(json.dumps({
        "run_id": "r1", "result": "succeeded",
        "tasks": [{"task": t, "state": "stopped"} for t in hostile + ["worker:0"]]}))
    evil = tmp_path / "runs" / "r2"
    shutil.copytree(run, evil)
    assert index.register(str(evil), f"$(touch {pwn}4)") is None
    assert index.register(str(run), "r1") is None
    assert "worker:0" in complete("tfcluster logs r1 ", tmp_path, env)
    complete("tfcluster logs ", tmp_path, env)
    complete("tfcluster stop $", tmp_path, env)
    # the shell script alone, with values that reach it unfiltered (an older tfcluster on PATH)
    exe.write_text(f"#!/bin/sh\nprintf '%s\\n' '$(touch {pwn}5)' '`touch {pwn}6`' worker:0\n")
    assert "worker:0" in complete("tfcluster logs r1 ", tmp_path, env)
    assert not list(tmp_path.glob("PWN*")), "completion ran a command from a record"


# ------------------------------------------------------------------ finding 5: planted modules
PLANT = "import os; open(os.path.join({out!r}, 'PWN-' + __name__), 'w').close()\n"


def plant(folder, out, *names):
    for name in names:
        path = folder / name
        if name.endswith("/"):
            path.mkdir()
            (path / "__init__.py").write_text(PLANT.format(out=str(out)))
        else:
            path.write_text(PLANT.format(out=str(out)))


def test_no_module_planted_in_the_current_folder_runs(tmp_path, state, ports, monkeypatch):
    from tfcluster.backends.slurm.batch import TASK_COMMAND
    from tfcluster.runs.control import tensorboard_argv
    out = tmp_path / "out"
    out.mkdir()
    here = tmp_path / "shared"
    here.mkdir()
    plant(here, out, "tfcluster.py", "signal.py", "runpy.py", "select.py", "json.py", "base64.py",
          "tensorboard/")
    monkeypatch.chdir(here)
    (port,) = ports(1)
    (here / "cluster.yaml").write_text(
        f"cluster: {{worker: ['localhost:{port}']}}\n"
        f"program: {{command: [{sys.executable}, -I, -c, 'print(1)']}}\nlogdir: {tmp_path}/runs\n")
    # launch (its reaper: python -I -S -c ...) and launch --detach (python -I -m tfcluster)
    assert cli.main(["launch", "cluster.yaml", "--no-live", "--no-security-note"]) == 0
    assert cli.main(["launch", "-d", "cluster.yaml", "--no-security-note"]) == 0
    deadline = time.time() + 60
    while time.time() < deadline:
        runs = [d for d in (tmp_path / "runs").iterdir()
                if (d / "run.json").exists() and "succeeded" in (d / "run.json").read_text()]
        if len(runs) == 2:
            break
        time.sleep(0.2)
    assert len(runs) == 2
    # the tensorboard fallback and the Slurm node command, run here
    monkeypatch.setattr(shutil, "which", lambda name: None)
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    cmd = tensorboard_argv(str(tmp_path), port=None)
    assert cmd[:3] == [sys.executable, "-I", "-m"]
    subprocess.run(cmd[:4] + ["--version_tb"], cwd=here, capture_output=True, timeout=60)
    subprocess.run([sys.executable, "-c", TASK_COMMAND], cwd=here, capture_output=True, timeout=60,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert sorted(os.listdir(out)) == [], "a planted module ran"


def test_the_old_helper_commands_would_have_run_them(tmp_path):
    """The check above can fail: a planted module runs under the old Slurm node command."""
    out = tmp_path / "out"
    out.mkdir()
    plant(tmp_path, out, "tfcluster/")
    subprocess.run([sys.executable, "-m", "tfcluster.backends.agent.node"], cwd=tmp_path,
                   capture_output=True, timeout=60)
    assert os.listdir(out) == ["PWN-tfcluster"]


# ------------------------------------------------------------------ finding 8: logs memory
def test_logs_memory_stays_bounded_by_a_window(tmp_path):
    from helpers.records import make
    d = make(tmp_path)
    line = b"x" * 999 + b"\n"
    with open(os.path.join(d, "worker-0.log"), "wb") as f:
        for _ in range(2):
            f.write(line * 50_000)                 # 100 MB in all
        f.write(b"y" * (30 << 20))                 # and a 30 MB line without end
    # the peak of this process's own memory (VmHWM: since its exec; ru_maxrss would also count
    # the pages of the large pytest it was started from)
    code = ("import re, sys; from tfcluster.cli.main import main; rc = main(sys.argv[1:]); "
            "sys.stderr.write(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
            "sys.exit(rc)")
    for extra in ([], ["--attempt", "0"]):
        r = subprocess.run([sys.executable, "-c", code, "logs", d, "worker:0", *extra],
                           env=dict(os.environ, PYTHONPATH=SRC), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=300)
        assert r.returncode == 0, r.stderr
        rss_kib = int(r.stderr.decode().strip().splitlines()[-1])
        assert rss_kib < 64_000, rss_kib           # ~22 MB here; not the 130 MB+ of the whole log


# ------------------------------------------------------------------ finding 10: detach files
def test_detach_files_are_private_and_made_without_following_links(tmp_path, state, ports,
                                                                    monkeypatch, capsys):
    (port,) = ports(1)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(
        f"cluster: {{worker: ['localhost:{port}']}}\n"
        f"program: {{command: [{sys.executable}, -c, 'print(1)']}}\nlogdir: runs\n")
    assert cli.main(["launch", "-qd", "cluster.yaml", "--run-id", "r1", "--no-security-note"]) == 0
    capsys.readouterr()
    d = tmp_path / "runs" / "r1"
    deadline = time.time() + 60
    while time.time() < deadline and "succeeded" not in (d / "run.json").read_text():
        time.sleep(0.2)
    for name in ("console.log", "detached.json", "run.json"):
        assert oct((d / name).stat().st_mode & 0o777) == "0o600", name
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    # a second detach of that id: one line, and nothing of the first run's is touched
    assert cli.main(["launch", "-d", "cluster.yaml", "--run-id", "r1"]) == 2
    assert "exists already" in capsys.readouterr().err
