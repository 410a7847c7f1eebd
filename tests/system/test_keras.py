"""Keras ``Model.fit`` under MultiWorkerMirroredStrategy and ParameterServerStrategy, end to end
under ``tfcluster launch`` with real TensorFlow servers on loopback ports.

What each row of docs/TF2_STRATEGIES.md's Keras table claims is measured here: the shipped
examples (examples/keras_mwms.py, examples/keras_pss.py) and unmodified tutorial-shaped
programs (tests/programs/keras_tutorial_*.py, no tfcluster import), with Keras 2 (tf_keras,
``TF_USE_LEGACY_KERAS=1``, the ``keras2`` extra) and with TensorFlow's default Keras 3.
"""
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys

import pytest
import yaml

from helpers import EXAMPLES, PROGRAMS
from helpers.launch import assert_all_gone, finish, kill_when, run_record, start, tail, task_log, tasks_of
from tfcluster.core.output_patterns import failure_hint
from tfcluster.plan.progress import parse_progress

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="TensorFlow is not installed")
needs_tf_keras = pytest.mark.skipif(
    importlib.util.find_spec("tf_keras") is None,
    reason="tf_keras is not installed: pip install -e '.[test,keras2]'")

KERAS2 = {"TF_USE_LEGACY_KERAS": "1"}
KERAS3 = {"TF_USE_LEGACY_KERAS": "0"}  # TensorFlow's default, whatever the test's environment

PER_REPLICA = ("unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) "
               "to a Tensor")


def example_file(tmp_path, ports, example, args):
    """The example's cluster file with free ports, a temporary logdir and backup folder."""
    with open(os.path.join(EXAMPLES, example + ".yaml")) as f:
        doc = yaml.safe_load(f)
    it = iter(ports(sum(len(v) for v in doc["cluster"].values())))
    doc["cluster"] = {j: [f"localhost:{next(it)}" for _ in v] for j, v in doc["cluster"].items()}
    doc["program"]["command"] = ["python", os.path.join(EXAMPLES, example + ".py")]
    doc["program"]["args"] = [f"--backup_dir={tmp_path / 'backup'}", *args]
    doc["logdir"] = str(tmp_path / "runs")
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def program_file(tmp_path, ports, program, args, env, pss=False, command=("python",)):
    """A cluster file for an unmodified program: 2 workers (MWMS, every worker runs it), or a
    chief running it with 1 ps and 2 workers serving (PSS)."""
    serve = {"command": ["python", "-m", "tfcluster.runtime.serve"], "args": [],
             "env": {"GRPC_FAIL_FAST": "use_caller"}}
    if pss:
        p = ports(4)
        cluster = {"chief": [f"localhost:{p[0]}"], "ps": [f"localhost:{p[1]}"],
                   "worker": [f"localhost:{p[2]}", f"localhost:{p[3]}"]}
        extra = {"jobs": {"ps": serve, "worker": serve}, "success": "chief", "grace": 1}
    else:
        cluster = {"worker": [f"localhost:{p}" for p in ports(2)]}
        extra = {"success": "all-workers"}
    doc = {"version": 1, "cluster": cluster,
           "program": {"command": [*command, os.path.join(PROGRAMS, program)],
                       "args": list(args), "env": dict(env)},
           **extra, "logdir": str(tmp_path / "runs")}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def summary(text, prefix):
    """The JSON object at the end of the example's last ``<prefix> done: ...`` line."""
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix + " done: ")]
    assert lines, f"no '{prefix} done:' line in:\n{text[-3000:]}"
    return json.loads(lines[-1][lines[-1].index("{"):])


def history(text, prefix):
    """The per-epoch history the tutorial program prints at its end."""
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix + ": done: ")]
    assert lines, f"no '{prefix}: done:' line in:\n{text[-3000:]}"
    return json.loads(lines[-1][len(prefix + ": done: "):])


def launch(path, tmp_path, timeout=150):
    proc = start(path, tmp_path)
    return proc, finish(proc, timeout)


