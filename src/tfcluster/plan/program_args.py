"""``--arg``: edits of the program's flags on the command line (``launch``, ``commands``,
``render``), read once into the run plan (:func:`tfcluster.plan.runplan.build_plan`)."""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from tfcluster.clusterfile.checks import check_text
from tfcluster.errors import UserError


def parse_args(words: Sequence[str]) -> List[Tuple[str, Optional[str]]]:
    """``--arg`` words as (flag, value): ``train_steps=4000`` and ``--train_steps=4000`` are both
    ``("--train_steps", "4000")``; ``-v`` or ``--verbose`` alone is a flag without a value.
    Raises UserError naming the word (exit 2)."""
    out: List[Tuple[str, Optional[str]]] = []
    for word in words:
        check_text("--arg", word)
        name, eq, value = word.partition("=")
        flag = name if name.startswith("-") else "--" + name
        if not re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*", flag):
            raise UserError(f"--arg: '{printable_word(word)}' is not NAME=VALUE (for example --arg "
                            f"train_steps=4000 or --arg --train_steps=4000)")
        out.append((flag, value if eq else None))
    return out


def apply_args(argv: Sequence[str], edits: Sequence[Tuple[str, Optional[str]]]) -> List[str]:
    """The program ``argv`` with each ``--arg`` edit (:func:`parse_args`) made: a flag already
    there gets the new value, in the form it has (``--f=v``, or ``--f v`` where the next word
    is not a flag); a flag not there is appended (``--f=v``, or ``--f`` without a value). The
    program's own words (the first, and a script after ``python``) are never taken for flags,
    nor is anything after a ``--`` of the program's own."""
    argv = list(argv)
    for flag, value in edits:
        found = False
        i = 1
        while i < len(argv):
            w = argv[i]
            if w == "--":
                break
            if w.startswith(flag + "="):
                found = True
                if value is not None:
                    argv[i] = f"{flag}={value}"
            elif w == flag:
                found = True
                nxt = argv[i + 1] if i + 1 < len(argv) else None
                if value is not None:
                    if nxt is not None and nxt != "--" and not nxt.startswith("-"):
                        argv[i + 1] = value
                        i += 1
                    else:
                        argv[i] = f"{flag}={value}"
            i += 1
        if not found:
            add = flag if value is None else f"{flag}={value}"
            cut = argv.index("--", 1) if "--" in argv[1:] else len(argv)
            argv.insert(cut, add)
    return argv


def printable_word(text: str) -> str:
    """A word of the command line as one printable line, cut at 80 characters."""
    return text.encode("unicode_escape", "backslashreplace").decode("ascii")[:80]
