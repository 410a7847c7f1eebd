"""tfcluster status and tfcluster runs: the result of a run, lost launchers, picking the run of
the right cluster file, exit codes, and broken records."""
from __future__ import annotations

import json
import os
import time

import psutil
import pytest

from helpers.status import cli, fake_tools, write_cluster, write_run  # noqa: F401
from tfcluster.runs.result import decide_result
from tfcluster.safe_files import write_json

# ------------------------------------------------------------------ lost launchers
# (a launcher killed for real: tests/integration/test_status_lost.py)

def test_a_reused_pid_does_not_keep_a_run_alive(tmp_path, capsys):
    me = psutil.Process()
    d = write_run(tmp_path / "runs", "r", None, result="running", started=me.create_time(),
                  launcher_pid=os.getpid(), launcher_started=me.create_time() - 3600)
    rc, out, _ = cli(capsys, "status", "--json", str(d))
    assert (rc, json.loads(out)["result"]) == (5, "lost")
    write_run(tmp_path / "runs", "r", None, result="running", started=me.create_time(),
              launcher_pid=os.getpid(), launcher_started=me.create_time())
    rc, out, _ = cli(capsys, "status", "--json", str(d))
    assert (rc, json.loads(out)["result"]) == (3, "running")


def test_the_launcher_dates_its_start_as_status_reads_it():
    """record.launcher_start_time reads /proc itself; status compares it with psutil's."""
    from tfcluster.runs.liveness import STARTED_SLACK
    from tfcluster.runs.record import launcher_start_time

    assert abs(launcher_start_time() - psutil.Process().create_time()) < min(0.05, STARTED_SLACK)


def test_an_older_record_without_launcher_started(tmp_path, capsys, monkeypatch):
    from tfcluster.runs import liveness
    me = psutil.Process()
    # a tfcluster process that started before the run: it may be the launcher
    monkeypatch.setattr(liveness, "looks_like_tfcluster", lambda argv: True)
    d = write_run(tmp_path / "runs", "old", None, result="running", started=me.create_time() + 5,
                  launcher_pid=os.getpid(), launcher_started=None)
    assert cli(capsys, "status", str(d))[0] == 3
    # a process started after the run cannot be its launcher
    write_run(tmp_path / "runs", "old", None, result="running", started=me.create_time() - 3600,
              launcher_pid=os.getpid(), launcher_started=None)
    assert cli(capsys, "status", str(d))[0] == 5
    monkeypatch.undo()
    # any older process (pid 1, this test) that is not tfcluster is not the launcher
    for pid in (1, os.getpid()):
        write_run(tmp_path / "runs", "old", None, result="running", started=time.time(),
                  launcher_pid=pid, launcher_started=None)
        assert cli(capsys, "status", str(d))[0] == 5, pid


def test_a_lost_run_does_not_keep_ageing(tmp_path, capsys):
    d = write_run(tmp_path / "runs", "r", None, result="running", started=time.time() - 7200)
    os.utime(d / "run.json", (time.time() - 3600, time.time() - 3600))
    rc, out, _ = cli(capsys, "status", str(d))
    assert rc == 5
    assert "last seen after 1h00m" in out          # not "running for 2h"
    assert "2h" not in out


# ------------------------------------------------------------------ which run
def test_status_shows_the_latest_run_of_that_file_not_of_the_folder(tmp_path, capsys, monkeypatch):
    a, b = write_cluster(tmp_path, "a.yaml"), write_cluster(tmp_path, "b.yaml")
    logdir = tmp_path / "runs"
    write_run(logdir, "a-old", a, result="failed", started=1000)
    write_run(logdir, "a-new", a, result="succeeded", started=2000)
    write_run(logdir, "b-newest", b, result="failed", started=3000)
    os.utime(logdir / "a-old" / "run.json")       # touched last: mtime must not decide
    rc, out, _ = cli(capsys, "status", "--file", str(a))
    assert rc == 0 and out.startswith("run a-new ")
    rc, out, _ = cli(capsys, "status", "--file", str(b))
    assert rc == 1 and out.startswith("run b-newest ") and "root cause: worker:1 SIGKILL" in out
    # no arguments: ./cluster.yaml's logdir and runs of that file only
    monkeypatch.chdir(tmp_path)
    c = write_cluster(tmp_path)
    assert cli(capsys, "status")[0] == 2             # no run of cluster.yaml yet
    write_run(logdir, "c1", c, result="interrupted", started=1500)
    rc, out, _ = cli(capsys, "status")
    assert rc == 4 and out.startswith("run c1 ")
    # a logdir as RUN_DIR: its latest run, whatever the file
    rc, out, _ = cli(capsys, "status", str(logdir))
    assert rc == 1 and out.startswith("run b-newest ")


