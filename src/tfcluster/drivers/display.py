"""What the launcher shows, and how: task output on stdout, its own lines on stderr, a live
table or progress lines, and the run's end.

- :class:`View` and :class:`OutputOptions`: how a run is shown (the launcher's settings: quiet,
  the live table, ``--tasks``, ``--timestamps``, host prefixes, ...).
- :class:`Display`: the console. Task output (prefixed ``[worker:1]``) goes to stdout;
  tfcluster's own lines (starts, failures, restarts, the stop sequence, the summary) go to
  stderr, so ``>/dev/null`` keeps the launcher's story and ``2>/dev/null`` keeps only task
  output. Progress-protocol lines are consumed, not echoed (the task logs keep them).
- The words of a run as it goes: when stdout and stderr are both a terminal, rich draws a live
  table (:func:`live_table`: task, state, uptime, restarts, step, its own steps/s, metrics; the
  chief marked; global step, steps/s, ETA) under the scrolling output, on that one screen;
  otherwise the launcher prints :class:`ProgressLines` every few seconds
  (:class:`ProgressPace`). At the end, :func:`summary`: the verdict, the first failure, every
  task, the failed task's last lines and a hint naming the fix.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from tfcluster.core.machine import RunMachine, TaskState
from tfcluster.core.output_patterns import exception_lines
from tfcluster.core.rules import describe_exit, format_duration
from tfcluster.errors import UserError
from tfcluster.plan.progress import PIPED_PROGRESS_EVERY
from tfcluster.runs.failure import read_failure
from tfcluster.runs.table import HEADER, ago, format_table, task_rows

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
        return self.stamp(now) + label

    def stamp(self, now: Optional[float] = None) -> str:
        """``12:04:05.123 `` with ``--timestamps`` (task lines and tfcluster's own), else ''."""
        if not self.timestamps:
            return ""
        t = time.time() if now is None else now
        return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d} "

    def check_tasks(self, names) -> None:
        """``--tasks`` must name tasks or jobs of the run (exit 2 naming the word)."""
        if self.tasks is None:
            return
        names = list(names)
        jobs = {n.split(":", 1)[0] for n in names}
        unknown = sorted(w for w in self.tasks if w not in names and w not in jobs)
        if unknown:
            raise UserError(f"--tasks: {', '.join(unknown)}: no such task or job in this run "
                            f"(tasks: {', '.join(names)})")


@dataclass
class View:
    """How a run is shown: the launcher's own presentation settings."""

    quiet: bool = False
    live: Optional[bool] = None
    stream: object = None              # task output (default stdout)
    err_stream: object = None          # tfcluster's own lines (default stderr)
    progress_every: float = PIPED_PROGRESS_EVERY   # seconds between progress lines (no table)
    echo_progress: bool = False        # also print progress-protocol lines (tools parse them)
    show_tf_noise: bool = False        # show TensorFlow's start-up noise on the console
    output: Optional[OutputOptions] = None   # --tasks, --timestamps, host prefixes


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
        self._emit(self.err, self.options.stamp() + "tfcluster: ", line, style)

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


# ---------------------------------------------------------------------------- the words of a run
# Read from the supervisor's tasks (tfcluster.drivers.tasks.TaskRun) and its machine.

