"""The commands people run on their runs, in this process: the run index, logs, stop, the
default FILE (./cluster.yaml), a quick cluster without a file (--ps/--workers), hints, output
options, help, tensorboard and profile's answers, the Python API and the one translation from
argparse. Pure logic, in-process (``cli.main`` with capsys): no process, no TensorFlow.
(Detach, logs -f and stop with real processes: tests/integration/test_detach_logs_stop.py; the
quick start and tensorboard with TensorFlow: tests/system/test_quick_start_tensorboard.py.)"""
from __future__ import annotations

import json
import os
import re

import psutil
import pytest

from tfcluster.cli import main as cli
from tfcluster.cli.launching import tasks_flag
from tfcluster.core import messages
from tfcluster.drivers.display import Display, OutputOptions
from tfcluster.errors import UserError
from tfcluster.runs import control, index, logs

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTENER = os.path.join(HERE, "programs", "listener.py")


@pytest.fixture
def state(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(d))
    return d


def record(run_id, tasks=("ps:0", "worker:0"), result="succeeded", **more):
    return {"run_id": run_id, "result": result,
            "tasks": [{"task": t, "state": "succeeded"} for t in tasks], **more}


def make_run(root, run_id, **kw):
    d = root / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(record(run_id, **kw)))
    return d


