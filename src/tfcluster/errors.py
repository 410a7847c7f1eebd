"""Errors that end a command with a one-line message and exit code 2 (bad input)."""
from __future__ import annotations

import sys
from typing import Iterable, List


class UserError(Exception):
    """Bad input from the user: a file, a flag, a port. Printed without traceback; exit 2.

    Args:
        message: one line (or a few) naming the field, flag or task that is wrong.

    ``message`` and ``exit_code`` (2) are its attributes."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ConfigError(UserError):
    """One or more problems in a cluster file; each message names the field.

    Args:
        source: the file's path ("" for a dict).
        problems: one line per problem, each naming its field (``cluster.worker[1]: ...``).

    A :class:`UserError` (exit 2); ``problems`` keeps the lines."""

    def __init__(self, source: str, problems: Iterable[str]):
        self.source = source
        self.problems: List[str] = list(problems)
        lines = [f"{source}: {p}" if source else p for p in self.problems]
        super().__init__("\n".join(lines))


def print_error(error: UserError, stream=None) -> None:
    """The one way tfcluster reports bad input: ``tfcluster: error: <line>`` per line, stderr."""
    out = stream or sys.stderr
    sys.stdout.flush()
    for line in error.message.splitlines() or [""]:
        out.write(f"tfcluster: error: {line}\n")
    out.flush()
