"""A task started the fast way (``setpriv --pdeathsig``, no preexec_fn) and the fallback way
(``child_setup`` between fork and exec, ``TFCLUSTER_SETPRIV=""``) keeps the same guarantees:
it dies at once with a SIGKILLed launcher, it starts with default signal dispositions, and a
task whose launcher died before its death signal was set is killed by the reaper.
(The choice between the two: tests/unit/test_task_start.py.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers import ROOT
from tfcluster.backends import base

pytestmark = pytest.mark.integration

# A task that says its parent-death signal and ignored signals, then waits ignoring SIGTERM: the
# reaper (SIGTERM, 2 s, SIGKILL) cannot end it quickly; only the parent-death signal can. The
# ignored signals are read by sh, first (Python itself ignores SIGPIPE and SIGXFSZ).
SHELL = ('m="$1/$(echo "$TFCLUSTER_TASK" | tr : -)"; grep "^SigIgn:" /proc/$$/status > "$m.ign"; '
         'exec "$2" "$3" "$m"')
TASK = r"""
import ctypes, json, os, signal, sys, time
v = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0)      # PR_GET_PDEATHSIG
ign = int(open(sys.argv[1] + ".ign").read().split()[1], 16)
info = {"pid": os.getpid(), "pdeathsig": v.value, "ignored": [s.name for s in signal.Signals if s > 0
        and s < 64 and ign >> (s - 1) & 1]}
with open(sys.argv[1], "w") as f:
    json.dump(info, f)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie is dead: here init reaps orphans only now and then)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    gone_by = time.time() + seconds
    while _alive(pid) and time.time() < gone_by:
        time.sleep(0.05)
    return not _alive(pid)


def _launch(tmp_path, setpriv, n=2, ignore_hup=False):
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "task.py").write_text(TASK)
    f = tmp_path / "cluster.yaml"
    f.write_text(json.dumps({"cluster": {"worker": n}, "base_port": 21000 + os.getpid() % 5000,
                             "program": {"command": ["sh", "-c", SHELL, "sh", str(marks),
                                                     sys.executable, str(tmp_path / "task.py")]},
                             "watchdog": {"startup_timeout": 0}, "logdir": str(tmp_path / "runs")}))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    if setpriv is not None:
        env[base.SETPRIV_ENV] = setpriv

    def pre():
        if ignore_hup:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
    launcher = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live"],
                                cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, preexec_fn=pre, start_new_session=True)
    deadline = time.time() + 60
    while len([m for m in os.listdir(marks) if not m.endswith(".ign")]) < n:
        assert launcher.poll() is None, "the launcher ended early"
        assert time.time() < deadline, "the tasks never ran"
        time.sleep(0.1)
    time.sleep(0.2)
    return launcher, [json.loads(p.read_text()) for p in sorted(marks.iterdir()) if p.suffix != ".ign"]


@pytest.mark.parametrize("way", ["fast", "fallback"])
def test_a_task_dies_at_once_with_a_sigkilled_launcher(tmp_path, way):
    launcher, tasks = _launch(tmp_path, None if way == "fast" else "")
    pids = [t["pid"] for t in tasks]
    try:
        assert all(t["pdeathsig"] == signal.SIGKILL for t in tasks), tasks
        assert all(not {"SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE"} & set(t["ignored"]) for t in tasks), tasks
        if way == "fast":   # the fast start really ran: the task's pid ran setpriv first
            assert base.setpriv() is not None
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        gone_by = time.time() + 1.5   # the reaper's SIGKILL comes 2 s after its SIGTERM
        while any(_alive(p) for p in pids) and time.time() < gone_by:
            time.sleep(0.05)
        left = [p for p in pids if _alive(p)]
        assert not left, f"tasks outlived the SIGKILLed launcher ({way} start): {left}"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(2.5)   # the reaper ends after its SIGKILL round


def test_a_launcher_that_ignores_sighup_gives_tasks_the_default(tmp_path):
    """nohup tfcluster launch: SIGHUP ignored in the launcher, default in its tasks."""
    launcher, tasks = _launch(tmp_path, None, ignore_hup=True)
    try:
        assert all("SIGHUP" not in t["ignored"] and t["pdeathsig"] == signal.SIGKILL for t in tasks), tasks
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        for t in tasks:
            try:
                os.kill(t["pid"], signal.SIGKILL)
            except OSError:
                pass


