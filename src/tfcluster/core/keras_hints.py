"""Keras support for the launcher, without importing TensorFlow: one question starts the
task's interpreter (:func:`has_tf_keras`, a fraction of a second, cached), and the wording of
the fix reads TensorFlow's version from its package metadata (:func:`tf_keras_install`).

- :func:`legacy_keras_problem`: before anything starts, a task whose environment asks for
  legacy Keras (``TF_USE_LEGACY_KERAS``) in an interpreter without ``tf_keras``.
- :func:`keras_failure_hint`: one line naming the fix when a failed task's log shows a known
  Keras 3 failure (``Model.fit`` under MultiWorkerMirroredStrategy or ParameterServerStrategy,
  an API Keras 3 removed: ``reset_states``, ``experimental_*`` names); the drivers ask
  :func:`tfcluster.core.output_patterns.failure_hint`, which asks this first.
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

# TensorFlow's own test (tensorflow/python/util/lazy_loader.py and tensorflow/__init__.py)
LEGACY_KERAS_VALUES = ("true", "True", "1")

def tf_keras_install() -> str:
    """The pip line that installs the tf_keras of the installed TensorFlow (its version from the
    package metadata: nothing is imported); ``pip install tf_keras`` when that is unknown. It
    works from any folder (``pip install -e '.[keras2]'`` works only in tfcluster's checkout)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            v = version("tensorflow")
        except PackageNotFoundError:
            v = version("tensorflow-cpu")
        major, minor = v.split(".")[:2]
        return f"pip install 'tf_keras~={int(major)}.{int(minor)}.0'"
    except Exception:  # no TensorFlow here, an odd version: the plain line
        return "pip install tf_keras"


def fix() -> str:
    """How to run a Keras 2 program (read from the package metadata when a hint needs it:
    ~20 ms, not at every launcher's start)."""
    return (f"install Keras 2 with `{tf_keras_install()}` (the tf_keras of your TensorFlow) and "
            "set TF_USE_LEGACY_KERAS: \"1\" in the cluster file's env (docs/TF2_STRATEGIES.md)")

_FIND_SPEC = ("import importlib.util, sys; "
              "sys.exit(0 if importlib.util.find_spec('tf_keras') is not None else 1)")

# (interpreter, the PYTHON* variables that change what it can import) -> has tf_keras (None: unknown)
_cache: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], Optional[bool]] = {}


def wants_legacy_keras(env: Mapping[str, str]) -> bool:
    """True when ``env`` makes TensorFlow route ``tf.keras`` to ``tf_keras`` (TensorFlow's test)."""
    return env.get("TF_USE_LEGACY_KERAS") in LEGACY_KERAS_VALUES


def has_tf_keras(python: str, env: Optional[Mapping[str, str]] = None) -> Optional[bool]:
    """Whether interpreter ``python`` finds the ``tf_keras`` package (``find_spec``: nothing is
    imported, a fraction of a second), with ``env``'s PYTHON* variables (PYTHONPATH, ...).
    None when it cannot tell (the interpreter does not start). Cached per interpreter and
    PYTHON* variables."""
    env = dict(os.environ if env is None else env)
    key = (python, tuple(sorted((k, v) for k, v in env.items() if k.startswith("PYTHON"))))
    if key not in _cache:
        try:
            rc = subprocess.run([python, "-c", _FIND_SPEC], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                timeout=30).returncode
        except (OSError, subprocess.SubprocessError):
            rc = None
        _cache[key] = {0: True, 1: False}.get(rc) if rc is not None else None
    return _cache[key]


_PYTHON_NAME = re.compile(r"python[0-9.]*$")


def python_interpreter(argv: Sequence[str]) -> Optional[str]:
    """The interpreter a task's argv runs (``argv[0]`` when its name is python, python3,
    python3.11, ...), or None for any other program."""
    if argv and _PYTHON_NAME.match(os.path.basename(argv[0])):
        return argv[0]
    return None


