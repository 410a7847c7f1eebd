"""What the launcher shows: prefixed task output, its own lines, and a live status table.

On a terminal, rich draws a live table (task states, uptime, restarts, global step, steps/s,
ETA) under the scrolling output; elsewhere everything is plain lines.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, Optional

COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta",
           "bright_green", "bright_yellow", "bright_blue"]


class Display:
    def __init__(self, quiet: bool = False, live: Optional[bool] = None,
                 table: Optional[Callable[[], object]] = None, stream=None):
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.lock = threading.Lock()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.live_wanted = self.tty if live is None else (live and self.tty)
        self.table = table
        self.live = None
        self.console = None
        if self.tty:
            from rich.console import Console
            self.console = Console(file=self.stream, highlight=False, soft_wrap=True)
        self._colour = {}

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
        if self.quiet:
            return
        self._emit(f"[{name}] ", line, self.colour(name))

    def info(self, line: str) -> None:
        self._emit("tfcluster: ", line, "bold")

    def error(self, line: str) -> None:
        self._emit("tfcluster: ", line, "bold red")

    def block(self, text: str) -> None:
        with self.lock:
            if self.console is not None:
                self.console.print(text, markup=False, highlight=False)
            else:
                self.stream.write(text + "\n")
                self.stream.flush()

    def _emit(self, prefix: str, line: str, style: str) -> None:
        with self.lock:
            try:
                if self.console is not None:
                    from rich.text import Text
                    text = Text(prefix, style=style)
                    text.append(line)
                    self.console.print(text)
                else:
                    self.stream.write(prefix + line + "\n")
                    self.stream.flush()
            except (BrokenPipeError, ValueError):
                pass
