"""The progress protocol: how a training program tells ``tfcluster launch`` how far it is.

A task reports progress by printing one line to its stdout (or stderr)::

    @tfcluster progress {"step": 120, "total": 1000, "loss": 0.31}

The prefix is exactly ``@tfcluster progress `` and the rest is a JSON object.
``step`` (an integer, the global step) is required; ``total`` (the target step)
is optional and lets the launcher show an ETA; any other key whose value is a
number is shown as a metric. Lines that do not parse are treated as ordinary
output. No TensorFlow is imported here: any program, in any language, can print
this line.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import Dict, Optional, TextIO

PREFIX = "@tfcluster progress "


@dataclass
class Progress:
    step: int
    total: Optional[int] = None
    metrics: Dict[str, float] = field(default_factory=dict)


def format_progress(step: int, total: Optional[int] = None, **metrics: float) -> str:
    """The progress line (without newline) for ``step`` of ``total``."""
    body: Dict[str, object] = {"step": int(step)}
    if total is not None:
        body["total"] = int(total)
    for key, value in metrics.items():
        value = float(value)
        if math.isfinite(value):
            body[key] = round(value, 6)
    return PREFIX + json.dumps(body, separators=(", ", ": "))


def report_progress(step: int, total: Optional[int] = None, stream: Optional[TextIO] = None,
                    **metrics: float) -> None:
    """Print a progress line and flush it, so the launcher sees it at once."""
    out = stream if stream is not None else sys.stdout
    out.write(format_progress(step, total, **metrics) + "\n")
    out.flush()


def parse_progress(line: str) -> Optional[Progress]:
    """The Progress a line reports, or None when it is not a valid progress line."""
    line = line.strip()
    if not line.startswith(PREFIX.strip()):
        return None
    try:
        body = json.loads(line[len(PREFIX.strip()):].strip())
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    step = body.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    total = body.get("total")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
        total = None
    metrics = {k: float(v) for k, v in body.items()
               if k not in ("step", "total") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return Progress(step=step, total=total, metrics=metrics)
