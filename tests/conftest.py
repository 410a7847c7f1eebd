"""Shared test helpers: free ports, and a check that no test leaves a process behind."""
from __future__ import annotations

import os
import time

import psutil
import pytest

from tfcluster.hosts import free_ports, port_in_use  # noqa: F401 (tests import free_ports from here)

def pytest_configure(config):
    """Runs started by tests register in a per-user index (tfcluster.runindex) and notes are
    remembered in the user's state folder: keep both out of the real home during tests."""
    if not os.environ.get("TFCLUSTER_TEST_KEEP_STATE"):
        import tempfile
        config._tfcluster_state = tempfile.mkdtemp(prefix="tfcluster-test-state-")
        os.environ["XDG_STATE_HOME"] = config._tfcluster_state


def pytest_unconfigure(config):
    state = getattr(config, "_tfcluster_state", None)
    if state:
        import shutil
        shutil.rmtree(state, ignore_errors=True)


SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared")


def port_is_free(port: int) -> bool:
    """True when a TensorFlow server could bind ``port`` (TIME_WAIT does not count as bound)."""
    return not port_in_use(port)


@pytest.fixture
def ports():
    """Call ports(n) for n free ports; after the test, they must all be free again."""
    taken = []

    def get(n):
        got = free_ports(n)
        taken.extend(got)
        return got

    yield get
    deadline = time.time() + 10
    busy = [p for p in taken if not port_is_free(p)]
    while busy and time.time() < deadline:
        time.sleep(0.2)
        busy = [p for p in taken if not port_is_free(p)]
    assert not busy, f"ports still bound after the test: {busy}"


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """Every test must leave no child process of pytest running."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    deadline = time.time() + 10
    while True:
        left = [p for p in me.children(recursive=True) if p.pid not in before and _alive(p)]
        if not left or time.time() > deadline:
            break
        time.sleep(0.2)
    for p in left:  # clean up so one failure does not cascade, then fail
        try:
            p.kill()
        except psutil.Error:
            pass
    assert not left, "processes left behind: " + ", ".join(
        f"{p.pid} {' '.join(_cmd(p))[:120]}" for p in left)


def _alive(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _cmd(p):
    try:
        return p.cmdline()
    except psutil.Error:
        return ["?"]
