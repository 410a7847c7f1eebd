"""The output reader (tfcluster.core.task_output, with the local pump of tfcluster.drivers.pump): pieces, the progress pipe, a full disk, endless
lines, and nothing lost at the end. The reader runs on real pipes; no TensorFlow."""
from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import threading
import time

import pytest

from tfcluster import safe_files
from tfcluster.core.task_output import MAX_LINE, NOISE_NOTE, NoiseFold, OutputReader, Seen
from tfcluster.drivers.pump import OutputPump, join_readers
from tfcluster.plan.progress import format_progress

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(os.path.dirname(HERE), "src")


class Sink:
    def __init__(self):
        self.lines, self.progress = [], []

    def __call__(self, line, p):
        (self.lines if p is None else self.progress).append(p if p is not None else line)


def pytest_generate_tests(metafunc):
    """Every test that takes ``via`` runs the reader both ways: on a thread of its own, and fed
    by the run's shared :class:`OutputPump` (what the launcher uses for real pipes)."""
    if "via" in metafunc.fixturenames:
        metafunc.parametrize("via", ["thread", "pump"])


def read(data: bytes, log_path=None, side: bytes = None, noise=None, log_file=None, via="pump"):
    """Feed ``data`` (and ``side``) through a real pipe to a reader; return (seen, sink)."""
    seen, sink = Seen(), Sink()
    r, w = os.pipe()
    sr = sw = None
    if side is not None:
        sr, sw = os.pipe()
    reader = OutputReader("worker:0", os.fdopen(r, "rb"), log_path, seen, threading.RLock(),
                          lambda s: s, time.monotonic, sink,
                          side=os.fdopen(sr, "rb") if sr is not None else None, noise=noise,
                          log_file=log_file, open_log=safe_files.open_append_fd)
    pump = OutputPump()
    if via == "thread":
        reader.start()
    else:
        assert pump.add(reader)

    def write(fd, blob):
        with os.fdopen(fd, "wb") as f:
            f.write(blob)

    writers = [threading.Thread(target=write, args=(w, data))]
    if sw is not None:
        writers.append(threading.Thread(target=write, args=(sw, side)))
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    assert join_readers([reader], timeout=30) == []
    pump.close()
    return seen, sink


def test_a_report_glued_to_a_redrawn_bar_is_progress_and_never_shown_raw(tmp_path, via):
    log = tmp_path / "w.log"
    bar = "\r1/2 [==>...] - ETA: 1s - loss: 0.9\r2/2 [======] - 1s 5ms/step - accuracy: 0.8483"
    data = ("Epoch 1/1\n" + bar + format_progress(51, 100, loss=0.25) + "\n").encode()
    seen, sink = read(data, str(log), via=via)
    assert not any("@tfcluster" in x for x in sink.lines)
    assert "2/2 [======] - 1s 5ms/step - accuracy: 0.8483" in sink.lines
    assert [p.step for p in sink.progress] == [1, 51]   # the bar until the first report
    assert seen.life_at is not None
    assert "accuracy: 0.8483" in log.read_text()            # the log keeps the line


@pytest.mark.parametrize("name,last", [
    ("keras3_verbose1.txt", "8/8 ━━━━━━━━━━━━━━━━━━━━ 0s 7ms/step - accuracy: 0.3594 - loss: 0.7166"),
    ("tf_keras_verbose1.txt", "8/8 [==============================] - 0s 2ms/step - loss: 0.6716 - "
                              "accuracy: 0.5156"),
])
def test_real_keras_bars_show_their_last_state_and_give_steps(name, last, via):
    data = open(os.path.join(HERE, "data", "outputs", name), "rb").read()
    seen, sink = read(data, via=via)
    assert sink.lines[-1] == last
    assert not any("\b" in x or "\x1b" in x or "\r" in x for x in sink.lines)
    assert [p.step for p in sink.progress][-1] == 16 and seen.progress.total == 16


def test_a_report_alone_after_a_carriage_return_shows_nothing(via):
    seen, sink = read(("\r" + format_progress(4, 8) + "\nnext\n").encode(), via=via)
    assert sink.lines == ["next"] and [p.step for p in sink.progress] == [4]


