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
    "unit": ("unit", 60, ()),   # 60: side by side with TensorFlow (-n 2 on 2 cores), a 3 s test can take 30
    "integration": ("integration", 600, ()),
    "system": ("system", 1200, ("tf",)),
}

_TF = "tensorflow"
_tf_at_start = [True]
_tf_collected_by = []
_in_worker = [False]      # an xdist worker (the controller writes the timeline)


def layer_of(path) -> str:
    """The layer folder a test file sits in ("" for a file outside tests/unit|integration|system)."""
    rel = os.path.relpath(str(path), TESTS).split(os.sep)
    return rel[0] if len(rel) > 1 and rel[0] in LAYERS else ""


def pytest_configure(config):
    _tf_at_start[0] = _TF in sys.modules
    _in_worker[0] = hasattr(config, "workerinput")
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False    # our order (LONGEST_FIRST), not by test count
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


_layer_times: dict = {}


def pytest_runtest_logreport(report):
    """Each layer's tests: how many, their summed time, and the wall time from the first one's
    start to the last one's end (side by side under xdist, so the sum is larger than the span)."""
    _note_cpu(report)
    layer = report.nodeid.split("/", 2)[1] if report.nodeid.startswith("tests/") else ""
    if layer not in LAYERS or not getattr(report, "stop", 0):
        return
    t = _layer_times.setdefault(layer, {"tests": 0, "seconds": 0.0, "first": report.start, "last": report.stop})
    t["tests"] += report.when == "call" or (report.when == "setup" and report.skipped)
    t["seconds"] += report.duration
    t["first"], t["last"] = min(t["first"], report.start), max(t["last"], report.stop)


def _cpu_seconds() -> float:
    """CPU time of this process and of the children it has waited for (a launch's tasks count
    once the launcher that waited for them has ended; a Slurm or Ray daemon's processes never)."""
    import resource
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


_cpu_mark = [0.0]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _cpu_mark[0] = _cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report carries the CPU seconds it took ("cpu_s"), which xdist brings to the
    controller: on 2 cores the suite is bound by CPU, so a test's CPU is what it costs the run."""
    report = yield
    now = _cpu_seconds()
    report.user_properties.append(("cpu_s", round(now - _cpu_mark[0], 2)))
    _cpu_mark[0] = now
    return report


_cpu_by_test: dict = {}


def _note_cpu(report) -> None:
    if _in_worker[0]:
        return            # the controller sums and prints them (a worker sees its reports too)
    for key, value in report.user_properties:
        if key == "cpu_s":
            _cpu_by_test[report.nodeid] = _cpu_by_test.get(report.nodeid, 0.0) + value
            _timeline(report, value)


def _timeline(report, cpu: float) -> None:
    """With TFCLUSTER_TEST_TIMELINE=FILE: one JSON line per test phase (worker, start, stop,
    CPU seconds), to see how the lanes filled and where both only waited."""
    path = os.environ.get("TFCLUSTER_TEST_TIMELINE")
    if path and getattr(report, "stop", 0):
        import json
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", "") if node is not None else ""
        with open(path, "a") as f:
            f.write(json.dumps({"test": report.nodeid, "when": report.when, "worker": worker,
                                "start": report.start, "stop": report.stop, "cpu": cpu}) + "\n")


def pytest_terminal_summary(terminalreporter):
    if not _layer_times or hasattr(terminalreporter.config, "workerinput"):
        return
    if _cpu_by_test:
        terminalreporter.write_sep("-", "CPU seconds by file, then the 40 costliest tests "
                                        "(processes the test waited for; docs/TESTING.md)")
        by_file: dict = {}
        for nodeid, cpu in _cpu_by_test.items():
            f = nodeid.split("::", 1)[0]
            by_file[f] = by_file.get(f, 0.0) + cpu
        for f, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:25]:
            terminalreporter.write_line(f"{cpu:8.1f} s  {f}")
        terminalreporter.write_line(f"{sum(by_file.values()):8.1f} s  in all")
        for nodeid, cpu in sorted(_cpu_by_test.items(), key=lambda kv: -kv[1])[:40]:
            terminalreporter.write_line(f"{cpu:8.1f} s  {nodeid}")
    terminalreporter.write_sep("-", "time by layer")
    for layer in LAYERS:
        t = _layer_times.get(layer)
        if t:
            terminalreporter.write_line(
                f"{layer:<12} {t['tests']:>5} tests  {t['seconds']:8.1f} s of test time  "
                f"{t['last'] - t['first']:8.1f} s from the first to the last")


