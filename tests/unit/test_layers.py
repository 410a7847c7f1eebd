"""The package's layers point one way: no import circles, no import from a lower floor to a
higher one (imports inside functions count too). No TensorFlow, no processes."""
from __future__ import annotations

import ast
import os

import pytest

import helpers

SRC = os.path.join(helpers.SRC, "tfcluster")

# Floor of each module: the layer folders of src/tfcluster (docs/PLAN.md draws them). A name is
# a package (every module in it) or a module. Lower floors never import higher ones; the CLI is
# the composition root, and only the package's __init__ (tfcluster.launch) stands above it.
FLOORS = [
    # 0: the ground every layer stands on: one-line user errors, text made safe for a terminal,
    # files opened safely (no link followed, bounded reads: run folders and cluster files), this
    # machine's names and ports, the version
    ["errors", "terminal", "safe_files", "net", "version"],
    # 1: the cluster file
    ["clusterfile"],
    # 2: the resolved run and the task contract
    ["plan"],
    # 3: the run core (pure) and what runs inside a task
    ["core", "runtime"],
    # 4: what a run leaves behind, and the commands that read it
    ["runs"],
    # 5: backends: processes on hosts (I/O only); backends.agent, the node agent, is one of them
    ["backends"],
    # 6: the launcher's driver over a backend
    ["drivers"],
    # 7: renders for Kubernetes
    ["k8s"],
    # 8: the command line (the composition root), and the public import paths kept for programs
    ["cli", "__main__", "progress", "keras", "contract"],
    # 9: the package's __init__: its names, loaded on first use, and tfcluster.launch (the CLI's)
    ["__init__"],
]


def floor_of(module: str) -> int:
    parts = module.split(".") if module else ["__init__"]
    for name in (".".join(parts[:2]), parts[0]):
        for i, names in enumerate(FLOORS):
            if name in names:
                return i
    raise AssertionError(f"tfcluster.{module} has no floor in tests/unit/test_layers.py; add it")


def modules():
    for root, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, f), SRC)[:-3].replace(os.sep, ".")
                if rel.endswith(".__init__"):
                    rel = rel[: -len(".__init__")]
                yield rel, os.path.join(root, f)


def imports(module: str, path: str):
    """tfcluster modules that ``module`` imports, anywhere in the file."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    is_pkg = path.endswith("__init__.py")
    package = module.split(".") if is_pkg else module.split(".")[:-1]
    out = set()
    # imports under ``if TYPE_CHECKING:`` count too: a circle of types is a circle of design
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("tfcluster"):
                target = node.module.split(".")[1:]
            else:
                continue
            names = [a.name for a in node.names]
            for n in names:   # "from . import rules" imports a module
                cand = ".".join(target + [n])
                if os.path.exists(os.path.join(SRC, *cand.split("."))) or \
                        os.path.exists(os.path.join(SRC, *cand.split(".")) + ".py"):
                    out.add(cand)
                else:   # a name of a module; "from tfcluster import __version__": the __init__
                    out.add(".".join(target) or "__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tfcluster."):
                    out.add(a.name[len("tfcluster."):])
                elif a.name == "tfcluster":
                    out.add("__init__")
    out.discard(module)
    return {m for m in out if m}


GRAPH = {m: imports(m, p) for m, p in modules()}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_import_from_a_lower_floor_to_a_higher_one(module):
    mine = floor_of(module)
    up = [m for m in GRAPH[module] if floor_of(m) > mine]
    assert not up, f"tfcluster.{module} (floor {mine}) imports higher floors: {up}"


def test_no_import_circles():
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for n in sorted(GRAPH.get(m, ())):
            if n in GRAPH:
                visit(n)
        stack.pop()

    for m in sorted(GRAPH):
        visit(m)
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_checker_counts_type_checking_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tfcluster.clusterfile.config import Cluster\n")
    assert "clusterfile.config" in imports("m", str(f))


def test_the_checker_sees_names_taken_from_the_package_itself(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import tfcluster\ndef v():\n    from tfcluster import __version__\n")
    assert imports("m", str(f)) == {"__init__"}
    assert floor_of("__init__") > floor_of("cli.main")     # the package's face, above the CLI


def test_the_checker_sees_function_level_imports_and_circles():
    assert "cli.main" not in GRAPH["cli.hello"]        # hello once imported cli (a circle)
    assert "plan.runplan" in GRAPH["cli.hello"]        # a function-level import is seen
    assert "backends.base" in GRAPH["drivers.supervisor"]


def test_the_node_agent_shares_pieces_with_the_launcher_not_the_launcher_itself():
    """The node agent runs on every node: it imports the Slurm pieces it shares with the launcher
    (their own modules), never the launcher's side (launcher, follower); the launcher reads the
    agents' folder channel."""
    launcher_side = {"backends.slurm.launcher", "backends.slurm.follower"}
    agent = [m for m in GRAPH if m.startswith("backends.agent")]
    assert "backends.agent.node" in agent and "backends.agent.folder" in agent
    for m in agent:
        assert not GRAPH[m] & launcher_side, m
    assert "backends.agent.folder" in GRAPH["backends.slurm.launcher"]


#: one job per file: no module of the package over 700 lines, none exempt (issue 47)
MAX_LINES = 700


def test_no_module_is_over_700_lines():
    long = []
    for folder, _, files in os.walk(SRC):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, SRC).replace(os.sep, "/")
                with open(path, encoding="utf-8") as f:
                    n = sum(1 for _ in f)
                if n > MAX_LINES:
                    long.append(f"{rel}: {n} lines")
    assert not long, "split these by job: " + ", ".join(long)
