"""Reading a task's output: every line to its log file, what matters to the supervisor noted.

A line that redraws itself with carriage returns (Keras' progress bar) is kept as its latest
state (what a terminal would show), in the console and in the log.
One reader thread per started task. A line is masked (secrets), written to the task's log
(everything, progress-protocol lines included), and classified: a port conflict, a
"CreateSession still waiting" about another task, or a progress report. The reader only
records what it saw (:class:`Seen`); the supervisor loop decides what to do about it.
"""
from __future__ import annotations

import os
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, IO, Optional

from ..keras_support import latest_bar_state
from ..progress import Progress, parse_progress

from ..rules import PORT_CONFLICT, STILL_WAITING  # noqa: F401 (the reader's classes of lines)
TAIL_LINES = 20


@dataclass
class Seen:
    """What a task's output has told the supervisor (shared with the reader thread)."""

    tail: Deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    port_conflict: bool = False
    waiting_on: Dict[str, float] = field(default_factory=dict)   # task -> first "still waiting"
    progress: Optional[Progress] = None
    progress_at: Optional[float] = None

    def reset(self) -> None:
        self.port_conflict = False
        self.waiting_on.clear()


class OutputReader(threading.Thread):
    """Reads ``stream`` to its end: log, classify, and hand each line to ``on_line``
    (``on_line(line, progress)``; progress is None for ordinary lines)."""

    def __init__(self, name: str, stream: IO[bytes], log_path: Optional[str], seen: Seen,
                 lock: threading.RLock, mask: Callable[[str], str], clock: Callable[[], float],
                 on_line: Callable[[str, Optional[Progress]], None], banner: str = ""):
        super().__init__(daemon=True, name=f"out-{name}")
        self.stream, self.log_path, self.seen, self.lock = stream, log_path, seen, lock
        self.mask, self.clock, self.on_line, self.banner = mask, clock, on_line, banner

    def run(self) -> None:
        log = None
        if self.log_path:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            log = os.fdopen(fd, "ab")
        try:
            if log is not None and self.banner:
                log.write(self.banner.encode() + b"\n")
            for raw in iter(self.stream.readline, b""):
                line = self.mask(latest_bar_state(raw.decode("utf-8", "replace").rstrip("\r\n")))
                if log is not None:
                    log.write((line + "\n").encode("utf-8", "replace"))
                    log.flush()
                p = parse_progress(line)
                with self.lock:
                    self.seen.tail.append(line)
                    if PORT_CONFLICT.search(line):
                        self.seen.port_conflict = True
                    m = STILL_WAITING.search(line)
                    if m:
                        self.seen.waiting_on.setdefault(f"{m.group(1)}:{m.group(2)}", self.clock())
                    if p is not None:
                        self.seen.progress, self.seen.progress_at = p, self.clock()
                self.on_line(line, p)
        finally:
            if log is not None:
                log.close()
            try:
                self.stream.close()
            except OSError:
                pass