def pytest_unconfigure(config):
    state = getattr(config, "_tfcluster_state", None)
    if state:
        import shutil
        shutil.rmtree(state, ignore_errors=True)


def pytest_collectreport(report):
    """Name the first test module whose import brought TensorFlow in."""
    if not _tf_at_start[0] and not _tf_collected_by and _TF in sys.modules:
        _tf_collected_by.append(report.nodeid or "conftest")


# Tests run side by side (pytest-xdist, `-n 2 --dist loadgroup`, the README's line; docs/TESTING.md says why
# two, not four). Tests that use something of which this machine has one at a
# time run in one group, in one worker, one after another:
SERIAL_GROUPS = {
    # two Rays at a time, no more (every port of helpers.ray_nodes is chosen free, but a Ray of
    # several nodes on 2 shared cores can starve its own GCS): two lanes of about equal length
    "ray-1": ("test_ray_cluster.py",
              "test_ray_elastic.py::test_mwms_keras_fit_on_ray_restarts_the_others_alone_when_a_workers_node_is_lost",
              "test_ray_elastic.py::test_pss_on_ray_goes_on_without_a_lost_node_and_restarts_the_coordinator_alone_when_it_joins"),
    "ray-2": ("test_ray.py", "test_ray_move.py",
              "test_ray_elastic.py::test_a_lost_node_shrinks_an_elastic_run_and_a_node_that_joins_grows_it_back",
              "test_ray_elastic.py::test_a_sized_run_on_ray_grows_when_a_node_with_room_joins"),
    # they look for ssh clients and control-socket folders of every process of the machine
    "ssh": ("test_ssh.py", "test_ssh_multinode.py"),
    # its OOM kill grows the machine's oom_kill count (/proc/vmstat), which its other tests'
    # launchers read to say a SIGKILL was not the OOM killer's: one after another
    "oom": ("test_launch_oom.py",),
    # two tests that mostly wait (a stuck worker, a slow end): one after another, each beside a
    # test that computes, not side by side (the machine was 83% idle while both ran)
    "hangs": ("test_hangs.py",),
    # the CI smoke test and the guide's smoke test bind the host's 2222/2223
    "host-2222": ("test_launch.py::test_ci_smoke_launch_on_2222_2223",
                  "test_smoke.py::test_seed_smoke_two_local_servers"),
}
# Besides these, the tests of a file that share a module- or session-scoped fixture of ours (a
# Slurm, a TensorFlow cluster, a trained run) run in that file's group, so that the fixture is
# made once; every other test is scheduled on its own.
_SERIAL = {name: group for group, names in SERIAL_GROUPS.items() for name in names}
# The groups that take longest, started first (pytest-xdist hands groups out in the order their
# first test was collected: tests/conftest.py sorts the collection so); then the system layer's
# tests and the integration layer's interleaved (each at its share of its own layer: a lane that
# waits on a launch, a stall or a timeout, as many integration tests do, mostly has a system
# test, which computes, beside it, instead of another one that waits; run one layer after the
# other, the integration layer's waiting tests met at the end, the machine half idle), and the
# unit layer's, which fill the gaps at the end. A Ray lane
# starts beside a Slurm one, which mostly waits, not beside the other Ray lane: a Ray joining a
# node on a machine that two Rays and their training keep busy can miss Ray's 30 s start-up wait.
# The second lane begins with a test that only computes (the embeddings benchmark, one test, then
# the three-node Slurm): while the first Ray and the Slurm nodes start, both lanes mostly waited
# (a clean-clone run: the machine's CPU 10-46% busy in three of its first five half-minutes).
LONGEST_FIRST = ("ray-1", "bench-embeddings", "test_slurm_nodes.py", "ray-2", "test_slurm.py",
                 "bench-training", "bench-peers", "ssh", "bench-links")