@pytest.mark.parametrize("result", ["succeeded", "failed", "interrupted", "running"])
def test_exit_code_follows_the_result(tmp_path, capsys, result):
    d = write_run(tmp_path / "runs", "r", None, result=result,
                  launcher_pid=os.getpid(), launcher_started=psutil.Process().create_time())
    rc, out, _ = cli(capsys, "status", "--json", str(d))
    assert json.loads(out)["result"] == result
    assert rc == {"succeeded": 0, "failed": 1, "running": 3, "interrupted": 4}[result]


# ------------------------------------------------------------------ broken records
@pytest.mark.parametrize("text, words", [
    ("{not json", "not valid JSON"),
    ('["a list"]', "not a JSON object"),
    ('{"result": "maybe", "tasks": []}', "result: 'maybe' is not one of"),
    ('{"result": "failed", "tasks": {}}', "tasks: not a list"),
    ('{"result": "failed", "tasks": [{"task": "worker:0"}]}', "tasks[0].state"),
    ('{"result": "running", "launcher_pid": "12"}', "launcher_pid"),
    ('{"result": "failed", "started": "yesterday"}', "started: not a number"),
])
def test_a_broken_run_json_is_one_line_exit_2(tmp_path, capsys, text, words):
    d = tmp_path / "r"
    d.mkdir()
    (d / "run.json").write_text(text)
    for cmd in (["status"], ["status", "--json"], ["report"]):
        rc, out, err = cli(capsys, *cmd, str(d))
        assert rc == 2 and out == ""
        assert len(err.splitlines()) == 1 and words in err and "run.json" in err


