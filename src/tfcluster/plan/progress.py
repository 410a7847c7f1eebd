"""The progress protocol: how a training program tells ``tfcluster launch`` how far it is.

A task reports progress with one line::

    @tfcluster progress {"step": 120, "total": 1000, "loss": 0.31}

The prefix is exactly ``@tfcluster progress `` and the rest is a JSON object.
``step`` (an integer, the global step) is required; ``total`` (the target step)
is optional and lets the launcher show an ETA; ``local_step`` (an integer, optional) is how
many steps this task itself has run -- its own rate of steps, where the global step moves with
every worker's steps (tfcluster's runtime and Keras callback send it); any other key whose value
is a number is shown as a metric. A task that sends no ``local_step`` has no rate of its own in
the live table or the report: the global step's rate is the run's, not the task's. No
TensorFlow is imported here: any program, in any language, can print this line.

Where the line goes: :func:`report_progress` writes it to the launcher's own pipe
when the launcher gave one (``TFCLUSTER_PROGRESS_FD``, set by the local backend),
so it never shares stdout with the program; otherwise (a program started by hand,
a backend without the pipe) to stdout. On stdout the launcher finds the report
anywhere in a line -- after a progress bar's carriage return, glued to the bar
without a newline -- and never shows it raw on the console. Text that only looks
like a report (no valid JSON object with an integer ``step``) is ordinary output.
"""
from __future__ import annotations

import json
import math
import os
import stat
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, TextIO, Tuple

from tfcluster.plan.contract import PROGRESS_FD
from tfcluster.terminal import printable

PREFIX = "@tfcluster progress "
#: seconds between the launcher's progress lines when there is no live table (piped output, CI,
#: ``--no-live``): ``launch --progress-interval`` changes it. The first line comes as soon as a
#: task's step has moved past its first report, so a run of a few seconds shows progress too.
PIPED_PROGRESS_EVERY = 5.0
_MARK = PREFIX.strip()
_decoder = json.JSONDecoder()


@dataclass
class Progress:
    """One progress report as parsed from its line."""

    step: int
    total: Optional[int] = None
    metrics: Dict[str, float] = field(default_factory=dict)
    local_step: Optional[int] = None     # the steps this task itself ran (None: not reported)


def format_progress(step: int, total: Optional[int] = None, local_step: Optional[int] = None,
                    **metrics: float) -> str:
    """The progress line (without newline) for ``step`` of ``total``; ``local_step``: the steps
    this task itself ran."""
    body: Dict[str, object] = {"step": int(step)}
    if total is not None:
        body["total"] = int(total)
    if local_step is not None:
        body["local_step"] = int(local_step)
    for key, value in metrics.items():
        value = float(value)
        if math.isfinite(value):
            body[key] = round(value, 6)
    return PREFIX + json.dumps(body, separators=(", ", ": "))


def channel_fd(env=None) -> Optional[int]:
    """The launcher's progress pipe (``TFCLUSTER_PROGRESS_FD`` = ``FD:INODE``) when this process
    still holds it: the descriptor is open, a pipe, and the very pipe the launcher made (its
    inode). None otherwise (started by hand, or a child that inherited the variable but not
    the descriptor, or whose descriptor number now names something else)."""
    value = (os.environ if env is None else env).get(PROGRESS_FD, "")
    fd, _, inode = value.partition(":")
    if not fd.isdigit() or not inode.isdigit():
        return None
    try:
        st = os.fstat(int(fd))
    except OSError:
        return None
    if not stat.S_ISFIFO(st.st_mode) or st.st_ino != int(inode):
        return None
    return int(fd)


def report_progress(step: int, total: Optional[int] = None, stream: Optional[TextIO] = None,
                    local_step: Optional[int] = None, **metrics: float) -> None:
    """Report progress (``step``: the global step; ``local_step``: the steps this task itself
    ran, when known): to ``stream`` when given; else to the launcher's progress pipe when it
    gave one (:func:`channel_fd`); else print the line to stdout and flush it.

    Args:
        step: the global step.
        total: the step the run ends at, when known (the report and status show a fraction).
        stream: where to write the line instead (a text stream).
        local_step: the steps this task ran itself (its own steps/s in ``tfcluster report``).
        **metrics: numbers to show beside the step (``loss=0.3``).

    Returns:
        None.

    Raises:
        OSError: only when writing to ``stream`` or stdout fails; a launcher's pipe that has
            gone is dropped without a word.
    """
    line = format_progress(step, total, local_step, **metrics) + "\n"
    if stream is None:
        fd = channel_fd()
        if fd is not None:
            try:
                os.write(fd, line.encode("utf-8"))   # one write under PIPE_BUF: never torn
                return
            except OSError:
                pass       # the launcher is gone or closed its end: fall back to stdout
    out = stream if stream is not None else sys.stdout
    out.write(line)
    out.flush()


def split_progress(text: str) -> Tuple[str, List[Progress]]:
    """The reports found anywhere in ``text`` and the text without them: ``"...acc: 0.84@tfcluster
    progress {...}"`` gives ``("...acc: 0.84", [Progress])``. A marker not followed by a valid
    report stays in the text."""
    if _MARK not in text:
        return text, []
    found: List[Progress] = []
    kept: List[str] = []
    pos = 0
    while True:
        i = text.find(_MARK, pos)
        if i < 0:
            kept.append(text[pos:])
            break
        j = i + len(_MARK)
        while j < len(text) and text[j] in " \t":
            j += 1
        try:
            body, end = _decoder.raw_decode(text, j)
        except ValueError:
            body, end = None, j
        p = _from_body(body)
        if p is None:
            kept.append(text[pos:i + len(_MARK)])
            pos = i + len(_MARK)
            continue
        kept.append(text[pos:i])
        found.append(p)
        pos = end
    return "".join(kept), found


def parse_progress(line: str) -> Optional[Progress]:
    """The (last) Progress a line reports anywhere in it, or None when it holds no valid report."""
    _, found = split_progress(line)
    return found[-1] if found else None


def _from_body(body) -> Optional[Progress]:
    if not isinstance(body, dict):
        return None
    step = body.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    total = body.get("total")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
        total = None
    local = body.get("local_step")
    if isinstance(local, bool) or not isinstance(local, int) or local < 0:
        local = None
    # a metric's name reaches the live table and the console: printable text only
    metrics = {printable(k): float(v) for k, v in body.items()
               if k not in ("step", "total", "local_step") and isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(float(v))}
    return Progress(step=step, total=total, metrics=metrics, local_step=local)
