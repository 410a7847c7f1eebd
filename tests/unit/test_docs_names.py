"""The docs name only what is there: a page of docs/ (README.md, examples/README.md), a docstring
or a comment under src/, tests/, scripts/, examples/ (and trainer.py) that names a module, a
function, a class, an attribute, a file or a test names one that exists.

What is read as a name:

* a dotted name of the package or of the tests' helpers: ``tfcluster.net.ports``,
  ``tfcluster.core.machine.RunMachine``, ``tfcluster.core.machine.RunMachine.handle``,
  ``helpers.slurm_nodes.ThreeNodeSlurm``;
* a Sphinx role (``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:attr:``, ``:data:``,
  ``:exc:``), ``~`` or not: a target that starts with a dot is read as a relative import is,
  from the module's package; a target with no package, in the classes around the docstring or
  comment, then in its module (a target whose first name is a module outside tfcluster, found
  but not imported, is not ours to check);
* a path from the repository's root (under src/tfcluster, tests, scripts, examples or docs,
  and a package path that starts at tfcluster: ``tfcluster/net/ports.py``; ``*`` as in a glob), and a
  path written from a folder of the package (``backends/agent/node.py``, with a name after it:
  ``runs/eventlog.py: EventLog``, ``drivers/pump.OutputPump``) or of scripts/
  (``bench_programs/mlp.py``);
* a test: a test file's path with ``::`` and a test function (and a ``::`` and a function
  after it, which means the same file), a bare test file ``test_machine.py`` (one of tests/unit,
  tests/integration, tests/system: their names are unique), and in a page of docs/ a test
  function's bare name, in backticks, which must be a test of some test file;
* a Markdown link to a file, from the page's folder;
* in docs/PLAN.md, the page of the design, every backticked word of code: a name that some
  module or class defines, or a word of the package's strings (an environment variable, an
  event, a field of a record), and ``module.name`` or ``Class.attr`` with the name in it.

A module defines a name at its top (a def, a class, an assignment, an import, also inside an
``if`` or ``try``, or a name its ``__getattr__`` loads from a table); a class, its methods, its
class-level names, ``self.NAME`` set in a method, and what its bases in the package define (a
base from outside the package may define anything). Everything is read with ast: nothing is
imported. PLAN.md's "Layers" picture draws the floors tests/unit/test_layers.py enforces.
"""
from __future__ import annotations

import ast
import glob
import importlib.util
import io
import os
import re
import tokenize
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

from helpers import ROOT

# Names that are written on purpose though they are not here: (the file, the name as written
# (a trailing "/": every path under it), why).
ALLOWED: List[Tuple[str, str, str]] = [
    ("src/tfcluster/core/keras_hints.py", "tensorflow/",
     "TensorFlow's own files, where the rule the hint follows is written"),
    ("src/tfcluster/k8s/trainer_progress.py", "docs/user-guides/trainjob-progress.md",
     "a page of Kubeflow Trainer's repository (kubeflow/trainer), where the protocol is described"),
    ("docs/MIGRATING_FROM_TFJOB.md", "examples/tensorflow/",
     "Kubeflow's TFJob examples (kubeflow/training-operator), which the page migrates"),
    ("examples/README.md", "examples/runs/",
     "the examples' run folders and Keras backups (logdir: runs, relative to their cluster files), made when they run"),
    ("docs/PLAN.md", "TORCHELASTIC_RESTART_COUNT", "torchrun's variable, which ours is modelled on"),
]

# The pages whose backticked words are code names (the others' are mostly the cluster file's
# keys, TensorFlow's names and benchmark figures): every such word must be the package's.
CODE_PAGES = ("docs/PLAN.md",)

# a dotted name that ends as a file's name does is a file's name: tfcluster.py, launcher.log
FILE_ENDINGS = {"py", "nft", "yaml", "yml", "json", "jsonl", "md", "log", "txt", "sh", "html", "out"}


# the packages whose names are checked: (the folder above each, its name)
PACKAGES = ((os.path.join(ROOT, "src"), "tfcluster"), (os.path.join(ROOT, "tests"), "helpers"))


