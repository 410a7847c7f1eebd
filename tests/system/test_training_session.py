"""TrainingSession's fast path with real TensorFlow: which of TensorFlow's own hooks do per-step
work, and a sync cluster (1 ps + 2 SyncReplicasOptimizer replicas in one process) whose replicas
step through the cached callable, not MonitoredSession.run -- unless a hook has before_run."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import PROGRAMS, ROOT
from helpers.tasks import _env

PROGRAM = os.path.join(PROGRAMS, "sync_fast_path.py")

pytestmark = pytest.mark.tf


def test_which_tensorflow_hooks_act_per_step(tmp_path):
    import tensorflow as tf

    from tfcluster.runtime.training import hook_acts_per_step

    base = tf.compat.v1.train.SessionRunHook
    with tf.Graph().as_default():
        gs = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", [2])
        loss = tf.reduce_sum(w * w)
        tf.compat.v1.summary.scalar("loss", loss)
        opt = tf.compat.v1.train.SyncReplicasOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2,
            total_num_replicas=2)
        opt.minimize(loss, global_step=gs)
        # the sync hook: begin + after_create_session only (local step, tokens, queue runner)
        assert not hook_acts_per_step(opt.make_session_run_hook(is_chief=False), base)
        assert not hook_acts_per_step(opt.make_session_run_hook(is_chief=True), base)
        saver = tf.compat.v1.train.Saver()
        per_step = [tf.compat.v1.train.CheckpointSaverHook(str(tmp_path), save_secs=600, saver=saver),
                    tf.compat.v1.train.SummarySaverHook(save_steps=100, output_dir=str(tmp_path),
                                                        summary_op=tf.compat.v1.summary.merge_all()),
                    tf.compat.v1.train.StepCounterHook(every_n_steps=100),
                    tf.compat.v1.train.StopAtStepHook(last_step=10)]
        for hook in per_step:
            assert hook_acts_per_step(hook, base), type(hook).__name__


def run_program(*args):
    p = subprocess.run([sys.executable, PROGRAM, *args], cwd=ROOT, env=_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180,
                       start_new_session=True)
    assert p.returncode == 0, p.stdout[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1]
    res = json.loads(line)
    assert not res["errors"], res
    return res["replicas"]


def test_sync_replicas_take_the_fast_path():
    reps = run_program("40")
    for task in ("worker:0", "worker:1"):  # the chief too: no checkpoint_dir, no per-step hook
        r = reps[task]
        assert r["fast"], (task, r)
        assert r["runs"] > 0 and r["monitored_runs"] == 0, (task, r)
        # the steps this worker ran itself (its own rate), not the global step
        assert r["local_step"] == r["runs"], (task, r)
        assert r["final_step"] >= 40


def test_a_hook_with_before_run_keeps_the_monitored_path():
    reps = run_program("40", "before_run")
    hooked, chief = reps["worker:1"], reps["worker:0"]
    assert not hooked["fast"]
    assert hooked["runs"] > 0
    assert hooked["monitored_runs"] == hooked["runs"] == hooked["hook_before_run_calls"]
    assert hooked["local_step"] == hooked["runs"]
    assert chief["fast"] and chief["monitored_runs"] == 0
