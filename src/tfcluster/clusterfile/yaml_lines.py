"""YAML read as the cluster file is: :func:`yaml.safe_load`'s tags and values, with the line of
each field kept for messages (``cluster.worker[1]: ... (line 4)``), every duplicate key named
(YAML itself keeps the last one silently) and aliases refused that expand beyond
:data:`MAX_EXPANDED_VALUES` values or :data:`MAX_EXPANDED_CHARS` characters ("billion laughs").
PyYAML is imported on first use only."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from tfcluster.clusterfile.wording import field_path, short

# A YAML file's aliases may not expand to more values than this ("billion laughs").
MAX_EXPANDED_VALUES = 100_000
# ... nor to more text than this (a long string referenced many times): no program can take
# more in its arguments and environment (Linux: ARG_MAX is 2 MiB).
MAX_EXPANDED_CHARS = 4_000_000


def parse_with_lines(text: str) -> Tuple[Any, Dict[str, int], List[str]]:
    """``yaml.safe_load`` that also refuses aliases that expand beyond
    :data:`MAX_EXPANDED_VALUES` values or :data:`MAX_EXPANDED_CHARS` characters; returns the data,
    the line of each field (``cluster.worker[1]`` -> 3) and one message per duplicate key (all
    of them, not only the first; the data is then None)."""
    loader = safe_loader(text)
    try:
        node = loader.get_single_node()
        if loader.duplicates:
            return None, {}, [m for _, _, m in sorted(loader.duplicates)]
        if node is None:
            return None, {}, []
        lines: Dict[str, int] = {}
        _node_lines(node, (), lines)
        return loader.construct_document(node), lines, []
    finally:
        loader.dispose()


def safe_loader(text: str) -> Any:
    """A ``yaml.SafeLoader`` over ``text`` (same tags, same values) that refuses aliases
    expanding beyond the limits above (a ``yaml.MarkedYAMLError`` naming the line) and lists
    the duplicate keys it meets in ``.duplicates`` as (line, column, message), at most 100.
    The caller reads documents from it and calls ``dispose()``."""
    return _loader_class()(text)


def with_line(problem: str, lines: Dict[str, int]) -> str:
    """``cluster.worker[1]: ...`` -> ``cluster.worker[1]: ... (line 4)`` when the line is known."""
    where = problem.split(": ", 1)[0]
    while where:
        if where in lines:
            return f"{problem} (line {lines[where]})"
        cut = max(where.rfind("."), where.rfind("["))
        where = where[:cut] if cut > 0 else ""
    return problem


def tab_indented(text: str, line: int) -> bool:
    """Whether line ``line`` (0-based) of ``text``, or the line before it, starts with
    whitespace that holds a tab (YAML forbids tabs in indentation)."""
    lines = text.split("\n", line + 1)[:line + 1]
    for candidate in lines[-2:]:
        indent = candidate[:len(candidate) - len(candidate.lstrip(" \t"))]
        if "\t" in indent:
            return True
    return False


_OPENED = {"flow sequence": ("[", "]"), "flow mapping": ("{", "}")}


def _at(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def syntax_error(e: Exception, text: str) -> str:
    """A YAML syntax error in plain words, at the place of the mistake: ``line L, column C:
    ...``. PyYAML's ``problem_mark`` is where it noticed; for a ``[``, ``{`` or quote never
    closed its ``context_mark`` (where the bracket or quote opened) is where the mistake is,
    and the place it noticed is said after."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None) or ""
    start = getattr(e, "context_mark", None)
    noticed = f" (YAML noticed at {_at(mark)}: {problem})" if mark is not None else ""
    for kind, (opening, closing) in _OPENED.items():
        if context == f"while parsing a {kind}" and start is not None:
            return (f"{_at(start)}: this '{opening}' is never closed: a '{closing}' (or a ',' "
                    f"between items) is missing{noticed}")
    if context == "while scanning a quoted scalar" and start is not None:
        return f"{_at(start)}: this quoted text is never closed: its closing quote is missing{noticed}"
    if mark is None:
        return problem
    where = f"{_at(mark)}: "
    if problem.startswith("expected <block end>") and start is not None:
        problem = (f"this line is indented differently from the lines above it (the block that "
                   f"starts at {_at(start)}): indent it like its siblings")
    elif problem == "mapping values are not allowed here":
        problem = ("a second ': ' on one line (a value holding ': ' must be quoted, or the key "
                   "needs its own line)")
    if tab_indented(text, mark.line):
        problem += "; this line is indented with a tab: use spaces, not tabs, to indent YAML"
    return where + problem


