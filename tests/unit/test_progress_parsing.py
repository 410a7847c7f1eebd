"""Progress from real programs' output, the progress pipe, the watchdogs' view of life, the
failure tail and TensorFlow's start-up noise: pure logic, no TensorFlow, no process.

The Keras and TF1 samples in tests/data/outputs/ are real output, captured from the installed
tf_keras and Keras 3 (tests/data/outputs/capture_fit.py with verbose 1 and 2, through a pipe,
carriage returns and backspaces included) and TF1 hooks (capture_tf1.py)."""
from __future__ import annotations

import os
import shlex

import pytest

from tfcluster.core import output_patterns as outputs
from tfcluster.core import rules
from tfcluster.core.output_patterns import ProgressParser, clean_segment, failure_tail, is_noise, is_progress_line
from tfcluster.plan import contract
from tfcluster.plan.progress import channel_fd, format_progress, parse_progress, report_progress, split_progress

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "outputs")


def read_all(name):
    """Every progress reading of a captured output, split as the reader splits it."""
    text = open(os.path.join(DATA, name), "rb").read().decode("utf-8")
    parser = ProgressParser()
    out = []
    for line in text.split("\n"):
        for seg in line.split("\r"):
            seg = clean_segment(seg)
            if seg:
                out.append(parser.feed(seg))
    return out


# ---------------------------------------------------------------------------- the protocol

def test_a_report_is_found_glued_to_a_keras_bar_and_taken_out():
    line = ('8/8 [==============================] - 1s 5ms/step - accuracy: 0.8483'
            + format_progress(51, 100, loss=0.25))
    visible, found = split_progress(line)
    assert visible == "8/8 [==============================] - 1s 5ms/step - accuracy: 0.8483"
    assert [(p.step, p.total, p.metrics) for p in found] == [(51, 100, {"loss": 0.25})]
    assert parse_progress("junk " + format_progress(7)).step == 7


def test_text_that_only_looks_like_a_report_stays_text():
    for text in ("@tfcluster progress {bad json", '@tfcluster progress {"step": 1.5}',
                 '@tfcluster progress ["step", 1]', 'say @tfcluster progress'):
        visible, found = split_progress(text)
        assert found == [] and visible == text


def test_the_progress_pipe_is_used_only_while_it_is_the_launchers(monkeypatch, capsys):
    r, w = os.pipe()
    try:
        monkeypatch.setenv(contract.PROGRESS_FD, f"{w}:{os.fstat(w).st_ino}")
        assert channel_fd() == w
        report_progress(3, 10, loss=0.5)
        assert capsys.readouterr().out == ""
        assert parse_progress(os.read(r, 4096).decode()).step == 3
        # the variable inherited by a process where that number is something else: stdout
        monkeypatch.setenv(contract.PROGRESS_FD, f"{w}:{os.fstat(w).st_ino + 1}")
        assert channel_fd() is None
        report_progress(4)
        assert parse_progress(capsys.readouterr().out).step == 4
    finally:
        os.close(r)
        os.close(w)
    monkeypatch.setenv(contract.PROGRESS_FD, f"{w}:1")      # closed descriptor
    assert channel_fd() is None


def test_supervised_needs_the_launcher_to_be_an_ancestor(monkeypatch):
    """A process tree of its own (no real one: the test's own group leader may have exited, as
    under a CI runner's subshell): a task (100) in a group whose leader (40) was started by the
    launcher (30), under a login shell (20)."""
    tree = {100: (50, 40), 50: (40, 40), 40: (30, 40), 30: (20, 30), 20: (1, 20)}   # pid: (ppid, pgrp)

    def stat(pid="self"):
        if int(pid) not in tree:
            raise FileNotFoundError(pid)
        ppid, pgrp = tree[int(pid)]
        return [b"S", str(ppid).encode(), str(pgrp).encode()]
    monkeypatch.setattr(contract, "proc_stat", stat)
    monkeypatch.setattr(contract, "_is_supervisor", lambda pid, env: True)
    me = 100
    assert contract.supervised({contract.LAUNCHER_PID: "30"}, pid=me)
    assert not contract.supervised({contract.LAUNCHER_PID: str(me)}, pid=me)
    assert not contract.supervised({contract.LAUNCHER_PID: "40"}, pid=me)    # the leader itself
    assert not contract.supervised({contract.TASK: "worker:0"}, pid=me)   # commands' lines
    assert not contract.supervised({contract.LAUNCHER_PID: "1"}, pid=me)
    assert not contract.supervised({contract.LAUNCHER_PID: "x"}, pid=me)
    # an ancestor above the group's starter (a login shell's $$) does not count
    assert not contract.supervised({contract.LAUNCHER_PID: "20"}, pid=me)
    # a group whose leader has exited: nothing to trust
    del tree[40]
    assert not contract.supervised({contract.LAUNCHER_PID: "30"}, pid=me)


