"""The node agent on Slurm reads a task's output with the local launcher's own reader
(tfcluster.core.task_output): progress reports anywhere in a line, Keras bars and TF1 hook
lines as signs of life, long lines in pieces, a redraw read before its line ends, one source of
steps per task (the same progress and liveness on every backend). No Slurm, no processes."""
from __future__ import annotations

import io
import os
import re
import threading
import time
import types

import pytest

from helpers.node_agent import Node
from tfcluster.backends.agent.node import MAX_LINE
from tfcluster.core import machine as mc


@pytest.fixture
def task(tmp_path):
    """worker:0's agent, built without Slurm (helpers.node_agent.Node); what it shows is kept."""
    node = Node(tmp_path, rank=1)
    shown = []
    node.agent.emit = shown.append
    node.agent.status = types.SimpleNamespace(state=types.SimpleNamespace(alive=True))
    return node.agent, shown


@pytest.fixture
def pump(task):
    def pump(data: bytes):
        t, shown = task
        t.inbox.clear()
        t._pump(io.BytesIO(data))
        return list(t.inbox) + t._life(), shown
    return pump


def test_a_report_glued_to_a_keras_bar_is_read_and_the_bar_is_life(pump):
    data = (b"Epoch 1/2\n"
            b"\r 3/10 [=====>........] - ETA: 1s - loss: 0.9000"
            b"\r 7/10 [=========>....] - ETA: 0s - loss: 0.7000"
            b'@tfcluster progress {"step": 17, "total": 20}\n')
    events, shown = pump(data)
    assert all(isinstance(e, mc.Progressed) and e.task == "worker:0" for e in events)
    # the bar's first redraw (a parsed step, before any report), then the glued report's step
    # (17, not the bar's 7);
    # from the report on, the bar is life only (one source of steps), and the reader's last
    # sign of life is handed on once
    assert [e.step for e in events] == [3, 17, None], events


def test_tf1_hook_lines_are_progress(pump):
    events, _ = pump(b"INFO:tensorflow:loss = 0.12, step = 1200 (0.5 sec)\n"
                     b"INFO:tensorflow:global_step/sec: 41.7\n")
    assert 1200 in [e.step for e in events if isinstance(e, mc.Progressed)]


def test_a_line_without_an_end_is_read_in_pieces_and_still_classified(pump):
    data = b"x" * (3 * MAX_LINE) + b"\nUnknownError: Could not start gRPC server\n"
    events, shown = pump(data)
    assert len(shown) >= 4 and max(len(s) for s in shown) <= MAX_LINE
    assert any(isinstance(e, mc.PortConflict) for e in events)


def test_a_program_that_reports_itself_has_one_source_of_steps(pump):
    """As the local launcher reads it: once reports arrive, a Keras-looking line is life only."""
    events, shown = pump(b'@tfcluster progress {"step": 40, "total": 100}\n'
                         b"Epoch 3/5\n 9/10 [=========>....] - ETA: 0s - loss: 0.7000\n")
    steps = [e.step for e in events if isinstance(e, mc.Progressed) and e.step is not None]
    assert steps == [40]
    assert any(b"Epoch 3/5" in s for s in shown)          # shown as the program wrote it


def test_a_redraw_is_a_sign_of_life_before_its_line_ends(task):
    """A bar that redraws with carriage returns is read as it arrives, not at its newline."""
    t, shown = task
    r, w = os.pipe()
    stream = os.fdopen(r, "rb")
    reader = threading.Thread(target=t._pump, args=(stream,), daemon=True)
    reader.start()
    try:
        os.write(w, b"\r 3/10 [=====>........] - ETA: 1s - loss: 0.9000"
                    b"\r 4/10 [======>.......] - ETA: 1s - loss: 0.8000")
        deadline = time.monotonic() + 5
        while t.seen.life_at is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert t.seen.life_at is not None
        assert [e.step for e in t.inbox] == [3]             # the first redraw, read whole
        assert shown == []                                  # the line has not ended yet
    finally:
        os.close(w)
        reader.join(5)
    assert not reader.is_alive()
    assert len(shown) == 1 and shown[0].startswith(b"\r 3/10") and b"\r 4/10" in shown[0]


def test_the_follower_shows_what_was_glued_to_a_report_and_takes_the_report(capsys):
    """The submitting side reads the job's output: a report glued to other text is consumed
    as progress, and the rest of the line is still shown (it was dropped whole before)."""
    from tfcluster.backends.slurm.follower import Follower

    f = Follower({}, "/nonexistent", quiet=False, progress_every=1e9)
    f._line('[worker:0] epoch 3 acc 0.91@tfcluster progress {"step": 30, "total": 50}')
    f._line('[worker:1] @tfcluster progress {"step": 7}')
    f._line("[worker:1] plain line")
    out = capsys.readouterr().out.splitlines()
    assert out == ["[worker:0] epoch 3 acc 0.91", "[worker:1] plain line"]
    assert f.progress["worker:0"].step == 30 and f.progress["worker:1"].step == 7


def test_the_follower_applies_tasks_timestamps_and_folds_tensorflow_noise(capsys):
    """--tasks, --timestamps and --show-tf-noise mean under Slurm what they mean locally."""
    from tfcluster.backends.slurm.follower import Follower
    from tfcluster.core.task_output import NOISE_NOTE
    from tfcluster.drivers.display import OutputOptions

    noise = ("[worker:0] I0000 00:00:1796136878.937212   22036 port.cc:153] oneDNN custom "
             "operations are on. You may see slightly different numerical results")
    f = Follower({}, "/nonexistent", quiet=False, progress_every=1e12,
                 output=OutputOptions(tasks=frozenset({"worker"}), timestamps=True))
    for line in (noise, noise, "[ps:0] serving", "[worker:0] step line", "[worker:1] tfcluster: a note"):
        f._line(line)
    out = capsys.readouterr().out.splitlines()
    stamp = r"\d\d:\d\d:\d\d\.\d\d\d "
    assert len(out) == 3, out                  # ps:0 not chosen; the noise once, as the note
    assert re.fullmatch(stamp + re.escape(f"[worker:0] {NOISE_NOTE}"), out[0])
    assert re.fullmatch(stamp + re.escape("[worker:0] step line"), out[1])
    assert re.fullmatch(stamp + re.escape("[worker:1] tfcluster: a note"), out[2])

    shown = Follower({}, "/nonexistent", quiet=False, progress_every=1e12, show_tf_noise=True)
    shown._line(noise)
    assert capsys.readouterr().out.splitlines() == [noise]
