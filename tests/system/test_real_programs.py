"""Supervising real programs as they are: the guide's shapes, preflight guards,
progress and liveness from unmodified programs, watchdogs that never kill a healthy run, and
hand-started clusters that end. In-process checks first; tests that start TensorFlow are
marked ``tf`` and kept few and short."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from tfcluster.cli.main import main

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(HERE)
PROGRAMS = os.path.join(HERE, "programs")


def cluster_file(tmp_path, body: str) -> str:
    f = tmp_path / "cluster.yaml"
    f.write_text(body + f"\nlogdir: {tmp_path / 'runs'}\n")
    return str(f)


def tfcluster(*args, env=None, timeout=300, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], capture_output=True,
                          text=True, timeout=timeout, env=e, cwd=cwd)


# ---------------------------------------------------------------------------- the guide's shapes

def test_the_guides_local_cluster_validates_and_gives_tf_config(tmp_path, capsys):
    f = cluster_file(tmp_path, "cluster: {local: [localhost:2222, localhost:2223]}\n"
                               "program: {command: [python, x.py]}")
    (tmp_path / "x.py").write_text("")      # validate checks that the program is there
    assert main(["validate", f]) == 0
    out = capsys.readouterr().out
    assert "chief: local:0" in out
    assert main(["tf-config", f, "local:1"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg == {"cluster": {"local": ["localhost:2222", "localhost:2223"]},
                   "task": {"type": "local", "index": 1}}
    assert main(["commands", f]) == 0
    assert capsys.readouterr().out.count("TFCLUSTER_TASK=local:") == 2


def test_a_cluster_of_only_ps_or_a_misspelt_worker_job_is_still_refused(tmp_path, capsys):
    f = cluster_file(tmp_path, "cluster: {ps: [localhost:2222]}")
    assert main(["validate", f]) == 2
    assert "no worker and no chief job" in capsys.readouterr().err
    f = cluster_file(tmp_path, "cluster: {ps: [localhost:2222], workers: [localhost:2223]}")
    assert main(["validate", f]) == 2
    assert "did you mean 'worker'" in capsys.readouterr().err


def test_serve_help_and_flags_reach_the_serve_program(capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--job_name", "--task_index", "--ps_hosts", "--worker_hosts"):
        assert flag in out


def test_launch_runs_the_guides_local_job_to_the_first_tasks_exit(tmp_path, ports):
    a, b = ports(2)
    f = cluster_file(tmp_path, f"cluster: {{local: [localhost:{a}, localhost:{b}]}}\n"
                               f"program: {{command: [python, {os.path.join(PROGRAMS, 'listener.py')}]}}")
    r = tfcluster("launch", f, "--no-live", env={"MODE_local_0": "exit:0"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "run succeeded (local:0 exited 0)" in r.stderr
    assert "stopping local:1" in r.stderr


# ---------------------------------------------------------------------------- preflight

def test_a_missing_script_after_an_interpreter_path_is_exit_2_with_nothing_started(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = cluster_file(tmp_path, "cluster: {worker: [localhost:2222]}")
    versioned = "python%d.%d" % sys.version_info[:2]
    assert shutil.which(versioned), f"{versioned} is not on PATH"
    for python in (sys.executable, versioned, "python3.99"):
        code = main(["launch", f, "--", python, "nosuch.py"])
        err = capsys.readouterr().err
        if python == "python3.99":      # not on PATH: the interpreter itself is missing
            assert code == 2 and "program not found: python3.99" in err
            continue
        assert code == 2, err
        assert f"program script not found: {tmp_path}/nosuch.py" in err
        assert "nothing was started" in err
    assert not (tmp_path / "runs").exists()


def test_a_second_launch_of_a_live_file_is_exit_2_naming_the_first_launcher(tmp_path, capsys):
    f = cluster_file(tmp_path, "cluster: {worker: [localhost:2222]}\n"
                               "program: {command: [python, -c, pass]}")
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run_dir = tmp_path / "runs" / "20260101-000000"
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({
            "run_id": run_dir.name, "file": f, "run_dir": str(run_dir),
            "launcher_pid": first.pid, "launcher_started": psutil.Process(first.pid).create_time(),
            "started": time.time(), "ended": None, "result": "running", "backend": "local",
            "tasks": [{"task": "worker:0", "state": "running"}]}))
        assert main(["launch", f]) == 2
        err = capsys.readouterr().err
        assert f"launcher pid {first.pid}" in err and str(run_dir) in err
        assert len(os.listdir(tmp_path / "runs")) == 1           # nothing started
    finally:
        first.kill()
        first.wait()
    # once that launcher is gone the record is a lost run, not a live one
    assert main(["launch", f, "--dry-run"]) == 0
    from tfcluster.clusterfile.config import load
    from tfcluster.drivers.preflight import live_run_problem
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    assert live_run_problem(build_plan(load(f), LaunchOptions())) is None


# ---------------------------------------------------------------------------- watchdogs, progress

REPORTER = """
import time
from tfcluster.plan.progress import report_progress
for i in range(int(15 / 0.5)):
    report_progress(i + 1, 30)
    time.sleep(0.5)