# Keras' progress output: "Epoch 2/3", then its bar (verbose=1), redrawn after every step:
# " 6/10 [=====>....] - ETA: 0s - loss: 2.6557 - accuracy: 0.7448", and at the epoch's end
# "10/10 [==========] - 1s 141ms/step - loss: 1.0640 - accuracy: 0.6141"; verbose=2 prints
# only that line, without a bar: "20/20 - 4s - loss: 1.1944 - accuracy: 0.5125 - 4s/epoch ..."
KERAS_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)$")
KERAS_BAR = re.compile(r"^\s*(\d+)/(\d+) (?:\[[=>.]*\] )?- (.*)$")
KERAS_METRIC = re.compile(r" - (loss|accuracy): (\d+\.\d+(?:e[-+]\d+)?)")


def keras_progress(text):
    """What Keras printed, read as written (every redraw, carriage returns and backspaces as
    a terminal takes them): ``(steps, ends)``: ``steps[(epoch, batch)]`` the metrics its bar
    showed after a step, ``ends[epoch]`` those of its epoch line (both from 1)."""
    steps, ends, epoch = {}, {}, None
    for segment in re.split(r"[\r\n]", text.replace("\b", "")):
        segment = segment.strip()
        m = KERAS_EPOCH.match(segment)
        if m:
            epoch = int(m.group(1))
            continue
        m = KERAS_BAR.match(segment)
        if not m or epoch is None:
            continue
        metrics = {k: float(v) for k, v in KERAS_METRIC.findall(" - " + m.group(3))}
        if not metrics:
            continue
        if m.group(3).startswith("ETA:"):
            steps[(epoch, int(m.group(1)))] = metrics
        else:
            ends[epoch] = metrics
    return steps, ends


def progress_rows(record, task, events=True):
    """The progress tfcluster recorded for ``task``, as (step, metrics): every report, in order,
    from the task's log (``@tfcluster progress`` lines, what ``tfcluster logs`` shows), then
    (``events``) the run's events (what ``tfcluster status`` and the report read: at most
    one a second)."""
    reports = [parse_progress(ln) for ln in task_log(record, task).splitlines()]
    rows = [(p.step, p.metrics) for p in reports if p is not None]
    if events:
        with open(os.path.join(record["run_dir"], "events.jsonl")) as f:
            events = [json.loads(ln) for ln in f if ln.strip()]
        rows += [(e["step"], e["metrics"]) for e in events
                 if e.get("event") == "progress" and e.get("task") == task]
    return rows


def same_to_4_decimals(ours, printed):
    """``ours`` shows as ``printed`` does at Keras' precision (4 decimals)."""
    return abs(ours - printed) <= 0.5e-4 + 2e-6


# ------------------------------------------------------------------ MWMS, Keras 2 (tf_keras)

@needs_tf_keras
def test_mwms_example_fits_to_the_end_with_keras2(tmp_path, ports):
    path = example_file(tmp_path, ports, "keras_mwms", ["--epochs=3", "--steps_per_epoch=20"])
    proc, rc = launch(path, tmp_path)
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    tasks = tasks_of(record)
    assert record["success_rule"] == "all-workers" and record["result"] == "succeeded"
    sums = {}
    for i in (0, 1):
        log = task_log(record, f"worker:{i}")
        sums[i] = summary(log, f"keras_mwms: worker:{i}")
        assert sums[i]["initial_epoch"] == 0 and sums[i]["workers"] == 2
        # tfcluster.runtime.keras.ProgressCallback drove the live table: global step over all epochs
        progress = tasks[f"worker:{i}"]["progress"]
        assert progress["step"] == progress["total"] == 60 and progress["epoch"] == 3, progress
    loss = sums[0]["history"]["loss"]
    assert loss[-1] < loss[0], sums[0]
    assert sums[0]["accuracy"] > 0.6, sums[0]  # a learnable 4-class task: chance is 0.25
    # synchronous training: both workers hold the same model
    assert sums[0]["history"] == sums[1]["history"] and sums[0]["accuracy"] == sums[1]["accuracy"]
    assert (tmp_path / "backup.done").exists()
    assert_all_gone(record)

    # launched again (as a worker restarted after the others ended would be): nothing to do,
    # every worker exits at once instead of waiting for peers
    proc, rc = launch(path, tmp_path, timeout=90)
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    for i in (0, 1):
        log = task_log(record, f"worker:{i}")
        assert "nothing to train" in log and " done: " not in log, log[-2000:]
    assert_all_gone(record)


