"""tfcluster report on real TensorFlow runs of the quick start (trainer.py, 1 ps, 2 workers,
the shipped cluster.yaml's flags): the chief, slower because it writes the checkpoints and
summaries, is not called a straggler though both workers end together; the same folder run
again with a layer added fails, and its report says what the console said -- the exception,
the hint naming the checkpoint folder and the real file, the log's tail."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT
from tfcluster.runs.report import build_model, write_report

pytestmark = pytest.mark.tf


def _launch(tmp_path):
    return subprocess.run([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--no-live",
                           "--no-security-note"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, env=dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state")))


def _latest_run(tmp_path):
    runs = sorted(d for d in (tmp_path / "runs").iterdir() if (d / "run.json").is_file())
    return str(runs[-1])


def test_the_quick_starts_report_marks_no_straggler_and_a_failed_ones_says_why(tmp_path, ports):
    shutil.copy(os.path.join(ROOT, "trainer.py"), tmp_path / "trainer.py")
    p = ports(3)
    text = open(os.path.join(ROOT, "cluster.yaml"), encoding="utf-8").read()
    text = text.replace("[localhost:2222]", f"[localhost:{p[0]}]").replace(
        "[localhost:2223, localhost:2224]", f"[localhost:{p[1]}, localhost:{p[2]}]")
    (tmp_path / "cluster.yaml").write_text(text)
    r = _launch(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run = _latest_run(tmp_path)
    m = build_model(run)
    tasks = {v.name: v for v in m["tasks"]}
    assert m["chief"] == "worker:0" and tasks["worker:0"].rate and tasks["worker:1"].rate
    page = open(write_report(run), encoding="utf-8").read()
    assert '<tr class="straggler"' not in page and "&mdash; straggler" not in page
    row = re.search(r'<tr class="(\w*)" id="rate-worker-0">(.*?)</tr>', page)
    assert row.group(1) == "exempt" and "the chief: checkpoints and summaries are work besides " \
        "its steps, not compared" in row.group(2), row.group(0)
    assert '<rect class="stall"' not in page            # both ended by themselves

    # a layer added: the checkpoint no longer matches; the report says so as the console did
    src = (tmp_path / "trainer.py").read_text()
    (tmp_path / "trainer.py").write_text(src.replace(
        '        h = dense(h, FLAGS.hidden_units, "hidden2", tf.nn.relu)\n',
        '        h = dense(h, FLAGS.hidden_units, "hidden2", tf.nn.relu)\n'
        '        h = dense(h, FLAGS.hidden_units, "hidden3", tf.nn.relu)\n'))
    text = (tmp_path / "cluster.yaml").read_text().replace("--train_steps=2000", "--train_steps=4000")
    (tmp_path / "cluster.yaml").write_text(text)
    r = _launch(tmp_path)
    assert r.returncode == 1, r.stderr[-3000:]
    run = _latest_run(tmp_path)
    record = json.loads(open(os.path.join(run, "run.json")).read())
    failed = record["root_cause"].split()[0]
    page = open(write_report(run), encoding="utf-8").read()
    ckpt = tmp_path / "runs" / "checkpoints"
    assert "NotFoundError: Key model/hidden3/" in page and "not found in checkpoint" in page
    hint = re.search(r'<p class="hint" id="failure-hint"><b>hint</b>: (.*?)</p>', page).group(1)
    assert f"the checkpoint in {ckpt} no longer matches the model" in hint, hint
    assert f"tfcluster launch {tmp_path}/cluster.yaml --arg --checkpoint_dir={ckpt}-2" in hint, hint
    tail = re.search(r'<pre class="tail" id="failure-tail">(.*?)</pre>', page, re.S).group(1)
    assert tail.startswith("tensorflow.python.framework.errors_impl.NotFoundError"), tail
    assert "trainer.py&quot;" in tail and f"last lines of {failed}" in page