def test_a_program_without_reports_gets_its_steps_from_its_bar(via):
    seen, sink = read(b"Epoch 1/2\n\r3/10 [==>...] - ETA: 1s - loss: 0.9\r10/10 [=====] - 1s "
                      b"5ms/step - loss: 0.5\nEpoch 2/2\n", via=via)
    assert [p.step for p in sink.progress] == [3, 10]
    assert seen.progress.total == 20 and seen.progress.metrics["loss"] == 0.5
    assert sink.lines == ["Epoch 1/2", "10/10 [=====] - 1s 5ms/step - loss: 0.5", "Epoch 2/2"]


def test_the_progress_pipe_feeds_progress_and_is_never_shown(tmp_path, via):
    side = "".join(format_progress(i, 10) + "\n" for i in range(1, 11)).encode()
    log = tmp_path / "w.log"
    seen, sink = read(b"hello\n", str(log), side=side, via=via)
    assert [p.step for p in sink.progress] == list(range(1, 11))
    assert sink.lines == ["hello"]
    assert log.read_text().count("@tfcluster progress") == 10        # the log keeps them
    assert seen.progress.step == 10 and seen.life_at is not None


def test_noise_is_folded_on_the_console_with_one_note_per_run_and_kept_in_the_log(tmp_path, via):
    noise = ("I0000 00:00:1.0 1 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
             "GPU will not be used.\n").encode()
    fold = NoiseFold()
    log = tmp_path / "a.log"
    seen, sink = read(noise * 3 + b"real line\n", str(log), noise=fold, via=via)
    seen2, sink2 = read(noise + b"other\n", None, noise=fold, via=via)
    assert sink.lines == [NOISE_NOTE, "real line"] and sink2.lines == ["other"]
    assert fold.hidden == 4 and seen.noise_hidden == 3
    assert log.read_text().count("cudart_stub") == 3
    shown = NoiseFold(show=True)
    _, sink3 = read(noise, None, noise=shown, via=via)
    assert len(sink3.lines) == 1 and "cudart_stub" in sink3.lines[0]


class FullDisk(io.RawIOBase):
    """A log file on a full disk: every write fails with ENOSPC, and so does close."""

    def __init__(self):
        self.writes = 0

    def writable(self):
        return True

    def write(self, b):
        self.writes += 1
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_is_reported_once_and_the_reader_keeps_draining(via):
    log = FullDisk()
    data = b"".join(b"line %d\n" % i for i in range(5000)) + b"end\n"
    seen, sink = read(data, None, log_file=log, via=via)
    assert "no space left" in seen.log_error
    assert log.writes == 1                                  # dropped after the first failure
    assert sink.lines[-1] == "end" and len(sink.lines) == 5001


def test_a_full_tmpfs_log_keeps_the_reader_going(tmp_path, via):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                                            str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (the fake full disk above covers the logic)")
    try:
        data = b"".join(b"step %06d of a long run\n" % i for i in range(20000)) + b"end\n"
        seen, sink = read(data, str(mnt / "w.log"), via=via)
        assert seen.log_error and "no space left" in seen.log_error
        assert sink.lines[-1] == "end"
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_long_line_is_split_and_the_last_piece_is_kept(via):
    data = b"x" * (3 * MAX_LINE + 10) + b"tail-without-newline"
    seen, sink = read(data, via=via)
    assert [len(x) for x in sink.lines[:3]] == [MAX_LINE] * 3
    assert sink.lines[-1].endswith("tail-without-newline")


