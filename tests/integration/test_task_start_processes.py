"""A task started the fast way (``setpriv --pdeathsig`` and a line of ``sh``, no preexec_fn) and
the fallback way (``child_setup`` between fork and exec, ``TFCLUSTER_SETPRIV=""``) keeps the
same guarantees: it dies at once with a SIGKILLed launcher, it starts with default signal
dispositions, and a child whose launcher died before its death signal was set never runs.
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


@pytest.mark.skipif(base.setpriv() is None, reason="no setpriv with --pdeathsig here")
def test_a_child_whose_launcher_died_before_its_death_signal_never_runs(tmp_path):
    """The fork-to-prctl race: the shim compares its parent with the launcher's pid (not with
    1: under a subreaper an orphan's parent is not init). Here the 'launcher' pid is another."""
    mark = tmp_path / "ran"
    argv = ["touch", str(mark)]
    wrapped = [base.setpriv(), "--pdeathsig", "KILL", "--", "/bin/sh", "-c"]
    r = subprocess.run(wrapped + [base._SHIM % (os.getpid() + 1), "tfcluster", *argv], timeout=30)
    assert r.returncode == 137 and not mark.exists()
    r = subprocess.run(wrapped + [base._SHIM % os.getpid(), "tfcluster", *argv], timeout=30)
    assert r.returncode == 0 and mark.exists()


def test_start_child_runs_the_program_with_its_own_pid_and_args(tmp_path):
    """Args with spaces, quotes and a leading dash reach the program as they are."""
    args = ["a b", "'q'", "-x", "$HOME", ""]
    p = base.start_child([sys.executable, "-c", "import os, sys, json; print(json.dumps([os.getpid()] + sys.argv[1:]))",
                          *args], stdout=subprocess.PIPE, start_new_session=True, close_fds=True)
    out, _ = p.communicate(timeout=30)
    got = json.loads(out)
    assert got == [p.pid] + args