@needs_tf_keras
@pytest.mark.parametrize("workers", [2, 1])
def test_mwms_progress_shows_the_metrics_keras_prints_never_a_sum_over_workers(
        tmp_path, ports, workers):
    """tf_keras logs a step's loss and accuracy summed over the workers (its bar
    shows "accuracy: 1.2281" mid-epoch with 2 workers); the epoch's line prints the metrics'
    own values. tfcluster's progress shows the metrics' own values at every step: the epoch
    line's values at the epoch's end, Keras' step values divided by the workers it summed."""
    steps = 8
    path = example_file(tmp_path, ports, "keras_mwms",
                        ["--epochs=2", f"--steps_per_epoch={steps}", "--verbose=1",
                         "--step_delay=0.1"])    # a redraw of Keras' bar after every step
    doc = yaml.safe_load(open(path))
    doc["cluster"]["worker"] = doc["cluster"]["worker"][:workers]
    # every redraw of Keras' bar, as written: the task log keeps each line's last redraw
    raw = tmp_path / "stdout"
    doc["program"]["command"] = ["python", os.path.join(PROGRAMS, "raw_stdout.py"), str(raw),
                                 os.path.join(EXAMPLES, "keras_mwms.py")]
    with open(path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    proc, rc = launch(path, tmp_path)
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    for i in range(workers):
        task = f"worker:{i}"
        bar, _ = keras_progress((tmp_path / f"stdout.worker-{i}").read_text())
        _, ends = keras_progress(task_log(record, task))   # the epoch lines, from the task log
        rows = progress_rows(record, task)
        assert sorted(ends) == [1, 2] and rows, (ends, rows)
        # Keras' bar after an epoch's last step against its epoch line: how many values it
        # added (1 worker: none; 2: tf_keras's "auto" reduction sums, see runtime/keras.py)
        summed = [bar[(e, steps)][k] / ends[e][k] for e in ends for k in ends[e] if ends[e][k]]
        assert all(abs(x - workers) < 1e-3 for x in summed), (bar, ends)
        checked = {"end": 0, "step": 0}
        for step, metrics in rows:
            epoch, batch = (step - 1) // steps + 1, (step - 1) % steps + 1
            assert metrics["epoch"] == epoch
            assert 0 <= metrics["accuracy"] <= 1, (step, metrics)
            if batch == steps:         # the epoch's end (its last step's line, the epoch's)
                expected = ends[epoch]
                checked["end"] += 1
            elif (epoch, batch) in bar:
                expected = {k: v / workers for k, v in bar[(epoch, batch)].items()}
                checked["step"] += 1
            else:
                continue
            for key in ("loss", "accuracy"):
                assert same_to_4_decimals(metrics[key], expected[key]), \
                    (task, step, key, metrics[key], expected[key], bar.get((epoch, batch)))
        assert checked["end"] >= 2 and checked["step"] >= 1, (checked, rows, sorted(bar))
    assert_all_gone(record)


@pytest.mark.parametrize("env", [pytest.param(KERAS2, id="keras2", marks=needs_tf_keras),
                                 pytest.param(KERAS3, id="keras3")])
def test_progress_on_one_worker_with_two_replicas_is_what_keras_logs(env):
    """MirroredStrategy on one machine (2 replicas, no second worker): Keras' step logs are the
    metrics' own values (the replicas return the same tensors, nothing is added), so the
    callback divides nothing: each report is the step's logs, the epoch's end its history."""
    out = subprocess.run([sys.executable, os.path.join(PROGRAMS, "keras_mirrored_progress.py")],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("keras_mirrored: ")][-1]
    got = json.loads(line[len("keras_mirrored: "):])
    assert got["replicas"] == 2
    # a report after every step (4 an epoch), and one at each epoch's end
    steps = got["reports"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 4, 5, 6, 7, 8, 8], steps
    at_steps = [r for i, r in enumerate(steps) if i not in (4, 9)]
    for logged, reported in zip(got["logs"], at_steps):
        for key in ("loss", "accuracy"):
            assert reported[key] == pytest.approx(logged[key], abs=1e-6), (got["logs"], steps)
    for epoch, reported in enumerate((steps[4], steps[9])):
        for key in ("loss", "accuracy"):
            assert reported[key] == pytest.approx(got["history"][key][epoch], abs=1e-6), got


SHOWN_ACCURACY = re.compile(r"\baccuracy[:= ]\s*(\d+(?:\.\d+)?)")


def _report_shows_no_stall_at_the_quiet_end(run_dir, quiet):
    """A successful Keras run that reports once an epoch (verbose=2) and takes ``quiet`` seconds
    after fit without a report, every worker then exiting 0: its report draws no stall band (the
    yellow 'stall (no progress)'), at the end of a worker or anywhere."""
    from tfcluster.runs.report import build_model, write_report
    m = build_model(run_dir)
    for v in m["tasks"]:
        assert v.outcome == "succeeded" and v.points, (v.name, v.outcome)
        last, end = v.attempts[-1].last[0], v.attempts[-1].end
        assert end - last >= quiet, (v.name, last, end)    # the quiet end is there ...
        assert v.stalls == [], (v.name, v.stalls)          # ... and is no stall
    page = open(write_report(run_dir), encoding="utf-8").read()
    assert '<rect class="stall"' not in page


@needs_tf_keras
@pytest.mark.parametrize("variant", [
    # one line an epoch (verbose=2), and 12 s after fit without a report (saving, evaluating)
    ["--input=numpy", "--model=sequential", "--finish_seconds=12"],
    # Keras' bar, long enough for the sums to pass 1 and for events (one a second) in every epoch
    ["--input=dataset", "--model=functional", "--verbose=1", "--steps_per_epoch=150"]])
def test_unmodified_mwms_tutorial_program_fits_with_keras2(tmp_path, ports, variant):
    path = program_file(tmp_path, ports, "keras_tutorial_mwms.py",
                        ["--epochs=3", "--steps_per_epoch=20", *variant], KERAS2)
    proc, rc = launch(path, tmp_path)
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    if "--finish_seconds=12" in variant:
        _report_shows_no_stall_at_the_quiet_end(record["run_dir"], 12)
    hists = [history(task_log(record, f"worker:{i}"), "keras_tutorial") for i in (0, 1)]
    assert hists[0] == hists[1]
    assert hists[0]["loss"][-1] < hists[0]["loss"][0] and hists[0]["accuracy"][-1] > 0.6, hists[0]
    # Keras' own bar (verbose=1 redraws, each step's metrics summed over the 2 workers by
    # tf_keras) is read as one worker's values: no accuracy above 1 in the console, the logs,
    # the events or the record (the live table's source), and the last values within 5% of
    # Keras' own epoch line
    with open(os.path.join(record["run_dir"], "events.jsonl")) as f:
        events = [json.loads(ln) for ln in f if ln.strip()]
    progress = [e["metrics"] for e in events if e.get("event") == "progress"]
    logs = subprocess.run([sys.executable, "-m", "tfcluster", "logs", record["run_dir"]],
                          capture_output=True, text=True, timeout=60).stdout
    shown = [float(v) for text in (proc.out_path.read_text(), logs)
             for v in SHOWN_ACCURACY.findall(text)]
    shown += [m["accuracy"] for m in progress if "accuracy" in m]
    assert shown and max(shown) <= 1, max(shown)
    for i in (0, 1):
        last = tasks_of(record)[f"worker:{i}"]["progress"]
        assert 0 <= last["accuracy"] <= 1, last
        for key in ("loss", "accuracy"):
            assert last[key] == pytest.approx(hists[0][key][-1], rel=0.05), (key, last, hists[0])
    assert_all_gone(record)


@needs_tf_keras
def test_mwms_worker_killed_mid_fit_every_worker_resumes_from_the_backup(tmp_path, ports):
    """The dead worker aborts the others' collectives; on-failure restarts every worker and
    BackupAndRestore resumes fit after the last finished epoch."""
    path = example_file(tmp_path, ports, "keras_mwms",
                        ["--epochs=3", "--steps_per_epoch=20", "--step_delay=0.1"])
    proc = start(path, tmp_path)
    try:
        # step 25: epoch 2 (of 3) is running, epoch 1's backup is written
        at = kill_when(proc, tmp_path, "worker:1", min_step=25, watch="worker:0")
    finally:
        rc = finish(proc, timeout=170)
    assert at < 60, "the worker was killed after the end of training"
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    tasks = tasks_of(record)
    assert tasks["worker:1"]["restarts"] >= 1, tasks["worker:1"]
    for i in (0, 1):
        log = task_log(record, f"worker:{i}")
        s = summary(log, f"keras_mwms: worker:{i}")
        assert s["initial_epoch"] >= 1, s  # resumed, not started over
        assert len(s["history"]["loss"]) == 3 - s["initial_epoch"]
    assert_all_gone(record)


# ------------------------------------------------------------------ MWMS, Keras 3 (TF's default)

@pytest.mark.parametrize("variant", [["--input=numpy", "--model=sequential"],
                                     ["--input=dataset", "--model=sequential"],
                                     ["--input=dataset", "--model=functional"]])
def test_mwms_fit_fails_with_keras3_on_a_per_replica_conversion(tmp_path, ports, variant):
    """Measured on TF 2.21 / Keras 3.15: every variant fails at the first step. If Keras 3
    learns to do this, this test fails: update docs/TF2_STRATEGIES.md's table."""
    path = program_file(tmp_path, ports, "keras_tutorial_mwms.py",
                        [*variant, "--epochs=1", "--steps_per_epoch=2"], KERAS3)
    proc, rc = launch(path, tmp_path)
    assert rc == 1, tail(proc)
    record = run_record(tmp_path)
    failed = [t for t in record["tasks"] if t["state"] == "failed"]
    assert failed, record["tasks"]
    log = task_log(record, failed[0]["task"])
    assert PER_REPLICA in log, log[-3000:]
    assert "keras/src/" in log and "tf_keras" not in log  # it was Keras 3
    hint = failure_hint(log.splitlines()[-40:])
    assert hint and "MultiWorkerMirroredStrategy" in hint and "tf_keras" in hint
    assert_all_gone(record)
    # the failure summary names the fix, in one line (this was test_keras3_failure_summary_names_the_fix,
    # a launch of its own of the first variant)
    out = proc.out_path.read_text()
    assert PER_REPLICA in out
    hints = [ln for ln in out.splitlines() if ln.lstrip().startswith("hint: Keras 3")]
    assert hints, out[-3000:]
    assert "pip install 'tf_keras~=" in hints[0] and "TF_USE_LEGACY_KERAS" in hints[0]


# ------------------------------------------------------------------ PSS

@needs_tf_keras
def test_pss_example_fits_to_the_end_with_keras2(tmp_path, ports):
    path = example_file(tmp_path, ports, "keras_pss", ["--epochs=3", "--steps_per_epoch=20"])
    proc, rc = launch(path, tmp_path)
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    tasks = tasks_of(record)
    assert record["result"] == "succeeded"
    assert tasks["chief:0"]["exit_code"] == 0
    for t in ("ps:0", "worker:0", "worker:1"):
        assert tasks[t]["state"] == "stopped" and "serving at" in task_log(record, t)
    s = summary(task_log(record, "chief:0"), "keras_pss:")
    loss = s["history"]["loss"]
    assert s["initial_epoch"] == 0 and loss[-1] < loss[0], s
    assert s["accuracy"] > 0.6, s
    progress = tasks["chief:0"]["progress"]
    assert progress["step"] == progress["total"] == 60 and progress["epoch"] == 3, progress
    # the progress at each epoch's end is what Keras' epoch line prints (PSS sums nothing:
    # each step runs on one worker, one replica; verbose=1 is refused under PSS)
    _, ends = keras_progress(task_log(record, "chief:0"))
    assert sorted(ends) == [1, 2, 3], ends
    rows = progress_rows(record, "chief:0", events=False)
    for epoch, printed in ends.items():
        # the epoch's end report: the last at its step (its last step's report may come first)
        at_end = [m for step, m in rows if step == 20 * epoch]
        assert at_end, (epoch, rows)
        for key in ("loss", "accuracy"):
            assert same_to_4_decimals(at_end[-1][key], printed[key]), (epoch, rows, ends)
    assert_all_gone(record)


@needs_tf_keras
def test_unmodified_pss_tutorial_program_fits_a_dataset_with_keras2(tmp_path, ports):
    path = program_file(tmp_path, ports, "keras_tutorial_pss.py",
                        ["--input=dataset", "--epochs=3", "--steps_per_epoch=20"], KERAS2, pss=True)
    proc, rc = launch(path, tmp_path)
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    h = history(task_log(record, "chief:0"), "keras_tutorial_pss")
    assert h["loss"][-1] < h["loss"][0] and h["accuracy"][-1] > 0.6, h
    assert_all_gone(record)


def test_pss_example_refuses_keras3_in_one_line(tmp_path, ports):
    p = ports(2)
    tf_config = {"cluster": {"chief": [f"localhost:{p[0]}"], "ps": [f"localhost:{p[1]}"]},
                 "task": {"type": "chief", "index": 0}}
    env = {**os.environ, **KERAS3, "TF_CONFIG": json.dumps(tf_config)}
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "keras_pss.py")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("keras_pss: error:")]
    assert len(errors) == 1 and "tf_keras" in errors[0] and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("variant, error", [
    ("--input=creator", "AttributeError: module 'keras.utils' has no attribute 'experimental'"),
    ("--input=dataset", "ValueError: To use this dataset, you need to pass this dataset to "
                        "ClusterCoordinator.create_per_worker_dataset."),
])
def test_pss_fit_fails_with_keras3(tmp_path, ports, variant, error):
    """Measured on TF 2.21 / Keras 3.15: no DatasetCreator, and fit on a dataset fails."""
    path = program_file(tmp_path, ports, "keras_tutorial_pss.py",
                        [variant, "--epochs=1", "--steps_per_epoch=5"],
                        {**KERAS3, "TF_CPP_MIN_LOG_LEVEL": "2"}, pss=True)
    proc, rc = launch(path, tmp_path)
    assert rc == 1, tail(proc)
    record = run_record(tmp_path)
    log = task_log(record, "chief:0")
    assert error in log, log[-3000:]
    hint = failure_hint(log.splitlines()[-40:])
    assert hint and "ParameterServerStrategy" in hint and "tf_keras" in hint
    assert_all_gone(record)