# ------------------------------------------------------------------ the run index
def test_state_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert index.state_dir() == str(tmp_path / "tfcluster")
    monkeypatch.setenv("XDG_STATE_HOME", "relative/is/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert index.state_dir() == str(tmp_path / "home" / ".local" / "state" / "tfcluster")


def test_register_and_resolve_by_id_from_anywhere(state, tmp_path, monkeypatch):
    a = make_run(tmp_path / "runs", "20260101-120000")
    b = make_run(tmp_path / "runs", "nightly")
    assert index.register(str(a)) is None and index.register(str(b), "nightly") is None
    monkeypatch.chdir(tmp_path)   # no cluster.yaml here
    assert index.resolve_run("nightly") == str(b)
    assert index.resolve_run("20260101") == str(a)          # a unique prefix
    assert index.resolve_run(str(a)) == str(a)              # a folder
    assert index.resolve_run() == str(b)                    # the latest indexed run
    assert index.run_ids() == ["nightly", "20260101-120000"]
    with pytest.raises(UserError, match="no such run folder, and no run with this id"):
        index.resolve_run("nope")
    # a folder that is gone is skipped
    (b / "run.json").unlink()
    assert index.resolve_run() == str(a)
    assert (state / "tfcluster" / "runs.jsonl").stat().st_mode & 0o077 == 0


def test_without_a_run_this_folders_runs_come_first_and_the_choice_is_said(state, tmp_path,
                                                                           monkeypatch, capsys):
    """The index holds every folder's runs; logs and runs without arguments prefer
    this folder's and say which run or which index they read."""
    mine = make_run(tmp_path / "a" / "out", "mine")
    other = make_run(tmp_path / "b" / "out", "other")
    index.register(str(mine))
    index.register(str(other))                       # newer, of another folder
    (tmp_path / "c").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    assert index.choose_run() == (str(mine), "the latest run of this folder in your run index")
    assert cli.main(["logs"]) == 0
    assert "tfcluster: logs of run mine (the latest run of this folder in your run index)" in \
        capsys.readouterr().err
    assert cli.main(["runs"]) == 0
    got = capsys.readouterr()
    assert "mine" in got.out and "other" not in got.out
    assert "tfcluster: runs of this folder in your run index" in got.err
    monkeypatch.chdir(tmp_path / "c")
    d, how = index.choose_run()
    assert d == str(other) and "any folder" in how
    assert cli.main(["runs"]) == 0
    got = capsys.readouterr()
    assert "mine" in got.out and "other" in got.out and "every folder" in got.err
    assert index.choose_run("mine") == (str(mine), "")     # a named run: nothing to say


def test_ambiguous_prefix_names_the_candidates(state, tmp_path):
    for rid in ("exp-1", "exp-2"):
        index.register(str(make_run(tmp_path, rid)))
    with pytest.raises(UserError, match="ambiguous: exp-1, exp-2"):
        index.lookup("exp")


def test_an_unwritable_index_is_a_reason_not_an_exception(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    assert "cannot be written" in index.register(str(tmp_path))


# ------------------------------------------------------------------ logs
def test_logs_of_one_task_one_attempt_and_all_tasks(state, tmp_path, capsys, monkeypatch):
    d = make_run(tmp_path, "r1", tasks=("ps:0", "worker:1"))
    (d / "worker-1.log").write_text("first\n----- tfcluster: restart 1 -----\nsecond\n")
    (d / "ps-0.log").write_text("serving\n")
    (d / "launcher.log").write_text("12:00 started\n")
    index.register(str(d))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["logs", "r1", "worker:1"]) == 0    # every attempt, with the launcher's banner
    assert capsys.readouterr().out == "first\n----- tfcluster: restart 1 -----\nsecond\n"
    assert cli.main(["logs", "r1", "worker:1", "--attempt", "1"]) == 0
    assert capsys.readouterr().out == "second\n"
    assert cli.main(["logs", "r1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[ps:0] serving", "[worker:1] first", "[worker:1] ----- tfcluster: restart 1 -----",
        "[worker:1] second"]
    assert cli.main(["logs", "worker:1"]) == 0          # the latest run
    assert "second" in capsys.readouterr().out
    assert cli.main(["logs", "r1", "launcher"]) == 0
    assert capsys.readouterr().out == "12:00 started\n"
    assert cli.main(["logs", "r1", "worker:7"]) == 2
    assert "worker:7: no such task in this run (tasks: ps:0, worker:1, launcher)" in capsys.readouterr().err
    assert cli.main(["logs", "r1", "worker:1", "--attempt", "2"]) == 2
    assert "has 2 attempt(s)" in capsys.readouterr().err


def test_follow_prints_what_is_added_until_the_run_ends(tmp_path):
    d = tmp_path
    log = d / "worker-0.log"
    log.write_text("a\n")
    rec = record("r", tasks=("worker:0",))
    polls = iter([True, True, False])
    out = []

    class Out:
        def write(self, s):
            out.append(s)

        def flush(self):
            pass

    def sleep(_):
        with open(log, "a") as f:
            f.write("b\npart")

    assert logs.follow(str(d), rec, "worker:0", lambda: next(polls), out=Out(), sleep=sleep) == 0
    # a line is printed once it is whole; at the end, what is left is printed too
    assert "".join(out) == "a\nb\npartb\npart\n"


ONEDNN = ("I0000 00:00:1796189771.961067   17078 port.cc:153] oneDNN custom operations are on. "
          "You may see slightly different numerical results.")


def test_logs_show_what_the_console_shows_and_raw_shows_everything(tmp_path, capsys):
    """No raw protocol lines, no start-up noise (one note on stderr says so);
    --raw prints the log as written."""
    from tfcluster.plan.progress import format_progress
    d = tmp_path
    lines = (["WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
              ONEDNN, "worker:0: training"]
             + [format_progress(i, 100, loss=1.0 / (i + 1)) for i in range(0, 101, 5)]
             + ["worker:0: done", format_progress(100, 100)])
    (d / "worker-0.log").write_text("\n".join(lines) + "\n")
    rec = record("r", tasks=("worker:0",))
    assert logs.show(str(d), rec, "worker:0") == 0
    got = capsys.readouterr()
    shown = got.out.splitlines()
    assert shown[0] == "worker:0: training" and "worker:0: done" in shown
    assert not any("@tfcluster" in x or "oneDNN" in x or "absl" in x for x in shown)
    steps = [x for x in shown if x.startswith("progress: ")]
    # the first report, one each tenth of the total, the last before other output
    assert steps[0] == "progress: step 0/100, loss 1" and "progress: step 100/100, loss 0.009901" in steps
    assert 10 <= len(steps) <= 13
    assert "2 line(s) of TensorFlow's known-harmless messages" in got.err and "--raw" in got.err
    assert logs.show(str(d), rec, "worker:0", raw=True) == 0
    got = capsys.readouterr()
    assert got.out.splitlines() == lines and got.err == ""


def test_logs_follow_shows_progress_every_few_seconds():
    from tfcluster.core.task_output import ConsoleView
    from tfcluster.plan.progress import format_progress
    now = [0.0]
    view = ConsoleView(clock=lambda: now[0], every=5.0)
    assert view.feed(format_progress(1, 50)) == ["progress: step 1/50"]
    now[0] = 2.0
    assert view.feed(format_progress(2, 50)) == [] and view.tick() == []
    now[0] = 5.5
    assert view.tick() == ["progress: step 2/50"] and view.tick() == []
    assert view.feed(ONEDNN) == []
    now[0] = 6.0
    # a report glued to text: the text, then the report (the first after other output)
    assert view.feed("tail text" + format_progress(3, 50)) == ["tail text", "progress: step 3/50"]
    now[0] = 7.0
    assert view.feed(format_progress(4, 50)) == [] and view.flush() == ["progress: step 4/50"]
    assert view.flush() == []


# ------------------------------------------------------------------ stop
def test_stop_refuses_a_pid_that_is_no_longer_the_launcher(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    me = psutil.Process()
    # this process, with another start time: a reused pid must never be signalled
    (d / "run.json").write_text(json.dumps(record("r", result="running", launcher_pid=me.pid,
                                                  launcher_started=me.create_time() - 3600)))
    assert cli.main(["stop", str(d)]) == 1
    assert "is lost" in capsys.readouterr().err
    assert psutil.Process().is_running()
    (d / "run.json").write_text(json.dumps(record("r", result="succeeded")))
    assert cli.main(["stop", str(d)]) == 0
    assert "not running (result: succeeded)" in capsys.readouterr().err


# ------------------------------------------------------------------ FILE defaults to ./cluster.yaml
CLUSTER = ("cluster:\n  ps: [localhost:{0}]\n  worker: [localhost:{1}, localhost:{2}]\n"
           "program: {{command: [python, t.py]}}\n")


def test_subcommands_default_to_cluster_yaml(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate"]) == 2
    assert f"no FILE given and no cluster.yaml in {tmp_path}" in capsys.readouterr().err
    (tmp_path / "cluster.yaml").write_text(CLUSTER.format(2222, 2223, 2224))
    (tmp_path / "t.py").write_text("")
    assert cli.main(["validate"]) == 0
    assert "cluster.yaml: ok" in capsys.readouterr().out
    assert cli.main(["tf-config", "worker:1"]) == 0
    assert json.loads(capsys.readouterr().out)["task"] == {"type": "worker", "index": 1}
    assert cli.main(["tf-config", "cluster.yaml", "ps:0"]) == 0
    assert json.loads(capsys.readouterr().out)["task"]["type"] == "ps"
    assert cli.main(["commands"]) == 0
    assert capsys.readouterr().out.count("# ") == 3
    assert cli.main(["launch", "--dry-run"]) == 0
    assert "worker:1" in capsys.readouterr().out
    assert cli.main(["tf-config"]) == 2
    assert "give a task" in capsys.readouterr().err
    assert cli.main(["render", "slurm"]) == 0
    assert "#SBATCH --ntasks=3" in capsys.readouterr().out
    assert cli.main(["render", "jobset", "--image", "tf:2"]) == 0
    assert "kind: JobSet" in capsys.readouterr().out


# ------------------------------------------------------------------ a cluster without a file
def test_quick_cluster_dry_run_and_save(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert cli.main(["launch", "--ps", "1", "--workers", "2", "--chief", "--dry-run", "--",
                     "python", "train.py"]) == 0
    out = capsys.readouterr().out
    for t in ("chief:0", "ps:0", "worker:0", "worker:1"):
        assert t in out
    assert cli.main(["launch", "--ps", "1", "--workers", "2", "--save", "c.yaml", "--dry-run",
                     "--", "python", "train.py"]) == 0
    capsys.readouterr()
    assert cli.main(["validate", "c.yaml"]) == 0
    assert "3 tasks in 2 jobs" in capsys.readouterr().out
    # counts, not the ports this run happened to get: each launch takes free ones
    saved = (tmp_path / "c.yaml").read_text()
    assert "  ps: 1\n" in saved and "  worker: 2\n" in saved and "localhost:" not in saved
    assert cli.main(["launch", "--workers", "1", "--save", "c.yaml", "--", "python", "train.py"]) == 2
    assert "--save: c.yaml exists already" in capsys.readouterr().err
    assert cli.main(["launch", "--ps", "1", "--workers", "2"]) == 2
    assert "give the program after '--'" in capsys.readouterr().err
    assert cli.main(["launch", "--ps", "1", "--", "python", "train.py"]) == 2
    assert "needs at least one worker" in capsys.readouterr().err


# ------------------------------------------------------------------ hints
def test_script_beside_the_cluster_file_gets_a_did_you_mean(tmp_path, monkeypatch, capsys):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "cluster.yaml").write_text(CLUSTER.format(2222, 2223, 2224))
    (proj / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["launch", "proj/cluster.yaml", "--dry-run", "--", "python", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean proj/train.py?" in err and "-- python proj/train.py" in err


@pytest.mark.parametrize("argv", [["render", "slurm", "x.yaml", "--sbatch", "--mem=8G"],
                                  ["launch", "x.yaml", "--backend", "slurm", "--sbatch", "--mem=8G"],
                                  ["launch", "--sbatch", "--mem=8G", "--", "python", "t.py"]])
def test_sbatch_with_a_space_gets_the_equals_form(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "hint: write --sbatch=--mem=8G" in capsys.readouterr().err


# ------------------------------------------------------------------ output options
def test_task_filter_host_prefix_and_timestamps():
    class Buf:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    out = Buf()
    opts = OutputOptions(tasks=tasks_flag("worker:0,chief"))
    d = Display(stream=out, err_stream=Buf(), options=opts)
    for name in ("worker:0", "worker:1", "chief:0", "ps:0"):
        d.task_line(name, "hi")
    assert out.text == "[worker:0] hi\n[chief:0] hi\n"
    opts = OutputOptions(hosts=(("worker:0", "node-a"), ("ps:0", "node-b")), timestamps=True)
    assert opts.prefix("worker:0", now=0).endswith(".000 [node-a/worker:0] ")
    # --timestamps dates tfcluster's own lines too (its warnings included), not only the tasks'
    out, err = Buf(), Buf()
    d = Display(stream=out, err_stream=err, options=OutputOptions(timestamps=True))
    d.task_line("worker:0", "a task line")
    d.info("started worker:0 (pid 7)")
    d.error("worker:1 (no progress for 16s, at step 40) while worker:0 goes on")
    stamp = r"\d\d:\d\d:\d\d\.\d\d\d "
    assert re.fullmatch(stamp + re.escape("[worker:0] a task line\n"), out.text), out.text
    assert [re.sub("^" + stamp, "", x) for x in err.text.splitlines()] == [
        "tfcluster: started worker:0 (pid 7)",
        "tfcluster: worker:1 (no progress for 16s, at step 40) while worker:0 goes on"], err.text
    assert all(re.match(stamp, x) for x in err.text.splitlines()), err.text
    assert OutputOptions().stamp() == ""
    with pytest.raises(UserError, match="--tasks: worker:9"):
        OutputOptions(tasks=tasks_flag("worker:9")).check_tasks(["ps:0", "worker:0"])
    with pytest.raises(UserError, match="not a list of tasks"):
        tasks_flag("worker:x")


def test_security_note_for_hosts_is_once_per_file_and_silenceable(state, tmp_path):
    f = str(tmp_path / "c.yaml")
    first = messages.security_note(f, [2222], environ={}, first_time=index.first_time, local=False)
    assert "tfcluster help security" in first and "every user of the run's hosts" in first
    assert messages.security_note(f, [2222], environ={}, first_time=index.first_time, local=False) is None
    other = str(tmp_path / "d.yaml")
    assert messages.security_note(other, [1], silenced=True, local=False) is None
    assert messages.security_note(other, [1], environ={messages.SILENCE_ENV: "1"}, local=False) is None
    assert messages.security_note(other, [1], environ={}, first_time=index.first_time,
                                  local=False) is not None


def test_a_host_network_run_here_says_at_every_start_who_can_connect(state, tmp_path):
    f = str(tmp_path / "c.yaml")
    for _ in range(2):
        line = messages.security_note(f, [2222, 41000], environ={}, first_time=index.first_time,
                                      why_host="worker:0 is at node1:2223, not a loopback address")
        assert line.startswith("note: network: host (worker:0 is at node1:2223, not a loopback "
                               "address): every user of this machine can connect") and "2222, 41000" in line
    assert messages.security_note(f, [1], environ={messages.SILENCE_ENV: "1"}) is None


def test_help_security_prints_the_packaged_text(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # not a path relative to the user's folder
    assert cli.main(["help", "security"]) == 0
    out = capsys.readouterr().out
    assert "no authentication" in out and "IPv6" in out and "meta skuid" in out
    assert "nobody but the run" in out and "tfcluster exec RUN" in out and "every user of" in out
    assert cli.main(["help", "nope"]) == 2


# ------------------------------------------------------------------ training words, summaries
def test_nothing_trained_says_why_and_what_to_do():
    s = messages.nothing_trained(2001, 2000, "runs/checkpoints")
    assert "nothing trained" in s and "clear runs/checkpoints" in s and "--train_steps above 2001" in s
    assert "FILE" not in s


def test_hints_name_the_runs_real_cluster_file(tmp_path, monkeypatch):
    """A task of a run reads its cluster file from the run's record: the hint is a command to
    paste, not 'tfcluster launch FILE'."""
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "file": str(tmp_path / "my cluster.yaml")}))
    monkeypatch.setenv("TFCLUSTER_RUN_DIR", str(run))
    s = messages.nothing_trained(2001, 2000, "runs/checkpoints")
    assert s.endswith(f"tfcluster launch '{tmp_path}/my cluster.yaml' --arg --train_steps=4002"), s
    assert messages.launch_command(str(tmp_path / "c.yaml"), str(tmp_path)) == "tfcluster launch c.yaml"
    assert messages.launch_command(str(tmp_path / "c.yaml"), str(tmp_path / "sub")) == \
        f"tfcluster launch {tmp_path}/c.yaml"
    assert messages.launch_command("", str(tmp_path)) is None
    monkeypatch.setenv("TFCLUSTER_RUN_DIR", str(tmp_path / "none"))
    assert "launch it again with --arg --train_steps=4002" in messages.nothing_trained(2001, 2000, None)


def test_summaries_dir_from_the_chiefs_flags(tmp_path):
    (tmp_path / "ckpt").mkdir()
    rec = {"run_id": "r", "file": str(tmp_path / "cluster.yaml"), "tasks": [
        {"task": "ps:0", "argv": ["python", "t.py"]},
        {"task": "worker:0", "chief": True, "argv": ["python", "t.py", "--checkpoint_dir=ckpt"]}]}
    assert control.summaries_dir(rec) == str(tmp_path / "ckpt")
    assert "tfcluster tensorboard r" in control.summaries_line(rec)
    cmd = control.tensorboard_argv(str(tmp_path / "ckpt"), port=7000)
    assert cmd[-4:] == ["--logdir", str(tmp_path / "ckpt"), "--port", "7000"]


# ------------------------------------------------------------------ the Python API
def test_python_api_launch_does_a_dry_run(tmp_path, monkeypatch, capsys):
    import tfcluster
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(CLUSTER.format(2222, 2223, 2224))
    (tmp_path / "t.py").write_text("")
    assert tfcluster.launch(dry_run=True) == 0
    assert "worker:1" in capsys.readouterr().out


def test_tensorboard_prints_the_command_when_asked(tmp_path, state, capsys):
    d = make_run(tmp_path, "tb2")
    index.register(str(d))
    assert cli.main(["tensorboard", "tb2", "--print", "--port", "6007"]) == 0
    out = capsys.readouterr().out
    assert f"--logdir {d}" in out and "--port 6007" in out


def test_tensorboard_profile_opens_the_runs_profiles(tmp_path, state, capsys):
    """tfcluster tensorboard RUN --profile: TensorBoard on <run>/profile (tfcluster profile's
    captures); before any capture, one line saying how to take one, exit 2."""
    d = make_run(tmp_path, "tb3")
    index.register(str(d))
    assert cli.main(["tensorboard", "tb3", "--profile", "--print"]) == 2
    assert "tfcluster profile tb3" in capsys.readouterr().err
    (d / "profile").mkdir()
    assert cli.main(["tensorboard", "tb3", "--profile", "--print"]) == 0
    assert f"--logdir {d / 'profile'}" in capsys.readouterr().out


def test_profile_of_a_run_that_is_not_running_is_one_line_and_exit_2(tmp_path, state, capsys):
    d = make_run(tmp_path, "pr1")
    index.register(str(d))
    assert cli.main(["profile", "pr1", "--seconds", "1"]) == 2
    err = capsys.readouterr().err         # launched without the profiler: that first
    assert "pr1 was launched without the profiler" in err and "Traceback" not in err
    rec = json.loads((d / "run.json").read_text())
    rec["tasks"][0]["profiler_port"] = 41000
    (d / "run.json").write_text(json.dumps(rec))
    assert cli.main(["profile", "pr1", "--seconds", "1"]) == 2
    err = capsys.readouterr().err
    assert "pr1 is not running" in err and "Traceback" not in err


def test_one_translation_from_argparse_leaves_the_namespace_alone(tmp_path, monkeypatch):
    """launch_request is the one reader of launch's argparse; main does not add to
    the namespace."""
    args = cli.build_parser().parse_args(["launch", "c.yaml", "--tasks", "worker:0", "--timestamps",
                                          "--quiet", "--restart", "on-failure", "--detach"])
    before = dict(vars(args))
    req = cli.launch_request(args, ["python", "t.py"], ["launch", "c.yaml", "--detach"])
    assert vars(args) == before
    assert req.file == "c.yaml" and req.detach and not req.dry_run
    assert req.options.command == ("python", "t.py") and req.options.restart == "on-failure"
    assert req.view.quiet and req.view.output.timestamps and req.view.output.shows("worker:0")
    assert not req.view.output.shows("worker:1")
    import tfcluster
    from tfcluster.drivers.display import View  # the subpackage is still importable ...
    assert View is not None and callable(tfcluster.launch)   # ... and tfcluster.launch the function


def test_strip_detach_keeps_the_rest_of_the_command_line():
    argv = ["launch", "-d", "--ps", "1", "--workers=2", "--save", "c.yaml", "--quiet", "--",
            "python", "t.py", "--detach"]
    assert control.strip_detach(argv) == ["launch", "--ps", "1", "--workers=2", "--save", "c.yaml",
                                          "--quiet", "--", "python", "t.py", "--detach"]
    assert control.strip_detach(argv, control.QUICK_FLAGS) == [
        "launch", "--quiet", "--", "python", "t.py", "--detach"]


def test_host_prefixes_only_when_the_run_spans_hosts():
    from types import SimpleNamespace as NS
    one = NS(tasks=[NS(name="ps:0", host="localhost"), NS(name="worker:0", host="localhost")])
    two = NS(tasks=[NS(name="ps:0", host="node-a"), NS(name="worker:0", host="node-b")])
    assert OutputOptions.hosts_of(one) == ()
    opts = OutputOptions(hosts=OutputOptions.hosts_of(two))
    assert opts.prefix("worker:0") == "[node-b/worker:0] " and opts.prefix("ps:0") == "[node-a/ps:0] "


def test_help_prints_a_commands_help(capsys):
    assert cli.main(["help", "logs"]) == 0
    assert "--attempt" in capsys.readouterr().out
    assert cli.main(["help"]) == 0
    assert "tfcluster help security" in capsys.readouterr().out
