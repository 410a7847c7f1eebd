"""A failed task's story for people, read one way for every place that tells it -- the
console's failure line, the end summary and the report: its one-line cause, the lines worth
showing from the end of its output and a hint naming the fix
(:mod:`tfcluster.core.output_patterns` reads them), the fix's command naming the run's real
cluster file (:func:`tfcluster.core.messages.launch_command`).
"""
from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from tfcluster.core.messages import launch_command
from tfcluster.core.output_patterns import failure_cause, failure_hint, failure_tail, is_progress_line
from tfcluster.core.task_output import TAIL_LINES

TAIL_SHOWN = 10        # lines of a failed task's tail shown (the summary, the report)


@dataclass(frozen=True)
class Failure:
    """What a failed task's output says: ``cause`` (one line, its exception; None without
    one), ``tail`` (the lines worth showing, the exception first) and ``hint`` (``hint: ...``
    naming the fix of a known cause; None)."""

    cause: Optional[str] = None
    tail: List[str] = field(default_factory=list)
    hint: Optional[str] = None


def read_failure(lines: Sequence[str], record: Dict, task: str, cwd: Optional[str] = None) -> Failure:
    """The :class:`Failure` of ``task`` from the last lines of its output; ``record``: the
    run's record as far as it is known (its ``file`` and the tasks' ``argv``: where the
    checkpoints are), ``cwd``: the folder the person is in (the file is named from there)."""
    lines = list(lines)
    folder, flag = checkpoint_dir(record, task)
    return Failure(failure_cause(lines), failure_tail(lines, TAIL_SHOWN),
                   failure_hint(lines, folder, flag, launch=launch_command(record.get("file"), cwd)))


def checkpoint_dir(record: Dict, task: str) -> Tuple[Optional[str], str]:
    """The checkpoint folder a failed task restores from, as its argv names it
    (``--checkpoint_dir``, ``--model_dir``, ...; control.summaries_dir's reading, that task
    first) when it holds a checkpoint (else None), and the flag."""
    from tfcluster.runs.control import SUMMARY_FLAGS, summaries_dir
    rows = [t for t in record.get("tasks") or [] if t.get("task") == task]
    folder = summaries_dir(dict(record, tasks=rows)) or summaries_dir(record)
    if folder is not None and not os.path.isfile(os.path.join(folder, "checkpoint")):
        folder = None
    argv = [w for t in rows for w in t.get("argv") or [] if isinstance(w, str)]
    flag = next((f for f in SUMMARY_FLAGS for w in argv if w == f or w.startswith(f + "=")),
                "--checkpoint_dir")
    return folder, flag


def root_task(record: Dict) -> Optional[str]:
    """The task whose failure failed the run, from run.json's ``root_cause`` (``worker:0 exit 1
    (...)``): its first word when that is a task of the run; else None (the watchdog's stall,
    a task that could not start, a run that did not fail)."""
    words = (record.get("root_cause") or "").split(" ", 1)
    names = {t.get("task") for t in record.get("tasks") or []}
    return words[0] if words and words[0] in names else None


def log_tail(run_dir: str, record: Dict, task: str, limit: int = TAIL_LINES) -> List[str]:
    """The last ``limit`` lines of ``task``'s log in ``run_dir``, of its last attempt (what the
    launcher held in memory when it said the failure), as text safe for a terminal or a page;
    [] when the log cannot be read."""
    from tfcluster.errors import UserError
    from tfcluster.runs.logs import BANNER, log_files, log_lines
    path = log_files(run_dir, record).get(task)
    kept: Deque[str] = deque(maxlen=limit)
    if path is None:
        return []
    try:
        for line in log_lines(path):
            line = line.rstrip("\n")
            if BANNER.match(line):
                kept.clear()
            elif not is_progress_line(line):   # (the log keeps the reports; the tail does not)
                kept.append(line)
    except (OSError, UserError):   # a log that is gone or not a plain file: the page says less
        return []
    return list(kept)