"""


def test_a_program_that_reports_progress_and_opens_no_port_is_not_killed(tmp_path, ports):
    """15 s of progress through the launcher's pipe, no TensorFlow port, startup_timeout 5."""
    (tmp_path / "reporter.py").write_text(REPORTER)
    (port,) = ports(1)
    f = cluster_file(tmp_path, f"cluster: {{worker: [localhost:{port}]}}\n"
                               f"program: {{command: [python, reporter.py]}}\n"
                               f"watchdog: {{startup_timeout: 5}}")
    r = tfcluster("launch", f, "--no-live", env={"PYTHONPATH": os.path.join(ROOT, "src")})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "watchdog" not in r.stderr and "@tfcluster" not in r.stdout
    run = next((tmp_path / "runs").iterdir())
    record = json.loads((run / "run.json").read_text())
    assert record["tasks"][0]["progress"]["step"] == 30


def test_a_server_that_never_opens_its_port_is_killed_naming_the_setting(tmp_path, ports):
    f = cluster_file(tmp_path, "cluster: {ps: [localhost:%d], worker: [localhost:%d]}\n"
                               "program: {command: [python, %s]}\nwatchdog: {startup_timeout: 2}"
                     % (*ports(2), os.path.join(PROGRAMS, "listener.py")))
    r = tfcluster("launch", f, "--no-live", env={"MODE_ps_0": "nobind"})
    assert r.returncode == 1
    assert "did not open port" in r.stderr and "reported no progress" in r.stderr
    assert "watchdog.startup_timeout: 2" in r.stderr and "set 0 to turn the check off" in r.stderr


FULL_DISK_PROGRAM = """
import sys
from tfcluster.plan.progress import report_progress
for step in range(1, 4001):
    print(f"step {step:06d} of a long and chatty training run", flush=(step % 100 == 0))
    if step % 500 == 0:
        report_progress(step, 4000)
open(sys.argv[1], "w").write("reached 4000")
"""


def test_a_run_whose_log_disk_fills_up_keeps_training(tmp_path, ports):
    """The task's log on a 64 KiB tmpfs; the task trains to its target anyway and the
    launcher names the log failure."""
    logs = tmp_path / "logs"
    logs.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                                            str(logs)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (tests/test_output_reader.py covers the reader)")
    try:
        (tmp_path / "chatty.py").write_text(FULL_DISK_PROGRAM)
        (port,) = ports(1)
        f = tmp_path / "cluster.yaml"
        f.write_text(f"cluster: {{worker: [localhost:{port}]}}\n"
                     f"program: {{command: [python, chatty.py, {tmp_path / 'done'}]}}\n"
                     f"logdir: {logs}\n")
        r = tfcluster("launch", str(f), "--no-live", "--quiet",
                      env={"PYTHONPATH": os.path.join(ROOT, "src")}, timeout=120)
        assert (tmp_path / "done").read_text() == "reached 4000"
        assert "its log could not be written" in r.stderr and "no space left" in r.stderr
        assert r.returncode == 0, r.stderr[-2000:]
        (run_dir,) = [d for d in logs.iterdir() if d.is_dir()]
        record = json.loads((run_dir / "run.json").read_text())      # closed, on a full disk
        assert record["result"] == "succeeded" and record["ended"] and record["exit_code"] == 0
        assert not [n for n in os.listdir(run_dir) if ".tmp" in n]
    finally:
        subprocess.run(["umount", str(logs)], check=False)