def xdist_group(item) -> str:
    """The xdist group to give a test ("" for none): none when it names one itself
    (``@pytest.mark.xdist_group``), else its entry in SERIAL_GROUPS, else its file's name when it
    uses a fixture of ours wider than a function."""
    if item.get_closest_marker("xdist_group"):
        return ""                       # the test names its group itself
    name = os.path.basename(str(item.path))
    group = _SERIAL.get(f"{name}::{getattr(item, 'originalname', item.name)}") or _SERIAL.get(name)
    if group:
        return group
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for d in defs:
            if d.scope != "function" and str(getattr(d, "baseid", "")).startswith("tests"):
                return name
    return ""


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session, config, items):
    """Layers, timeouts and groups first (pytest-xdist reads the groups in its own hook), then,
    after every plugin's, the check that the groups hold."""
    _mark_layers(config, items)
    result = yield
    _check_groups(config, items)
    return result


def _check_groups(config, items) -> None:
    """In an xdist worker under ``--dist loadgroup``: xdist adds each test's group to its id in
    its own hook; a test with a group whose id does not carry it would be scheduled alone, its
    group's fixtures made twice and its one-at-a-time resource shared. pytest 9.2 with
    pytest-xdist 3.8 did that to every test without a word."""
    if hasattr(config, "workerinput") and getattr(config.option, "loadgroup", False):
        lost = [item.nodeid for item in items
                if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
        if lost:
            import xdist
            why = (f"pytest-xdist {xdist.__version__} does not group tests under pytest "
                   f"{pytest.__version__} (--dist loadgroup; e.g. {lost[0]} has no @group): install "
                   f"the test extra's pytest (pip install -e '.[test]')")
            sys.__stderr__.write(f"tests/conftest.py: {why}\n")   # xdist shows a worker's error as a crash
            raise pytest.UsageError(why)


def _mark_layers(config, items) -> None:
    if _tf_collected_by:
        raise pytest.UsageError(
            f"{_tf_collected_by[0]}: imports TensorFlow at import time; import it inside the "
            f"tests that need it (docs/TESTING.md)")
    outside = set()
    timeouts = config.pluginmanager.hasplugin("timeout")
    # groups and their order only when the tests are spread over workers (-n): one at a time,
    # the suite keeps its folders' order (integration, system, unit)
    grouped = (config.pluginmanager.hasplugin("xdist")
               and (hasattr(config, "workerinput") or getattr(config.option, "dist", "no") != "no"))
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
        group = xdist_group(item) if layer != "unit" else ""
        if group and grouped:
            item.add_marker(pytest.mark.xdist_group(group))
    if grouped:
        items[:] = _start_order(items)
    if outside:
        raise pytest.UsageError(
            "test files outside a layer folder: " + ", ".join(sorted(outside))
            + "; move each into tests/unit, tests/integration or tests/system (docs/TESTING.md)")


def _start_order(items):
    """The collection in the order xdist hands it out (LONGEST_FIRST above): the longest groups,
    then the system and integration layers interleaved, each keeping its own order, then the
    unit layer."""
    def group(item):
        mark = item.get_closest_marker("xdist_group")
        return (mark.args[0] if mark.args else mark.kwargs.get("name", "")) if mark else ""
    first = sorted((i for i in items if group(i) in LONGEST_FIRST),
                   key=lambda i: LONGEST_FIRST.index(group(i)))
    rest = [i for i in items if group(i) not in LONGEST_FIRST]
    layers = {name: [i for i in rest if (layer_of(i.path) or "unit") == name]
              for name in ("system", "integration", "unit")}
    both = [((k + 0.5) / len(layers[name]), n, item) for n, name in enumerate(("system", "integration"))
            for k, item in enumerate(layers[name])]
    return first + [item for _, _, item in sorted(both, key=lambda x: x[:2])] + layers["unit"]


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
