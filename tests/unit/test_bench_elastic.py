"""The benchmark ``elastic``'s figures from step records (scripts/bench_elastic.py): the pause
around a node's loss, the steps trained again after a restore, the time to the target. The runs
themselves (two two-node Rays, a node killed in each) are the benchmark's, run by hand
(docs/BENCHMARKS.md)."""
from __future__ import annotations

import os
import sys

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_elastic as be


def series(name, points):
    return {"name": name, "points": list(points)}


def test_records_are_read_per_process_and_a_line_cut_by_the_kill_is_skipped(tmp_path):
    (tmp_path / "chief-0-127.0.0.2-11.steps").write_text("10.0 1\n10.1 2\n")
    (tmp_path / "worker-1-127.0.0.3-12.steps").write_text("10.05 3\n10.2")
    (tmp_path / "empty.steps").write_text("")
    got = be.read_steps(str(tmp_path))
    assert [s["name"] for s in got] == ["chief-0-127.0.0.2-11", "worker-1-127.0.0.3-12"]
    assert got[1]["points"] == [(10.05, 3)]


def test_async_shrink_nothing_restarted_no_steps_redone_pause_from_the_merged_steps():
    # the lost node's worker stops at the kill (t=10); the head's tasks go on, one 0.4 s gap
    head = series("chief-0-127.0.0.2-1", [(9.0, 100), (9.9, 110), (10.1, 112), (10.5, 120), (10.6, 121)])
    lost = series("worker-1-127.0.0.3-2", [(9.5, 105), (9.95, 111)])
    fig = be.figures([head, lost], t_kill=10.0, t0=0.0, target=121, window=5.0, examples_per_step=64)
    assert fig["pause_seconds"] == 0.4            # 10.1 -> 10.5
    assert fig["steps_redone"] == 0 and fig["examples_redone"] == 0 and fig["restarted_processes"] == 0
    assert fig["seconds_to_target"] == 10.6 and fig["step_at_loss"] == 111 and fig["resumed_from_step"] is None
    assert fig["pause_seconds_before_loss"] == 0.5   # 9.0 -> 9.5 (the 5 s before the kill)


def test_a_restart_from_a_checkpoint_counts_the_steps_trained_again_and_the_pause_until_it():
    before = [series("rank0-127.0.0.2-1", [(9.0, 240), (9.9, 250)]),
              series("rank1-127.0.0.3-2", [(9.0, 240), (9.9, 250)])]
    # both restarted on the head from the checkpoint of step 200: first record 201, 30 s later
    after = [series("rank0-127.0.0.2-3", [(40.0, 201), (40.1, 202), (45.0, 260)]),
             series("rank1-127.0.0.2-4", [(40.0, 201), (40.1, 202), (45.0, 260)])]
    fig = be.figures(before + after, t_kill=10.0, t0=0.0, target=260, window=60.0, examples_per_step=128)
    assert fig["steps_redone"] == 50 and fig["examples_redone"] == 6400
    assert fig["restarted_processes"] == 2 and fig["pause_seconds"] == 30.1 and fig["resumed_from_step"] == 200
    assert fig["seconds_to_target"] == 45.0


def test_no_step_after_the_loss_within_the_window_or_no_kill_is_not_measured():
    s = [series("rank0-127.0.0.2-1", [(9.0, 1), (9.5, 2)])]
    fig = be.figures(s, t_kill=10.0, t0=0.0, target=5, window=5.0, examples_per_step=64)
    assert fig["pause_seconds"] is None and fig["seconds_to_target"] is None
    fig = be.figures(s, t_kill=None, t0=0.0, target=2, window=5.0, examples_per_step=64)
    assert fig["pause_seconds"] is None and fig["steps_redone"] is None and fig["seconds_to_target"] == 9.5


def test_the_side_by_side_print_names_both_systems_and_what_was_not_measured():
    import io

    buf = io.StringIO()
    be.print_side_by_side({"tfcluster": {"pause_seconds": 0.25, "steps_redone": 0},
                           "ray_train": {"skipped": "no ray.train"}, "pause_over_ray_train": None}, buf)
    text = buf.getvalue()
    assert "tfcluster" in text and "Ray Train" in text and "0.250" in text and "n/a" in text


def test_the_last_checkpoint_reported_before_the_loss(tmp_path):
    assert be.checkpoint_before(str(tmp_path), 10.0) is None
    (tmp_path / "checkpoints.log").write_text("5.0 200\n9.5 400\n11.0 600\n")
    assert be.checkpoint_before(str(tmp_path), 10.0) == 400
    assert be.checkpoint_before(str(tmp_path), 4.0) is None and be.checkpoint_before(str(tmp_path), None) is None