def test_supervised_needs_a_tfcluster_supervisor(tmp_path, monkeypatch):
    """TFCLUSTER_LAUNCHER_PID=$$ in a shell: the named process must run tfcluster or
    hold the run folder open, as a launcher does."""
    from tfcluster import safe_files
    me = os.getpid()
    monkeypatch.setattr(contract, "_cmdline", lambda pid: [b"bash", b"-i"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {contract.RUN_DIR: str(run_dir)}
    assert not contract._is_supervisor(me, env)          # a shell holding nothing
    fd = safe_files.open_run_dir(str(run_dir))                # what a launcher holds for its run
    try:
        assert contract._is_supervisor(me, env)
    finally:
        os.close(fd)
    assert not contract._is_supervisor(me, {})
    monkeypatch.setattr(contract, "_cmdline", lambda pid: [b"python3", b"-m", b"tfcluster", b"launch"])
    assert contract._is_supervisor(me, {})


def test_the_wrappers_that_set_launcher_pid_are_supervisors_and_another_ray_actor_is_not(monkeypatch):
    """docs/PLAN.md, TFCLUSTER_LAUNCHER_PID: the ssh hosts' node agent, the Slurm node agent and the
    Ray actor (which Ray retitles ``ray::<its class name>``) are known by their command lines
    (as they run them); another Ray actor, holding no run folder, is not taken for a supervisor."""
    from tfcluster.backends import ssh
    from tfcluster.backends.slurm.batch import TASK_COMMAND
    me = os.getpid()
    boot = ssh.remote_command(ssh.RemoteSpec())            # python3 -I -c '"tfcluster node agent";...'
    for argv in (shlex.split(boot),
                 ["/usr/bin/python3", "-c", TASK_COMMAND],
                 ["/venv/bin/python3", "/venv/bin/tfcluster", "launch", "cluster.yaml"]):
        monkeypatch.setattr(contract, "_cmdline", lambda pid, a=argv: [w.encode() for w in a])
        assert contract._is_supervisor(me, {}), argv[:2]
    from tfcluster.backends import ray as ray_backend
    for title in (f"ray::{ray_backend.tfcluster_task.__name__}",
                  f"ray::{ray_backend.tfcluster_task.__name__}.start()"):
        monkeypatch.setattr(contract, "_cmdline", lambda pid, t=title: [t.encode(), b""])
        assert contract._is_supervisor(me, {}), title
    monkeypatch.setattr(contract, "_cmdline", lambda pid: [b"ray::TaskRunner", b""])
    assert not contract._is_supervisor(me, {})


# ---------------------------------------------------------------------------- Keras, TF1

@pytest.mark.parametrize("name", ["keras3_verbose1.txt", "tf_keras_verbose1.txt",
                                  "keras3_verbose2.txt", "tf_keras_verbose2.txt"])
def test_real_keras_output_gives_epochs_steps_totals_and_metrics(name):
    readings = read_all(name)
    steps = [r.progress for r in readings if r.progress is not None]
    assert steps, name
    # 2 epochs of 8 batches: the step counts across epochs, the total is epochs x steps
    assert [p.step for p in steps][-1] == 16
    assert all(p.total == 16 for p in steps)
    assert [p.metrics["epoch"] for p in steps][0] == 1 and steps[-1].metrics["epoch"] == 2
    assert steps[-1].metrics["epochs"] == 2
    assert set(steps[-1].metrics) >= {"loss", "accuracy"}
    assert 0 < steps[-1].metrics["loss"] < 2
    assert sum(r.life for r in readings) >= 4       # two headers, and the steps that moved
    assert any(r.rate for r in readings)            # "5ms/step"


def test_verbose1_redraws_are_steps_within_the_epoch():
    steps = [r.progress.step for r in read_all("keras3_verbose1.txt") if r.progress is not None]
    assert steps == [1, 8, 9, 16]          # the redraw at batch 1, the epoch's end, twice


def test_real_tf1_hook_lines_give_the_global_step_and_loss():
    steps = [r.progress for r in read_all("tf1_hooks.txt") if r.progress is not None]
    assert [p.step for p in steps] == [0, 100, 200]
    assert steps[1].metrics["loss"] == pytest.approx(0.017587947)
    assert all(p.total is None for p in steps)        # no total known: no invented ETA


def test_tf1_rate_and_checkpoint_lines():
    parser = ProgressParser()
    r = parser.feed("INFO:tensorflow:global_step/sec: 41.7")
    assert r.progress is None and r.life and r.rate == pytest.approx(41.7)
    assert not parser.feed("INFO:tensorflow:global_step/sec: 0").life
    r = parser.feed("I1201 05:23:40.1 123 basic_session_run_hooks.py:606] Saving checkpoints "
                    "for 1200 into /tmp/m/model.ckpt.")
    assert r.progress.step == 1200 and r.life
    assert not parser.feed("I1201 05:23:40.1 123 basic_session_run_hooks.py:606] Saving "
                           "checkpoints for 1200 into /tmp/m/model.ckpt.").life   # same step


def test_unknown_steps_per_epoch_give_no_total():
    parser = ProgressParser()
    parser.feed("Epoch 1/3")
    r = parser.feed("     12/Unknown - 3s 250ms/step - loss: 0.5")
    assert r.progress.step == 12 and r.progress.total is None
    assert r.rate == pytest.approx(4.0)


def test_ordinary_lines_are_not_progress():
    parser = ProgressParser()
    for line in ("3/10 files copied", "3/10", "Epoch 3 of 10", "step 5 done", "loss = high",
                 "keras_tutorial: done: {\"loss\": [0.5]}"):
        r = parser.feed(line)
        assert r.progress is None and not r.life, line


# ---------------------------------------------------------------------------- noise

def test_noise_is_exactly_tensorflows_known_start_up_lines():
    text = open(os.path.join(DATA, "keras3_verbose1.txt"), "rb").read().decode()
    lines = [clean_segment(x) for x in text.split("\n") if x.strip()]
    noise = [x for x in lines if is_noise(x)]
    assert len(noise) >= 8          # absl pre-init, oneDNN, cudart stub, cuInit, CPU features
    assert not any("Epoch" in x or "/step" in x for x in noise)
    for line in ("Traceback (most recent call last):", "ValueError: bad shape",
                 "E0000 00:00:1.0 1 grpc_server_lib.cc:1] Could not start gRPC server",
                 "2026-01-01 INFO: training started"):
        assert not is_noise(line), line


def test_the_runtimes_profiler_server_start_is_noise_and_its_failure_is_not():
    assert is_noise("I0000 00:00:1796189621.757604   10123 profiler_server.cc:46] Profiler server "
                    "listening on [::]:12222 selected port:12222")
    assert not is_noise("E0000 00:00:1796189621.756795   10123 profiler_server.cc:43] Unable to "
                        "bind to [::]:12222 selected port:0")


# ---------------------------------------------------------------------------- failure tail

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 40, in <module>',
    "    main()",
    '  File "/work/train.py", line 31, in main',
    "    metric.reset_states()",
    "    ^^^^^^^^^^^^^^^^^^^",
    "AttributeError: 'SparseCategoricalAccuracy' object has no attribute 'reset_states'",
]


def test_the_exception_line_is_shown_even_after_50_progress_lines():
    lines = (["I0000 00:00:1.0 1 cudart_stub.cc:31] Could not find cuda drivers on your "
              "machine, GPU will not be used."] + TRACEBACK[:-1] + [TRACEBACK[-1]]
             + [format_progress(i, 100, loss=0.1) for i in range(50)]
             + ["8/8 [======] - 1s 5ms/step - loss: 0.3", "Epoch 2/3"])
    tail = failure_tail(lines[-60:], 10)
    assert tail == [TRACEBACK[6]] + TRACEBACK[1:5]
    assert not any("@tfcluster" in x or "cudart" in x or "/step" in x for x in tail)


def test_the_exception_first_then_the_frames_in_order_without_noise_between():
    lines = (TRACEBACK[:1]
             + ['  File "/usr/lib/python3.11/runpy.py", line 1, in _run', "    exec(code)"]
             + TRACEBACK[1:6]
             + ["W0000 00:00:1.0 1 dataset.cc:997] The calling iterator did not fully read the "
                "dataset being cached.", TRACEBACK[6], "some cleanup line", "another"])
    tail = failure_tail(lines, 6)
    assert tail == [TRACEBACK[6]] + TRACEBACK[1:5]


def test_tensorflows_error_line_wins_over_its_original_stack_trace():
    """The frames of TensorFlow's "Original stack trace" (inside its message) are not the
    traceback; the line that says what happened follows a generic first line."""
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "tf_failures",
                        "reshape-after-restore.log")
    with open(path, encoding="utf-8") as f:
        lines = [x.rstrip("\n") for x in f][-200:]
    tail = failure_tail(lines, 10)
    assert tail[0] == ("tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph "
                       "execution error:")
    assert tail[1] == "Input to reshape is a tensor with 64 values, but the requested shape has 32"
    assert [x for x in tail if x.lstrip().startswith("File ")] == [
        '  File "/work/trainer.py", line 253, in <module>',
        '  File "/work/trainer.py", line 245, in main',
        '  File "/work/trainer.py", line 174, in train']
    assert not any("site-packages" in x or "Original stack" in x for x in tail)
    hint = outputs.failure_hint(lines)
    assert "/work/runs/checkpoints no longer matches the model" in hint
    assert "rm -r /work/runs/checkpoints" in hint and "--arg --checkpoint_dir=" in hint


