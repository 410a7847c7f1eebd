"""The public API (docs/API.md): its examples run, every name it lists is declared in
tfcluster.PUBLIC (and __all__) and has a docstring that says its arguments, result and
errors. Docstrings are read from the source (ast), so nothing here imports TensorFlow."""
import ast
import inspect
import os
import re

import pytest

import tfcluster

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SRC = os.path.join(ROOT, "src", "tfcluster")
with open(os.path.join(ROOT, "docs", "API.md"), encoding="utf-8") as f:
    API = f.read()
EXAMPLES = re.findall(r"```python\n(.*?)```", API, re.S)
LISTED = re.findall(r"^\| `tfcluster\.(\w+)` \|", API, re.M)


def test_the_doc_lists_exactly_the_declared_names():
    assert EXAMPLES and LISTED
    assert sorted(LISTED) == sorted(n for n in tfcluster.__all__ if n != "__version__")
    for name in LISTED:
        assert getattr(tfcluster, name) is not None


def _definition(module: str, name: str):
    path = os.path.join(SRC, *module.split(".")) + ".py"
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
    for node in tree.body:      # imported there: follow the import
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfcluster.") \
                and any(a.name == name for a in node.names):
            return _definition(node.module[len("tfcluster."):], name)
    raise AssertionError(f"tfcluster.{module} defines no {name}")


def _params(node) -> list:
    a = node.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg != "self"] + \
        ([a.vararg.arg] if a.vararg else []) + ([a.kwarg.arg] if a.kwarg else [])


@pytest.mark.parametrize("name", LISTED)
def test_every_listed_name_says_its_arguments_result_and_errors(name):
    module = tfcluster.PUBLIC.get(name, "__init__")
    node = _definition(module, name)
    doc = ast.get_docstring(node) or ""
    assert doc, f"tfcluster.{name} has no docstring"
    if isinstance(node, ast.FunctionDef):
        params = _params(node)
        if params:
            assert "Args:" in doc, f"tfcluster.{name}: its docstring says no Args"
            for p in params:
                if not p.startswith("_"):
                    assert re.search(rf"\b{p}\b", doc), f"tfcluster.{name}: Args do not name {p}"
        assert "Returns:" in doc, f"tfcluster.{name}: its docstring says no Returns"
        assert "Raises:" in doc, f"tfcluster.{name}: its docstring says no Raises"


def test_the_keras_callback_says_its_arguments_too():
    doc = ast.get_docstring(_definition("runtime.keras", "ProgressCallback")) or ""
    assert "Args:" in doc and "max_per_second" in doc and "Raises:" in doc


def test_launch_takes_public_types_only():
    sig = inspect.signature(tfcluster.launch)
    assert list(sig.parameters) == ["path_or_cluster", "options", "dry_run", "quiet"]
    with pytest.raises(TypeError, match="options: a tfcluster.LaunchOptions"):
        tfcluster.launch("cluster.yaml", options={"restart": "never"}, dry_run=True)


@pytest.mark.parametrize("i", range(len(EXAMPLES)))
def test_the_examples_run(i, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    exec(compile(EXAMPLES[i], f"docs/API.md example {i + 1}", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    for comment in re.findall(r"print\(.*\)\s+# (\[.*\]|0)", EXAMPLES[i]):
        assert comment in out.replace('"', "'") or comment == "0"
    if "launch(" in EXAMPLES[i]:
        assert "exit code 0" in out and "worker:1" in out
