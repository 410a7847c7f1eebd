"""What tfcluster report says is true, from run folders in the documented formats (no process,
no browser; the page in Chromium: tests/integration/test_report_browser.py; from real runs:
tests/system/test_report_real_runs.py): a chief's extra work is not a straggler, the end of a
run that finished by itself is not a stall (a real stall still is), a failed run shows the
failure's cause, its hint and its log's tail as the console did, and the progress reported is
drawn; the end labels of the step chart are laid out apart."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from helpers import ROOT
from helpers.runs import quick_start_run
from tfcluster.runs.eventlog import EventLog
from tfcluster.runs.report import build_model, render_html
from tfcluster.safe_files import write_json

T0 = 1_764_500_000.0
DATA = os.path.join(ROOT, "tests", "data", "tf_failures")


def rows(page):
    return {m.group(2): (m.group(1), m.group(3))
            for m in re.finditer(r'<tr class="(\w*)" id="rate-([\w-]+)">(.*?)</tr>', page)}


def test_a_chief_slower_by_its_checkpoints_is_no_straggler(tmp_path):
    m = build_model(str(quick_start_run(tmp_path)))
    tasks = {v.name: v for v in m["tasks"]}
    assert tasks["worker:0"].chief and tasks["worker:0"].rate == pytest.approx(7.0)
    page = render_html(m)
    got = rows(page)
    assert got["worker-0"][0] == "exempt" and "70% &mdash; the chief: checkpoints and summaries " \
        "are work besides its steps, not compared" in got["worker-0"][1], got
    assert '<tr class="straggler"' not in page
    # another worker that slow is still one
    d = quick_start_run(tmp_path / "b", chief_rate=10.0, other_rate=7.0)
    page = render_html(build_model(str(d)))
    assert rows(page)["worker-1"][0] == "straggler" and "70% &mdash; straggler" in rows(page)["worker-1"][1]


def test_the_end_of_a_run_that_finished_by_itself_is_no_stall(tmp_path):
    """Keras reports per epoch: 30 s without a report between the last epoch and exit 0 is the
    program finishing. A task stopped 30 s after its last report, mid-run, did stall."""
    ok = build_model(str(quick_start_run(tmp_path, tail=30.0)))
    assert all(v.stalls == [] for v in ok["tasks"])
    assert 'class="stall"' not in render_html(ok)
    # a task at its final step that is stopped: ending, not stalled
    final = build_model(str(quick_start_run(tmp_path / "f", tail=30.0, end_states=("succeeded", "stopped"),
                                            last_step=1000)))
    assert all(v.stalls == [] for v in final["tasks"])
    # stopped mid-run, 30 s after its last report: a stall
    hung = build_model(str(quick_start_run(tmp_path / "h", tail=30.0, end_states=("succeeded", "stopped"))))
    w1 = {v.name: v for v in hung["tasks"]}["worker:1"]
    assert len(w1.stalls) == 1 and w1.stalls[0][1] - w1.stalls[0][0] == pytest.approx(30.0)
    assert 'class="stall"' in render_html(hung)


def failed_run(folder, log_name="notfound-on-restore.log", events=True):
    """worker:0 (the chief) failed restoring runs/checkpoints (its log: a real TensorFlow
    failure), after reporting steps; run.json as a launcher writes it."""
    d = folder / "runs" / "failed"
    d.mkdir(parents=True)
    ckpt = folder / "runs" / "checkpoints"
    ckpt.mkdir()
    (ckpt / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-40"\n')
    shutil.copy(os.path.join(DATA, log_name), d / "worker-0.log")
    argv = ["python", str(folder / "trainer.py"), "--train_steps=80", "--checkpoint_dir=runs/checkpoints"]
    write_json(str(d / "run.json"), {
        "run_id": "failed", "file": str(folder / "cluster.yaml"), "run_dir": str(d),
        "launcher_pid": 999999, "backend": "local", "chief": "worker:0", "started": T0,
        "ended": T0 + 10, "result": "failed", "exit_code": 1, "root_cause": "worker:0 exit 1",
        "tasks": [{"task": "worker:0", "chief": True, "state": "failed", "exit": "exit 1",
                   "log": str(d / "worker-0.log"), "argv": argv, "started": T0, "ended": T0 + 8,
                   "progress": {"step": 57, "total": 80, "at": T0 + 6}},
                  {"task": "worker:1", "state": "stopped", "exit": "SIGTERM", "argv": argv,
                   "log": str(d / "worker-1.log"), "started": T0, "ended": T0 + 9}]})
    if events:
        log = EventLog(str(d))
        log.emit("run_started", time=T0, run_id="failed", file="cluster.yaml", backend="local",
                 tasks=["worker:0", "worker:1"], chief="worker:0")
        for n in ("worker:0", "worker:1"):
            log.emit("task_started", n, time=T0 + 0.1, pid=100, attempt=0, host="localhost")
        log.emit("task_exited", "worker:0", time=T0 + 8, exit_code=1, signal=None, exit="exit 1",
                 state="failed")
        log.emit("task_exited", "worker:1", time=T0 + 9, exit_code=None, signal="SIGTERM",
                 exit="SIGTERM", state="stopped")
        log.emit("run_ended", time=T0 + 10, result="failed", exit_code=1)
        log.close()
    return d


def test_a_failed_runs_report_says_what_the_console_said(tmp_path):
    d = failed_run(tmp_path)
    page = render_html(build_model(str(d)))
    ckpt = tmp_path / "runs" / "checkpoints"
    assert re.search(r'<p id="failure-cause"><b>worker:0 failed</b>: NotFoundError: Key '
                     r'model/hidden3/bias not found in checkpoint</p>', page), page[:3000]
    hint = re.search(r'<p class="hint" id="failure-hint"><b>hint</b>: (.*?)</p>', page).group(1)
    assert f"the checkpoint in {ckpt} no longer matches the model" in hint
    assert hint.endswith(f"train into another folder: tfcluster launch {tmp_path}/cluster.yaml "
                         f"--arg --checkpoint_dir={ckpt}-2"), hint
    tail = re.search(r'<pre class="tail" id="failure-tail">(.*?)</pre>', page, re.S).group(1)
    assert tail.splitlines()[0].startswith("tensorflow.python.framework.errors_impl.NotFoundError")
    assert "trainer.py&quot;, line 162, in train" in tail
    assert "tfcluster logs failed worker:0" in page
    # the progress worker:0 reported (run.json's last report: events.jsonl has none here)
    assert "No task reported progress" not in page and 'id="steps-worker-0"' in page


def test_a_failed_run_without_a_traceback_shows_its_last_lines(tmp_path):
    d = failed_run(tmp_path)
    (d / "worker-0.log").write_text("loading\nerror: the data file is empty\n")
    page = render_html(build_model(str(d)))
    assert 'id="failure-cause"' not in page and 'id="failure-hint"' not in page
    tail = re.search(r'<pre class="tail" id="failure-tail">(.*?)</pre>', page, re.S).group(1)
    assert tail == "loading\nerror: the data file is empty"


def test_a_hostile_log_tail_is_escaped(tmp_path):
    d = failed_run(tmp_path)
    (d / "worker-0.log").write_text('Traceback (most recent call last):\n  File "<x>", line 1\n'
                                    'ValueError: <script>alert(1)</script>\n')
    page = render_html(build_model(str(d)))
    assert "<script>" not in page and "ValueError: &lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.parametrize("ys", [[14.0, 14.0], [50.0, 50.0, 50.0, 51.0], [260.0] * 5,
                                 [14.0 + i for i in range(28)], [100.0, 30.0, 100.0, 31.0]])
def test_end_labels_are_spread_apart_and_kept_in_order(ys):
    from tfcluster.runs.report import LABEL_GAP, spread_labels
    got = spread_labels(ys, LABEL_GAP, 14.0, 274.0)
    ordered = sorted(range(len(ys)), key=lambda i: (ys[i], i))
    placed = [got[i] for i in ordered]
    assert all(b - a >= LABEL_GAP - 1e-9 for a, b in zip(placed, placed[1:])), placed
    assert min(got) >= 14.0
    if len(ys) * LABEL_GAP <= 274.0 - 14.0:
        assert max(got) <= 274.0, got
    assert spread_labels([40.0, 120.0], LABEL_GAP, 14.0, 274.0) == [40.0, 120.0]   # apart: as they are


def test_the_step_chart_grows_to_hold_28_labels(tmp_path):
    from tfcluster.runs.report import LABEL_GAP
    d = quick_start_run(tmp_path)
    lines = (d / "events.jsonl").read_text().splitlines()
    extra = []
    for k in range(2, 28):
        extra.append(json.dumps({"time": T0 + 0.2, "event": "task_started", "task": f"worker:{k}",
                                 "pid": 300 + k, "attempt": 0, "host": "localhost"}))
        extra.append(json.dumps({"time": T0 + 5, "event": "progress", "task": f"worker:{k}",
                                 "step": 50, "total": 1000}))
    (d / "events.jsonl").write_text("\n".join(lines[:5] + extra + lines[5:]) + "\n")
    page = render_html(build_model(str(d)))
    ys = sorted(float(y) for y in re.findall(r'<text class="line-label" id="[^"]+" x="[^"]+" y="([^"]+)"', page))
    assert len(ys) == 28 and all(b - a >= LABEL_GAP - 1e-6 for a, b in zip(ys, ys[1:]))
    height = int(re.search(r'<svg id="steps" class="chart" viewBox="0 0 \d+ (\d+)"', page).group(1))
    assert height >= ys[-1] + 4