_LOADER = None


def _loader_class():
    """yaml.SafeLoader (same tags, same values) with two refusals, built once on first use."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    class Refused(yaml.MarkedYAMLError):
        pass

    class Loader(yaml.SafeLoader):
        def __init__(self, stream):
            super().__init__(stream)
            self.duplicates: List[Tuple[int, int, str]] = []

        def compose_mapping_node(self, anchor):
            node = super().compose_mapping_node(anchor)
            seen: Dict[Any, Any] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                try:
                    key = self.yaml_constructors[key_node.tag](self, key_node)
                    hash(key)
                except Exception:  # odd key: construction reports it
                    key = (key_node.tag, key_node.value)
                if key in seen:
                    first, here = seen[key], key_node.start_mark
                    if len(self.duplicates) < 100:
                        self.duplicates.append((here.line, here.column,
                            f"line {here.line + 1}, column {here.column + 1}: duplicate key "
                            f"{short(key)} (first on line {first.line + 1}); YAML keeps only the "
                            f"last, so write it once"))
                    continue
                seen[key] = key_node.start_mark
            return node

        def compose_document(self):
            node = super().compose_document()
            # Per node: (values, characters) once expanded; each node is measured once, so the
            # cost follows the file, not what its aliases expand to.
            sizes: Dict[int, Tuple[int, int]] = {}
            physical = [0, 0]

            def size(n, path) -> Tuple[int, int]:
                if id(n) in sizes:
                    return sizes[id(n)]
                if id(n) in path:
                    raise Refused(None, None, "an alias refers to a value that contains it "
                                  "(a recursive structure)", n.start_mark)
                physical[0] += 1
                total, chars = 1, 0
                if isinstance(n, (SequenceNode, MappingNode)):
                    path.add(id(n))
                    children = n.value if isinstance(n, SequenceNode) else \
                        [c for pair in n.value for c in pair]
                    for c in children:
                        values, text = size(c, path)
                        total += values
                        chars += text
                        if total > MAX_EXPANDED_VALUES and total > physical[0]:
                            raise Refused(None, None, f"aliases expand to more than "
                                          f"{MAX_EXPANDED_VALUES} values", c.start_mark)
                        if chars > MAX_EXPANDED_CHARS and chars > physical[1]:
                            raise Refused(None, None, f"aliases expand to more than "
                                          f"{MAX_EXPANDED_CHARS} characters of text (a long "
                                          f"value referenced many times)", c.start_mark)
                    path.discard(id(n))
                else:
                    chars = len(n.value)
                    physical[1] += chars
                sizes[id(n)] = (total, chars)
                return total, chars

            if node is not None:
                size(node, set())
            return node

    _LOADER = Loader
    return Loader


def _node_lines(node: Any, loc: Tuple[Any, ...], lines: Dict[str, int], depth: int = 0) -> None:
    """Line numbers of fields, a few levels deep (the levels error messages name)."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode
    if depth > 4 or len(lines) > 5000:
        return
    if isinstance(node, MappingNode):
        for k, v in node.value:
            if isinstance(k, ScalarNode):
                sub = loc + (k.value,)
                lines.setdefault(field_path(sub), k.start_mark.line + 1)
                _node_lines(v, sub, lines, depth + 1)
    elif isinstance(node, SequenceNode):
        for i, v in enumerate(node.value[:1000]):
            sub = loc + (i,)
            lines.setdefault(field_path(sub), v.start_mark.line + 1)
            _node_lines(v, sub, lines, depth + 1)