# --- what the package defines -----------------------------------------------------------------

@dataclass
class Defn:
    """What a name is, enough to follow it."""
    kind: str                       # module, class, import, from, other, external, missing
    module: str = ""                # module: its name; class: where it is; import/from: the module
    node: Optional[ast.ClassDef] = None
    name: str = ""                  # from: the name imported


def names_in(body, package: str, module: str = "") -> Dict[str, Defn]:
    """The names a body (a module's, a class's) defines at its top, inside ``if`` and ``try``."""
    names: Dict[str, Defn] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = Defn("other")
        elif isinstance(node, ast.ClassDef):
            names[node.name] = Defn("class", module, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names[n.id] = Defn("other")
        elif isinstance(node, ast.Import):
            for a in node.names:
                name = a.asname or a.name.split(".")[0]
                names[name] = Defn("import", a.name if a.asname else name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = Defn("from", base, name=a.name)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            inner = list(node.body) + list(getattr(node, "orelse", [])) + list(getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                inner += handler.body
            names.update(names_in(inner, package, module))
    return names


def lazy_names(tree: ast.Module) -> List[str]:
    """The names a module's ``__getattr__`` (PEP 562) loads: the string keys of its tables."""
    if not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
        return []
    return [k.value for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
            for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


@dataclass
class Source:
    """A parsed Python file: its module (``tfcluster.net.ports``, or its path when it is no module of
    the index), the package relative imports start from, its tree and top-level names."""
    module: str
    package: str
    tree: ast.Module
    names: Dict[str, Defn] = field(default_factory=dict)


def parse(path: str, module: str, package: str) -> Source:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    source = Source(module, package, tree, names_in(tree.body, package, module))
    for name in lazy_names(tree):
        source.names.setdefault(name, Defn("other"))
    return source


class Index:
    """The modules of the packages under ``roots`` (tfcluster under src/, helpers under tests/)."""

    def __init__(self, roots=PACKAGES):
        self.modules: Dict[str, Source] = {}
        self.paths: Dict[str, str] = {}
        for top, package in roots:
            for folder, dirs, files in os.walk(os.path.join(top, package)):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
                for f in sorted(files):
                    if f.endswith(".py"):
                        path = os.path.join(folder, f)
                        dotted = os.path.relpath(path, top)[:-3].replace(os.sep, ".")
                        is_package = dotted.endswith(".__init__")
                        dotted = dotted[: -len(".__init__")] if is_package else dotted
                        self.modules[dotted] = parse(path, dotted, dotted if is_package else dotted.rpartition(".")[0])
                        self.paths[os.path.relpath(path, ROOT)] = dotted

    def follow(self, d: Defn, depth: int = 0) -> Defn:
        """What an imported name is: a module or class of the index, something else of it
        (``other``), something from outside (``external``) or nothing (``missing``)."""
        if d.kind == "import":
            return Defn("module", d.module) if d.module in self.modules else Defn("external", d.module)
        if d.kind == "from" and depth < 10:
            full = f"{d.module}.{d.name}"
            if full in self.modules:
                return Defn("module", full)
            if d.module not in self.modules:
                return Defn("external", full)
            inner = self.modules[d.module].names.get(d.name)
            return self.follow(inner, depth + 1) if inner else Defn("missing", full)
        return d

    def attributes(self, cls: Defn, seen: Tuple[int, ...] = ()) -> Tuple[Dict[str, Defn], bool]:
        """A class's attributes, its own and its bases', and whether a base is from outside."""
        node = cls.node
        source = self.modules.get(cls.module)
        attrs = names_in(node.body, source.package if source else "", cls.module)
        for fn in ast.walk(node):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in ast.walk(fn):
                    if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                            and isinstance(n.value, ast.Name) and n.value.id == "self"):
                        attrs.setdefault(n.attr, Defn("other"))
        outside = False
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id == "object":
                continue
            d = None
            if isinstance(base, ast.Name):
                local = source.names.get(base.id) if source else None
                d = self.follow(local) if local else None
            if d is not None and d.kind == "class" and id(d.node) not in seen:
                inherited, base_outside = self.attributes(d, seen + (id(node),))
                for k, v in inherited.items():
                    attrs.setdefault(k, v)
                outside = outside or base_outside
            else:
                outside = True
        return attrs, outside

    def resolve(self, d: Defn, parts: List[str], written: str) -> Optional[str]:
        """None when ``parts``, read from ``d``, name something; else what is missing."""
        for i, part in enumerate(parts):
            if d.kind == "module":
                if f"{d.module}.{part}" in self.modules:
                    d = Defn("module", f"{d.module}.{part}")
                    continue
                inner = self.modules[d.module].names.get(part)
                if inner is None:
                    return f"{d.module} has no {part}"
                d = self.follow(inner)
                if d.kind == "missing":
                    return f"{d.module}, imported, is not there"
            elif d.kind == "class":
                attrs, outside = self.attributes(d)
                if part not in attrs:
                    return None if outside else f"class {d.node.name} has no attribute {part}"
                d = self.follow(attrs[part])
            elif d.kind == "external":
                return None
            else:
                return f"{'.'.join(parts[:i])} is no module or class: it has no {part}"
        return None

    def resolve_dotted(self, dotted: str) -> Optional[str]:
        """A name from its package down: a module, a name in it, an attribute of that."""
        parts = dotted.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in self.modules:
                return self.resolve(Defn("module", ".".join(parts[:n])), parts[n:], dotted)
        return "no such module"

    def defined_anywhere(self) -> Set[str]:
        """Every name a module or class of the package defines, and its modules' own names."""
        names: Set[str] = set()
        for module, source in self.modules.items():
            names.add(module.rpartition(".")[2])
            names.update(source.names)
            for n in ast.walk(source.tree):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(n.name)
                elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                    names.add(n.attr)
                elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    names.add(n.id)
                elif isinstance(n, ast.arg):
                    names.add(n.arg)
        return names

    def words_of_strings(self) -> Set[str]:
        """The words of the package's string constants (variables, events, fields, flags)."""
        words: Set[str] = set()
        for module, source in self.modules.items():
            if module.startswith("tfcluster"):
                for n in ast.walk(source.tree):
                    if isinstance(n, ast.Constant) and isinstance(n.value, str):
                        words.update(re.findall(r"[A-Za-z_]\w*", n.value))
        return words


# --- where names are written ------------------------------------------------------------------

@dataclass
class Text:
    """Text that names things: its file (from the root), first line, the module and the classes
    it is read in (a docstring's, a comment's), whether it is a Markdown page."""
    path: str
    line: int
    text: str
    source: Optional[Source] = None
    classes: Tuple[str, ...] = ()
    page: bool = False


def python_files(root: str = ROOT) -> Iterator[str]:
    """The Python files the docs are written in: src/, tests/ (not its data), scripts/,
    examples/ and the root's."""
    for top in ("src", "tests", "scripts", "examples"):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and not d.endswith(".egg-info")
                             and os.path.relpath(os.path.join(folder, d), root) != os.path.join("tests", "data"))
            for f in sorted(files):
                if f.endswith(".py"):
                    yield os.path.relpath(os.path.join(folder, f), root)
    for f in sorted(os.listdir(root)):
        if f.endswith(".py"):
            yield f


def pages(root: str = ROOT) -> Iterator[str]:
    yield "README.md"
    for f in sorted(os.listdir(os.path.join(root, "docs"))):
        if f.endswith(".md"):
            yield os.path.join("docs", f)
    yield os.path.join("examples", "README.md")


def python_texts(path: str, text: str, index: Index) -> Iterator[Text]:
    """A Python file's docstrings (of the module, its classes and functions) and comments."""
    module = index.paths.get(path)
    if module:                  # a module of the index: its tree, parsed once
        source = index.modules[module]
        tree = source.tree
    else:
        tree = ast.parse(text, path)
        source = Source(path, "", tree, names_in(tree.body, "", path))
    classes_at: List[Tuple[int, int, Tuple[str, ...]]] = []

    def walk(node, classes):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if isinstance(node, ast.ClassDef):
                classes = classes + (node.name,)
                classes_at.append((node.lineno, node.end_lineno, classes))
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield Text(path, node.body[0].lineno, doc, source, classes)
        for child in ast.iter_child_nodes(node):
            yield from walk(child, classes)

    yield from walk(tree, ())
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            line = tok.start[0]
            around = max((c for first, last, c in classes_at if first <= line <= last), key=len, default=())
            yield Text(path, line, tok.string, source, around)


def all_texts(index: Index, root: str = ROOT) -> Iterator[Text]:
    for path in python_files(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            yield from python_texts(path, f.read(), index)
    for path in pages(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            yield Text(path, 1, f.read(), page=True)


# --- the names in a text ----------------------------------------------------------------------

ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|exc|obj|const):`(?:[^`<]*<)?~?([^`<>]+)>?`")
DOTTED = re.compile(r"(?<![\w.~/-])((?:tfcluster|helpers)(?:\.[A-Za-z_]\w*)+)(?![\w-]|\.\w)")
# from the repository's root (``*`` as in a glob; ``examples/s`` is a rate, not a path)
PATH = re.compile(r"(?<![\w./~$-])((?:src/tfcluster|tfcluster|tests|scripts|examples|docs)/(?!s\b)"
                  r"(?:[\w.*-]*[\w*](?:/[\w.*-]*[\w*])*/?)?)(::[A-Za-z_]\w*(?:::[A-Za-z_]\w*)?)?")
# from a folder: a file (``backends/agent/node.py``, ``runs/eventlog.py: EventLog``) or a
# module of the package and a name in it (``drivers/pump.OutputPump``)
FOLDER_PATH = re.compile(r"(?<![\w./~$-])([a-z_]\w*(?:/[a-z_]\w*)+)(\.py(?::\s*([A-Za-z_]\w*))?"
                         r"|\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?))(?![\w/-])")
# where a path written from a folder starts: the package, scripts/ (bench_programs/), the root
FOLDERS = ("src/tfcluster", "scripts", "")
TEST_FILE = re.compile(r"(?<![\w./-])(test_\w+\.py)(::[A-Za-z_]\w*)?")
NEXT_TEST = re.compile(r"(?<![\w:.])::(test_\w+)")
BARE_TEST = re.compile(r"(?<!`)`(test_\w+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
CODE_WORD = re.compile(r"(?<![`\w])`([A-Za-z_][\w.]*\w)(\([^`]*\))?`(?!`)")


@dataclass
class Problem:
    path: str
    line: int
    written: str
    what: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.written}: {self.what}"


class Checker:
    def __init__(self, index: Index, root: str = ROOT):
        self.index = index
        self.root = root
        self.test_files: Dict[str, str] = {}            # a test file's name -> its path
        for layer in ("unit", "integration", "system"):
            for f in sorted(os.listdir(os.path.join(root, "tests", layer))):
                if f.startswith("test_") and f.endswith(".py"):
                    self.test_files[f] = os.path.join("tests", layer, f)
        self._defs: Dict[str, Set[str]] = {}
        self.all_tests = set().union(*(self.defs(p) for p in self.test_files.values()))
        self._anywhere: Optional[Set[str]] = None
        self._strings: Optional[Set[str]] = None

    def defs(self, path: str) -> Set[str]:
        """The functions and classes a test file defines (a test is one of them)."""
        if path not in self._defs:
            with open(os.path.join(self.root, path), encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            self._defs[path] = {n.name for n in ast.walk(tree)
                                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        return self._defs[path]

    def exists(self, path: str) -> bool:
        return bool(glob.glob(os.path.join(self.root, path)))

    def problems(self, t: Text) -> Iterator[Problem]:
        for at, written, what in self.found(t):
            yield Problem(t.path, t.line + t.text.count("\n", 0, at), written, what)

    def found(self, t: Text) -> Iterator[Tuple[int, str, str]]:
        text = t.text
        for m in ROLE.finditer(text):
            what = self.role(t, m.group(1).strip())
            if what:
                yield m.start(), m.group(1).strip(), what
        text = ROLE.sub(lambda m: " " * len(m.group(0)), text)
        for m in DOTTED.finditer(text):
            if m.group(1).rpartition(".")[2] not in FILE_ENDINGS:
                what = self.index.resolve_dotted(m.group(1))
                if what:
                    yield m.start(), m.group(1), what
        paths = [m for m in PATH.finditer(text)]
        for m in paths:
            path = "src/" + m.group(1) if m.group(1).startswith("tfcluster/") else m.group(1)
            if not self.exists(path):
                yield m.start(), m.group(1), "no such file"
            elif m.group(2) and path.startswith("tests/"):
                yield from self.test(m.start(), path, m.group(2)[2:])
        inside = [m.span() for m in paths]
        tests = [m for m in TEST_FILE.finditer(text) if not any(a <= m.start() < b for a, b in inside)]
        for m in tests:
            path = self.test_files.get(m.group(1))
            if path is None:
                yield m.start(), m.group(1), "no such test file in tests/unit, tests/integration or tests/system"
            elif m.group(2):
                yield from self.test(m.start(), path, m.group(2)[2:])
        for m in FOLDER_PATH.finditer(text):
            if not any(a <= m.start() < b for a, b in inside):
                yield from self.folder_path(m)
        files = [(m.start(), m.group(1)) for m in paths if m.group(1).endswith(".py")]
        files += [(m.start(), self.test_files.get(m.group(1), m.group(1))) for m in tests]
        for m in NEXT_TEST.finditer(text):
            before = [f for f in files if f[0] < m.start()]
            if not before:
                yield m.start(), m.group(0), "no test file named before it"
            else:
                yield from self.test(m.start(), max(before)[1], m.group(1))
        if t.page:
            yield from self.page(t, text)

    def page(self, t: Text, text: str) -> Iterator[Tuple[int, str, str]]:
        for m in BARE_TEST.finditer(text):
            if m.group(1) not in self.all_tests:
                yield m.start(), m.group(1), "no such test in tests/"
        for m in LINK.finditer(text):
            target = m.group(1)
            if "://" not in target and not target.startswith("mailto:"):
                if not self.exists(os.path.normpath(os.path.join(os.path.dirname(t.path), target))):
                    yield m.start(), target, f"no such file (a link from {os.path.dirname(t.path) or 'the root'})"
        if t.path in CODE_PAGES:
            yield from self.code_words(text)

    def test(self, at: int, path: str, name: str) -> Iterator[Tuple[int, str, str]]:
        if os.path.isfile(os.path.join(self.root, path)) and name not in self.defs(path):
            yield at, f"{path}::{name}", "no such test"

    def folder_path(self, m) -> Iterator[Tuple[int, str, str]]:
        folders = m.group(1)
        module = "tfcluster." + folders.replace("/", ".")
        if m.group(2).startswith(".py"):
            if not any(os.path.isfile(os.path.join(self.root, top, folders + ".py")) for top in FOLDERS):
                yield m.start(), folders + ".py", "no such file in src/tfcluster, scripts or the root"
            elif m.group(3) and module in self.index.modules:
                what = self.index.resolve_dotted(f"{module}.{m.group(3)}")
                if what:
                    yield m.start(), m.group(0), what
        elif module in self.index.modules:      # else no path of ours (a ratio, a unit, ...)
            what = self.index.resolve_dotted(f"{module}.{m.group(4)}")
            if what:
                yield m.start(), m.group(0), what

    def role(self, t: Text, target: str) -> Optional[str]:
        target = target.lstrip("~")
        target = target[:-2] if target.endswith("()") else target
        if target.startswith(("tfcluster.", "helpers.")):
            return self.index.resolve_dotted(target)
        if target.startswith("."):
            dots = len(target) - len(target.lstrip("."))
            if t.source is None or t.source.module not in self.index.modules:
                return "a relative name outside a package"
            package = t.source.package.split(".")
            return self.index.resolve_dotted(".".join(package[: len(package) - dots + 1] + [target[dots:]]))
        return self.local(t, target)

    def local(self, t: Text, target: str) -> Optional[str]:
        """A name with no package: in the classes around the text, innermost first, else in its
        module."""
        parts = target.split(".")
        source = t.source
        if source is None:
            return "no module to look it up in"
        for depth in range(len(t.classes), 0, -1):
            cls = self.class_at(source, t.classes[:depth])
            if cls is not None:
                attrs, _ = self.index.attributes(cls)
                if parts[0] in attrs:
                    return self.index.resolve(self.index.follow(attrs[parts[0]]), parts[1:], target)
        if parts[0] not in source.names:
            if importlib.util.find_spec(parts[0]) is not None:
                return None         # a module from outside the package: not ours to check
            return f"{source.module} has no {parts[0]}"
        return self.index.resolve(self.index.follow(source.names[parts[0]]), parts[1:], target)

    def class_at(self, source: Source, classes: Tuple[str, ...]) -> Optional[Defn]:
        d = source.names.get(classes[0])
        for name in classes[1:]:
            if d is None or d.kind != "class":
                return None
            d = names_in(d.node.body, source.package, d.module).get(name)
        return d if d is not None and d.kind == "class" else None

    def code_words(self, text: str) -> Iterator[Tuple[int, str, str]]:
        """A page of the design: each backticked word of code (snake_case, CamelCase, a call) is
        the package's; ``module.name`` and ``Class.attr``, where the first is the package's, name
        what is in it."""
        if self._anywhere is None:
            self._anywhere = self.index.defined_anywhere()
            self._strings = self.index.words_of_strings()
        modules: Dict[str, List[str]] = {}
        classes: Dict[str, List[Defn]] = {}
        for name, source in self.index.modules.items():
            if name.startswith("tfcluster"):
                modules.setdefault(name.rpartition(".")[2], []).append(name)
                classes_here = {k: d for k, d in source.names.items() if d.kind == "class" and d.module == name}
                for k, d in classes_here.items():
                    classes.setdefault(k, []).append(d)
        for m in CODE_WORD.finditer(text):
            word, call = m.group(1), m.group(2)
            parts = word.split(".")
            if len(parts) == 1:
                if ((call or "_" in word or re.search(r"[a-z][A-Z]", word)) and re.search(r"[A-Za-z]{2}", word)
                        and word not in self._anywhere and word not in self._strings):
                    yield m.start(), word, "no module or class of the package defines it"
                continue
            if parts[-1] in FILE_ENDINGS or importlib.util.find_spec(parts[0]) is not None:
                continue            # a file's name, or a module from outside
            first = [Defn("module", name) for name in modules.get(parts[0], [])] + classes.get(parts[0], [])
            if first:
                whats = [self.index.resolve(d, parts[1:], word) for d in first]
                if all(whats):
                    yield m.start(), word, whats[0]


def find_problems(texts, checker: Checker) -> List[str]:
    """The problems in ``texts`` that ALLOWED does not name."""
    def allowed(p: Problem) -> bool:
        return any(p.path == where and (p.written == name or (name.endswith("/") and p.written.startswith(name)))
                   for where, name, _ in ALLOWED)
    return [str(p) for t in texts for p in checker.problems(t) if not allowed(p)]


def layers_picture() -> List[Tuple[int, List[str], str]]:
    """PLAN.md's "Layers" picture: (floor, the folders and modules named on it, their text)."""
    with open(os.path.join(ROOT, "docs", "PLAN.md"), encoding="utf-8") as f:
        page = f.read()
    block = re.search(r"## Layers\n.*?```\n(.*?)```", page, re.S).group(1)
    rows: List[Tuple[int, List[str], str]] = []
    floor = None
    for line in block.splitlines():
        head, text = line[:16], line[16:]
        if not head.strip():
            rows[-1] = (rows[-1][0], rows[-1][1], rows[-1][2] + " " + text.strip())
            continue
        m = re.match(r"\s*(\d+)?\s+(.*)", line)
        floor = int(m.group(1)) if m.group(1) else floor
        names = re.match(r"([\w/]+(?:, [\w/]+)*)\s*(.*)", m.group(2))
        rows.append((floor, [n.rstrip("/") for n in names.group(1).split(", ")], names.group(2)))
    return rows


def enforced_floors() -> List[List[str]]:
    """FLOORS of tests/unit/test_layers.py, read (not imported: test modules import no other)."""
    with open(os.path.join(ROOT, "tests", "unit", "test_layers.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "FLOORS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("tests/unit/test_layers.py has no FLOORS")


# --- the tests --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def index():
    return Index()


@pytest.fixture(scope="module")
def checker(index):
    return Checker(index)


def test_every_name_the_docs_give_exists(index, checker):
    problems = find_problems(all_texts(index), checker)
    assert problems == [], "names that are not there:\n" + "\n".join(problems)


def test_every_allowed_name_is_still_written():
    """An allowance that no longer matches anything goes, so that the list stays small."""
    for where, name, why in ALLOWED:
        assert why
        with open(os.path.join(ROOT, where), encoding="utf-8") as f:
            assert name in f.read(), f"{where} no longer writes {name}: take it off ALLOWED"


def test_the_layers_picture_draws_the_floors_the_layers_test_enforces():
    drawn: Dict[str, int] = {}
    for floor, names, _ in layers_picture():
        for name in names:
            assert name not in drawn, f"PLAN.md's Layers picture draws {name} twice"
            drawn[name] = floor
    enforced = {name: floor for floor, names in enumerate(enforced_floors()) for name in names}
    assert drawn == enforced


def test_each_folder_in_the_layers_picture_names_its_modules():
    """Each module of a folder (and of the folders in it) is named in its text (``clusterfile/``:
    ``config``, ``models``, ...), and each folder and module drawn is there."""
    package = os.path.join(ROOT, "src", "tfcluster")
    for _, names, text in layers_picture():
        words = set(re.findall(r"\w+", text))
        for name in names:
            folder = os.path.join(package, name)
            assert os.path.isdir(folder) or os.path.isfile(folder + ".py"), f"{name}: not in src/tfcluster"
            unnamed = []
            for inner, dirs, files in os.walk(folder):
                dirs[:] = [d for d in dirs if os.path.isfile(os.path.join(inner, d, "__init__.py"))]
                unnamed += [d for d in dirs if d not in words]
                unnamed += [f[:-3] for f in files if f.endswith(".py") and f != "__init__.py" and f[:-3] not in words]
            assert sorted(unnamed) == [], f"PLAN.md's Layers picture: {name}/ does not name {sorted(unnamed)}"


MADE_UP = '''
The old cluster file: tfcluster.spec.config and :mod:`tfcluster.spec`; the task's state
:class:`~tfcluster.core.machine.TaskStatus`, :meth:`tfcluster.core.machine.RunMachine.no_such`;
:func:`.no_such_module` and :func:`no_such_name`. Files: src/tfcluster/spec/config.py,
tfcluster/hosts.py, tests/unit/test_no_such.py, `tests/unit/test_machine.py::test_no_such`
and then `::test_nor_this`, test_slurm_node_wrapper.py, docs/NO_SUCH.md, scripts/no_such.py,
spec/config.py, drivers/pump.NoSuch, runs/eventlog.py: NoSuch, [a link](NO_SUCH.md).
'''

GOOD = '''
tfcluster.core.machine.RunMachine.handle, :class:`~tfcluster.drivers.display.View`,
:func:`tfcluster.net.ports.port_in_use`, :mod:`.checks`, :func:`load`, :data:`CLUSTER_FILE_LIMIT`,
:func:`os.getpid`, tfcluster.launch, tfcluster.runtime.start_server, helpers.slurm_nodes.ThreeNodeSlurm,
src/tfcluster/net/private.py, tfcluster/net/ports.py, tests/unit/test_machine.py, test_layers.py,
`tests/unit/test_docs_names.py::test_the_checker_finds_made_up_names` and `::test_every_allowed_name_is_still_written`,
docs/PLAN.md, scripts/benchmark.py, examples/mwms.py, tests/programs/keras_tutorial_*.py, 250 examples/s,
backends/agent/node.py: NodeAgent, drivers/pump.OutputPump, bench_programs/mlp.py, [a page](PLAN.md),
a tfcluster.py planted in the folder.
'''


def test_the_checker_finds_made_up_names(index, checker):
    config = index.modules["tfcluster.clusterfile.config"]
    found = [(p.written, p.what) for p in checker.problems(Text("docs/X.md", 1, MADE_UP, config, page=True))]
    assert found == [
        ("tfcluster.spec", "tfcluster has no spec"),
        ("tfcluster.core.machine.TaskStatus", "tfcluster.core.machine has no TaskStatus"),
        ("tfcluster.core.machine.RunMachine.no_such", "class RunMachine has no attribute no_such"),
        (".no_such_module", "tfcluster.clusterfile has no no_such_module"),
        ("no_such_name", "tfcluster.clusterfile.config has no no_such_name"),
        ("tfcluster.spec.config", "tfcluster has no spec"),
        ("src/tfcluster/spec/config.py", "no such file"),
        ("tfcluster/hosts.py", "no such file"),
        ("tests/unit/test_no_such.py", "no such file"),
        ("tests/unit/test_machine.py::test_no_such", "no such test"),
        ("docs/NO_SUCH.md", "no such file"),
        ("scripts/no_such.py", "no such file"),
        ("test_slurm_node_wrapper.py", "no such test file in tests/unit, tests/integration or tests/system"),
        ("spec/config.py", "no such file in src/tfcluster, scripts or the root"),
        ("drivers/pump.NoSuch", "tfcluster.drivers.pump has no NoSuch"),
        ("runs/eventlog.py: NoSuch", "tfcluster.runs.eventlog has no NoSuch"),
        ("tests/unit/test_machine.py::test_nor_this", "no such test"),
        ("NO_SUCH.md", "no such file (a link from docs)"),
    ]


def test_the_checker_passes_what_is_there(index, checker):
    config = index.modules["tfcluster.clusterfile.config"]
    assert list(checker.problems(Text("docs/X.md", 1, GOOD, config, page=True))) == []


def test_the_checker_reads_docstrings_and_comments_in_their_module_and_class(index, checker):
    program = '''"""See :class:`Box` and :meth:`Box.fill`, tfcluster.net.nowhere."""
class Box:
    """:meth:`fill` and :attr:`size`; not :meth:`empty`."""
    def fill(self):
        self.size = 1   # :attr:`size`, :meth:`spill`
'''
    texts = list(python_texts("tests/unit/test_box.py", program, index))
    assert [(t.line, t.classes) for t in texts] == [(1, ()), (3, ("Box",)), (5, ("Box",))]
    found = [str(p) for t in texts for p in checker.problems(t)]
    assert found == ["tests/unit/test_box.py:1: tfcluster.net.nowhere: tfcluster.net has no nowhere",
                     "tests/unit/test_box.py:3: empty: tests/unit/test_box.py has no empty",
                     "tests/unit/test_box.py:5: spill: tests/unit/test_box.py has no spill"]


def test_a_design_page_names_only_code_that_is_there(checker):
    text = "`RunMachine`, `decide_restart`, `RunPlan.with_endpoints`, `launcher.log`, `keras.Model`, " \
           "`runplan.apply_args`, `TFCLUSTER_TASK`, `decide_to_restart`, `RunPlan.with_hosts`, `runplan.no_such()`"
    found = [(p.written, p.what) for p in checker.problems(Text("docs/PLAN.md", 1, text, page=True))]
    assert found == [("decide_to_restart", "no module or class of the package defines it"),
                     ("RunPlan.with_hosts", "class RunPlan has no attribute with_hosts"),
                     ("runplan.no_such", "tfcluster.plan.runplan has no no_such")]