def test_a_broken_record_at_the_command_line_has_no_traceback(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    (d / "run.json").write_text('{"result": "running", "tasks": [')
    (d / "events.jsonl").write_text("")
    rc, _, err = cli(capsys, "status", str(d))
    assert rc == 2 and "Traceback" not in err
    assert err.startswith("tfcluster: error: ") and len(err.splitlines()) == 1


def test_a_broken_run_among_others_is_named_and_skipped(tmp_path, capsys):
    logdir = tmp_path / "runs"
    write_run(logdir, "good", None, result="succeeded", started=1000)
    (logdir / "bad").mkdir()
    (logdir / "bad" / "run.json").write_text("{")
    rc, out, err = cli(capsys, "status", str(logdir))
    assert rc == 0 and out.startswith("run good ")
    assert "warning" in err and os.path.join("bad", "run.json") in err
    rc, out, err = cli(capsys, "runs", str(logdir))
    assert rc == 0 and "good" in out and "bad" not in out and "bad" in err


def test_status_of_nothing_is_bad_input(tmp_path, capsys):
    assert cli(capsys, "status", str(tmp_path / "nope"))[0] == 2
    assert cli(capsys, "status", "--file", str(tmp_path / "nope.yaml"))[0] == 2
    (tmp_path / "empty").mkdir()
    rc, _, err = cli(capsys, "status", str(tmp_path / "empty"))
    assert rc == 2 and "no runs" in err


# ------------------------------------------------------------------ runs
def test_runs_lists_the_runs_of_a_file_newest_first(tmp_path, capsys, monkeypatch):
    a, b = write_cluster(tmp_path, "a.yaml"), write_cluster(tmp_path, "b.yaml")
    logdir = tmp_path / "runs"
    write_run(logdir, "a1", a, result="failed", started=1000, duration=90, restarts=2)
    write_run(logdir, "a2", a, result="succeeded", started=5000, duration=3725)
    write_run(logdir, "a3", a, result="running", started=9000)   # launcher 999999: gone
    write_run(logdir, "b1", b, result="succeeded", started=7000)
    rc, out, _ = cli(capsys, "runs", "--file", str(a))
    lines = out.splitlines()
    assert rc == 0 and lines[0].split() == ["run", "result", "exit", "started", "duration",
                                            "tasks", "restarts", "file", "cause"]
    assert [line.split()[:2] for line in lines[1:]] == [["a3", "lost"], ["a2", "succeeded"],
                                                        ["a1", "failed"]]
    assert [line.split()[2] for line in lines[2:]] == ["0", "1"]          # the exit column
    assert "1h02m" in lines[2] and "1m30s" in lines[3]
    assert lines[3].split()[-5:-3] == ["2", "2"]      # tasks, restarts
    assert lines[3].endswith("worker:1 SIGKILL")      # the cause: run.json's root cause
    assert lines[1].endswith("launcher gone")
    rc, out, _ = cli(capsys, "runs", "--json", str(logdir))
    rows = json.loads(out)
    assert [r["run_id"] for r in rows] == ["a3", "b1", "a2", "a1"]
    assert rows[3] == {"run_id": "a1", "run_dir": str(logdir / "a1"), "file": str(a),
                       "result": "failed", "exit_code": 1, "cause": "worker:1 SIGKILL",
                       "started": 1000, "ended": 1090,
                       "duration": 90, "tasks": ["worker:0", "worker:1"], "restarts": 2}
    monkeypatch.chdir(tmp_path)
    rc, out, _ = cli(capsys, "runs")                 # no ./cluster.yaml: every run in ./runs
    assert rc == 0 and len(out.splitlines()) == 5
    write_cluster(tmp_path)
    rc, out, _ = cli(capsys, "runs")                 # ./cluster.yaml: its runs only
    assert rc == 0 and out.startswith("no runs of ")


def test_a_launcher_on_another_host_is_not_checked(tmp_path, capsys):
    d = write_run(tmp_path / "runs", "r", None, result="running", launcher_host="elsewhere.invalid")
    rc, out, _ = cli(capsys, "status", "--json", str(d))
    shown = json.loads(out)
    assert (rc, shown["result"], shown["launcher_alive"]) == (3, "running", None)
    rc, out, _ = cli(capsys, "status", str(d))
    assert "on elsewhere.invalid: not checked from here" in out


def test_without_cluster_yaml_status_and_runs_look_in_runs(tmp_path, capsys, monkeypatch):
    a, b = write_cluster(tmp_path, "a.yaml"), write_cluster(tmp_path, "b.yaml")
    write_run(tmp_path / "runs", "a1", a, result="failed", started=1000)
    write_run(tmp_path / "runs", "b1", b, result="succeeded", started=2000)
    monkeypatch.chdir(tmp_path)
    rc, out, _ = cli(capsys, "status")
    assert rc == 0 and out.startswith("run b1 ")
    rc, out, _ = cli(capsys, "runs", "runs", "--file", "a.yaml")
    assert rc == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["a1"]


def test_a_running_run_shows_its_launcher_and_how_to_stop_it(tmp_path, capsys):
    me = psutil.Process()
    d = write_run(tmp_path / "runs", "r", None, result="running", started=me.create_time(),
                  launcher_pid=os.getpid(), launcher_started=me.create_time())
    rc, out, _ = cli(capsys, "status", str(d))
    assert rc == 3
    assert f"launcher pid {os.getpid()}; stop it: tfcluster stop {d}  (or: kill -TERM {os.getpid()})" in out


def test_status_says_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)                      # no cluster.yaml, no runs/
    for cmd in ("status", "runs", "report"):
        rc, out, err = cli(capsys, cmd)
        assert rc == 2 and out == "" and len(err.splitlines()) == 1
        assert "no ./cluster.yaml and no ./runs folder in " in err and "--file FILE" in err
    rc, _, err = cli(capsys, "status", str(tmp_path / "no" / "such" / "path"))
    assert rc == 2 and "no such run folder" in err


