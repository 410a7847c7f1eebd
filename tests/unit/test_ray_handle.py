"""A Ray task's handle (tfcluster.backends.ray.RayHandle) closes its exit pipe once, and never
under its pull thread: no Ray cluster, the actor's answers are given here (``ray.get``
replaced), no process started."""
from __future__ import annotations

import os
import threading

import pytest

ray = pytest.importorskip("ray")

from tfcluster.backends.ray import RayHandle  # noqa: E402 (after the skip)


class _Actor:
    class read:
        @staticmethod
        def remote(wait):
            return "ref"


@pytest.fixture
def thread_errors(monkeypatch):
    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    return errors


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
        return False
    except OSError:
        return True


def _handle(monkeypatch, answer):
    monkeypatch.setattr(ray, "get", answer)
    h = RayHandle(_Actor(), 123, "worker:0", "n" * 20, "10.0.0.1")
    return h


def test_a_second_close_closes_nothing(monkeypatch, thread_errors):
    """The exit pipe is closed once: a second close() must not close files that have taken its
    descriptor numbers since (the old handler ignored the EBADF, or closed another file)."""
    h = _handle(monkeypatch, lambda ref: (b"out", b"", 0))
    assert h.wait(5) == 0
    h._thread.join(5)
    r, w = h._exit_r, h._exit_w
    h.close()
    assert _closed(r) and _closed(w)
    a, b = os.pipe()
    os.dup2(a, r, inheritable=False)       # other files take those two numbers
    os.dup2(b, w, inheritable=False)
    os.close(a)
    os.close(b)
    try:
        h.close()
        assert not _closed(r) and not _closed(w)
    finally:
        os.close(r)
        os.close(w)
        h.stdout.close()
        h.progress.close()
    assert thread_errors == []


def test_closed_before_the_task_ends_the_pull_thread_closes_the_write_end(monkeypatch, thread_errors):
    """RayBackend.close waits 10 s for each task, then closes its handle: a pull thread still
    waiting on Ray keeps the write end, writes nothing to a closed pipe, and closes it itself."""
    release = threading.Event()

    def answer(ref):
        release.wait(10)
        return (b"", b"", 3)
    h = _handle(monkeypatch, answer)
    try:
        r, w = h._exit_r, h._exit_w
        h.close()
        assert _closed(r) and not _closed(w)       # the thread's end stays open
        release.set()
        h._thread.join(5)
        assert not h._thread.is_alive() and h.poll() == 3
        assert _closed(w)
        h.close()                                  # still nothing more to close
    finally:
        release.set()
        h.stdout.close()
        h.progress.close()
    assert thread_errors == []
