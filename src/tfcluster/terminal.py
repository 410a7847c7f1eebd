"""Text for a terminal: the one sanitiser for everything tfcluster prints that a task or a
record wrote.

A task's output, a metric name in a progress report, a task name or a path in a run.json can
hold bytes a terminal acts on: ``ESC c`` resets it, ``ESC ( 0`` switches to line drawing,
``ESC 7``/``ESC 8`` save and restore the cursor, ``ESC # 8`` fills the screen with ``E``, the
one-byte CSI U+009B and OSC strings (``ESC ] 0;title BEL``: the window title, clipboard, links)
do what their ESC forms do, NUL and other control characters, and bidirectional overrides
(U+202E) make a line read other than it is. So:

- :func:`terminal_text`: a line of a task's output as a terminal should show it: every escape
  sequence taken out (CSI in both forms, OSC/DCS/SOS/PM/APC strings to their end, ESC with
  intermediate bytes, any other two-byte ESC), every other control character written as an
  escape (``\\x00``); tabs kept. The console, the live view, ``--no-live`` output, the task logs
  and ``tfcluster logs`` show task text only through it.
- :func:`printable`: a value for one line of a message (a task name, a path, a metric name from
  a report): every control character escaped, tabs and newlines included.

No import beyond ``re``: everything may use it.
"""
from __future__ import annotations

import codecs
import re

# What a terminal would act on, all of it removed: CSI (ESC [ or U+009B) with its parameters and
# final byte; a string command (OSC ESC ], DCS ESC P, SOS ESC X, PM ESC ^, APC ESC _, or their
# one-byte C1 forms) to its terminator (BEL, ST as ESC \ or U+009C) or the end of the text;
# ESC with intermediate bytes and its final byte (ESC ( 0, ESC # 8); any other ESC and the one
# byte after it (ESC c, ESC 7, ESC 8, ESC =); a lone ESC at the end.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?")
# Controls left after that: C0 but tab (and newline, carriage return: callers split at them),
# DEL, C1, line/paragraph separators, bidirectional marks and overrides, lone surrogates.
_LEFT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e"
                   r"\u2066-\u2069\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
                      r"\ud800-\udfff]")


def _escape(m: "re.Match[str]") -> str:
    return repr(m.group(0))[1:-1]


def strip_escapes(text: str) -> str:
    """``text`` without the escape sequences a terminal acts on (nothing else changed)."""
    if "\x1b" not in text and not _C1.search(text):
        return text
    return _ESCAPES.sub("", text)


_C1 = re.compile(r"[\x90\x98\x9b\x9c\x9d\x9e\x9f]")


def terminal_text(text: str) -> str:
    """A line of task output for a terminal (see the module's docstring): escape sequences
    removed, other control characters escaped, tabs kept."""
    if text.isprintable():
        return text
    text = strip_escapes(text)
    return _LEFT.sub(_escape, text)


def printable(text: object) -> str:
    """``text`` with control characters (newline, ESC, bidi overrides, lone surrogates) written as
    escapes, so that printing it cannot add a line, move the cursor or recolour a terminal."""
    text = str(text)
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(_escape, text)


def has_control(text: str) -> bool:
    return bool(_CONTROL.search(text))


# ------------------------------------------------------------------ bytes a program wrote
def _replace_short(e: UnicodeDecodeError):
    # U+FFFD is 3 bytes in UTF-8: for every invalid byte it would make a log up to 3x larger
    # than the output (random bytes: 2.5x). A span of 3 or more invalid bytes becomes one U+FFFD,
    # shorter ones a '?' each, so a line never grows by being decoded.
    n = e.end - e.start
    return ("\ufffd" if n >= 3 else "?" * n), e.end


codecs.register_error("tfcluster.replace", _replace_short)


def decode(data: bytes) -> str:
    """Bytes a program wrote as text: UTF-8, invalid bytes replaced by no more bytes than they
    took (see :func:`_replace_short`)."""
    return data.decode("utf-8", "tfcluster.replace")