ENDLESS = """
import sys
chunk = b"z" * (1 << 20)
for _ in range(100):
    sys.stdout.buffer.write(chunk)
sys.stdout.buffer.write(b"\\nend\\n")
sys.stdout.flush()
"""


MEASURE = ("import os, subprocess, sys\n"
           "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
           "err = p.stderr.read()\n"
           "_, status, usage = os.wait4(p.pid, 0)\n"
           "sys.stderr.write(err.decode(errors='replace'))\n"
           "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n")


def test_100_mib_without_a_newline_keeps_the_launcher_small_and_the_end_in_the_log(tmp_path, ports):
    """The launcher's own peak memory (wait4's rusage of the launcher process) stays
    under 80 MB (a launcher that held the line would pass 100 MB), and the task's last line is
    in its log."""
    (tmp_path / "endless.py").write_text(ENDLESS)
    (port,) = ports(1)
    # (the program opens no port: the startup watchdog, which would kill it after 120 s on a
    # loaded machine, is not what this test is about)
    f = cluster_file(tmp_path, f"cluster: {{worker: [localhost:{port}]}}\n"
                               f"program: {{command: [python, endless.py]}}\n"
                               "watchdog: {startup_timeout: 0}")
    # The launcher is started by a small intermediary: a process forked from this test process
    # (which may hold TensorFlow, hundreds of MB) carries its parent's resident size into its own
    # peak until it execs; the intermediary's child starts small.
    r = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "tfcluster", "launch", f,
                        "--no-live", "--quiet"], capture_output=True, text=True, timeout=600)
    code, peak_kb = (int(w) for w in r.stdout.split())
    assert code == 0, r.stderr[-2000:]
    assert peak_kb // 1024 < 80, f"launcher peak {peak_kb // 1024} MB"
    log = next((tmp_path / "runs").iterdir()) / "worker-0.log"
    with open(log, "rb") as fh:
        fh.seek(-4, os.SEEK_END)
        assert fh.read() == b"end\n"
    assert log.stat().st_size > 100 * (1 << 20)


FAILING = """
import sys
from tfcluster.plan.progress import format_progress
def main():
    raise AttributeError("'SparseCategoricalAccuracy' object has no attribute 'reset_states'")
try:
    main()
except AttributeError:
    import traceback
    traceback.print_exc()
for i in range(50):
    print(format_progress(i, 50, loss=0.5), flush=True)
sys.exit(1)
"""


def test_a_failing_programs_summary_shows_its_exception_after_50_progress_lines(tmp_path, ports):
    (tmp_path / "failing.py").write_text(FAILING)
    (port,) = ports(1)
    f = cluster_file(tmp_path, f"cluster: {{worker: [localhost:{port}]}}\n"
                               f"program: {{command: [python, failing.py]}}")
    r = tfcluster("launch", f, "--no-live", env={"PYTHONPATH": os.path.join(ROOT, "src")})
    assert r.returncode == 1
    summary = r.stderr[r.stderr.index("last lines of worker:0:"):]
    shown = summary.splitlines()[1:4]
    # the exception first, then the program's own frame: the real error leads
    assert "AttributeError: 'SparseCategoricalAccuracy' object has no attribute 'reset_states'" \
        in shown[0]
    frames = [ln.strip() for ln in summary.splitlines()[2:8] if ln.strip().startswith('File "')]
    assert [f.rsplit(" in ", 1)[-1] for f in frames] == ["<module>", "main"], summary  # in order
    assert "@tfcluster" not in summary
    assert "hint: SparseCategoricalAccuracy has no 'reset_states' in Keras 3" in summary


# ---------------------------------------------------------------------------- TensorFlow