class ProgressPace:
    """When a progress line is due without a live table: every ``every`` seconds, the first as
    soon as the step has moved past the first one reported (a line at step 0 alone says
    nothing), or ``every`` after that first report."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.last = 0.0                                  # when the last line was said
        self.first: Optional[Tuple[int, float]] = None   # (the first step reported, when)

    def due(self, step: int, now: float) -> bool:
        """Is a line due at ``now`` (the run at ``step``)? If so, it counts as said."""
        if self.first is None:
            self.first = (step, now)
        if self.last == 0.0:
            first, at = self.first
            due = step != first or now - at >= self.every
        else:
            due = now - self.last >= self.every
        if due:
            self.last = now
        return due


class ProgressLines:
    """Without a live table: one line per running task that reports progress -- its step, its
    own steps/s (from its ``local_step`` reports), the ETA at the run's rate (the global step's;
    only once that rate is steady: :meth:`tfcluster.drivers.tasks.StepRate.steady`), its
    metrics. A line is said only when it says something new: the same line is not said again,
    and a task whose reports have stopped (none for twice the interval between lines) gets one
    line that says so, then another each time that silence has doubled -- never its stale line
    with an ETA from a rate it no longer has."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._said: dict = {}      # task -> the last progress line said for it
        self._silent: dict = {}    # task -> the silence after which the next "no report" line is due

    def lines(self, runs: Iterable, eta_rate: Optional[float], now: float) -> List[str]:
        out = []
        for tr in runs:
            p = tr.progress
            if p is None or tr.state != TaskState.RUNNING:
                continue
            at = f"{p.step}" + (f"/{p.total}" if p.total else "")
            age = now - (tr.seen.progress_at or now)
            if age > 2 * self.every:
                due = self._silent.get(tr.name)
                if due is None or age >= due:
                    still = "still " if due is not None else ""
                    out.append(f"{tr.name}: {still}no progress report for {format_duration(age)} "
                               f"(at step {at})")
                    self._silent[tr.name] = 2 * age
                continue
            self._silent.pop(tr.name, None)
            line = f"{tr.name}: step {at}"
            own = tr.own_rate.current(now)
            if own:
                line += f", {own:.1f} steps/s"
            if eta_rate and p.total and p.total > p.step:
                line += f", ETA {format_duration((p.total - p.step) / eta_rate)}"
            if p.metrics:
                line += ", " + ", ".join(f"{k} {_num(v)}" for k, v in p.metrics.items())
            if self._said.get(tr.name) == line:
                continue
            self._said[tr.name] = line
            out.append(line)
        return out


def live_table(runs: Iterable, machine: RunMachine, chief: str, run_rate: Optional[float],
               now: float, eta_rate: Optional[float] = None):
    """The live table (a rich Table): a row per task -- its state as the machine shows it,
    pid, uptime, restarts, step, its own steps/s, the age of its last sign of life and of its
    last output, up to four metrics -- and a caption with the global step, the run's steps/s
    (``run_rate``: None once stale) and the ETA (at ``eta_rate``: the steady rate, or none)."""
    from rich.table import Table
    runs = list(runs)
    table = Table(box=None, header_style="bold", pad_edge=False)
    metric_names: List[str] = []
    for tr in runs:
        for k in (tr.progress.metrics if tr.progress else {}):
            if k not in metric_names and len(metric_names) < 4:
                metric_names.append(k)
    for h in ["task", "state", "pid", "uptime", "restarts", "step", "steps/s", "progress",
              "output"] + metric_names:
        table.add_column(h)
    best = None
    for tr in runs:
        up = format_duration((tr.ended or now) - tr.started) if tr.started else ""
        p = tr.progress
        step = "" if p is None else str(p.step)
        if p is not None and (best is None or p.step > best.step):
            best = p
        name = tr.name + (" (chief)" if tr.name == chief else "")
        running = tr.state == TaskState.RUNNING
        table.add_row(name, machine.shown(tr.name), str(tr.pid or ""), up, str(tr.restarts), step,
                      _own_rate(tr, now),
                      ago(tr.track.alive_at, now) if running else "",
                      ago(tr.seen.output_at, now) if running else "",
                      *[_num(p.metrics[k]) if p is not None and k in p.metrics else ""
                        for k in metric_names])
    if best is not None:
        line = f"global step {best.step}" + (f"/{best.total}" if best.total else "")
        if run_rate:
            line += f"  {run_rate:.1f} steps/s"
        if eta_rate and best.total and best.total > best.step:
            line += f"  ETA {format_duration((best.total - best.step) / eta_rate)}"
        table.caption = line
    return table


