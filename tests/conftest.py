"""The test layers, and the fixtures every test may use (free ports, no process left behind).

Layers are folders (docs/TESTING.md): every test under tests/unit/ is marked ``unit``, under
tests/integration/ ``integration``, under tests/system/ ``system`` (and ``tf``), and gets its
layer's default timeout unless it sets its own ``@pytest.mark.timeout(N)``. A unit test may not
import TensorFlow or start a process: the ``unit_guard`` fixture fails it if it does. No test
module may import TensorFlow at import time (collection would take half a minute): collection
fails naming the first module that did.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tfcluster.net.ports import free_ports, port_in_use

TESTS = os.path.dirname(os.path.abspath(__file__))

# folder -> (marker, default timeout in seconds, extra markers)
LAYERS = {
    "unit": ("unit", 30, ()),
    "integration": ("integration", 600, ()),
    "system": ("system", 1200, ("tf",)),
}

_TF = "tensorflow"
_tf_at_start = [True]
_tf_collected_by = []


def layer_of(path) -> str:
    """The layer folder a test file sits in ("" for a file outside tests/unit|integration|system)."""
    rel = os.path.relpath(str(path), TESTS).split(os.sep)
    return rel[0] if len(rel) > 1 and rel[0] in LAYERS else ""


def pytest_configure(config):
    _tf_at_start[0] = _TF in sys.modules
    # Every launch a test starts imports tfcluster afresh: with PYTHONDONTWRITEBYTECODE set
    # (CI machines set it) and a fresh clone, each one compiled every module again (~0.3 s).
    import compileall

    import tfcluster
    compileall.compile_dir(os.path.dirname(tfcluster.__file__), quiet=1)
    # Runs started by tests register in a per-user index (tfcluster.runs.index) and notes are
    # remembered in the user's state folder: keep both out of the real home during tests.
    if not os.environ.get("TFCLUSTER_TEST_KEEP_STATE"):
        import tempfile
        config._tfcluster_state = tempfile.mkdtemp(prefix="tfcluster-test-state-")
        os.environ["XDG_STATE_HOME"] = config._tfcluster_state


_state_serial = [0]


@pytest.fixture(autouse=True)
def own_state_folder(request, monkeypatch):
    """Each test gets its own state folder (run index, remembered notes): a run that one test
    registered must not show up in another test's `status`/`runs` (the suite runs the
    integration layer before the unit layer in one session)."""
    state = getattr(request.config, "_tfcluster_state", None)
    if state:
        _state_serial[0] += 1
        d = os.path.join(state, str(_state_serial[0]))
        os.makedirs(d, exist_ok=True)
        monkeypatch.setenv("XDG_STATE_HOME", d)
    yield


def pytest_unconfigure(config):
    state = getattr(config, "_tfcluster_state", None)
    if state:
        import shutil
        shutil.rmtree(state, ignore_errors=True)


def pytest_collectreport(report):
    """Name the first test module whose import brought TensorFlow in."""
    if not _tf_at_start[0] and not _tf_collected_by and _TF in sys.modules:
        _tf_collected_by.append(report.nodeid or "conftest")


def pytest_collection_modifyitems(session, config, items):
    if _tf_collected_by:
        raise pytest.UsageError(
            f"{_tf_collected_by[0]}: imports TensorFlow at import time; import it inside the "
            f"tests that need it (docs/TESTING.md)")
    outside = set()
    timeouts = config.pluginmanager.hasplugin("timeout")
    for item in items:
        layer = layer_of(item.path)
        if not layer:
            outside.add(os.path.relpath(str(item.path), os.path.dirname(TESTS)))
            continue
        marker, timeout, extra = LAYERS[layer]
        item.add_marker(marker)
        for m in extra:
            item.add_marker(m)
        if timeouts and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(timeout))
    if outside:
        raise pytest.UsageError(
            "test files outside a layer folder: " + ", ".join(sorted(outside))
            + "; move each into tests/unit, tests/integration or tests/system (docs/TESTING.md)")


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
def unit_guard(request, monkeypatch):
    """A unit test imports no TensorFlow and starts no process (tests/integration is for those)."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    had_tf = _TF in sys.modules

    def no_process(self, args, *a, **k):
        raise AssertionError(f"a unit test started a process ({args!r}); "
                             f"move the test to tests/integration (docs/TESTING.md)")

    def no_fork():
        raise AssertionError("a unit test forked (a launch in a private network runs in a child: "
                             "give --network host, or move the test to tests/integration)")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    monkeypatch.setattr(os, "fork", no_fork)
    yield
    if not had_tf and _TF in sys.modules:
        pytest.fail("a unit test imported TensorFlow; move the test to tests/system "
                    "(docs/TESTING.md)", pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    """The end of a unit-only session: TensorFlow must not be loaded at all."""
    items = getattr(session, "items", [])
    if (items and not _tf_at_start[0] and _TF in sys.modules
            and all(i.get_closest_marker("unit") for i in items)):
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            "tfcluster: error: TensorFlow was imported during a unit-only session", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