FAKE_LAUNCHER = r"""
import os, subprocess, sys
from tfcluster.plan import contract
from tfcluster.backends.local import Reaper
reaper = Reaper()
reaper.start()
# a task whose start the launcher did not live to report: no death signal, not told to the reaper
env = dict(os.environ, **{contract.LAUNCHER_PID: str(os.getpid())})
p = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
print(p.pid, flush=True)
sys.stdin.read()
"""


def test_the_reaper_kills_a_task_whose_launcher_died_before_its_death_signal(tmp_path):
    """The fork-to-prctl race of the fast start: the launcher is SIGKILLed after the fork and
    before setpriv's prctl (and before it told the reaper): the reaper finds the task by the
    launcher's pid in its environment."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    launcher = subprocess.Popen([sys.executable, "-c", FAKE_LAUNCHER], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    task = int(launcher.stdout.readline())
    try:
        assert _alive(task)
        launcher.kill()
        launcher.wait(timeout=10)
        assert _gone_within(task, 5)
    finally:
        try:
            os.kill(task, signal.SIGKILL)
        except OSError:
            pass
        launcher.stdin.close()
        launcher.stdout.close()


def test_start_child_runs_the_program_with_its_own_pid_args_and_environment(tmp_path):
    """Args with spaces, quotes and a leading dash, and environment variables a shell would
    drop (``BASH_FUNC_module%%``) or rewrite (``PWD``) reach the program as they are."""
    args = ["a b", "'q'", "-x", "$HOME", ""]
    env = {"PATH": os.environ["PATH"], "BASH_FUNC_module%%": "() {  echo m\n}", "A-B": "1",
           "PWD": "/somewhere/else"}
    p = base.start_child([sys.executable, "-c", "import os, sys, json; "
                          "print(json.dumps([os.getpid(), dict(os.environ)] + sys.argv[1:]))", *args],
                         env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, start_new_session=True,
                         close_fds=True)
    out, _ = p.communicate(timeout=30)
    got = json.loads(out)
    assert got[0] == p.pid and got[2:] == args
    assert {k: got[1].get(k) for k in env} == env


@pytest.mark.parametrize("setpriv", [None, ""], ids=["fast", "fallback"])
def test_a_program_that_cannot_run_is_one_line_naming_the_task(tmp_path, setpriv):
    """setpriv would report a missing program after the start (exit 127): start_child looks it
    up first, so the launcher says what it said with Popen's own error."""
    (tmp_path / "noexec.sh").write_text("#!/bin/sh\necho hi\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    if setpriv is not None:
        env[base.SETPRIV_ENV] = setpriv
    for program, words in ((str(tmp_path / "nodir" / "prog"), "program not found"),
                           ("./noexec.sh", "program cannot be run (permission denied)")):
        f = tmp_path / "cluster.yaml"
        f.write_text(json.dumps({"cluster": {"worker": 1}, "base_port": 21000 + os.getpid() % 5000,
                                 "program": {"command": [program]},
                                 "watchdog": {"startup_timeout": 0}, "logdir": str(tmp_path / "runs")}))
        r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert f"error: worker:0: {words}: " in r.stderr and program.split("/")[-1] in r.stderr, r.stderr


FAKE_LAUNCHER_WITH_CHILD = r"""
import os, subprocess, sys
from tfcluster.plan import contract
from tfcluster.backends.local import Reaper
reaper = Reaper()
reaper.start()
# a task not yet told to the reaper (groups are told in batches), with a child of its own
env = dict(os.environ, **{contract.LAUNCHER_PID: str(os.getpid())})
p = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], env=env, start_new_session=True,
                     stdout=subprocess.PIPE, text=True)
print(p.pid, p.stdout.readline().strip(), flush=True)
sys.stdin.read()
"""


def test_the_reaper_kills_the_child_of_a_task_whose_leader_died_with_the_launcher(tmp_path):
    """The launcher is SIGKILLed before it told the reaper of a task; the task's leader is gone
    too (its death signal), and its child, in the task's group but no session leader, is left:
    the reaper finds it by the launcher's pid in its environment and kills its group."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    launcher = subprocess.Popen([sys.executable, "-c", FAKE_LAUNCHER_WITH_CHILD], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    leader, child = (int(x) for x in launcher.stdout.readline().split())
    try:
        assert _alive(child) and os.getpgid(child) == leader
        os.kill(leader, signal.SIGKILL)       # what the death signal does to the leader
        launcher.kill()
        launcher.wait(timeout=10)
        assert _gone_within(child, 5), "the task's child outlived its launcher"
    finally:
        for pid in (leader, child):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        launcher.stdin.close()
        launcher.stdout.close()
