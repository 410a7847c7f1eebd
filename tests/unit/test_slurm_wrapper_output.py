"""The Slurm node wrapper reads a task's output as the local launcher does: progress reports
anywhere in a line, Keras bars and TF1 hook lines as signs of life, long lines in pieces
(issue 19: the same progress and liveness on every backend). No Slurm, no processes."""
from __future__ import annotations

import collections
import io

from tfcluster import machine as mc
from tfcluster.backends.slurm_task import MAX_LINE, Task


def pump(data: bytes):
    t = Task.__new__(Task)
    t.name, t.inbox, shown = "worker:0", collections.deque(), []
    t.emit = shown.append
    t._pump(io.BytesIO(data))
    return list(t.inbox), shown


def test_a_report_glued_to_a_keras_bar_is_read_and_the_bar_is_life():
    data = (b"Epoch 1/2\n"
            b"\r 3/10 [=====>........] - ETA: 1s - loss: 0.9000"
            b"\r 7/10 [=========>....] - ETA: 0s - loss: 0.7000"
            b'@tfcluster progress {"step": 7, "total": 20}\n')
    events, shown = pump(data)
    assert all(isinstance(e, mc.Progressed) and e.task == "worker:0" for e in events)
    assert 7 in [e.step for e in events]                        # the glued report
    assert any(e.step is None or e.step == 3 for e in events)   # the bar moving before it


def test_tf1_hook_lines_are_progress():
    events, _ = pump(b"INFO:tensorflow:loss = 0.12, step = 1200 (0.5 sec)\n"
                     b"INFO:tensorflow:global_step/sec: 41.7\n")
    assert 1200 in [e.step for e in events if isinstance(e, mc.Progressed)]


def test_a_line_without_an_end_is_read_in_pieces_and_still_classified():
    data = b"x" * (3 * MAX_LINE) + b"\nUnknownError: Could not start gRPC server\n"
    events, shown = pump(data)
    assert len(shown) >= 4 and max(len(s) for s in shown) <= MAX_LINE
    assert any(isinstance(e, mc.PortConflict) for e in events)
