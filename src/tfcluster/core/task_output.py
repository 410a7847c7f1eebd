"""Reading a task's output: every line to its log file, what matters to the driver kept (one
:class:`OutputReader` per started task). The supervisor's readers share one thread
(:class:`tfcluster.drivers.pump.OutputPump`); the Slurm node agent feeds its reader the bytes
it reads (:meth:`OutputReader.feed`), so every backend reads a program's output by these rules.

- **Pieces.** A newline ends a line; a carriage return ends a *redraw* (Keras' ``verbose=1``
  bar). A redraw is read for progress and liveness at once; the log and the console get the
  line as a terminal last shows it (its last non-blank redraw), as before. A line longer than
  :data:`MAX_LINE` bytes is split there, so memory stays bounded whatever the program prints
  (300 MiB without a newline is 4,800 lines of 64 KiB).
- **Log.** Each line is masked (secrets) and written to the task's log, everything included
  (progress reports, TensorFlow's start-up noise). A write that fails (a full disk: ENOSPC)
  is kept once in ``Seen.log_error`` and the log is dropped; reading goes on, so the task
  never blocks on a full pipe and training goes on.
- **Progress.** The progress protocol is found anywhere in a piece (glued to a bar) and taken
  out of what is shown. Well-known output (Keras bars and epochs, TF1 hook lines:
  :mod:`tfcluster.core.output_patterns`) gives the step of a program that sends no reports;
  once a task has sent one, its parsed output counts as life only (one source of steps per
  task). A report also arrives on the launcher's own pipe (``side``), which output cannot
  garble.
- **Console.** ``on_line(text, None)`` shows a line; ``on_line(report, progress)`` hands over
  progress (shown only with ``--echo-progress``). TensorFlow's known start-up noise is not
  handed over unless the run's :class:`NoiseFold` shows it; the first folded line of a run
  hands over one line instead, once (:data:`NOISE_NOTE`: a note, said to the person).

The reader only records what it saw (:class:`Seen`); the driver's loop decides what to do.
"""
from __future__ import annotations

import errno
import os
import select
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Callable, Deque, Dict, List, Optional, Tuple

from tfcluster.core.output_patterns import ProgressParser, clean_segment, is_noise, noise_continues
from tfcluster.core.rules import STILL_WAITING, longest_gap
from tfcluster.plan.progress import PIPED_PROGRESS_EVERY, Progress, format_progress, split_progress
from tfcluster.terminal import decode

TAIL_LINES = 200            # lines kept for the failure summary and hints
TAIL_LINE_CHARS = 4096      # of each
MAX_LINE = 64 * 1024        # bytes: a longer line is split
READ_SIZE = 64 * 1024

NOISE_NOTE = ("tfcluster: TensorFlow's known-harmless messages (no GPU found, oneDNN, absl, the "
              "coordination service's INFO lines, ...) are hidden on the console and kept in the "
              "task logs; --show-tf-noise shows them")


def still_waiting_on(line: str) -> Optional[str]:
    """The task (``ps:0``) TensorFlow says a session still waits for in ``line``, or None."""
    m = STILL_WAITING.search(line)
    return f"{m.group(1)}:{m.group(2)}" if m else None


@dataclass
class Seen:
    """What a task's output has told the supervisor (shared with the reader thread)."""

    tail: Deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    progress: Optional[Progress] = None
    progress_at: Optional[float] = None
    life_at: Optional[float] = None       # the last sign of progress (a step that moved, ...)
    longest_gap: float = 0.0              # the longest wait for a sign of life (its cadence)
    started_at: Optional[float] = None    # this attempt's start, as the reader saw it
    rate: Optional[float] = None          # steps/s as the program says it (TF1, Keras' ms/step)
    log_error: Optional[str] = None       # the first failed write to the log (then dropped)
    read_error: Optional[str] = None      # why reading the task's output stopped early
    noise_hidden: int = 0                 # noise lines not shown on the console
    output_at: Optional[float] = None     # the last line or redraw it printed (any output)

    def reset(self) -> None:
        self.life_at = None
        self.longest_gap = 0.0
        self.started_at = None

    def mark_life(self, now: float) -> None:
        """A sign of progress at ``now`` (call under the supervisor's lock)."""
        self.longest_gap = longest_gap(self.longest_gap, self.life_at, self.started_at, now)
        self.life_at = now