def legacy_keras_problem(env: Mapping[str, str], python: str) -> Optional[str]:
    """A one-line error when ``env`` (the environment the task will run with) asks for legacy
    Keras and ``tf_keras`` is not importable in interpreter ``python``; else None (also when
    the interpreter cannot be run: that is reported elsewhere)."""
    if not wants_legacy_keras(env):
        return None
    if has_tf_keras(python, env) is not False:
        return None
    return (f"TF_USE_LEGACY_KERAS={env.get('TF_USE_LEGACY_KERAS')} asks for Keras 2 but "
            f"{python} cannot import tf_keras: run `{tf_keras_install()}` (the tf_keras of "
            "your TensorFlow) for that interpreter")


# Keras 3 in a traceback: its sources live in keras/src/ (tf_keras's in tf_keras/src/)
_KERAS3_FRAME = re.compile(r"(?<![\w])keras[/\\]src[/\\]")

# (pattern, needs a Keras 3 frame in the lines too, what failed)
_SIGNATURES: Tuple[Tuple["re.Pattern[str]", bool, str], ...] = (
    # MWMS Model.fit: the message's first line is followed by the repr of every replica's
    # batch (hundreds of lines), so only its last line is sure to be in a log's tail
    (re.compile(r"unsupported type \(<class 'tensorflow\.python\.distribute\.values\.PerReplica'>\)"
                r" to a Tensor"), False,
     "Keras 3 (TensorFlow's default tf.keras) cannot run Model.fit under "
     "MultiWorkerMirroredStrategy"),
    # PSS Model.fit on a tf.data.Dataset: Keras 3 has no ClusterCoordinator path
    (re.compile(r"To use this dataset, you need to pass this dataset to "
                r"ClusterCoordinator\.create_per_worker_dataset"), True,
     "Keras 3 (TensorFlow's default tf.keras) has no Model.fit under ParameterServerStrategy"),
    # PSS Model.fit the tutorial's way: tf.keras.utils.experimental.DatasetCreator is Keras 2 only
    (re.compile(r"module 'keras(\._tf_keras\.keras)?\.utils' has no attribute 'experimental'"),
     False, "Keras 3 (TensorFlow's default tf.keras) has no DatasetCreator and no Model.fit "
     "under ParameterServerStrategy"),
)

# APIs that Keras 3 removed and tutorial programs still call: Metric.reset_states (now
# reset_state), the optimizers' and utils' experimental_* names, tf.keras.experimental
_REMOVED_API = re.compile(
    r"AttributeError: (?:'(\w+)' object|module '(keras[\w.]*)') has no attribute "
    r"'(reset_states|experimental(?:_\w+)?)'")

_NO_TF_KERAS = re.compile(r"TF_USE_LEGACY_KERAS set to True, but you do not have the tf_keras "
                          r"package installed")


def keras_failure_hint(lines: Iterable[str]) -> Optional[str]:
    """One line naming the fix when the tail of a failed task's log shows a known Keras 3
    failure (or legacy Keras asked for without tf_keras); None otherwise. Give it a generous
    tail: the MWMS error is followed by hundreds of lines of tensor values."""
    lines = list(lines)
    text = "\n".join(lines)
    if _NO_TF_KERAS.search(text):
        return ("hint: TF_USE_LEGACY_KERAS is set but tf_keras is not installed: "
                f"run `{tf_keras_install()}` (the tf_keras of your TensorFlow)")
    keras3 = None
    for pattern, needs_keras3, what in _SIGNATURES:
        if not pattern.search(text):
            continue
        if needs_keras3:
            if keras3 is None:
                keras3 = bool(_KERAS3_FRAME.search(text))
            if not keras3:
                continue
        return f"hint: {what}; {fix()}"
    removed = _REMOVED_API.search(text)
    if removed and (removed.group(2) or _KERAS3_FRAME.search(text)
                    or removed.group(3) == "reset_states"):
        owner = removed.group(1) or f"module {removed.group(2)}"
        name = removed.group(3)
        instead = " (Keras 3 calls it reset_state)" if name == "reset_states" else ""
        return (f"hint: {owner} has no {name!r} in Keras 3 (TensorFlow's default tf.keras): "
                f"the program was written for Keras 2{instead}; {fix()}")
    return None
