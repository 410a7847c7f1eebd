"""How tfcluster starts a child (tfcluster.backends.base.start_child): the fast start behind
``setpriv`` (no preexec_fn, so CPython can vfork), the fallback with ``child_setup``, and the
"program not found" check the fast start needs. No process is started: Popen is replaced.
(The real processes: tests/integration/test_task_start_processes.py.)"""
from __future__ import annotations

import os
import signal

import pytest

from tfcluster.backends import base

pytestmark = pytest.mark.unit


class FakePopen:
    def __init__(self, argv, **kw):
        self.argv, self.kw = argv, kw


@pytest.fixture
def popen(monkeypatch):
    monkeypatch.setattr(base.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(base, "_check_program", lambda *a: None)
    # a launcher that ignores none of the signals start_child restores (a test run before this
    # one in the same process may have left one ignored: the fallback would be taken)
    ignored = [s for s in base.DEFAULT_SIGNALS
               if s != signal.SIGPIPE and signal.getsignal(s) == signal.SIG_IGN]
    for s in ignored:
        signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
    yield
    for s in ignored:
        signal.signal(s, signal.SIG_IGN)


def test_fast_start_wraps_the_argv_and_runs_no_python_in_the_child(popen, monkeypatch):
    monkeypatch.setattr(base, "setpriv", lambda: "/usr/bin/setpriv")
    p = base.start_child(["prog", "a b"], cwd="/", start_new_session=True)
    assert "preexec_fn" not in p.kw and p.kw["start_new_session"] is True
    assert p.argv == ["/usr/bin/setpriv", "--pdeathsig", "KILL", "--", "prog", "a b"]
    p = base.start_child(["srun"], death_signal=signal.SIGTERM)
    assert p.argv[2] == "TERM"


def test_without_setpriv_the_child_is_set_up_by_child_setup(popen, monkeypatch):
    monkeypatch.setattr(base, "setpriv", lambda: None)
    p = base.start_child(["prog"], death_signal=signal.SIGTERM)
    assert p.argv == ["prog"]
    setup = p.kw["preexec_fn"]
    assert setup.func is base.child_setup and setup.args == (signal.SIGTERM, ())


def test_a_task_that_must_ignore_sigterm_is_started_so_even_with_setpriv(popen, monkeypatch):
    """A Slurm node's ps ignores Slurm's SIGTERM to the step (rules.shielded_from_step_signals):
    only child_setup sets a disposition that survives exec."""
    monkeypatch.setattr(base, "setpriv", lambda: "/usr/bin/setpriv")
    p = base.start_child(["prog"], ignore=(signal.SIGTERM,))
    assert p.argv == ["prog"]
    assert p.kw["preexec_fn"].args == (signal.SIGKILL, (signal.SIGTERM,))


def test_an_ignored_signal_takes_the_fallback(popen, monkeypatch):
    """exec keeps an ignored signal ignored: only child_setup can give the child its default."""
    monkeypatch.setattr(base, "setpriv", lambda: "/usr/bin/setpriv")
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        p = base.start_child(["prog"])
    finally:
        signal.signal(signal.SIGHUP, old)
    assert p.argv == ["prog"] and "preexec_fn" in p.kw


def test_start_child_refuses_what_it_cannot_keep(popen):
    for kw in ({"preexec_fn": print}, {"shell": True}, {"executable": "x"}, {"restore_signals": False}):
        with pytest.raises(ValueError):
            base.start_child(["prog"], **kw)


def test_setpriv_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(base.SETPRIV_ENV, "")
    assert base.setpriv() is None


def test_a_missing_program_raises_as_popen_does(tmp_path):
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    env = {"PATH": str(tmp_path / "bin")}
    with pytest.raises(FileNotFoundError) as e:
        base._check_program("nosuch-xyz", env, str(tmp_path))
    assert e.value.filename == "nosuch-xyz"
    with pytest.raises(PermissionError):
        base._check_program("tool", env, str(tmp_path))          # there, not executable
    with pytest.raises(PermissionError):
        base._check_program("./bin/tool", env, str(tmp_path))
    with pytest.raises(FileNotFoundError):
        base._check_program("./bin/nosuch", env, str(tmp_path))
    with pytest.raises(PermissionError):
        base._check_program("./bin", env, str(tmp_path))          # a folder: EACCES, as exec says
    tool.chmod(0o755)
    base._check_program("tool", env, str(tmp_path))
    base._check_program("bin/tool", env, str(tmp_path))               # relative to the task's folder
    base._check_program(str(tool), {"PATH": ""}, "/")
    with pytest.raises(FileNotFoundError):
        base._check_program("tool", {"PATH": "/nonexistent"}, str(tmp_path))


def test_ignores_reads_what_a_process_ignores_now():
    """How a Slurm node's wrapper tells a ps that still ignores SIGTERM (stopped with SIGHUP)
    from one that installed a handler of its own (stopped with SIGTERM)."""
    old = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        assert base.ignores(os.getpid(), signal.SIGUSR2)
        signal.signal(signal.SIGUSR2, lambda *a: None)
        assert not base.ignores(os.getpid(), signal.SIGUSR2)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert not base.ignores(2 ** 22 + 7, signal.SIGTERM)      # no such process
