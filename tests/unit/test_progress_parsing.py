"""Progress from real programs' output, the progress pipe, the watchdogs' view of life, the
failure tail and TensorFlow's start-up noise: pure logic, no TensorFlow, no process.

The Keras and TF1 samples in tests/data/outputs/ are real output, captured from the installed
tf_keras and Keras 3 (tests/data/outputs/capture_fit.py with verbose 1 and 2, through a pipe,
carriage returns and backspaces included) and TF1 hooks (capture_tf1.py)."""
from __future__ import annotations

import os

import pytest

from tfcluster import contract, rules
from tfcluster.outputs import (ProgressParser, clean_segment, failure_tail, is_noise,
                               is_progress_line)
from tfcluster.progress import (channel_fd, format_progress, parse_progress, report_progress,
                                split_progress)

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
    me = os.getpid()
    leader = int(contract.proc_stat(me)[2])            # this process group's leader
    starter = int(contract.proc_stat(leader)[1])       # the process that started the group
    monkeypatch.setattr(contract, "_is_supervisor", lambda pid, env: True)
    assert contract.supervised({contract.LAUNCHER_PID: str(starter)}, pid=me)
    assert not contract.supervised({contract.LAUNCHER_PID: str(me)}, pid=me)
    assert not contract.supervised({contract.TASK: "worker:0"}, pid=me)   # commands' lines
    assert not contract.supervised({contract.LAUNCHER_PID: "1"}, pid=me)
    assert not contract.supervised({contract.LAUNCHER_PID: "x"}, pid=me)
    # issue 30: an ancestor above the group's starter (a login shell's $$) does not count
    above = int(contract.proc_stat(starter)[1]) if starter > 1 else 0
    if above > 1:
        assert not contract.supervised({contract.LAUNCHER_PID: str(above)}, pid=me)


def test_supervised_needs_a_tfcluster_supervisor(tmp_path, monkeypatch):
    """TFCLUSTER_LAUNCHER_PID=$$ in a shell (issue 30): the named process must run tfcluster or
    hold the run folder open, as a launcher does."""
    from tfcluster import runfs
    me = os.getpid()
    monkeypatch.setattr(contract, "_cmdline", lambda pid: [b"bash", b"-i"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {contract.RUN_DIR: str(run_dir)}
    assert not contract._is_supervisor(me, env)          # a shell holding nothing
    fd = runfs.open_run_dir(str(run_dir))                # what a launcher holds for its run
    try:
        assert contract._is_supervisor(me, env)
    finally:
        os.close(fd)
    assert not contract._is_supervisor(me, {})
    monkeypatch.setattr(contract, "_cmdline", lambda pid: [b"python3", b"-m", b"tfcluster", b"launch"])
    assert contract._is_supervisor(me, {})


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
    assert tail[:3] == [TRACEBACK[3], TRACEBACK[4], TRACEBACK[6]]
    assert not any("@tfcluster" in x or "cudart" in x or "/step" in x for x in tail)
    assert len(tail) <= 10


def test_the_last_frame_and_exception_come_first_then_the_end():
    lines = TRACEBACK + ["some cleanup line", "another"]
    tail = failure_tail(lines, 6)
    assert tail[:3] == [TRACEBACK[3], TRACEBACK[4], TRACEBACK[6]]
    assert tail[3] == "..." and tail[-1] == "another" and len(tail) == 6


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
    from tfcluster.keras_support import failure_hint
    hint = failure_hint(["Traceback (most recent call last):", line])
    assert hint.startswith("hint: ") and repr(name) in hint and "tf_keras" in hint


def test_the_pss_datasetcreator_hint_is_unchanged_and_others_get_none():
    from tfcluster.keras_support import failure_hint
    assert "DatasetCreator" in failure_hint(
        ["AttributeError: module 'keras.utils' has no attribute 'experimental'"])
    assert failure_hint(["AttributeError: 'Foo' object has no attribute 'experimental_run'"]) is None