def test_100_mib_without_a_newline_stays_small_and_the_end_reaches_the_log(tmp_path):
    """A child process runs the reader on 100 MiB with no newline; its peak memory stays
    under 64 MB (~17 MB here, with 100 or 300 MiB: a reader that held the line would pass
    100 MB) and the final line is in the log."""
    log = tmp_path / "big.log"
    mib = 100
    code = f"""
import os, sys, threading, time
sys.path.insert(0, {SRC!r})
from tfcluster.drivers.pump import join_readers
from tfcluster.core.task_output import OutputReader, Seen
from tfcluster import safe_files
r, w = os.pipe()
def write():
    chunk = b"y" * (1 << 20)
    with os.fdopen(w, "wb") as f:
        for _ in range({mib}):
            f.write(chunk)
        f.write(b"\\nend\\n")
t = threading.Thread(target=write); t.start()
shown = []
reader = OutputReader("worker:0", os.fdopen(r, "rb"), {str(log)!r}, Seen(), threading.RLock(),
                      lambda s: s, time.monotonic, lambda line, p: shown.append(len(line)),
                      open_log=safe_files.open_append_fd)
reader.start(); t.join(); assert join_readers([reader]) == []
# the peak of this process's own memory since its exec (VmHWM; ru_maxrss also counts what a
# fork of the test process carried: hundreds of MB where TensorFlow was loaded there first)
peak_kb = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print(peak_kb // 1024, len(shown))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    peak_mb, shown = map(int, out.stdout.split())
    assert peak_mb < 64, f"peak {peak_mb} MB"
    assert shown == mib * (1 << 20) // MAX_LINE + 1       # 64 KiB pieces, then "end"
    assert log.stat().st_size == mib * (1 << 20) + mib * (1 << 20) // MAX_LINE + len("end\n")
    with open(log, "rb") as f:
        f.seek(-4, os.SEEK_END)
        assert f.read() == b"end\n"


def test_one_pump_reads_600_tasks_past_descriptor_1024_and_survives_a_broken_reader(tmp_path):
    """The launcher's shared reader at scale: 600 readers, each with its output pipe and its
    progress pipe (2,400 pipe ends: past select's limit of 1024), fed concurrently; every line
    and report arrives, every log is closed whole, and a reader whose handling raises is
    finished without stopping the others."""
    n = 600
    pump = OutputPump()
    readers, sinks, writers = [], [], []
    for i in range(n):
        r, w = os.pipe()
        sr, sw = os.pipe()
        sink = Sink()
        reader = OutputReader(f"worker:{i}", os.fdopen(r, "rb"), str(tmp_path / f"w{i}.log"),
                              Seen(), threading.RLock(), lambda s: s, time.monotonic, sink,
                              side=os.fdopen(sr, "rb"), open_log=safe_files.open_append_fd)
        if i == 7:
            def broken(data):
                raise RuntimeError("a bug in one reader")
            reader._feed = broken
        assert pump.add(reader)
        readers.append(reader)
        sinks.append(sink)
        writers.append((w, sw))
    assert max(fd for pair in writers for fd in pair) > 1024

    def write(i):
        w, sw = writers[i]
        with os.fdopen(w, "wb") as f:
            f.write(b"".join(b"task %d line %d\n" % (i, k) for k in range(20)) + b"last")
            if i == 7:                  # more than a pipe holds: the broken reader still drains
                f.write(b"x" * (1 << 20))
        with os.fdopen(sw, "wb") as f:
            f.write(format_progress(5, 10).encode() + b"\n")
    threads = [threading.Thread(target=write, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert join_readers(readers, timeout=60) == []
    pump.close()
    pump.join(10)
    assert not pump.is_alive()
    for i, sink in enumerate(sinks):
        if i == 7:
            continue
        assert sink.lines == [f"task {i} line {k}" for k in range(20)] + ["last"], i
        assert [p.step for p in sink.progress] == [5]
        log = (tmp_path / f"w{i}.log").read_text()
        assert log.endswith("last\n") and "@tfcluster progress" in log



def test_a_reader_that_fails_is_reported_not_silently_dropped():
    """A bug in one task's reader: the pump drains that task's pipe (it never blocks) and says
    why its output stopped (Seen.read_error, shown by the launcher at the end of the run)."""
    seen, sink = Seen(), Sink()
    r, w = os.pipe()
    reader = OutputReader("worker:0", os.fdopen(r, "rb"), None, seen, threading.RLock(),
                          lambda s: s, time.monotonic, sink)

    def boom(data):
        raise RuntimeError("a reader bug")
    reader._feed = boom
    pump = OutputPump()
    assert pump.add(reader)
    with os.fdopen(w, "wb") as f:
        f.write(b"line 1\n" * 1000)
    assert join_readers([reader], timeout=30) == []
    pump.close()
    assert seen.read_error and "RuntimeError: a reader bug" in seen.read_error
    assert "dropped" in seen.read_error
