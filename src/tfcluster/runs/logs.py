"""``tfcluster logs``: a run's task logs, one attempt of a restarted task, or followed live.

A task's log (``<run_dir>/<job>-<index>.log``) holds every attempt; the launcher writes
``----- tfcluster: restart N -----`` before attempt N. ``launcher`` names the launcher's own
log (``launcher.log``) and, for a detached run, ``console.log`` (what its terminal would
have shown). Task logs are shown as the console shows them: TensorFlow's known-harmless lines
folded and progress reports as ``progress: step N/M`` lines (:class:`tfcluster.core.task_output.ConsoleView`,
the console's NoiseFold); ``--raw`` shows every line as written. No TensorFlow.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from tfcluster import safe_files
from tfcluster.errors import UserError
from tfcluster.terminal import decode, printable, terminal_text

BANNER = re.compile(r"^----- tfcluster: restart (\d+) -----$")
TASK = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*:\d+$")
LAUNCHER = "launcher"


def looks_like_task(text: str) -> bool:
    return bool(TASK.match(text)) or text == LAUNCHER


def _log_name(run_dir: str, name: str, log: object) -> Optional[str]:
    """The file name (in the run folder) of a task's log. The record's ``log`` is a path the
    launcher wrote (``<run_dir>/worker-0.log``); only its last part counts, and only when it is a
    ``.log`` name: a record cannot point ``logs`` at a file outside its run folder
    (``/etc/shadow``, ``../../etc/passwd``)."""
    if isinstance(log, str) and log:
        base = safe_files.plain_name(os.path.basename(log))
        if base and base.endswith(".log"):
            return base
    if TASK.match(name):
        job, index = name.split(":")
        return f"{job}-{index}.log"
    return None


def log_files(run_dir: str, record: Dict) -> Dict[str, str]:
    """task name -> log path (always a file directly in ``run_dir``), in the record's task
    order; ``launcher`` last."""
    out: Dict[str, str] = {}
    for t in record.get("tasks") or []:
        name = t.get("task")
        if not isinstance(name, str):
            continue
        log = _log_name(run_dir, name, t.get("log"))
        if log:
            out[name] = os.path.join(run_dir, log)
    console = os.path.join(run_dir, "console.log")
    out[LAUNCHER] = console if os.path.isfile(console) and not os.path.islink(console) \
        else os.path.join(run_dir, "launcher.log")
    return out


def attempt_lines(lines: Iterable[str], attempt: int) -> Iterator[str]:
    """The lines of attempt ``attempt`` (0: the first start, N: the N-th restart)."""
    current = 0
    for line in lines:
        m = BANNER.match(line.rstrip("\n"))
        if m:
            current = int(m.group(1))
            continue
        if current == attempt:
            yield line


def attempts(lines: Iterable[str]) -> int:
    """How many attempts a log holds."""
    n = 1
    for line in lines:
        m = BANNER.match(line.rstrip("\n"))
        if m:
            n = max(n, int(m.group(1)) + 1)
    return n


def pick_task(files: Dict[str, str], task: Optional[str]) -> List[Tuple[str, str]]:
    if task is None:
        return [(n, p) for n, p in files.items() if n != LAUNCHER]
    if task not in files:
        names = ", ".join(printable(n) for n in files)
        raise UserError(f"{printable(task)}: no such task in this run (tasks: {names})")
    return [(task, files[task])]


def _open(path: str):
    """A run's log for reading: in the run folder, never through a link, a regular file only
    (a FIFO or a device planted under its name is refused without blocking); None when
    missing."""
    return safe_files.open_regular(path, what="a task's log is a plain file", single_link=True)


def log_lines(path: str) -> Iterator[str]:
    """The lines of a log as text for a terminal, read a window at a time (memory does not grow
    with the log's size; a longer line comes in pieces)."""
    f = _open(path)
    if f is None:
        return
    with f:
        for raw in safe_files.read_lines(f):
            yield _safe(raw)


def _safe(raw: bytes) -> str:
    """A log line for the terminal: invalid UTF-8 replaced, escape sequences and control
    characters made harmless (the one sanitiser, tfcluster.terminal)."""
    nl = raw.endswith(b"\n")
    return terminal_text(decode(raw[:-1] if nl else raw)) + ("\n" if nl else "")


def _views(chosen, raw: bool, clock=None):
    """task -> its :class:`~tfcluster.core.task_output.ConsoleView` (None: shown raw), sharing one
    NoiseFold; the launcher's own log is always shown as it is."""
    from tfcluster.core.task_output import ConsoleView, NoiseFold
    noise = NoiseFold(show=raw)
    return noise, {name: None if raw or name == LAUNCHER else ConsoleView(noise, clock=clock)
                   for name, _ in chosen}


def _folded_note(noise, err) -> None:
    if noise.hidden:
        err.write(f"tfcluster: {noise.hidden} line(s) of TensorFlow's known-harmless messages "
                  f"(no GPU found, oneDNN, ...) and the raw progress reports are not shown; "
                  f"tfcluster logs --raw shows everything\n")
        err.flush()


def show(run_dir: str, record: Dict, task: Optional[str], attempt: Optional[int] = None,
         out=None, raw: bool = False, err=None) -> int:
    """Print the log(s); one task's log plain, several with a ``[task] `` prefix. Unless
    ``raw``, as the console shows them (:class:`~tfcluster.core.task_output.ConsoleView`)."""
    out = out or sys.stdout
    chosen = pick_task(log_files(run_dir, record), task)
    prefix = len(chosen) > 1
    noise, views = _views(chosen, raw)
    for name, path in chosen:
        lines: Iterable[str] = log_lines(path)
        if attempt is not None:
            have = attempts(log_lines(path))
            if attempt >= have:
                raise UserError(f"--attempt {attempt}: {printable(name)} has {have} attempt(s) "
                                f"(0 is the first start)")
            lines = attempt_lines(log_lines(path), attempt)
        view = views[name]
        head = f"[{printable(name)}] " if prefix else ""
        for line in lines:
            line = line[:-1] if line.endswith("\n") else line
            for shown in ([line] if view is None else view.feed(line)):
                out.write(head + shown + "\n")
        for shown in (view.flush() if view is not None else []):
            out.write(head + shown + "\n")
    out.flush()
    _folded_note(noise, err or sys.stderr)
    return 0


class _Tail:
    """One log, read on from where the last read ended, a window at a time (memory stays
    bounded however large it grows): its complete lines, and a line without end in pieces."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.partial = b""        # the last line read, not ended yet

    def read(self, each: Callable[[bytes], None]) -> bool:
        """Every line added since the last read, to ``each``; False when the log cannot be opened."""
        f = _open(self.path)
        if f is None:
            return False
        with f:
            f.seek(self.offset)
            while True:
                data = f.read(safe_files.WINDOW)
                if not data:
                    return True
                self.offset += len(data)
                lines, self.partial = safe_files.split_lines(self.partial, data, safe_files.WINDOW)
                for raw in lines:
                    each(raw)


def follow(run_dir: str, record: Dict, task: Optional[str], running: Callable[[], bool],
           out=None, interval: float = 0.2, sleep: Callable[[float], None] = time.sleep,
           raw: bool = False, clock: Callable[[], float] = time.monotonic, err=None) -> int:
    """Print the log(s) from the start and then what is added, until ``running()`` says the
    run is over (then what is left is printed and 0 returned). Ctrl-C ends it (the run goes on).
    Each log is read a window at a time, so memory stays bounded however large it grows.
    Unless ``raw``, as the console shows them (:class:`~tfcluster.core.task_output.ConsoleView`)."""
    out = out or sys.stdout
    chosen = pick_task(log_files(run_dir, record), task)
    prefix = len(chosen) > 1
    noise, views = _views(chosen, raw, clock)
    tails = {name: _Tail(path) for name, path in chosen}

    def emit(name: str, raw: bytes) -> None:
        head = f"[{printable(name)}] " if prefix else ""
        view = views[name]
        for i in range(0, max(1, len(raw)), safe_files.WINDOW):   # a longer line: in pieces
            line = _safe(raw[i:i + safe_files.WINDOW])
            for shown in ([line] if view is None else view.feed(line)):
                out.write(head + shown + "\n")

    def drain(final: bool) -> None:
        for name, _ in chosen:
            tail = tails[name]
            if not tail.read(functools.partial(emit, name)):
                continue
            if final and tail.partial:
                emit(name, tail.partial)
                tail.partial = b""
            view = views[name]
            if view is not None:
                head = f"[{printable(name)}] " if prefix else ""
                for shown in (view.flush() if final else view.tick()):
                    out.write(head + shown + "\n")
        out.flush()

    while True:
        alive = running()
        drain(final=not alive)
        if not alive:
            _folded_note(noise, err or sys.stderr)
            return 0
        sleep(interval)