def test_a_missing_variable_names_the_checkpoint_folder_given():
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "tf_failures",
                        "notfound-on-restore.log")
    with open(path, encoding="utf-8") as f:
        lines = [x.rstrip("\n") for x in f][-200:]
    tail = failure_tail(lines, 10)
    assert tail[0].startswith("tensorflow.python.framework.errors_impl.NotFoundError: Restoring "
                              "from checkpoint failed")
    assert tail[1] == "Key model/hidden3/bias not found in checkpoint"
    assert tail[-2:] == ['  File "/work/trainer.py", line 162, in train', "    with session as sess:"]
    hint = outputs.failure_hint(lines, "/data/ckpt", "--model_dir")
    assert "checkpoint in /data/ckpt no longer matches the model" in hint
    assert "--arg --model_dir=/data/ckpt-2" in hint


def _failure_log(name):
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "tf_failures", name)
    with open(path, encoding="utf-8") as f:
        return [x.rstrip("\n") for x in f][-200:]


@pytest.mark.parametrize("lines,cause", [
    (_failure_log("notfound-on-restore.log"), "NotFoundError: Key model/hidden3/bias not found in checkpoint"),
    (_failure_log("reshape-after-restore.log"),
     "InvalidArgumentError: Input to reshape is a tensor with 64 values, but the requested shape has 32"),
    (TRACEBACK, "AttributeError: 'SparseCategoricalAccuracy' object has no attribute 'reset_states'"),
    (["Traceback (most recent call last):", '  File "/w/t.py", line 3, in <module>',
      "    raise SystemExit(3)", "SystemExit: 3"], "SystemExit: 3"),
    (["a plain line", "another", "Segmentation fault"], None),
    (["Traceback (most recent call last):", '  File "/w/t.py", line 80, in <module>',
      "    model.fit(x)", "ValueError: Attempt to convert a value (PerReplica:{",
      "  0: <tf.Tensor: shape=(2,), dtype=float32, numpy=", "array([1., 2.], dtype=float32)>",
      "}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor."],
     "ValueError: Attempt to convert a value (PerReplica:{ ... }) with an unsupported type "
     "(<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor."),
])
def test_a_failures_one_line_cause_is_its_exception(lines, cause):
    assert outputs.failure_cause(lines) == cause


