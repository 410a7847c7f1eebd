"""The supervisor's reading of its tasks' output: one thread, an :class:`OutputPump`, polls
every task's pipes and feeds each task's :class:`~tfcluster.core.task_output.OutputReader`
(the rules of reading -- pieces, log, progress, console -- are in
:mod:`tfcluster.core.task_output`, shared with the Slurm node agent). A thread per task cost
the launcher a thread start per task and 513 threads at 512 tasks; a stream without a
descriptor (a test's fake) gets a thread of its own. The supervisor joins every reader before
the launcher exits, so the last line always reaches the log. What the readers find reaches the
supervisor's loop through its :class:`Inbox`, with the launcher's signals.
"""
from __future__ import annotations

import os
import select
import threading
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from tfcluster.core.events import Event
from tfcluster.core.task_output import READ_SIZE, OutputReader


class Inbox:
    """What reaches the loop from other threads: the launcher's signals (from the signal
    handler) and the machine's events that the output readers found (the pump's thread)."""

    def __init__(self) -> None:
        self.signals: Deque[int] = deque()
        self.events: Deque[Event] = deque()

    def take_events(self) -> List[Event]:
        out = []
        while self.events:
            out.append(self.events.popleft())
        return out


class OutputPump(threading.Thread):
    """One thread that reads for every reader of a run: it polls their pipes (stdout and the
    progress pipe) and feeds each reader what arrives; a reader whose pipes have all ended is
    finished (its log closed, :meth:`OutputReader.join` returns). ``add`` is called from the
    supervisor's thread; the pump takes new pipes in through a wake-up pipe of its own."""

    def __init__(self):
        super().__init__(daemon=True, name="out-pump")
        self._pending: Deque[OutputReader] = deque()
        self._guard = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._closing = False
        self._running = False

    def add(self, reader: "OutputReader") -> bool:
        """Read for ``reader`` (True), or False where its streams have no descriptor."""
        try:
            fds = [reader.stream.fileno()]
            if reader.side is not None:
                fds.append(reader.side.fileno())
        except (AttributeError, OSError, ValueError):
            return False
        reader._pumped = True
        reader._done = threading.Event()
        reader._fds = fds
        # the pump opens the reader's log (before its first byte is read): creating hundreds of
        # log files is then not on the supervisor's thread while it starts tasks
        with self._guard:
            wake = not self._pending     # else a wake-up is on its way already
            self._pending.append(reader)
            if not self._running:
                self._running = True
                self.start()
        if wake:
            self._wake()
        return True

    def close(self) -> None:
        """End the pump once its readers are done (or now, if it never started)."""
        with self._guard:
            self._closing = True
            started = self._running
        if started:
            self._wake()
        else:
            self._close_fds()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:   # the pump has ended and closed its pipe: there is nothing to wake
            pass

    def _close_fds(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:   # closed already (a second close): nothing held
                pass

    def run(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        owners: Dict[int, Tuple[OutputReader, bool]] = {}
        open_fds: Dict[int, int] = {}          # id(reader) -> its pipes still open
        broken: set = set()                    # id(reader) whose handling raised
        try:
            while True:
                with self._guard:
                    new = list(self._pending)
                    self._pending.clear()
                    closing = self._closing
                for r in new:
                    self._admit(r, poller, owners, open_fds, broken)
                if closing and not owners:
                    with self._guard:           # nothing came in meanwhile
                        if not self._pending:
                            return
                    continue
                try:
                    ready = poller.poll()
                except InterruptedError:
                    continue
                for fd, _ in ready:
                    if fd == self._wake_r:
                        self._drain_wake()
                    elif fd in owners:
                        self._read(fd, poller, owners, open_fds, broken)
        finally:
            for reader, _ in list(owners.values()):   # only on a bug: free the joiners
                reader._done.set()
            self._close_fds()

    @staticmethod
    def _admit(r: OutputReader, poller, owners: Dict[int, Tuple[OutputReader, bool]],
               open_fds: Dict[int, int], broken: set) -> None:
        """A new reader begun and its pipes polled (the second one is its side channel)."""
        try:
            r.begin()
        except Exception as e:      # a bug in one reader must not stop the others
            _broken(r, e)
            broken.add(id(r))
        open_fds[id(r)] = len(r._fds)
        for i, fd in enumerate(r._fds):
            owners[fd] = (r, i == 1)
            poller.register(fd, select.POLLIN)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:   # every wake-up read
            pass

    @staticmethod
    def _read(fd: int, poller, owners: Dict[int, Tuple[OutputReader, bool]],
              open_fds: Dict[int, int], broken: set) -> None:
        """One read of a ready pipe: its data fed to its reader (drained and dropped once the
        reader broke), or its end: the reader finished once all its pipes have ended."""
        reader, side = owners[fd]
        try:
            data = os.read(fd, READ_SIZE)
        except OSError as e:         # said at the end of the run; read as the end
            if reader.seen.read_error is None:
                reader.seen.read_error = f"reading its output failed ({e}); the rest was lost"
            data = b""
        if data:
            if id(reader) in broken:
                return              # drained and dropped: the task never blocks
            try:
                (reader._feed_side if side else reader._feed)(data)
            except Exception as e:  # a bug in one reader must not stop the others
                _broken(reader, e)
                broken.add(id(reader))
            return
        poller.unregister(fd)
        del owners[fd]
        open_fds[id(reader)] -= 1
        if open_fds[id(reader)] == 0:
            del open_fds[id(reader)]
            broken.discard(id(reader))
            try:
                reader.finish()
            except Exception as e:  # its last lines and log: said, joiners freed
                _broken(reader, e)
                reader._done.set()


def _broken(reader: OutputReader, e: BaseException) -> None:
    """A reader that raised (a bug): its output is drained and dropped from here on so that the
    task never blocks on a full pipe; the launcher says so at the end of the run."""
    if reader.seen.read_error is None:
        reader.seen.read_error = (f"its output reader failed ({type(e).__name__}: {e}); the rest of "
                                  f"its output and log were dropped")


def join_readers(readers: List[threading.Thread], timeout: Optional[float] = None) -> List[str]:
    """Join every reader (the launcher does, before it exits); the names of those still
    running after ``timeout`` seconds in all (None: wait for each to end)."""
    import time
    deadline = None if timeout is None else time.monotonic() + timeout
    left = []
    for r in readers:
        if r is None:
            continue
        r.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if r.is_alive():
            left.append(r.name)
    return left