@pytest.mark.tf
def test_an_unmodified_keras_mwms_program_shows_epochs_and_steps(tmp_path, ports):
    """The tutorial-shaped program (no tfcluster import), verbose=1 bars redrawn with carriage
    returns, under a 10 s stall watchdog: it succeeds, run.json has its epoch and step, and the
    console shows no raw protocol."""
    a, b = ports(2)
    prog = os.path.join(PROGRAMS, "keras_tutorial_mwms.py")
    f = cluster_file(tmp_path, f"cluster: {{worker: [localhost:{a}, localhost:{b}]}}\n"
                               f"program: {{command: [python, {prog}, --epochs=2, "
                               f"--steps_per_epoch=5, --verbose=1], env: {{TF_USE_LEGACY_KERAS: '1'}}}}\n"
                               f"watchdog: {{stall_timeout: 10}}\nsuccess: all-workers")
    r = tfcluster("launch", f, "--no-live", "--progress-interval", "1", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "@tfcluster progress" not in r.stdout + r.stderr
    run = next((tmp_path / "runs").iterdir())
    record = json.loads((run / "run.json").read_text())
    worker = next(t for t in record["tasks"] if t["task"] == "worker:0")
    assert worker["progress"]["step"] == 10 and worker["progress"]["total"] == 10
    assert worker["progress"]["epoch"] == 2 and "loss" in worker["progress"]
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    steps = [e["step"] for e in events if e.get("event") == "progress" and e.get("task") == "worker:0"]
    assert steps and steps[-1] == 10 and steps == sorted(steps)    # events followed the steps
    from tfcluster.core.output_patterns import is_noise
    logged = "".join(p.read_text() for p in run.glob("*.log"))
    noise = [ln for ln in logged.splitlines() if is_noise(ln)]
    assert "Epoch 2/2" in logged
    assert not any(ln in r.stdout for ln in noise)      # folded on the console, kept in the log
    # the note that start-up messages are hidden is the launcher's own line, said once
    assert (r.stdout + r.stderr).count("--show-tf-noise") == (1 if noise else 0)


@pytest.mark.tf
def test_keras_progress_callback_under_mwms_with_verbose_1(tmp_path, ports):
    """ProgressCallback reports through the launcher's pipe while Keras redraws its bar."""
    a, b = ports(2)
    prog = os.path.join(PROGRAMS, "keras_tutorial_mwms.py")
    f = cluster_file(tmp_path, f"cluster: {{worker: [localhost:{a}, localhost:{b}]}}\n"
                               f"program: {{command: [python, {prog}, --epochs=2, "
                               f"--steps_per_epoch=5, --verbose=1, --tfcluster_callback], "
                               f"env: {{TF_USE_LEGACY_KERAS: '1', PYTHONPATH: {os.path.join(ROOT, 'src')}}}}}\n"
                               f"watchdog: {{stall_timeout: 10}}\nsuccess: all-workers")
    r = tfcluster("launch", f, "--no-live", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "@tfcluster progress" not in r.stdout + r.stderr
    run = next((tmp_path / "runs").iterdir())
    record = json.loads((run / "run.json").read_text())
    assert {t["progress"]["step"] for t in record["tasks"]} == {10}
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "progress" for e in events)


@pytest.mark.tf
def test_the_lines_from_commands_run_by_hand_all_end_by_themselves(tmp_path, ports):
    """`tfcluster commands cluster.yaml` for the repository's cluster.yaml + trainer.py, run from
    bash with no launcher: ps and workers all exit within a bound after the last worker."""
    ps, w0, w1 = ports(3)
    text = open(os.path.join(ROOT, "cluster.yaml")).read()
    text = (text.replace("localhost:2222", f"localhost:{ps}").replace("localhost:2223", f"localhost:{w0}")
            .replace("localhost:2224", f"localhost:{w1}")
            .replace("--train_steps=2000", "--train_steps=60")
            .replace("runs/checkpoints", str(tmp_path / "ckpt")))
    f = tmp_path / "cluster.yaml"
    f.write_text(text.replace("logdir: runs", f"logdir: {tmp_path / 'runs'}"))
    (tmp_path / "trainer.py").write_text(open(os.path.join(ROOT, "trainer.py")).read())
    out = tfcluster("commands", str(f))
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == 3 and all("TFCLUSTER_TASK=" in ln for ln in lines)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    env.pop("TFCLUSTER_LAUNCHER_PID", None)
    procs = [subprocess.Popen(["bash", "-c", ln], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, start_new_session=True) for ln in lines]
    try:
        deadline = time.time() + 420
        workers = procs[1:]
        while any(p.poll() is None for p in workers) and time.time() < deadline:
            time.sleep(0.5)
        assert all(p.poll() == 0 for p in workers), [p.poll() for p in workers]
        last = time.time()
        while procs[0].poll() is None and time.time() < last + 30:
            time.sleep(0.2)
        assert procs[0].poll() == 0, "the ps did not end within 30 s of the last worker"
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