def test_the_hint_names_the_launch_command_it_is_given():
    lines = _failure_log("notfound-on-restore.log")
    hint = outputs.failure_hint(lines, "/data/ckpt", launch="tfcluster launch my.yaml")
    assert hint.endswith("train into another folder: tfcluster launch my.yaml --arg "
                         "--checkpoint_dir=/data/ckpt-2"), hint
    assert "FILE" not in outputs.failure_hint(lines, "/data/ckpt")


def test_hints_for_removed_modules_and_none_for_other_failures():
    hint = outputs.failure_hint(["ModuleNotFoundError: No module named 'tensorflow.examples'"])
    assert "tensorflow.examples" in hint and "tf.keras.datasets.mnist" in hint
    assert "tf_slim" in outputs.failure_hint(["AttributeError: module 'tensorflow' has no "
                                              "attribute 'contrib'"])
    assert outputs.failure_hint(TRACEBACK[:-1] + ["ValueError: no such split: 'tain'"]) is None
    # the one question the drivers ask answers the Keras 3 failures too
    assert "Keras 3" in outputs.failure_hint(TRACEBACK)
    # a shape error without a restore is the program's own bug, not the checkpoint's
    assert outputs.failure_hint(["InvalidArgumentError: Input to reshape is a tensor with 64 "
                                 "values, but the requested shape has 32"]) is None


