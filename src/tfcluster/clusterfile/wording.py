"""How the cluster file's messages show what they name: a value in a few characters, the kind
of a value, a field's path (``cluster.worker[1]``) and the near-miss a misspelled word probably
means. Pure text; every message about a cluster file is worded with these."""
from __future__ import annotations

import difflib
import reprlib
from typing import Any, Sequence

from tfcluster.terminal import printable

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 40
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 4
_REPR.maxlevel = 2


def short(value: Any) -> str:
    """A short, one-line picture of a value; its cost does not grow with the value."""
    if isinstance(value, str):
        text = f"'{printable(value[:60])}'"
    else:
        text = printable(_REPR.repr(value))
    return text if len(text) <= 40 else text[:37] + "..."


def kind_of(value: Any) -> str:
    """What a value is, in the file's words: a mapping, a list, a string, a number, ..."""
    if value is None:
        return "nothing"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def field_path(loc: Sequence[Any]) -> str:
    """``("cluster", "worker", 1)`` -> ``cluster.worker[1]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'worker'?)`` when one of ``choices`` is close to ``word``, else ""."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