def summary(record: dict, runs: Mapping[str, object], machine: RunMachine, run_id: str,
            started: float, ended: float) -> str:
    """The end of the run for the person: the decision, the first failure, every task (the one
    that failed first at the top), its last lines and a hint naming the fix. ``record``: the
    final run record (written once, not built again)."""
    root = None if machine.root_cause is None else runs[machine.root_cause]
    order = list(runs.values())
    if root is not None:
        order.remove(root)
        order.insert(0, root)
    by_name = {t["task"]: t for t in record["tasks"]}
    rows = task_rows({"tasks": [by_name[tr.name] for tr in order]}, now=ended)
    result = machine.result.value
    words = {"succeeded": "succeeded", "failed": "FAILED", "interrupted": "interrupted"}
    text = [f"run {run_id} {words.get(result, result)} in {format_duration(ended - started)} "
            f"(exit code {machine.exit_code})"]
    if root is None and machine.root_cause_words:
        text.append(f"cause: {machine.root_cause_words}")
    text.extend(f"warning: {line}" for line in machine.stalled())
    if root is not None:
        text.append(f"first failure: {root.name} ({describe_exit(root.returncode)})"
                    + (f" — {root.why}" if root.why else "") + f"; log: {root.log_path}")
    text.append(format_table(HEADER, rows))
    for tr in order:        # who sent a SIGKILL, as far as tfcluster can tell (the root's is above)
        if tr is not root and tr.why and describe_exit(tr.returncode) == "SIGKILL":
            text.append(f"{tr.name} ended by SIGKILL: {tr.why}")
    if root is not None:
        failure = read_failure(root.seen.tail, record, root.name, os.getcwd())
        if failure.tail:
            text.append(f"last lines of {root.name}:")
            text.extend("  " + line for line in failure.tail)
        if failure.hint:
            text.append(failure.hint)     # "hint: ..." naming the fix
    return "\n".join(text)


class TracebackFold:
    """A task's Python traceback on the console: held back from the moment it starts
    (``Traceback (most recent call last):``). If the task then fails, the console gets the
    failure's one-line cause and hint first (the machine's failure line) and the traceback
    folded after them (:meth:`fold`: where to read it whole, and its exception); if the task
    goes on (a progress report, HOLD seconds still running, a chatty stream) or exits 0, every
    held line is shown as it came (:meth:`release`). Shared by the task's reader thread and the
    launcher's loop."""

    HOLD = 10.0           # seconds a traceback is held while its task runs on
    MAX_HELD = 1000       # lines held at most: a task that prints more is not dying

    def __init__(self) -> None:
        self.held: List[str] = []
        self.since: Optional[float] = None
        self._lock = threading.Lock()

    def feed(self, line: str, now: float) -> List[str]:
        """The lines to show now for one line of the task's output."""
        with self._lock:
            if self.since is None:
                if not line.startswith("Traceback (most recent call last):"):
                    return [line]
                self.since = now
            self.held.append(line)
            if len(self.held) > self.MAX_HELD:
                return self._take()
            return []

    def due(self, now: float) -> bool:
        """A traceback held HOLD seconds while its task runs on: show it."""
        return self.since is not None and now - self.since >= self.HOLD

    def release(self) -> List[str]:
        """Every held line, as it came (the task went on, or exited 0)."""
        with self._lock:
            return self._take()

    def fold(self, logs: str) -> List[str]:
        """The traceback as the console shows it after a failure: one line that says how many
        lines were folded and where they all are (``logs``: the ``tfcluster logs`` command),
        then its exception's lines."""
        with self._lock:
            held = self._take()
        if not held:
            return []
        head = exception_lines(held)
        return [f"{held[0].rstrip()} {len(held)} lines folded: {logs} shows them"] + head

    def _take(self) -> List[str]:
        held, self.held, self.since = self.held, [], None
        return held


def _own_rate(tr, now: float) -> str:
    """The live table's steps/s of a task: its own rate (from ``local_step`` reports; none
    once stale); ``global`` for a task that reports only the global step (the run's rate is
    the caption's)."""
    if tr.own_rate.value is not None:
        own = tr.own_rate.current(now)
        return "" if own is None else f"{own:.1f}"
    return "global" if tr.progress is not None and not tr.own_rate.points else ""


def _num(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e9:
        return str(int(v))
    return f"{v:.4g}"