def test_an_exception_line_after_a_tensor_dump_without_its_traceback():
    lines = ["  [1.0, 2.0]"] * 30 + ["ValueError: Attempt to convert a value (PerReplica:{...}) "
                                     "with an unsupported type"] + ["  [3.0]"] * 20
    tail = failure_tail(lines, 5)
    assert tail[0].startswith("ValueError: Attempt to convert")


def test_a_tail_without_an_error_is_its_last_lines():
    lines = ["a", "b", format_progress(3), "c"]
    assert failure_tail(lines, 2) == ["b", "c"]
    assert is_progress_line(format_progress(3)) and not is_progress_line("c")


# ---------------------------------------------------------------------------- watchdogs

def test_startup_never_kills_a_task_that_makes_progress():
    assert rules.check_startup("worker:0", 0.0, False, 130.0, 120.0, 2223,
                               last_progress_at=129.5) is None
    a = rules.check_startup("worker:0", 0.0, False, 130.0, 120.0, 2223, last_progress_at=None)
    assert a.action == "kill" and "port 2223 within 120s" in a.reason
    assert "watchdog.startup_timeout: 120" in a.reason and "set 0" in a.reason
    # progress from before this attempt started does not count
    assert rules.check_startup("worker:0", 50.0, False, 200.0, 120.0, 2223,
                               last_progress_at=10.0) is not None
    assert rules.check_startup("worker:0", 0.0, False, 1e9, 0, 2223) is None   # 0: off


def test_stall_counts_any_life_and_the_runs_own_cadence():
    # the global step stands, but a task showed life (a batch moved, a rate) a second ago
    assert rules.check_stall(51, 0.0, 100.0, 10.0, last_life_at=99.0) is None
    a = rules.check_stall(51, 0.0, 100.0, 10.0, last_life_at=80.0)
    assert a.action == "fail_run" and "stood at 51" in a.reason
    assert "watchdog.stall_timeout: 10" in a.reason and "set 0" in a.reason
    # one report per 400 s epoch so far: silence up to 800 s is that run's normal
    assert rules.check_stall(51, 0.0, 700.0, 300.0, last_life_at=0.0, cadence=400.0) is None
    a = rules.check_stall(51, 0.0, 900.0, 300.0, last_life_at=0.0, cadence=400.0)
    assert a is not None and "800s" in a.reason
    assert rules.check_stall(None, 0.0, 1e9, 10.0) is None          # nothing reported yet
    assert rules.check_stall(51, 0.0, 1e9, 0) is None              # 0: off


def test_waiting_spares_a_task_that_shows_progress_and_names_its_setting():
    acts = rules.check_waiting("worker:0", {"ps:0": 0.0}, 20.0, 10.0, {"ps:0": True}, {},
                               life={"ps:0": 19.0})
    assert acts == []
    acts = rules.check_waiting("worker:0", {"ps:0": 0.0}, 20.0, 10.0, {"ps:0": True}, {},
                               life={"ps:0": None})
    assert acts[0].action == "kill" and "watchdog.waiting_timeout: 10" in acts[0].reason


# ---------------------------------------------------------------------------- Keras 3 hints

@pytest.mark.parametrize("line,name", [
    ("AttributeError: 'SparseCategoricalAccuracy' object has no attribute 'reset_states'",
     "reset_states"),
    ("AttributeError: module 'keras.optimizers' has no attribute 'experimental'", "experimental"),
])
def test_removed_keras_apis_get_the_keras_2_hint(line, name):
    from tfcluster.core.keras_hints import keras_failure_hint
    hint = keras_failure_hint(["Traceback (most recent call last):", line])
    assert hint.startswith("hint: ") and repr(name) in hint and "tf_keras" in hint