class NoiseFold:
    """The run's console decision for TensorFlow's start-up noise: hidden (the default; one
    note per run says so) or shown (``--show-tf-noise``). Shared by every reader of a run."""

    def __init__(self, show: bool = False, say: Optional[Callable[[str], None]] = None):
        self.show = show
        self.hidden = 0
        self.say = say            # where the note goes (the launcher's own lines); None: the
        self._said = False        # reader hands it over as a line of the task
        self._lock = threading.Lock()
        self._folded: Dict[object, str] = {}   # each source's last line, when it was folded

    def fold(self, line: str, source: object = None) -> Tuple[bool, Optional[str]]:
        """(hide it, the note to show instead or None). ``source``: whose line it is (a task's
        reader): a message of several lines (a deprecation warning) is folded whole."""
        if self.show:
            return False, None
        with self._lock:
            previous = self._folded.pop(source, None)
        if not is_noise(line) and not noise_continues(previous, line):
            return False, None
        with self._lock:
            self._folded[source] = line
            self.hidden += 1
            if self._said:
                return True, None
            self._said = True
        return True, NOISE_NOTE


def describe_progress(p: Progress) -> str:
    """``step 317/2000, loss 0.0195``: a progress report as the launcher's lines say it."""
    words = f"step {p.step}" + (f"/{p.total}" if p.total else "")
    for k, v in p.metrics.items():
        words += f", {k} " + (str(int(v)) if float(v).is_integer() and abs(v) < 1e9 else f"{v:.4g}")
    return words


class ConsoleView:
    """A task's logged lines as the console shows them (``tfcluster logs``, ``logs -f``): the
    run's :class:`NoiseFold` hides TensorFlow's known-harmless lines; progress reports (the raw
    ``@tfcluster progress {...}`` lines) become ``progress: step N/M, loss ...`` lines, one for
    the first report after other output, then one each ``every`` seconds (with a ``clock``:
    following a live log) or each tenth of the total (without: a whole log at once), and the
    last before other output and at the end."""

    def __init__(self, noise: Optional[NoiseFold] = None, clock: Optional[Callable[[], float]] = None,
                 every: float = PIPED_PROGRESS_EVERY):
        self.noise = noise if noise is not None else NoiseFold()
        self.clock, self.every = clock, every
        self._pending: Optional[Progress] = None     # a report not shown yet
        self._shown: Optional[Progress] = None       # the last report shown since other output
        self._shown_at = 0.0

    def _show(self, p: Progress) -> List[str]:
        self._pending, self._shown = None, p
        self._shown_at = self.clock() if self.clock is not None else 0.0
        return ["progress: " + describe_progress(p)]

    def _due(self, p: Progress) -> bool:
        last = self._shown
        if last is None:
            return True
        if self.clock is not None:
            return self.clock() - self._shown_at >= self.every
        if p.total:
            return p.step * 10 // p.total > last.step * 10 // p.total
        return False

    def feed(self, line: str) -> List[str]:
        """The lines to show for one logged line (without its newline)."""
        visible, found = split_progress(line)
        out: List[str] = []
        if visible.strip():
            hide, _ = self.noise.fold(clean_segment(visible), id(self))
            if not hide:
                out += self.flush()
                out.append(visible)
                self._shown = None
        for p in found:
            if self._due(p):
                out += self._show(p)
            else:
                self._pending = p
        return out

    def tick(self) -> List[str]:
        """Following a live log: a held report whose time has come."""
        if self._pending is not None and self._due(self._pending):
            return self._show(self._pending)
        return []

    def flush(self) -> List[str]:
        """The held report (before other output, at the end)."""
        return self._show(self._pending) if self._pending is not None else []


