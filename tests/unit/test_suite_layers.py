"""The test layers themselves (tests/conftest.py, docs/TESTING.md): markers by folder, the unit
guard (no process, no TensorFlow), no TensorFlow at collection, no test outside a layer. Each case
runs pytest in this process (pytester) on a small tree with a copy of tests/conftest.py and a
stand-in ``tensorflow`` module (the real one is never imported)."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from helpers import TESTS

pytest_plugins = ("pytester",)


@pytest.fixture
def tree(pytester, monkeypatch):
    """pytester's folder with tests/conftest.py, a stand-in tensorflow module on sys.path, and a
    function that writes tests/<path>. A TensorFlow that an earlier system test loaded into this
    process is hidden for the test (pytester puts sys.modules back afterwards)."""
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    (pytester.path / "tests").mkdir()
    shutil.copy(os.path.join(TESTS, "conftest.py"), pytester.path / "tests" / "conftest.py")
    (pytester.path / "site").mkdir()
    (pytester.path / "site" / "tensorflow.py").write_text("STAND_IN = True\n")
    pytester.syspathinsert(pytester.path / "site")
    assert "tensorflow" not in sys.modules or not hasattr(sys.modules["tensorflow"], "STAND_IN")

    def write(path, text):
        p = pytester.path / "tests" / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    return write


def run(pytester, *args):
    """pytest ARGS in this process, without the plugins that cost time or start processes."""
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:benchmark",
                                        "-p", "no:hypothesispytest", *args)


def test_each_folder_is_its_layer_and_system_is_tf(tree, pytester):
    for layer in ("unit", "integration", "system"):
        tree(f"{layer}/test_{layer}_one.py", "def test_it():\n    assert True\n")
    for marker, expect in [("unit", ["unit"]), ("integration", ["integration"]),
                           ("system", ["system"]), ("tf", ["system"]), ("not system", ["integration", "unit"])]:
        r = run(pytester, "-m", marker, "--co", "-q")
        got = sorted(line.split("/")[1] for line in r.outlines if line.startswith("tests/"))
        assert got == expect, (marker, r.outlines)


def test_a_unit_test_may_not_start_a_process(tree, pytester):
    tree("unit/test_proc.py", "import subprocess\n\ndef test_it():\n    subprocess.run(['true'])\n")
    r = run(pytester)
    r.assert_outcomes(failed=1)
    assert ("a unit test started a process (['true']); move the test to tests/integration"
            in r.stdout.str())


def test_a_unit_test_may_not_import_tensorflow(tree, pytester):
    tree("unit/test_tf.py", "def test_it():\n    import tensorflow\n")
    r = run(pytester)
    r.assert_outcomes(passed=1, errors=1)  # the check fails the test at its teardown
    r.stdout.fnmatch_lines(["*a unit test imported TensorFlow; move the test to tests/system*"])


def test_a_unit_session_that_loaded_tensorflow_fails(tree, pytester):
    """Loaded after the per-test check (a module fixture's teardown): the session still fails."""
    tree("unit/test_late.py", "import pytest\n\n@pytest.fixture(scope='module', autouse=True)\n"
                              "def late():\n    yield\n    import tensorflow\n\n"
                              "def test_it():\n    assert True\n")
    r = run(pytester, "-m", "unit")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(["*TensorFlow was imported during a unit-only session*"])


def test_tensorflow_at_import_time_stops_collection_naming_the_module(tree, pytester):
    tree("unit/test_fine.py", "def test_it():\n    assert True\n")
    tree("system/test_eager.py", "import tensorflow\n\ndef test_it():\n    assert tensorflow\n")
    r = run(pytester, "-m", "unit")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "tests/system/test_eager.py: imports TensorFlow at import time" in "\n".join(r.errlines)


def test_a_test_outside_the_layer_folders_stops_the_run(tree, pytester):
    tree("unit/test_fine.py", "def test_it():\n    assert True\n")
    tree("test_loose.py", "def test_it():\n    assert True\n")
    r = run(pytester)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert ("test files outside a layer folder: tests/test_loose.py; move each into tests/unit, "
            "tests/integration or tests/system" in "\n".join(r.errlines))


def test_each_layer_has_its_default_timeout_and_a_test_may_set_its_own(tree, pytester):
    if not pytester._request.config.pluginmanager.hasplugin("timeout"):
        pytest.skip("pytest-timeout is not installed (pip install -e '.[test]')")
    seen = pytester.path / "seen.txt"
    body = (f"def test_it(request):\n    with open({str(seen)!r}, 'a') as f:\n"
            f"        f.write(str(request.node.get_closest_marker('timeout').args[0]) + '\\n')\n")
    for layer in ("unit", "integration", "system"):
        tree(f"{layer}/test_{layer}_t.py", body)
    tree("unit/test_own.py", "import pytest\n\n@pytest.mark.timeout(5)\n" + body)
    r = run(pytester, "-q")
    r.assert_outcomes(passed=4)
    assert sorted(seen.read_text().split(), key=int) == ["5", "60", "600", "1200"]
