"""tfcluster relies on no other package's private names: a new release of a dependency (pydantic,
TensorFlow, rich, psutil, Ray, argparse of a new Python) may change them, and a fresh install
takes the newest release. Where tfcluster must reach TensorFlow's internal ``tensorflow.python``
package, the import sits in a ``try`` with a fallback."""
from __future__ import annotations

import ast
import os
import re

import pytest

import helpers

ROOT = os.path.dirname(helpers.SRC)

#: underscore names that are documented public API of their module
DOCUMENTED = {("os", "_exit"), ("sys", "_getframe"), ("sys", "_current_frames")}
#: a private class or function named in a string (compared with type(x).__name__, say)
PRIVATE_NAME_IN_TEXT = re.compile(r"^_[A-Z][A-Za-z0-9]+$")


def _sources():
    out = [os.path.join(ROOT, "trainer.py")]
    for top in (os.path.join(ROOT, "src", "tfcluster"), os.path.join(ROOT, "examples")):
        for folder, _, files in os.walk(top):
            out += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign(module: str) -> bool:
    return module.split(".")[0] not in ("tfcluster", "")


def _caught_import_errors(node: ast.AST, parents) -> bool:
    """``node`` sits in the body of a ``try`` whose handlers take ImportError."""
    child = node
    for parent in parents.get(id(node), []):
        if isinstance(parent, ast.Try) and child in parent.body:
            for h in parent.handlers:
                names = [h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts)
                if h.type is None or any(isinstance(n, ast.Name) and n.id in
                                         ("ImportError", "ModuleNotFoundError", "Exception")
                                         for n in names):
                    return True
        child = parent
    return False


def private_uses(source: str, path: str = "<text>"):
    """Every use of another package's private name in ``source``: ``where: what``."""
    tree = ast.parse(source, path)
    parents = {}

    def walk(node, chain):
        parents[id(node)] = chain
        for child in ast.iter_child_nodes(node):
            walk(child, [node] + chain)
    walk(tree, [])
    annotations = set()
    for node in ast.walk(tree):
        for a in ([node.returns] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []) + \
                ([node.annotation] if isinstance(node, (ast.arg, ast.AnnAssign)) else []):
            if a is not None:
                annotations.update(id(n) for n in ast.walk(a))
    foreign = {}        # local name -> the foreign module it came from
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _foreign(a.name):
                    if any(_private(p) for p in a.name.split(".")):
                        found.append(f"{path}:{node.lineno}: import {a.name}")
                    foreign[(a.asname or a.name).split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _foreign(node.module or ""):
            parts = (node.module or "").split(".")
            for a in node.names:
                if any(_private(p) for p in parts) or _private(a.name):
                    found.append(f"{path}:{node.lineno}: from {node.module} import {a.name}")
                foreign[a.asname or a.name] = parts[0]
            if parts[:2] == ["tensorflow", "python"] and not _caught_import_errors(node, parents):
                found.append(f"{path}:{node.lineno}: from {node.module} (TensorFlow's internal "
                             "package) outside a try that falls back on ImportError")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in foreign:
                private = [a for a in chain if _private(a)]
                if private and (base.id, chain[-1]) not in DOCUMENTED:
                    found.append(f"{path}:{node.lineno}: {base.id}...{private[0]}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in annotations:
            if PRIVATE_NAME_IN_TEXT.match(node.value):
                found.append(f"{path}:{node.lineno}: names {node.value!r}")
    return sorted(set(found))


def test_no_module_of_tfcluster_uses_another_packages_private_names():
    found = []
    for path in _sources():
        with open(path, encoding="utf-8") as f:
            found += private_uses(f.read(), os.path.relpath(path, ROOT))
    assert not found, "private names of other packages:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    "import argparse\nisinstance(a, argparse._SubParsersAction)",
    "from pydantic._internal import _fields",
    "from pydantic.fields import _Unset",
    "import pydantic\nx = pydantic.fields._general",
    "ok = type(m).__name__ == '_PydanticGeneralMetadata'",
    "from tensorflow.python.util import deprecation",
    "import tensorflow as tf\ntf.compat.v1._private_thing()",
    "import atexit\natexit._run_exitfuncs()",
])
def test_the_check_finds_each_kind_of_private_use(source):
    assert private_uses(source)


@pytest.mark.parametrize("source", [
    "import os\nos._exit(0)",
    "from tfcluster.core import _internal_of_ours",
    "from tfcluster.runs import eventlog\neventlog._shown(1)",
    "self._x = 1",
    "try:\n    from tensorflow.python.util import deprecation\nexcept ImportError:\n    pass",
    "class A:\n    __slots__ = ()\nA.__pydantic_decorators__",
    "import atexit\nrun = getattr(atexit, '_run_exitfuncs', None)",
    "def f(tail: '_Tail') -> '_Tail': pass",
])
def test_the_check_passes_what_is_ours_or_public(source):
    assert not private_uses(source)