# ------------------------------------------------------------------ Slurm runs whose launcher died
@pytest.mark.parametrize("recorded, alive, job, state, result", [
    ("running", True, None, None, "running"),
    ("running", None, None, None, "running"),       # cannot be checked (another host)
    ("running", False, None, None, "lost"),
    ("running", False, "42", "RUNNING", "running"),  # the job lives on without its launcher
    ("running", False, "42", "PENDING", "running"),
    ("running", False, "42", "COMPLETING", "running"),
    ("running", False, "42", "COMPLETED", "lost"),
    ("running", False, "42", "CANCELLED by 0", "lost"),
    ("running", False, "42", "", "lost"),            # Slurm forgot the job
    ("running", False, "42", None, "unknown"),       # Slurm cannot be asked
    ("failed", False, "42", "RUNNING", "failed"),    # a closed record is what it says
    ("succeeded", None, None, None, "succeeded"),
])
def test_decide_result(recorded, alive, job, state, result):
    assert decide_result(recorded, alive, job, state) == result








def test_runs_tells_an_sbatch_refusal_from_a_task_failure(tmp_path, capsys):
    logdir = tmp_path / "runs"
    write_run(logdir, "refused", None, result="failed", started=1000, backend="slurm",
              slurm_job=None, root_cause=None,
              tasks=[{"task": "worker:0", "state": "stopped", "exit": "", "restarts": 0}])
    write_run(logdir, "crashed", None, result="failed", started=2000, backend="slurm",
              slurm_job="7", root_cause=None,
              tasks=[{"task": "worker:0", "state": "failed", "exit": "exit 3", "restarts": 0}])
    write_run(logdir, "local", None, result="failed", started=3000)
    write_run(logdir, "decided", None, result="failed", started=4000, root_cause=None,
              decision="watchdog: global step stuck for 60s")
    rc, out, _ = cli(capsys, "runs", str(logdir))
    cause = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert cause["refused"].endswith("not submitted: no Slurm job (sbatch refused or failed)")
    assert cause["crashed"].endswith("worker:0 exit 3")
    assert cause["local"].endswith("worker:1 SIGKILL")
    assert cause["decided"].endswith("watchdog: global step stuck for 60s")
    rows = {r["run_id"]: r for r in json.loads(cli(capsys, "runs", "--json", str(logdir))[1])}
    assert rows["refused"]["cause"].startswith("not submitted") and rows["refused"]["exit_code"] == 1




def test_status_shows_the_segments_of_a_requeued_slurm_job(tmp_path, capsys):
    """A Slurm job requeued before its time limit is one run with its segments."""
    f = write_cluster(tmp_path)
    d = write_run(tmp_path / "runs", "s1", f)
    rec = json.loads((d / "run.json").read_text())
    rec.update(backend="slurm", slurm_job="42", segments=3)
    write_json(str(d / "run.json"), rec)
    rc, out, err = cli(capsys, "status", str(d))
    assert rc == 0 and "Slurm job 42: 3 segments (requeued 2 times" in out, out + err


def test_status_report_and_runs_find_an_indexed_run_from_any_folder(tmp_path, capsys, monkeypatch):
    """A run started elsewhere (registered in the user's run index, as every launch does) is
    found by its id from a folder with no cluster.yaml, and listed by `runs` there."""
    from tfcluster.runs import index
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "proj").mkdir()
    f = write_cluster(tmp_path / "proj")
    d = write_run(tmp_path / "proj" / "runs", "far-run-1", f)
    assert index.register(str(d), "far-run-1", str(f)) is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    rc, out, err = cli(capsys, "status", "far-run-1")
    assert rc == 0 and "run far-run-1" in out and "succeeded" in out, out + err
    rc, out, err = cli(capsys, "runs")
    assert rc == 0 and "far-run-1" in out, out + err
    rc, out, err = cli(capsys, "report", "far-run-1")
    assert rc == 0 and out.strip().endswith("report.html"), out + err