def test_the_pss_datasetcreator_hint_is_unchanged_and_others_get_none():
    from tfcluster.core.keras_hints import keras_failure_hint
    assert "DatasetCreator" in keras_failure_hint(
        ["AttributeError: module 'keras.utils' has no attribute 'experimental'"])
    assert keras_failure_hint(["AttributeError: 'Foo' object has no attribute 'experimental_run'"]) is None


@pytest.mark.parametrize("line", [
    "I0000 00:00:1796190047.769222   18034 coordination_service_agent.cc:301] Coordination agent "
    "has successfully connected.",
    "I0000 00:00:1796190047.769222   18034 coordination_service.cc:599] /job:worker/replica:0/task:1 "
    "has connected to coordination service. Incarnation: 6624",
    "I0000 00:00:1796190047.769222   18034 preemption_notifier.cc:89] Preemption notifier is being "
    "deleted.",
    "W0000 00:00:1796190047.769222   18034 local_rendezvous.cc:405] Local rendezvous is aborting "
    "with status: CANCELLED: RecvAsync is cancelled.",
    "WARNING:tensorflow:It seems that global step (tf.train.get_global_step) has not been "
    "increased. Current value (could be stable): 5 vs previous value: 5.",
    "W0000 00:00:1.0 1 dataset.cc:997] The calling iterator did not fully read the dataset being "
    "cached. In order to avoid unexpected truncation of the dataset, ...",
])
def test_the_noise_of_mwms_and_tf1_endings_is_folded(line):
    assert is_noise(line)


def test_coordination_service_errors_are_not_noise():
    assert not is_noise("E0000 00:00:1.0 1 coordination_service_agent.cc:720] Polled an error "
                        "from coordination service")
    assert not is_noise("W0000 00:00:1.0 1 coordination_service.cc:1] heartbeat timeout")


def test_a_remote_error_whose_origin_has_a_line_of_its_own():
    """A worker that sees the failure of another task's op: TensorFlow puts "From /job:..." on a
    line of its own between its generic first line and what happened (CI saw it once)."""
    lines = ["Traceback (most recent call last):",
             '  File "/work/trainer.py", line 174, in train',
             "    sess.run(train_op)",
             "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:",
             "",
             "From /job:worker/replica:0/task:0:",
             "Input to reshape is a tensor with 64 values, but the requested shape has 32",
             "\t [[{{node gradients/model/hidden2/add_grad/Reshape}}]]"]
    tail = failure_tail(lines, 10)
    assert tail[1] == "Input to reshape is a tensor with 64 values, but the requested shape has 32"
    assert tail[2] == '  File "/work/trainer.py", line 174, in train'


def keras_bar_reports(name, summed_over):
    """Every progress the reader hands over for a captured output fed as the pipe gives it
    (carriage-return redraws and backspaces included)."""
    import threading

    from tfcluster.core.task_output import OutputReader, Seen
    got = []
    r = OutputReader("worker:0", None, None, Seen(), threading.RLock(), lambda s: s, lambda: 0.0,
                     lambda text, p: got.append(p) if p is not None else None,
                     summed_over=summed_over)
    r.feed(open(os.path.join(DATA, name), "rb").read())
    r.end()
    return got


