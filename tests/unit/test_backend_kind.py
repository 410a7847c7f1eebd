"""Backends are described once (tfcluster.plan.backend_kind) and the plan asks the description:
no module compares a backend's name with a string."""
import ast
import os

import pytest

from tfcluster.clusterfile import vocabulary
from tfcluster.errors import UserError
from tfcluster.plan.backend_kind import KINDS, backend_kind, recorded_kind

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src", "tfcluster")


def test_one_kind_per_backend_name():
    assert tuple(KINDS) == vocabulary.BACKENDS
    assert all(k.name == name for name, k in KINDS.items())


def test_an_unknown_name_is_a_user_error_and_an_unknown_record_is_local():
    with pytest.raises(UserError, match="--backend: 'pbs' is not one of local, ssh, slurm, ray"):
        backend_kind("pbs")
    assert recorded_kind(None).name == recorded_kind("pbs").name == "local"
    assert recorded_kind("slurm").takes_slurm_options


def _compares_a_backend_name(node: ast.Compare) -> bool:
    names = {"backend"}
    sides = [node.left] + list(node.comparators)
    def named(n):
        if isinstance(n, ast.Name) and n.id in names:
            return True
        if isinstance(n, ast.Attribute) and n.attr in names:
            return True
        return (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
                and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value in names)
    words = [n for n in sides if isinstance(n, ast.Constant) and n.value in vocabulary.BACKENDS]
    words += [n for n in sides if isinstance(n, ast.Tuple)
              and any(isinstance(e, ast.Constant) and e.value in vocabulary.BACKENDS for e in n.elts)]
    return any(named(n) for n in sides) and bool(words)


#: none: every module asks the backend's kind (the machine's policies have landed)
NOT_YET: set = set()


def test_no_module_compares_a_backend_name():
    found = []
    for folder, _, files in os.walk(SRC):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, SRC).replace(os.sep, "/")
            if rel in NOT_YET:
                continue
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            found += [f"{rel}:{n.lineno}" for n in ast.walk(tree)
                      if isinstance(n, ast.Compare) and _compares_a_backend_name(n)]
    assert not found, "ask tfcluster.plan.backend_kind instead: " + ", ".join(found)
