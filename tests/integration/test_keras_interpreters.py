"""Which interpreter can load tf_keras: tfcluster.core.keras_hints.legacy_keras_problem asks the task's
real interpreter (a subprocess, cached); and importing tfcluster.runtime.keras loads no TensorFlow, in a
fresh interpreter. (The pure parts of keras_hints are in tests/unit/test_keras_hints.py.)
"""
import os
import stat
import subprocess
import sys

import pytest

from tfcluster.core import keras_hints
from tfcluster.core.keras_hints import legacy_keras_problem


@pytest.fixture
def bare_python(tmp_path):
    """A real interpreter that sees no site-packages (``python -S``): tf_keras is not
    importable there unless PYTHONPATH shows one."""
    (tmp_path / "bin").mkdir()
    path = tmp_path / "bin" / "python3"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    keras_hints._cache.clear()
    yield str(path)
    keras_hints._cache.clear()


@pytest.fixture
def fake_tf_keras(tmp_path):
    """A folder holding a package named tf_keras (find_spec finds it; nothing imports it)."""
    pkg = tmp_path / "site" / "tf_keras"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise SystemExit('tf_keras must not be imported')\n")
    return str(tmp_path / "site")


@pytest.mark.parametrize("value", ["1", "true", "True"])
def test_legacy_keras_asked_without_tf_keras_is_a_problem(bare_python, value):
    problem = legacy_keras_problem({"TF_USE_LEGACY_KERAS": value}, bare_python)
    assert problem is not None and "\n" not in problem
    assert f"TF_USE_LEGACY_KERAS={value}" in problem and bare_python in problem
    assert "pip install 'tf_keras~=" in problem and ".[keras2]" not in problem


def test_tf_keras_on_the_tasks_pythonpath_is_found(bare_python, fake_tf_keras):
    env = {"TF_USE_LEGACY_KERAS": "1", "PYTHONPATH": fake_tf_keras}
    assert legacy_keras_problem(env, bare_python) is None
    # the same interpreter without that PYTHONPATH: another cache entry, and a problem
    assert legacy_keras_problem({"TF_USE_LEGACY_KERAS": "1"}, bare_python) is not None


@pytest.mark.parametrize("env", [{}, {"TF_USE_LEGACY_KERAS": "0"}, {"TF_USE_LEGACY_KERAS": "yes"},
                                 {"TF_USE_LEGACY_KERAS": ""}])
def test_no_legacy_keras_asked_is_never_a_problem(bare_python, env):
    # TensorFlow's own test: only "1", "true" and "True" switch to tf_keras
    assert legacy_keras_problem(env, bare_python) is None
    assert not keras_hints._cache, "nothing asked: the interpreter need not be run"


def test_this_interpreter_answers_like_find_spec():
    import importlib.util

    keras_hints._cache.clear()
    has = importlib.util.find_spec("tf_keras") is not None
    problem = legacy_keras_problem({**os.environ, "TF_USE_LEGACY_KERAS": "1"}, sys.executable)
    assert (problem is None) == has


def test_the_answer_is_cached_per_interpreter(bare_python, tmp_path):
    env = {"TF_USE_LEGACY_KERAS": "1"}
    assert legacy_keras_problem(env, bare_python) is not None
    os.unlink(bare_python)  # a second call must not run it again
    assert legacy_keras_problem(env, bare_python) is not None


def test_an_interpreter_that_does_not_run_is_not_reported_here(tmp_path):
    keras_hints._cache.clear()
    assert legacy_keras_problem({"TF_USE_LEGACY_KERAS": "1"}, str(tmp_path / "no-python")) is None


def test_importing_tfcluster_keras_does_not_import_tensorflow():
    code = ("import sys, tfcluster.runtime.keras as k; "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'imported'; "
            "assert 'ProgressCallback' in k.__all__; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
