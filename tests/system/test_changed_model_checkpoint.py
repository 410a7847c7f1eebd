"""An everyday mistake with real TensorFlow: a model changed after its checkpoint was
saved, run again on the same checkpoint folder. The first tfcluster line after the failure
says what does not match, the checkpoint folder and the command to fix it with the real
cluster file; TensorFlow's long traceback is folded after it (whole in the task's log); the
failure summary shows TensorFlow's own error first and the hint again; the other worker ends
on SIGTERM instead of needing SIGKILL. A run again at the target step says it trained nothing
and names the real file to train on with."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.tf


def _launch(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--no-live",
                           "--no-security-note", *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300,
                          env=dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state")))


def _summary_tail(stderr: str):
    lines = stderr.splitlines()
    # the first worker to fail (either may: both restore-step the same graph)
    at = next(i for i, x in enumerate(lines) if x.startswith("last lines of worker:"))
    return lines[at + 1:]


def test_a_changed_model_on_an_old_checkpoint_says_to_clear_it(tmp_path, ports):
    shutil.copy(os.path.join(REPO, "trainer.py"), tmp_path / "trainer.py")
    p = ports(3)
    (tmp_path / "cluster.yaml").write_text(
        f"version: 1\ncluster:\n  ps: [localhost:{p[0]}]\n"
        f"  worker: [localhost:{p[1]}, localhost:{p[2]}]\n"
        "program:\n  command: [python, trainer.py]\n"
        "  args: [--train_steps=40, --checkpoint_dir=runs/checkpoints]\nlogdir: runs\n")
    ckpt = str(tmp_path / "runs" / "checkpoints")
    r = _launch(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert os.path.isfile(os.path.join(ckpt, "checkpoint"))
    # again, at the target step: nothing trained, and the command to train on names the file
    r = _launch(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    said = [x for x in r.stdout.splitlines() if "already at the target step, nothing trained" in x]
    assert said and all(f"tfcluster launch {tmp_path}/cluster.yaml --arg --train_steps=" in x
                        for x in said), said

    # a changed layer width (--arg changes that one flag and keeps --checkpoint_dir)
    r = _launch(tmp_path, "--arg", "--hidden_units=32", "--arg", "train_steps=80")
    assert r.returncode == 1, r.stderr[-3000:]
    tail = _summary_tail(r.stderr)
    # TensorFlow's error first (its "Graph execution error" on the chief, "From /job:..." on
    # the other worker), then what happened
    assert tail[0].strip().startswith("tensorflow.python.framework.errors_impl.InvalidArgumentError"
                                      ), "\n".join(tail)
    assert "Input to reshape is a tensor with 64 values, but the requested shape has 32" in tail[1]
    assert tail[2].strip().startswith("File ") and "trainer.py" in tail[2]
    hint = next(x for x in tail if x.startswith("hint:"))
    assert f"the checkpoint in {ckpt} no longer matches the model" in hint
    assert f"rm -r {ckpt}" in hint and f"--arg --checkpoint_dir={ckpt}-2" in hint

    # a layer added to the MODEL section: a variable missing from the checkpoint
    text = (tmp_path / "trainer.py").read_text()
    text = text.replace('        h = dense(h, FLAGS.hidden_units, "hidden2", tf.nn.relu)\n',
                        '        h = dense(h, FLAGS.hidden_units, "hidden2", tf.nn.relu)\n'
                        '        h = dense(h, FLAGS.hidden_units, "hidden3", tf.nn.relu)\n')
    assert "hidden3" in text
    (tmp_path / "trainer.py").write_text(text)
    # (a stop timeout a loaded machine cannot outrun: the worker must end on SIGTERM, not need SIGKILL)
    r = _launch(tmp_path, "--arg", "train_steps=80", "--stop-timeout", "30")
    assert r.returncode == 1, r.stderr[-3000:]
    # the first tfcluster line after the failure: the mismatch, the folder, the real file
    first = next(x for x in r.stderr.splitlines() if x.startswith("tfcluster: worker:") and " failed (" in x)
    assert "NotFoundError: Key model/hidden3/" in first and "not found in checkpoint" in first, first
    assert f"the checkpoint in {ckpt} no longer matches the model" in first, first
    assert f"tfcluster launch cluster.yaml --arg --checkpoint_dir={ckpt}-2" in first, first
    # the traceback (about 170 lines) folded after it: where it is whole, and its exception
    failed = first.split()[1].rstrip(":")
    shown = [x for x in r.stdout.splitlines() if x.startswith(f"[{failed}]")]
    assert len(shown) < 10, "\n".join(shown)
    folded = next(x for x in shown if "lines folded: tfcluster logs" in x)
    assert int(folded.split("lines folded")[0].split()[-1]) > 100, folded
    assert any("Key model/hidden3/" in x for x in shown), shown
    tail = _summary_tail(r.stderr)
    assert tail[0].strip().startswith("tensorflow.python.framework.errors_impl.NotFoundError: "
                                      "Restoring from checkpoint failed"), "\n".join(tail)
    assert "Key model/hidden3/" in tail[1] and "not found in checkpoint" in tail[1]
    assert any("trainer.py" in x for x in tail[2:])
    assert any(f"the checkpoint in {ckpt} no longer matches the model" in x for x in tail)
    # worker:1, still waiting for the chief's session, ends on SIGTERM
    assert "SIGKILL" not in r.stderr, r.stderr[-3000:]
