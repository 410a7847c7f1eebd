"""tfcluster launch with real processes: success, failure, stopping, signals, ports, records.
(Launch input and rules checked before anything starts: tests/unit/test_launch_input.py.)"""
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers import PROGRAMS, write_cluster
from tfcluster.cli.launching import launch
from tfcluster.drivers.display import View
from tfcluster.plan.runplan import LaunchOptions

LISTENER = os.path.join(PROGRAMS, "listener.py")


def tfcluster(*args, env=None, timeout=120, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "tfcluster", *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=cwd)


def run_dir(tmp_path):
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    return runs[0]


def kill_tasks_of(tmp_path):
    """Clean-up after a test that killed a launcher: any task of its runs still alive."""
    for p in psutil.process_iter(["environ"]):
        try:
            if (p.info["environ"] or {}).get("TFCLUSTER_RUN_DIR", "").startswith(str(tmp_path)):
                p.kill()
        except psutil.Error:
            pass


def assert_gone(pids, timeout=10):
    deadline = time.time() + timeout
    alive = pids
    while time.time() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return
        time.sleep(0.1)
    raise AssertionError(f"still running: {alive}")


# ---------------------------------------------------------------- plain processes (fast)

def test_worker_exit_7_fails_the_run_and_names_it(tmp_path, ports):
    f = write_cluster(tmp_path, ports(3), ["python", LISTENER])
    r = tfcluster("launch", f, env={"MODE_worker_1": "exit:7"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "first failure: worker:1 (exit 7)" in r.stderr
    table = r.stderr[r.stderr.index("first failure"):]
    assert table.splitlines()[2].startswith("worker:1")  # root cause is the first row
    assert "exiting with 7" in r.stderr  # the tail of its log
    record = json.loads((run_dir(tmp_path) / "run.json").read_text())
    assert record["result"] == "failed" and record["exit_code"] == 1
    assert record["root_cause"].startswith("worker:1 exit 7")
    states = {t["task"]: t["state"] for t in record["tasks"]}
    assert states == {"ps:0": "stopped", "worker:0": "stopped", "worker:1": "failed"}


def test_bind_failure_at_start_is_reported_as_a_port_conflict(tmp_path, ports):
    p = ports(2)
    f = write_cluster(tmp_path, p, ["python", LISTENER],
                      extra="restart: {policy: on-failure, max_restarts: 3, backoff: 0.1}\n")
    r = tfcluster("launch", f, env={"MODE_worker_0": "bind-fail"})
    assert r.returncode == 2, r.stdout
    assert (f"first failure: worker:0 (exit 1) — port conflict: localhost:{p[1]} is in use "
            f"(Could not start gRPC server)") in r.stderr
    assert "restarted worker:0" not in r.stderr  # a taken port is not retried


def test_logs_are_private_and_secrets_masked_in_output(tmp_path, ports):
    prog = tmp_path / "p.py"
    prog.write_text("import os\nprint('token is', os.environ['DB_PASSWORD'])\n")
    (tmp_path / "cluster.yaml").write_text(
        f"cluster: {{worker: [localhost:{ports(1)[0]}]}}\n"
        f"program: {{command: [python, p.py], env: {{DB_PASSWORD: s3cr3tvalue}}}}\n"
        f"logdir: {tmp_path / 'runs'}\n")
    r = tfcluster("launch", str(tmp_path / "cluster.yaml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "token is ****" in r.stdout and "s3cr3tvalue" not in r.stdout
    d = run_dir(tmp_path)
    log = d / "worker-0.log"
    assert "token is ****" in log.read_text()
    assert (log.stat().st_mode & 0o077) == 0 and (d.stat().st_mode & 0o077) == 0
    record = (d / "run.json").read_text()
    assert "s3cr3tvalue" not in record and (d / "run.json").stat().st_mode & 0o077 == 0
    r = tfcluster("status", str(tmp_path / "runs"))
    assert r.returncode == 0 and "succeeded" in r.stdout and "worker:0" in r.stdout


def test_sigkill_escalation_for_a_task_that_ignores_sigterm(tmp_path, ports):
    f = write_cluster(tmp_path, ports(2), ["python", LISTENER])
    opts = LaunchOptions(stop_timeout=1.0)
    view = View(quiet=True, stream=open(os.devnull, "w"), err_stream=open(os.devnull, "w"))
    env = {"MODE_ps_0": "ignore-term", "MODE_worker_0": "exit:0"}
    os.environ.update(env)
    try:
        rc = launch(f, opts, view)
    finally:
        for k in env:
            os.environ.pop(k)
    assert rc == 0
    record = json.loads((run_dir(tmp_path) / "run.json").read_text())
    ps = next(t for t in record["tasks"] if t["task"] == "ps:0")
    assert ps["state"] == "stopped" and ps["exit"] == "SIGKILL"


def _start_launcher(f, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", f, "--stop-timeout", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e, text=True,
                            start_new_session=True)


def _wait_running(tmp_path, n, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            record = json.loads((run_dir(tmp_path) / "run.json").read_text())
            pids = [t["pid"] for t in record["tasks"] if t["state"] == "running"]
            if len(pids) == n:
                return pids
        except (AssertionError, FileNotFoundError, ValueError):
            pass
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)
    raise AssertionError("tasks did not start")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signals_to_the_launcher_stop_every_task(tmp_path, ports, sig, code):
    f = write_cluster(tmp_path, ports(3), ["python", LISTENER])
    proc = _start_launcher(f, env={"MODE_worker_1": "child"})
    try:
        pids = _wait_running(tmp_path, 3, proc)
        time.sleep(0.5)  # let worker:1 start its grandchild
        group = [c.pid for p in pids for c in psutil.Process(p).children(recursive=True)]
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code, out
    assert "interrupted" in out
    assert_gone(pids + group)


def test_sigkill_of_the_launcher_still_ends_its_tasks(tmp_path, ports):
    ps = ports(3)
    f = write_cluster(tmp_path, ps, ["python", LISTENER])
    proc = _start_launcher(f)
    try:
        pids = _wait_running(tmp_path, 3, proc)
        proc.kill()
        proc.wait()
        assert_gone(pids, timeout=5)
    finally:
        kill_tasks_of(tmp_path)


# ---------------------------------------------------------------- restarts and watchdog

def test_on_failure_restarts_the_task_with_the_same_port(tmp_path, ports):
    p = ports(3)
    f = write_cluster(tmp_path, p, ["python", LISTENER],
                      extra="restart: {policy: on-failure, max_restarts: 2, backoff: 0.1, min_uptime: 0}\n")
    r = tfcluster("launch", f, env={"MODE_worker_1": "exit-once:3", "MODE_worker_0": "exit:0",
                                    "DELAY": "3"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "worker:1 failed (exit 3)" in r.stderr and "restarted worker:1" in r.stderr
    record = json.loads((run_dir(tmp_path) / "run.json").read_text())
    w1 = next(t for t in record["tasks"] if t["task"] == "worker:1")
    assert w1["restarts"] == 1 and w1["endpoint"] == f"localhost:{p[2]}"
    assert "second run: staying up" in (run_dir(tmp_path) / "worker-1.log").read_text()


def test_exit_code_policy_does_not_retry_a_permanent_error(tmp_path, ports):
    f = write_cluster(tmp_path, ports(2), ["python", LISTENER],
                      extra="restart: {policy: exit-code, max_restarts: 3, backoff: 0.1}\n")
    r = tfcluster("launch", f, env={"MODE_worker_0": "exit:2"})
    assert r.returncode == 1
    assert "exit code 2 is a permanent error" in r.stderr
    record = json.loads((run_dir(tmp_path) / "run.json").read_text())
    assert record["total_restarts"] == 0


def test_watchdog_startup_deadline_names_the_task(tmp_path, ports):
    f = write_cluster(tmp_path, ports(2), ["python", LISTENER],
                      extra="watchdog: {startup_timeout: 2}\n")
    r = tfcluster("launch", f, env={"MODE_ps_0": "nobind"})
    assert r.returncode == 1
    assert "first failure: ps:0 (SIGKILL)" in r.stderr
    assert "did not open port" in r.stderr


def test_watchdog_names_the_task_a_session_waits_for(tmp_path, ports):
    f = write_cluster(tmp_path, ports(2), ["python", LISTENER],
                      extra="watchdog: {waiting_timeout: 1.5}\n")
    r = tfcluster("launch", f, env={"MODE_worker_0": "wait-ps"})
    assert r.returncode == 1
    assert "first failure: ps:0 (SIGKILL) — watchdog: worker:0 has waited 1.5s for it" in r.stderr


def test_watchdog_stalled_global_step_ends_the_run(tmp_path, ports):
    f = write_cluster(tmp_path, ports(3), ["python", LISTENER],
                      extra="watchdog: {stall_timeout: 2}\n")
    r = tfcluster("launch", f, env={"MODE_worker_0": "stall", "MODE_worker_1": "exit:0"})
    assert r.returncode == 1
    assert ("cause: watchdog: the global step has stood at 5 for 2s; suspects: worker:0 (no progress "
            "for 2s, at step 5); not running: worker:1 (succeeded, exit 0)") in r.stderr
    record = json.loads((run_dir(tmp_path) / "run.json").read_text())
    assert record["root_cause"].startswith("watchdog: the global step")


def test_per_host_mode_ends_with_the_remote_chief(tmp_path, ports):
    """Two agents, one per 'host' (127.0.0.2 and localhost): the ps host's agent ends when the
    chief, which runs on the other host, has ended."""
    p = ports(3)
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{ps: [127.0.0.2:{p[0]}], worker: [localhost:{p[1]}, localhost:{p[2]}]}}\n"
                 f"program: {{command: [python, {LISTENER}]}}\nlogdir: {tmp_path / 'runs'}\ngrace: 1\n")
    env = dict(os.environ, MODE_worker_0="exit:0", MODE_worker_1="exit:0", DELAY="4")
    ps_agent = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", str(f), "--host", "127.0.0.2",
                                 "--run-id", "ps-host"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
    try:
        r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--host", "localhost",
                            "--run-id", "worker-host"], capture_output=True, text=True, env=env,
                           timeout=60)
        out, _ = ps_agent.communicate(timeout=30)
    finally:
        if ps_agent.poll() is None:
            ps_agent.kill()
            ps_agent.wait()
    assert r.returncode == 0, r.stdout
    assert "skipped (not on --host localhost): ps:0" in r.stderr
    assert ps_agent.returncode == 0, out
    assert f"worker:0 on localhost:{p[1]}, which runs elsewhere, has ended" in out
    rec = json.loads((tmp_path / "runs" / "ps-host" / "run.json").read_text())
    assert [t["state"] for t in rec["tasks"] if t["task"] == "ps:0"] == ["stopped"]


# ---------------------------------------------------------------- real TensorFlow

@pytest.mark.tf
def test_seed_style_program_with_task_flags(tmp_path, ports):
    """The guide's flags, ps in server.join(): exit 0, ps stopped, nothing left."""
    f = write_cluster(tmp_path, ports(3), ["python", os.path.join(PROGRAMS, "seed_style.py")],
                      extra="")
    r = tfcluster("launch", f, "--task-flags", "--success", "all-workers", timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "[worker:0] worker 0 done" in r.stdout and "[worker:1] worker 1 done" in r.stdout
    record = json.loads((run_dir(tmp_path) / "run.json").read_text())
    states = {t["task"]: t["state"] for t in record["tasks"]}
    assert states == {"ps:0": "stopped", "worker:0": "succeeded", "worker:1": "succeeded"}


@pytest.mark.tf
def test_non_chief_still_waiting_when_chief_ends(tmp_path, ports):
    f = write_cluster(tmp_path, ports(3), ["python", os.path.join(PROGRAMS, "tfconfig_program.py")])
    t0 = time.time()
    r = tfcluster("launch", f, "--grace", "2", timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "[worker:0] chief done w=11.0" in r.stdout
    assert "giving worker:1 2s to finish" in r.stderr
    assert time.time() - t0 < 90
    record = json.loads((run_dir(tmp_path) / "run.json").read_text())
    states = {t["task"]: t["state"] for t in record["tasks"]}
    assert states == {"ps:0": "stopped", "worker:0": "succeeded", "worker:1": "stopped"}
    chief = next(t for t in record["tasks"] if t["task"] == "worker:0")
    assert chief["progress"]["step"] == 10 and chief["progress"]["w"] == 11.0


@pytest.mark.tf
def test_ci_smoke_launch_on_2222_2223(tmp_path):
    """The CI smoke test: tfcluster launch, 1 ps + 1 worker on localhost:2222/2223."""
    from tfcluster.net.ports import describe_port_holder, port_in_use
    for port in (2222, 2223):
        assert not port_in_use(port), f"port {port} is in use{describe_port_holder(port)}"
    f = write_cluster(tmp_path, [2222, 2223], ["python", os.path.join(PROGRAMS, "tfconfig_program.py")])
    r = tfcluster("launch", f, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "chief done" in r.stdout
    for port in (2222, 2223):
        assert not port_in_use(port)


def test_streams_events_and_a_closed_record(tmp_path, ports):
    """Task output on stdout, tfcluster's own lines on stderr (a failure is seen with
    >/dev/null, and 2>/dev/null leaves only task output); progress-protocol lines are consumed;
    events.jsonl has every task's start and end; run.json is closed; a restart is counted."""
    prog = tmp_path / "p.py"
    prog.write_text(
        "import json, os, sys, time\n"
        "task = os.environ['TFCLUSTER_TASK']\n"
        "print('hello from', task, 'attempt', os.environ['TFCLUSTER_RESTART_COUNT'], flush=True)\n"
        "print('@tfcluster progress {\"step\": 3, \"total\": 9, \"loss\": 0.25}', flush=True)\n"
        "if task == 'worker:1' and os.environ['TFCLUSTER_RESTART_COUNT'] == '0':\n"
        "    sys.exit(4)\n"
        "if task == 'worker:1':\n"
        "    time.sleep(1.5)\n"
        "    sys.exit(6)\n"
        "time.sleep(30)\n")
    f = write_cluster(tmp_path, ports(3), ["python", str(prog)],
                      extra="restart: {policy: on-failure, max_restarts: 1, backoff: 0.1, min_uptime: 0}\n")
    r = tfcluster("launch", f, "--progress-interval", "0.2")
    assert r.returncode == 1, r.stderr
    assert "[worker:1] hello from worker:1 attempt 0" in r.stdout
    assert "[worker:1] hello from worker:1 attempt 1" in r.stdout
    assert "tfcluster:" not in r.stdout and "@tfcluster progress" not in r.stdout
    assert "first failure: worker:1 (exit 6)" in r.stderr and "[worker:" not in r.stderr
    assert "worker:0: step 3/9" in r.stderr and "loss 0.25" in r.stderr   # the periodic line
    d = run_dir(tmp_path)
    assert "@tfcluster progress" in (d / "worker-0.log").read_text()   # logs keep everything
    record = json.loads((d / "run.json").read_text())
    assert record["result"] == "failed" and record["exit_code"] == 1 and record["total_restarts"] == 1
    assert record["launcher_started"] and record["chief"] == "worker:0"
    events = [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()]
    started = [(e["task"], e["attempt"]) for e in events if e["event"] == "task_started"]
    assert sorted(started) == [("ps:0", 0), ("worker:0", 0), ("worker:1", 0), ("worker:1", 1)]
    exited = {e["task"] for e in events if e["event"] == "task_exited"}
    assert exited == {"ps:0", "worker:0", "worker:1"}
    assert all(isinstance(e["time"], float) for e in events)
    assert [e["event"] for e in events][-1] == "run_ended"
    assert any(e["event"] == "task_restarting" and e["task"] == "worker:1" for e in events)
    assert "task_restarting" in (d / "launcher.log").read_text() or "restart" in (d / "launcher.log").read_text()
    assert f"tfcluster report {d}" in r.stderr


def test_sigkill_of_the_launcher_ends_every_process_a_task_started(tmp_path, ports):
    """A task that is a `bash -c` wrapper around a program that forks: after `kill -9` of the
    launcher, the wrapper, the program and its child are all gone (the reaper kills the whole
    process group, not only the task's leader)."""
    prog = tmp_path / "forker.py"
    prog.write_text("import subprocess, sys, time\n"
                    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
                    "print('forked', flush=True)\n"
                    "time.sleep(300)\n")
    f = write_cluster(tmp_path, ports(2), ["bash", "-c", f"{sys.executable} {prog}; echo done"],
                      jobs={"worker": 2})
    proc = _start_launcher(f)
    try:
        pids = _wait_running(tmp_path, 2, proc)
        deadline = time.time() + 20
        tree = []
        while time.time() < deadline:
            tree = [c.pid for p in pids for c in psutil.Process(p).children(recursive=True)]
            if len(tree) >= 4:     # per task: python forker.py and its sleeping child
                break
            time.sleep(0.1)
        assert len(tree) >= 4, tree
        proc.kill()
        proc.wait()
        assert_gone(pids + tree, timeout=10)
    finally:
        kill_tasks_of(tmp_path)


def test_a_task_that_exits_leaves_no_child_behind(tmp_path, ports):
    """When a task's leader exits (even successfully), what is left of its process group ends."""
    prog = tmp_path / "p.py"
    prog.write_text("import os, subprocess, sys, time\n"
                    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
                    "open(os.path.join(os.environ['TFCLUSTER_RUN_DIR'], 'child.pid'), 'w').write(str(c.pid))\n"
                    "time.sleep(0.5)\n")
    f = write_cluster(tmp_path, ports(1), ["python", str(prog)], jobs={"worker": 1})
    r = tfcluster("launch", f)
    assert r.returncode == 0, r.stderr
    child = int((run_dir(tmp_path) / "child.pid").read_text())
    assert_gone([child], timeout=5)


# ---------------------------------------------------------------- careless input at launch

def test_gpus_that_do_not_exist_are_a_warning_naming_the_task(tmp_path, ports):
    """jobs.worker.gpus: [0, 1] on a machine with one GPU (a stand-in nvidia-smi): a warning on
    stderr naming worker:1, and the run goes on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)'\n")
    smi.chmod(0o755)
    f = write_cluster(tmp_path, ports(3), ["python", LISTENER])
    with open(f, "a") as fh:
        fh.write("jobs: {worker: {gpus: [0, 1]}}\n")
    r = tfcluster("launch", f, env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "MODE_worker_0": "exit:0"})
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("tfcluster: warning:")]
    assert len(warnings) == 1 and "worker:1" in warnings[0] and "GPU 1 does not exist" in warnings[0]
    r = tfcluster("launch", f, "--dry-run", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert "warning" not in r.stderr


def test_a_declared_secret_is_masked_in_output_logs_and_the_record(tmp_path, ports):
    """secrets: [MY_CRED] -- the value comes from the launcher's environment (not the file) and
    is passed as a flag: it is masked in task output, the log, run.json's argv and the dry run."""
    prog = tmp_path / "p.py"
    prog.write_text("import os, sys\nprint('cred is', os.environ['MY_CRED'], 'argv', sys.argv[1:])\n"
                    "print('limits', os.environ['MAX_TOKENS'], os.environ['TOKENIZERS_PARALLELISM'])\n")
    f = write_cluster(tmp_path, ports(1), ["python", str(prog)], jobs={"worker": 1})
    with open(f, "a") as fh:
        fh.write("secrets: [MY_CRED]\n")
    env = {"MY_CRED": "opensesame42", "MAX_TOKENS": "1000", "TOKENIZERS_PARALLELISM": "false"}
    r = tfcluster("launch", f, "--", "python", str(prog), "--api-key=opensesame42", env=env)
    assert r.returncode == 0, r.stderr
    assert "opensesame42" not in r.stdout + r.stderr and "cred is ****" in r.stdout
    assert "limits 1000 false" in r.stdout     # ordinary names are not taken for secrets
    d = run_dir(tmp_path)
    assert "opensesame42" not in (d / "worker-0.log").read_text()
    record = (d / "run.json").read_text()
    assert "opensesame42" not in record and "--api-key=****" in record
    dry = tfcluster("launch", f, "--dry-run", "--", "python", str(prog), "--api-key=opensesame42", env=env)
    assert "opensesame42" not in dry.stdout and "--api-key=****" in dry.stdout


def test_a_big_start_wave_runs_every_task_once_and_leaves_nothing(tmp_path, ports):
    """48 tasks of one job start side by side (a few threads): each runs once, with its own
    identity, outlives the start wave (a task's death signal follows the thread that started
    it: those threads must live as long as the run), the events name them in order, the run
    succeeds, and every process is gone."""
    n = 48
    f = tmp_path / "many.yaml"
    f.write_text(json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports(n)]},
        "program": {"command": ["sh", "-c", 'echo "up $TFCLUSTER_TASK $$"; exec sleep 2']},
        "watchdog": {"startup_timeout": 0}, "success": "all-workers",
        "logdir": str(tmp_path / "runs")}))
    r = tfcluster("launch", str(f), "--no-live", "--run-id", "many")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    d = tmp_path / "runs" / "many"
    events = [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()]
    started = [e for e in events if e["event"] == "task_started"]
    assert [e["task"] for e in started] == [f"worker:{i}" for i in range(n)]
    for i in range(n):
        lines = [ln for ln in (d / f"worker-{i}.log").read_text().splitlines() if ln.startswith("up ")]
        assert len(lines) == 1 and lines[0].split()[1] == f"worker:{i}", lines
    assert_gone([e["pid"] for e in started])
