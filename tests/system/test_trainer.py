"""trainer.py on real clusters: async, resume, sync under TF_CONFIG; by hand with the seed's flags.

Every process must end by itself (ps tasks through the done queue). Step counts are small.
"""
from __future__ import annotations

import os
import re
import time

import pytest

from helpers.tasks import (
    TRAINER,
    assert_all_ended_ok,
    local_cluster,
    run_tasks,
    seed_flag_tasks,
    summary,
    tf_config_tasks,
)

pytestmark = pytest.mark.tf


# --- trainer.py under TF_CONFIG (as tfcluster launch runs it) -------------------------------

@pytest.fixture(scope="module")
def async_run(tmp_path_factory):
    """1 ps + 2 workers, async, to step 100 with a checkpoint dir (shared with the resume test)."""
    tmp = tmp_path_factory.mktemp("async")
    ckpt = str(tmp / "ckpt")
    cluster = local_cluster(1, 2)
    args = ["--mode=async", "--train_steps=100", f"--checkpoint_dir={ckpt}", "--print_placement"]
    results = run_tasks(tf_config_tasks(TRAINER, cluster, args), tmp, timeout=90)
    return results, ckpt


def test_async_1ps_2workers_learns_and_ends(async_run):
    results, _ = async_run
    assert_all_ended_ok(results)  # ps included: it ends once both workers are done
    step, acc, loss = summary(results["worker:0"])
    assert step >= 100 and acc >= 0.9 and loss < 0.5
    assert "@tfcluster progress {" in results["worker:0"].output
    assert "placement (greedy)" in results["worker:0"].output
    assert "all 2 replica(s) done" in results["ps:0"].output
    assert "accuracy=" not in results["worker:1"].output  # only the chief sums up


def test_resume_from_checkpoint(async_run, tmp_path):
    _, ckpt = async_run
    assert os.path.exists(os.path.join(ckpt, "checkpoint"))
    cluster = local_cluster(1, 2)
    args = ["--mode=async", "--train_steps=200", f"--checkpoint_dir={ckpt}"]
    results = run_tasks(tf_config_tasks(TRAINER, cluster, args), tmp_path, timeout=90)
    assert_all_ended_ok(results)
    restored = int(re.search(r"restored \S+ \(global_step=(\d+)\)",
                             results["worker:0"].output).group(1))
    start = int(re.search(r"from global_step=(\d+)", results["worker:0"].output).group(1))
    assert 100 <= restored <= start
    step, acc, _ = summary(results["worker:0"])
    assert step >= 200 and acc >= 0.9
    assert "placement (" not in results["worker:0"].output   # the table is behind --print_placement


def test_a_rerun_at_the_target_step_says_nothing_was_trained(async_run, tmp_path):
    """A second quick-start run on the same checkpoint folder trains nothing; the
    chief says so and names the folder to clear and the flag to raise."""
    _, ckpt = async_run
    cluster = local_cluster(1, 1)
    args = ["--mode=async", "--train_steps=50", f"--checkpoint_dir={ckpt}"]
    results = run_tasks(tf_config_tasks(TRAINER, cluster, args), tmp_path, timeout=90)
    assert_all_ended_ok(results)
    out = results["worker:0"].output
    assert "already at the target step, nothing trained" in out, out
    assert f"clear {ckpt}" in out and "raise --train_steps above" in out
    assert "from global_step=" not in out


def test_sync_1ps_2workers_learns_and_ends_promptly(tmp_path):
    cluster = local_cluster(1, 2)
    t0 = time.monotonic()
    results = run_tasks(tf_config_tasks(TRAINER, cluster, ["--mode=sync", "--train_steps=150"]),
                        tmp_path, timeout=90)
    wall = time.monotonic() - t0
    assert_all_ended_ok(results)
    step, acc, _ = summary(results["worker:0"])
    assert step >= 150 and acc >= 0.9
    assert "SyncReplicas" in results["worker:1"].output or "sync" in results["worker:1"].output
    assert wall < 90  # no 120 s close, no 30 s readiness poll
    print(f"sync 1 ps + 2 workers: {wall:.1f}s wall")


def test_trainer_by_hand_four_processes_sync_round_robin(tmp_path):
    cluster = local_cluster(2, 2)
    tasks = seed_flag_tasks(TRAINER, cluster["ps"], cluster["worker"],
                            ["--mode=sync", "--train_steps=150", "--ps_strategy=round_robin",
                             "--print_placement"])
    results = run_tasks(tasks, tmp_path, timeout=90)
    assert_all_ended_ok(results)
    step, acc, _ = summary(results["worker:0"])
    assert step >= 150 and acc >= 0.9
    assert "placement (round_robin)" in results["worker:0"].output
    for i in (0, 1):
        assert "all 2 replica(s) done" in results[f"ps:{i}"].output