def test_keras_bar_under_mwms_is_read_as_one_workers_values_never_the_sum():
    """tf_keras under MultiWorkerMirroredStrategy with 2 workers (tests/programs/
    keras_tutorial_mwms.py --verbose=1, captured): its bar redraws show each step's metrics
    summed over the workers ("loss: 3.1660 - accuracy: 0.5547" while the epoch line says
    "loss: 1.4331 - accuracy: 0.3307"); the reader shows the per-worker values."""
    cluster = {"worker": ["a:1", "b:2"]}
    assert outputs.keras_sums_over(cluster) == 2
    assert outputs.keras_sums_over({**cluster, "ps": ["c:3"]}) == 1
    assert outputs.keras_sums_over('{"cluster": {"chief": ["a:1"], "worker": ["b:2"]}}') == 2
    got = keras_bar_reports("tf_keras_mwms_2workers_verbose1.txt", outputs.keras_sums_over(cluster))
    assert [p.step for p in got] == [1, 4, 7, 10, 12, 13, 18, 22, 24], [p.step for p in got]
    for p in got:
        assert 0 <= p.metrics["accuracy"] <= 1, (p.step, p.metrics)
    by_step = {p.step: p.metrics for p in got}
    assert by_step[4]["loss"] == pytest.approx(3.1660 / 2) and by_step[4]["accuracy"] == pytest.approx(0.5547 / 2)
    # the epochs' ends as Keras' epoch lines print them, and the steps near them within 5%
    assert (by_step[12]["loss"], by_step[12]["accuracy"]) == (1.4331, 0.3307)
    assert (by_step[24]["loss"], by_step[24]["accuracy"]) == (1.1801, 0.5065)
    assert by_step[22]["loss"] == pytest.approx(by_step[24]["loss"], rel=0.05)
    # one worker (or a ps cluster): the bar is read as it is
    alone = keras_bar_reports("tf_keras_mwms_2workers_verbose1.txt", 1)
    assert {p.step: p.metrics for p in alone}[4]["loss"] == 3.1660


def test_an_epochs_end_shows_how_many_values_keras_added():
    """The last redraw of a step and the epoch's line for the same step: their ratio is what
    Keras added; used for the next epoch's redraws (here 1: nothing divided any more)."""
    parser = ProgressParser(summed_over=2)
    parser.feed("Epoch 1/2")
    parser.feed("2/2 [=====>....] - ETA: 0s - loss: 0.5000 - accuracy: 0.7500", redraw=True)
    parser.feed("2/2 [==========] - 1s 5ms/step - loss: 0.5000 - accuracy: 0.7500")
    assert parser.learned == 1
    parser.feed("Epoch 2/2")
    r = parser.feed("1/2 [=====>....] - ETA: 0s - loss: 0.4000 - accuracy: 0.8000", redraw=True)
    assert r.progress.metrics["loss"] == 0.4


# TensorFlow's own warnings, as TF 2.21 prints them (a TF1 trainer with --save_checkpoint_secs,
# examples/ps_strategy.yaml's chief)
DEPRECATION = [
    "WARNING:tensorflow:From /usr/lib/python3/dist-packages/tensorflow/python/training/saver.py:1068: "
    "remove_checkpoint (from tensorflow.python.checkpoint.checkpoint_management) is deprecated and "
    "will be removed in a future version.",
    "Instructions for updating:",
    "Use standard file APIs to delete files with this prefix.",
]
RETRACING = (
    "WARNING:tensorflow:6 out of the last 6 calls to <function MultiDeviceSaver.save.<locals>."
    "tf_function_save at 0x7f3c2c1d5e40> triggered tf.function retracing. Tracing is expensive and "
    "the excessive number of tracings could be due to (1) creating @tf.function repeatedly in a "
    "loop, (2) passing tensors with different shapes, (3) passing Python objects instead of "
    "tensors. For (1), please define your @tf.function outside of the loop. For (2), @tf.function "
    "has reduce_retracing=True option that can avoid unnecessary retracing. For (3), please refer "
    "to https://www.tensorflow.org/guide/function#controlling_retracing and "
    "https://www.tensorflow.org/api_docs/python/tf/function for  more details.")


def test_tensorflows_deprecation_and_retracing_warnings_are_folded_whole():
    from tfcluster.core.task_output import ConsoleView, NoiseFold
    lines = ["step 10", *DEPRECATION, RETRACING, "Instructions for updating:", "step 20"]
    fold = NoiseFold()
    shown = [ln for ln in lines if not fold.fold(ln, "worker:0")[0]]
    # the deprecation's three lines and the retracing line; a lone "Instructions ..." stays
    assert shown == ["step 10", "Instructions for updating:", "step 20"]
    assert fold.hidden == 4
    view = ConsoleView(NoiseFold())
    assert [out for ln in lines for out in view.feed(ln)] == shown
    # another task's lines between them do not make its own line noise
    fold = NoiseFold()
    assert fold.fold(DEPRECATION[0], "worker:0")[0]
    assert not fold.fold("Instructions for updating:", "worker:1")[0]
    assert fold.fold("Instructions for updating:", "worker:0")[0]
    assert failure_tail(["a", *DEPRECATION, "b"]) == ["a", "b"]
