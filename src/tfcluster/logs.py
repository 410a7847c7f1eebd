"""``tfcluster logs``: a run's task logs, one attempt of a restarted task, or followed live.

A task's log (``<run_dir>/<job>-<index>.log``) holds every attempt; the launcher writes
``----- tfcluster: restart N -----`` before attempt N. ``launcher`` names the launcher's own
log (``launcher.log``) and, for a detached run, ``console.log`` (what its terminal would
have shown). Task logs are shown as the console shows them: TensorFlow's known-harmless lines
folded and progress reports as ``progress: step N/M`` lines (:class:`tfcluster.reader.ConsoleView`,
the console's NoiseFold); ``--raw`` shows every line as written. No TensorFlow.
"""
from __future__ import annotations

import os
import re
import sys
import time
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .errors import UserError

BANNER = re.compile(r"^----- tfcluster: restart (\d+) -----$")
TASK = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*:\d+$")
LAUNCHER = "launcher"


def looks_like_task(text: str) -> bool:
    return bool(TASK.match(text)) or text == LAUNCHER


def log_files(run_dir: str, record: Dict) -> Dict[str, str]:
    """task name -> log path, in the record's task order; ``launcher`` last."""
    out: Dict[str, str] = {}
    for t in record.get("tasks") or []:
        name = t.get("task")
        if not isinstance(name, str):
            continue
        log = t.get("log")
        if not log and TASK.match(name):
            job, index = name.split(":")
            log = os.path.join(run_dir, f"{job}-{index}.log")
        if log:
            out[name] = log if os.path.isabs(log) else os.path.join(run_dir, log)
    console = os.path.join(run_dir, "console.log")
    out[LAUNCHER] = console if os.path.isfile(console) else os.path.join(run_dir, "launcher.log")
    return out


def attempt_lines(lines: Iterable[str], attempt: int) -> List[str]:
    """The lines of attempt ``attempt`` (0: the first start, N: the N-th restart)."""
    current, out = 0, []
    for line in lines:
        m = BANNER.match(line.rstrip("\n"))
        if m:
            current = int(m.group(1))
            continue
        if current == attempt:
            out.append(line)
    return out


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
        names = ", ".join(files)
        raise UserError(f"{task}: no such task in this run (tasks: {names})")
    return [(task, files[task])]


def _read(path: str) -> List[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readlines()
    except FileNotFoundError:
        return []


def _views(chosen, raw: bool, clock=None):
    """task -> its :class:`~tfcluster.reader.ConsoleView` (None: shown raw), sharing one
    NoiseFold; the launcher's own log is always shown as it is."""
    from .reader import ConsoleView, NoiseFold
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
    ``raw``, as the console shows them (:class:`~tfcluster.reader.ConsoleView`)."""
    out = out or sys.stdout
    chosen = pick_task(log_files(run_dir, record), task)
    prefix = len(chosen) > 1
    noise, views = _views(chosen, raw)
    for name, path in chosen:
        lines = _read(path)
        if attempt is not None:
            have = attempts(lines)
            if attempt >= have:
                raise UserError(f"--attempt {attempt}: {name} has {have} attempt(s) "
                                f"(0 is the first start)")
            lines = attempt_lines(lines, attempt)
        view = views[name]
        head = f"[{name}] " if prefix else ""
        for line in lines:
            line = line[:-1] if line.endswith("\n") else line
            for shown in ([line] if view is None else view.feed(line)):
                out.write(head + shown + "\n")
        for shown in (view.flush() if view is not None else []):
            out.write(head + shown + "\n")
    out.flush()
    _folded_note(noise, err or sys.stderr)
    return 0


def follow(run_dir: str, record: Dict, task: Optional[str], running: Callable[[], bool],
           out=None, interval: float = 0.2, sleep: Callable[[float], None] = time.sleep,
           raw: bool = False, clock: Callable[[], float] = time.monotonic, err=None) -> int:
    """Print the log(s) from the start and then what is added, until ``running()`` says the
    run is over (then what is left is printed and 0 returned). Ctrl-C ends it (the run goes on).
    Unless ``raw``, as the console shows them (:class:`~tfcluster.reader.ConsoleView`)."""
    out = out or sys.stdout
    chosen = pick_task(log_files(run_dir, record), task)
    prefix = len(chosen) > 1
    noise, views = _views(chosen, raw, clock)
    offsets = {name: 0 for name, _ in chosen}
    partial = {name: b"" for name, _ in chosen}

    def drain(final: bool) -> None:
        for name, path in chosen:
            try:
                with open(path, "rb") as f:
                    f.seek(offsets[name])
                    data = f.read()
            except FileNotFoundError:
                continue
            offsets[name] += len(data)
            data = partial[name] + data
            lines = data.split(b"\n")
            partial[name] = lines.pop()
            if final and partial[name]:
                lines.append(partial[name])
                partial[name] = b""
            view = views[name]
            head = f"[{name}] " if prefix else ""
            for data in lines:
                line = data.decode("utf-8", "replace")
                for shown in ([line] if view is None else view.feed(line)):
                    out.write(head + shown + "\n")
            for shown in ((view.flush() if final else view.tick()) if view is not None else []):
                out.write(head + shown + "\n")
        out.flush()

    while True:
        alive = running()
        drain(final=not alive)
        if not alive:
            _folded_note(noise, err or sys.stderr)
            return 0
        sleep(interval)