def test_report_says_a_watchdog_stop_and_what_the_decision_rule_means(tmp_path):
    """A watchdog kill is not drawn as a planned stop; the decision's rule is said in words; an
    exit label never runs past the chart's right edge."""
    import json as _json

    from tfcluster.runs.report import WIDTH, build_model, render_html, timeline_svg
    d = tmp_path / "r"
    d.mkdir()
    (d / "run.json").write_text(_json.dumps({
        "run_id": "r", "result": "failed", "exit_code": 1, "started": 100.0, "ended": 130.0,
        "tasks": [{"task": "worker:0", "state": "failed"}, {"task": "worker:1", "state": "stopped"}]}))
    ev = [{"time": 100.0, "event": "run_started", "task": None, "tasks": ["worker:0", "worker:1"],
           "chief": "worker:0"},
          {"time": 100.5, "event": "task_started", "task": "worker:0", "pid": 10, "attempt": 0},
          {"time": 100.5, "event": "task_started", "task": "worker:1", "pid": 11, "attempt": 0},
          {"time": 120.0, "event": "watchdog", "task": "worker:1", "reason": "stalled", "action": "kill"},
          {"time": 120.5, "event": "task_exited", "task": "worker:1", "exit": "SIGKILL",
           "state": "stopped"},
          {"time": 129.0, "event": "task_exited", "task": "worker:0", "exit": "exit 1", "state": "failed"},
          {"time": 129.5, "event": "decision", "task": None, "result": "failed", "rule": "restart",
           "exit_code": 1, "reason": "worker:0 failed (exit 1)"}]
    (d / "events.jsonl").write_text("".join(_json.dumps(e) + "\n" for e in ev))
    m = build_model(str(d), now=131.0)
    svg = timeline_svg(m)
    assert ">SIGKILL stopped by the watchdog</text>" in svg and "stopped (planned)" not in svg
    import re
    for x, _anchor in re.findall(r'class="exit-label[^"]*" x="([\d.]+)"( text-anchor="end")?', svg):
        assert float(x) <= WIDTH - 2
    page = render_html(m)
    assert "by rule restart" not in page and "allowed no restart" in page


@pytest.mark.parametrize("logdir", ["runs", "elsewhere"])
def test_the_latest_run_is_the_one_just_made_here_with_or_without_a_file(tmp_path, capsys,
                                                                         monkeypatch, logdir):
    """After `launch --ps 1 --workers 2 -- python trainer.py` in a folder whose cluster.yaml has
    older runs: status, report and runs show the file-less run (it went to ./runs); --file
    still means that file's runs only."""
    from tfcluster.runs.find import find_run
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: [localhost:2223, localhost:2224]}}\nlogdir: {logdir}\n")
    older = write_run(tmp_path / logdir, "of-the-file", f, started=1000.0)
    quick = write_run(tmp_path / "runs", "no-file", None, started=2000.0)
    assert find_run(None, None)[0] == str(quick)
    assert find_run(None, "cluster.yaml")[0] == str(older)
    rc, out, _ = cli(capsys, "status")
    assert "run no-file" in out, out
    rc, out, err = cli(capsys, "runs")
    assert out.index("no-file") < out.index("of-the-file"), out
    assert "launched here without a file" in err
    # a newer run of the file wins again
    newer = write_run(tmp_path / logdir, "again", f, started=3000.0)
    assert find_run(None, None)[0] == str(newer)


def test_a_decided_record_not_closed_yet_is_stopping_while_its_launcher_runs(tmp_path, capsys):
    """The launcher writes the result when it decides, then stops the tasks, then closes the
    record with its end and exit code: in between, status says "stopping" (exit 3, as running),
    not the result."""
    me = psutil.Process()
    d = write_run(tmp_path / "runs", "r", None, result="succeeded", started=me.create_time(),
                  launcher_pid=os.getpid(), launcher_started=me.create_time())
    record = json.loads((d / "run.json").read_text())
    record.update(ended=None, exit_code=None)
    write_json(str(d / "run.json"), record)
    rc, out, _ = cli(capsys, "status", str(d))
    assert rc == 3 and "): stopping (succeeded; its launcher is stopping the tasks)" in out, out
    rc, out, _ = cli(capsys, "status", "--json", str(d))
    assert (rc, json.loads(out)["result"]) == (3, "stopping")
    # its launcher gone: the result it wrote
    assert decide_result("succeeded", False, closed=False) == "succeeded"
    # closed: the result
    record.update(ended=record["started"] + 5, exit_code=0)
    write_json(str(d / "run.json"), record)
    rc, out, _ = cli(capsys, "status", "--json", str(d))
    assert (rc, json.loads(out)["result"]) == (0, "succeeded")
