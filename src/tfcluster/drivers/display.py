"""What the launcher shows: task output on stdout, its own lines on stderr, and a live table.

Task output (prefixed ``[worker:1]``) goes to stdout; tfcluster's own lines (starts, failures,
restarts, the stop sequence, the summary) go to stderr, so ``>/dev/null`` keeps the launcher's
story and ``2>/dev/null`` keeps only task output. Progress-protocol lines are consumed, not
echoed (the task logs keep them). When stdout and stderr are both a terminal, rich draws a live
table (task, state, uptime, restarts, step, its own steps/s, metrics; the chief marked; global
step, steps/s, ETA) under the scrolling output, on that one screen; otherwise the launcher prints a periodic
progress line instead.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, FrozenSet, Optional, Tuple

from tfcluster.errors import UserError

COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta",
           "bright_green", "bright_yellow", "bright_blue"]


@dataclass(frozen=True)
class OutputOptions:
    """How task lines are shown: which tasks (``--tasks worker:0,chief``; a job name means every
    task of the job), the ``host/job:i`` prefix on multi-host runs, timestamps, and whether the
    security note may be printed."""

    tasks: Optional[FrozenSet[str]] = None     # None: every task
    timestamps: bool = False
    hosts: Tuple[Tuple[str, str], ...] = ()    # (task, host) when the run spans several hosts
    security_note: bool = True

    @classmethod
    def parse(cls, tasks: Optional[str] = None, timestamps: bool = False,
              security_note: bool = True) -> "OutputOptions":
        chosen = None
        if tasks is not None:
            words = [w.strip() for w in tasks.split(",")]
            bad = [w for w in words if not w or not all(
                part.replace("_", "").replace("-", "").isalnum() for part in w.split(":", 1))
                or (":" in w and not w.split(":", 1)[1].isdigit())]
            if bad or not words:
                raise UserError(f"--tasks: '{tasks}' is not a list of tasks or jobs, e.g. "
                                f"--tasks worker:0,chief")
            chosen = frozenset(words)
        return cls(tasks=chosen, timestamps=timestamps, security_note=security_note)

    @staticmethod
    def hosts_of(plan) -> Tuple[Tuple[str, str], ...]:
        """(task, host) for every task when the plan's tasks are on more than one host."""
        pairs = tuple((t.name, t.host) for t in plan.tasks if t.host)
        return pairs if len({h for _, h in pairs}) > 1 else ()

    def shows(self, name: str) -> bool:
        if self.tasks is None:
            return True
        return name in self.tasks or name.split(":", 1)[0] in self.tasks

    def prefix(self, name: str, now: Optional[float] = None) -> str:
        host = dict(self.hosts).get(name)
        label = f"[{host}/{name}] " if host else f"[{name}] "
        if self.timestamps:
            t = time.time() if now is None else now
            label = time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d} " + label
        return label

    def check(self, names) -> None:
        """``--tasks`` must name tasks or jobs of the run (exit 2 naming the word)."""
        if self.tasks is None:
            return
        names = list(names)
        jobs = {n.split(":", 1)[0] for n in names}
        unknown = sorted(w for w in self.tasks if w not in names and w not in jobs)
        if unknown:
            raise UserError(f"--tasks: {', '.join(unknown)}: no such task or job in this run "
                            f"(tasks: {', '.join(names)})")


def _isatty(stream) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


class Display:
    def __init__(self, quiet: bool = False, live: Optional[bool] = None,
                 table: Optional[Callable[[], object]] = None, stream=None, err_stream=None,
                 options: Optional[OutputOptions] = None):
        self.options = options or OutputOptions()
        self.out = stream or sys.stdout
        self.err = err_stream or (stream if stream is not None else sys.stderr)
        self.quiet = quiet
        self.lock = threading.Lock()
        self.tty = _isatty(self.out) and _isatty(self.err)
        self.live_wanted = self.tty if live is None else (live and self.tty)
        self.table = table
        self.live = None
        self.console = None
        if self.tty:
            from rich.console import Console
            self.console = Console(file=self.out, highlight=False, soft_wrap=True)
        self._colour: dict = {}
        self.echo = None      # a callable that gets every launcher line too (the launcher log)

    @property
    def shows_table(self) -> bool:
        return self.live is not None

    # -- lifecycle
    def start(self) -> None:
        if self.live_wanted and self.table is not None and self.console is not None:
            from rich.live import Live
            self.live = Live(self.table(), console=self.console, refresh_per_second=2,
                             transient=True, redirect_stdout=False, redirect_stderr=False)
            self.live.start()

    def refresh(self) -> None:
        if self.live is not None and self.table is not None:
            with self.lock:
                self.live.update(self.table())

    def stop(self) -> None:
        if self.live is not None:
            with self.lock:
                self.live.stop()
            self.live = None

    # -- lines
    def colour(self, name: str) -> str:
        if name not in self._colour:
            self._colour[name] = COLOURS[len(self._colour) % len(COLOURS)]
        return self._colour[name]

    def task_line(self, name: str, line: str) -> None:
        if self.quiet or not self.options.shows(name):
            return
        self._emit(self.out, self.options.prefix(name), line, self.colour(name))

    def info(self, line: str, log: bool = True) -> None:
        """One of the launcher's lines; ``log=False``: the event log records it already (a
        start, a progress line), so launcher.log does not get it twice."""
        self._launcher(line, "bold", log)

    def error(self, line: str) -> None:
        self._launcher(line, "bold red")

    def _launcher(self, line: str, style: str, log: bool = True) -> None:
        if self.echo is not None and log:
            self.echo(line)
        self._emit(self.err, "tfcluster: ", line, style)

    def block(self, text: str) -> None:
        """A block of launcher text (the summary, a dry run's plan)."""
        if self.echo is not None:
            self.echo(text)
        self.write(text, self.err)

    def write(self, text: str, stream=None) -> None:
        with self.lock:
            try:
                if self.console is not None:
                    self.console.print(text, markup=False, highlight=False)
                else:
                    s = stream or self.out
                    s.write(text + "\n")
                    s.flush()
            except (BrokenPipeError, ValueError):   # closed (`| head`): the logs keep the text
                pass

    def _emit(self, stream, prefix: str, line: str, style: str) -> None:
        with self.lock:
            try:
                if self.console is not None:
                    from rich.text import Text
                    text = Text(prefix, style=style)
                    text.append(line)
                    self.console.print(text)
                else:
                    stream.write(prefix + line + "\n")
                    stream.flush()
            except (BrokenPipeError, ValueError):   # closed (`| head`): the logs keep the text
                pass