class OutputReader(threading.Thread):
    """Reads ``stream`` (and the progress pipe ``side``, when given) to its end: log, classify,
    and hand lines and progress to ``on_line`` (see the module's docstring)."""

    def __init__(self, name: str, stream: IO[bytes], log_path: Optional[str], seen: Seen,
                 lock: threading.RLock, mask: Callable[[str], str], clock: Callable[[], float],
                 on_line: Callable[[str, Optional[Progress]], None], banner: str = "",
                 side: Optional[IO[bytes]] = None, noise: Optional[NoiseFold] = None,
                 log_file: Optional[IO[bytes]] = None,
                 open_log: Optional[Callable[[str], int]] = None, summed_over: int = 1):
        super().__init__(daemon=True, name=f"out-{name}")
        # how the driver opens the task's log for appending, as a descriptor (the supervisor:
        # tfcluster.safe_files.open_append_fd, relative to the run folder, no link followed)
        self.open_log = open_log
        self.stream, self.log_path, self.seen, self.lock = stream, log_path, seen, lock
        self.mask, self.clock, self.on_line, self.banner = mask, clock, on_line, banner
        self.side = side
        self.noise = noise if noise is not None else NoiseFold()
        # summed_over: the workers whose values Keras adds in a bar (ProgressParser)
        self.parser = ProgressParser(summed_over)
        self._protocol = False            # reports arrived: parsed output is then life only
        self.log = log_file
        self._line = bytearray()          # the piece being read
        self._shown = b""                 # the last non-blank redraw of this line
        self._redrawn = False             # this line has had a carriage return
        self._side_buf = bytearray()
        with self.lock:
            if self.seen.started_at is None:
                self.seen.started_at = self.clock()

    # ------------------------------------------------------------------ the log
    def _open_log(self) -> None:
        if self.log is not None or not self.log_path or self.open_log is None:
            return
        try:
            self.log = os.fdopen(self.open_log(self.log_path), "ab", buffering=0)
        except OSError as e:
            self._log_failed(e)

    def _log_failed(self, e: OSError) -> None:
        with self.lock:
            if self.seen.log_error is None:
                why = os.strerror(e.errno) if e.errno else str(e)
                if e.errno == errno.ENOSPC:
                    why = "no space left on the device"
                self.seen.log_error = f"{self.log_path or 'log'}: {why}; the rest of the output was dropped"
        log, self.log = self.log, None
        if log is not None:
            try:
                log.close()
            except OSError:   # the failed log: its error is in seen.log_error already
                pass
        self.log_path = None

    def _write(self, data: bytes) -> None:
        if self.log is None:
            return
        try:
            self.log.write(data)
            flush = getattr(self.log, "flush", None)
            if flush is not None:
                flush()
        except OSError as e:
            self._log_failed(e)
        except ValueError:          # closed under us
            self.log = None

    # ------------------------------------------------------------------ reading
    def begin(self) -> None:
        """Open the log and write the banner (before the first byte is read)."""
        self._open_log()
        if self.banner:
            self._write(self.banner.encode() + b"\n")

    def run(self) -> None:
        """A reader on a thread of its own (a stream without a descriptor)."""
        try:
            self.begin()
            if self.side is None:
                self._read_one()
            else:
                self._read_both()
            self._end_of_output()
        finally:
            self.finish()

    # A reader the pump reads for: join() and is_alive() follow the pump's work, not a thread.
    _pumped = False
    _done: Optional[threading.Event] = None

    def join(self, timeout: Optional[float] = None) -> None:
        if self._pumped:
            self._done.wait(timeout)
        else:
            super().join(timeout)

    def is_alive(self) -> bool:
        if self._pumped:
            return not self._done.is_set()
        return super().is_alive()

    def finish(self) -> None:
        """The output has ended: flush what is pending, close the log and the streams."""
        try:
            if self._pumped:
                if self._side_buf:
                    self._side_report(bytes(self._side_buf))
                    self._side_buf.clear()
                self._end_of_output()
        finally:
            log, self.log = self.log, None
            if log is not None:
                try:
                    log.close()
                except OSError as e:
                    self.log = None
                    self._log_failed(e)
            for s in (self.stream, self.side):
                if s is not None:
                    try:
                        s.close()
                    except OSError:   # a pipe read to its end: a failed close loses nothing
                        pass
            if self._done is not None:
                self._done.set()

    def _chunk(self, stream) -> bytes:
        read1 = getattr(stream, "read1", None)
        try:
            return read1(READ_SIZE) if read1 is not None else stream.read(READ_SIZE)
        except (OSError, ValueError):
            return b""

    def _read_one(self) -> None:
        while True:
            data = self._chunk(self.stream)
            if not data:
                return
            self._feed(data)

    def _read_both(self) -> None:
        streams = {self.stream.fileno(): self.stream, self.side.fileno(): self.side}
        poller = select.poll()           # not select: it cannot wait on descriptors >= 1024
        for fd in streams:
            poller.register(fd, select.POLLIN)
        while streams:
            try:
                ready = [fd for fd, _ in poller.poll()]
            except InterruptedError:
                continue
            for fd in ready:
                if fd not in streams:
                    continue
                stream = streams[fd]
                try:
                    data = os.read(fd, READ_SIZE)
                except OSError:
                    data = b""
                if not data:
                    del streams[fd]
                    poller.unregister(fd)
                    continue
                if stream is self.side:
                    self._feed_side(data)
                else:
                    self._feed(data)
        if self._side_buf:
            self._side_report(bytes(self._side_buf))

    def _feed(self, data: bytes) -> None:
        """Split ``data`` at newlines and carriage returns; cap what is pending."""
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            cr = data.find(b"\r", start)
            ends = [i for i in (nl, cr) if i >= 0]
            end = min(ends) if ends else n
            piece = data[start:end]
            room = MAX_LINE - len(self._line)
            if len(piece) > room:        # split an over-long line at MAX_LINE bytes
                self._line += piece[:room]
                start += room
                self._end_line()
                continue
            self._line += piece
            if end == n:
                return
            if data[end:end + 1] == b"\r":
                self._redraw()
            else:
                self._end_line()
            start = end + 1

    def feed(self, data: bytes) -> None:
        """Read ``data`` as if it came from the stream (a caller that reads the pipe itself:
        the Slurm node agent, :mod:`tfcluster.backends.agent.node`)."""
        self._feed(data)

    def end(self) -> None:
        """The stream ended (see :meth:`feed`): read what is pending."""
        self._end_of_output()

    def _redraw(self) -> None:
        """A carriage return: the piece is a redraw of the line (a bar's state)."""
        piece = bytes(self._line)
        self._line.clear()
        if not piece.strip():
            return
        text = clean_segment(decode(piece))
        if not text.strip():
            return
        self._redrawn = True
        with self.lock:
            self.seen.output_at = self.clock()
        visible = self._progress(self.mask(text), redraw=True)
        self._shown = visible.encode("utf-8", "replace") if visible.strip() else b""

    def _end_line(self) -> None:
        piece = bytes(self._line)
        self._line.clear()
        redrawn, self._redrawn = self._redrawn, False
        text = clean_segment(decode(piece))
        if not text.strip() and (self._shown or redrawn):
            # a bar's last redraw, then a newline (possibly after blanks); nothing to show
            # when the redraws were only reports
            line, self._shown = self._shown.decode("utf-8", "replace"), b""
            if line:
                self._line_out(line)
            return
        self._shown = b""
        masked = self.mask(text)
        self._line_out(self._progress(masked), raw=masked)

    def _end_of_output(self) -> None:
        if self._line or self._shown:
            self._end_line()

    def _progress(self, text: str, redraw: bool = False) -> str:
        """Take protocol reports out of ``text`` and hand them over; else read well-known
        output (``redraw``: a carriage return ended it). Returns what is left to show."""
        visible, found = split_progress(text)
        now = self.clock()
        for p in found:
            self._protocol = True
            self._report(p, now, life=True)
        if visible.strip():
            r = self.parser.feed(visible, redraw=redraw)
            if r.rate is not None:
                with self.lock:
                    self.seen.rate = r.rate
            if r.progress is not None and not self._protocol:
                self._report(r.progress, now, life=r.life)
            elif r.life:            # a program that reports itself: its output is life only
                with self.lock:
                    self.seen.mark_life(now)
        return visible

    def _report(self, p: Progress, now: float, life: bool) -> None:
        with self.lock:
            old = self.seen.progress
            self.seen.progress, self.seen.progress_at = p, now
            moved = old is None or p.step != old.step or p.metrics.get("epoch") != old.metrics.get("epoch")
            if life or moved:
                self.seen.mark_life(now)
        self.on_line(format_progress(p.step, p.total, **p.metrics), p)

    def _line_out(self, line: str, raw: Optional[str] = None) -> None:
        """A whole line: to the log (as the program wrote it, masked), to the tail, to the
        console unless it is noise or only a report."""
        logged = raw if raw is not None else line
        self._write((logged + "\n").encode("utf-8", "replace"))
        if raw is not None and not line.strip() and raw.strip():
            return                        # only a protocol report: nothing more to show
        with self.lock:   # what a line means to the run: the machine's (machine.line_events)
            self.seen.output_at = self.clock()
            self.seen.tail.append(line[:TAIL_LINE_CHARS])
        hide, note = self.noise.fold(line, id(self))
        if hide:
            with self.lock:
                self.seen.noise_hidden += 1
            if note and self.noise.say is not None:
                self.noise.say(note)
            elif note:
                self.on_line(note, None)
            return
        self.on_line(line, None)

    # ------------------------------------------------------------------ the progress pipe
    def _feed_side(self, data: bytes) -> None:
        self._side_buf += data
        while True:
            i = self._side_buf.find(b"\n")
            if i < 0:
                if len(self._side_buf) > MAX_LINE:
                    self._side_buf.clear()     # not a report: drop it
                return
            line = bytes(self._side_buf[:i])
            del self._side_buf[:i + 1]
            self._side_report(line)

    def _side_report(self, line: bytes) -> None:
        text = self.mask(clean_segment(decode(line)))
        if text.strip():
            self._write((text + "\n").encode("utf-8", "replace"))   # the log keeps reports too
        _, found = split_progress(text)
        now = self.clock()
        for p in found:
            self._protocol = True
            self._report(p, now, life=True)