# ------------------------------------------------------------------ launcher hooks

def test_legacy_keras_without_tf_keras_is_refused_before_anything_starts(tmp_path, ports):
    """TF_USE_LEGACY_KERAS=1 for an interpreter that cannot import tf_keras (here ``python -S``,
    which sees no site-packages): exit 2 and one line, no task started."""
    (tmp_path / "bin").mkdir()
    bare = tmp_path / "bin" / "python3"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(bare.stat().st_mode | stat.S_IXUSR)
    path = program_file(tmp_path, ports, "keras_tutorial_mwms.py", [], KERAS2, command=(str(bare),))
    out = subprocess.run([sys.executable, "-m", "tfcluster", "launch", path, "--no-live"],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 2 or "tf_keras" not in out.stderr + out.stdout:
        pytest.skip("needs launcher hook: tfcluster.core.keras_hints.legacy_keras_problem before "
                    f"any task starts (got exit {out.returncode})")
    text = out.stderr + out.stdout
    assert "pip install 'tf_keras~=" in text and "Traceback" not in text, text


BAR_PROGRAM = r'''
import sys
bs = "\b" * 60
sys.stdout.write("Epoch 1/1\n")
for i in (1, 2, 3):
    sys.stdout.write(f"{i}/3 [{'=' * (10 * i)}{'.' * (30 - 10 * i)}] - loss: 0.{9 - i}000" + bs + "\r")
    sys.stdout.flush()
sys.stdout.write("3/3 [==============================] - 0s 5ms/step - loss: 0.6000\n")
sys.stdout.write("bar: done\n")
'''


def test_a_carriage_return_progress_bar_shows_its_latest_state(tmp_path, ports):
    """Keras' verbose=1 bar (tf_keras's bytes, no TensorFlow needed) in the console and the log."""
    prog = tmp_path / "bar.py"
    prog.write_text(BAR_PROGRAM)
    doc = {"version": 1, "cluster": {"worker": [f"localhost:{ports(1)[0]}"]},
           "program": {"command": ["python", str(prog)], "args": []},
           "logdir": str(tmp_path / "runs")}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc, rc = launch(str(path), tmp_path, timeout=60)
    assert rc == 0, tail(proc)
    record = run_record(tmp_path)
    log = task_log(record, "worker:0")
    console = proc.out_path.read_text()
    if "\b" in log or "\b" in console:
        pytest.skip("needs launcher hook: tfcluster.core.output_patterns.latest_bar_state in the "
                    "output reader (console and task log)")
    assert "3/3 [==============================] - 0s 5ms/step - loss: 0.6000" in log
    assert "\r" not in log and "\r" not in console
    assert "[worker:0] 3/3 [==============================] - 0s 5ms/step - loss: 0.6000" in console
    assert_all_gone(record)
