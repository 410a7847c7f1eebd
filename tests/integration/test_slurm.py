"""Slurm backend: real runs on a one-node Slurm (munged + slurmctld + slurmd) that the fixture in
tests/integration/conftest.py starts and stops. (The pure parts: tests/unit/test_slurm_plan.py.)

The real-Slurm tests skip when Debian's slurm-wlm and munge are not installed or cannot be
started here (they need root to run the daemons as configured)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from helpers import PROGRAMS, ROOT
from tfcluster.net.ports import free_port_run

# A tiny between-graph training program (ps serves, workers train a few steps).
with open(os.path.join(PROGRAMS, "tiny_tf.py")) as _f:
    TINY_TF = _f.read()


# --------------------------------------------------------------------------------------
# A real one-node Slurm

def _launch(path, *extra, timeout=150):
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    return subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(path), "--backend", "slurm",
                           "--no-live", *extra], cwd=os.path.dirname(str(path)), env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.tf
def test_slurm_trains_1ps_2workers_to_the_end(slurm_cluster, tmp_path):
    (tmp_path / "tiny_tf.py").write_text(TINY_TF)
    base = free_port_run(3, 24000 + os.getpid() % 2000)
    (tmp_path / "cluster.yaml").write_text(textwrap.dedent(f"""\
        cluster: {{ps: 1, worker: 2}}
        program: {{command: [python, tiny_tf.py], args: ["10"]}}
        base_port: {base}
        grace: 20
        logdir: runs
    """))
    r = _launch(tmp_path / "cluster.yaml", "--run-id", "t1")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "TRAINED worker:0" in out and "[worker:0]" in out, out[-3000:]
    assert "run succeeded" in out
    assert slurm_cluster.wait_empty_queue(10) == ""
    run_dir = tmp_path / "runs" / "t1"
    assert (run_dir / "exit_code").read_text().strip() == "0"
    for stem in ("ps-0", "worker-0", "worker-1"):
        assert (run_dir / f"{stem}.log").exists()
    assert "TRAINED worker:0" in (run_dir / "worker-0.log").read_text()
    assert '"failed": false' in (run_dir / "ps-0.exit.json").read_text()
    # the same closed record as the local launcher's: status and runs read it
    assert (run_dir.stat().st_mode & 0o077) == 0 and ((run_dir / "job.sbatch").stat().st_mode & 0o077) == 0
    st = subprocess.run([sys.executable, "-m", "tfcluster", "status", str(run_dir), "--json"],
                        capture_output=True, text=True, timeout=60)
    assert st.returncode == 0, st.stdout + st.stderr
    rec = json.loads(st.stdout)
    assert rec["result"] == "succeeded" and rec["backend"] == "slurm"
    assert {t["task"]: t["state"] for t in rec["tasks"]}["worker:0"] == "succeeded"


@pytest.mark.tf
@pytest.mark.timeout(900)
def test_two_jobs_of_one_file_share_a_node_and_a_third_meets_a_held_base_port(slurm_cluster, tmp_path):
    """Ports are chosen free on the node when the job starts (the node agents' rendezvous
    through the run folder): two jobs of the same file (1 ps + 2 workers, trainer.py) started
    together on the one node both train to the end; a third, started while another user's
    process holds the file's ports, trains too; status shows the ports chosen."""
    trainer = os.path.join(ROOT, "trainer.py")
    (tmp_path / "cluster.yaml").write_text(textwrap.dedent(f"""\
        cluster: {{ps: 1, worker: 2}}
        program: {{command: [python, {trainer}], args: [--train_steps=300]}}
        grace: 20
        logdir: runs
    """))
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)

    def launch(run_id):
        return subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--backend", "slurm",
                                 "--no-live", "--run-id", run_id, "--arg", f"--checkpoint_dir=ckpt-{run_id}"],
                                cwd=str(tmp_path), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    a, b = launch("j1"), launch("j2")
    outs = [p.communicate(timeout=600)[0] for p in (a, b)]
    for p, out in zip((a, b), outs):
        assert p.returncode == 0, out[-3000:]
    # the old rule's ports (base_port 2222 and up: the file's default) held by another user
    held = []
    for port in range(2222, 2225):
        code = (f"import encodings.idna, os, socket, time\ns = socket.socket(); s.bind(('0.0.0.0', {port})); "
                f"s.listen()\nos.setgid(65534); os.setuid(65534)\nprint('held', flush=True)\ntime.sleep(600)")
        h = subprocess.Popen([sys.executable, "-I", "-c", code], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
        if h.stdout.readline().strip() == "held":
            held.append(h)
        else:
            os.killpg(h.pid, signal.SIGKILL)
            h.wait()
    try:
        c = launch("j3")
        out = c.communicate(timeout=600)[0]
        assert c.returncode == 0, out[-3000:]
    finally:
        for h in held:
            os.killpg(h.pid, signal.SIGKILL)
            h.wait()
    st = subprocess.run([sys.executable, "-m", "tfcluster", "status", str(tmp_path / "runs" / "j3"), "--json"],
                        capture_output=True, text=True, timeout=60)
    rec = json.loads(st.stdout)
    ports = [int(t["endpoint"].rsplit(":", 1)[1]) for t in rec["tasks"]]
    assert len(set(ports)) == 3 and not set(ports) & {h for h in range(2222, 2225)} or not held, rec["tasks"]
    assert slurm_cluster.wait_empty_queue(10) == ""


FAIL_PROGRAM = """\
import os, sys, time
task = os.environ["TFCLUSTER_TASK"]
print("hello from", task, flush=True)
if task == "worker:0":
    time.sleep(1)
    sys.exit(3)
time.sleep(600)
"""


def test_slurm_chief_failure_ends_the_job_with_its_exit_code(slurm_cluster, tmp_path):
    (tmp_path / "prog.py").write_text(FAIL_PROGRAM)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\ngrace: 1\n")
    start = time.time()
    r = _launch(tmp_path / "cluster.yaml", "--run-id", "f1", timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    assert "first failure: worker:0" in out and "exit code 3" in out, out[-3000:]
    assert (tmp_path / "runs" / "f1" / "exit_code").read_text().strip() == "3"
    assert slurm_cluster.wait_empty_queue(10) == ""
    assert time.time() - start < 60


def test_slurm_ctrl_c_stops_the_job_in_order(slurm_cluster, tmp_path):
    """Ctrl-C on the launcher asks the job to stop in order through the run folder (as the
    time-limit warning does), and the job ends; the record says interrupted. The launcher is
    started with SIGINT ignored (a background job of a shell without job control, as a CI
    script may start the suite): SIGINT stops it all the same, as it does a local run's."""
    (tmp_path / "prog.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    (tmp_path / "cluster.yaml").write_text("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\n")
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    p = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--backend", "slurm",
                          "--run-id", "c1"], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.time() + 30
        log = tmp_path / "runs" / "c1" / "worker-1.log"
        while time.time() < deadline and not (log.exists() and "up" in log.read_text()):
            time.sleep(0.2)
        assert log.exists(), "the job did not start"
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, out[-3000:]
    assert "stopping Slurm job" in out and "in order" in out, out[-3000:]
    assert "a stop was asked for" in out, out[-3000:]
    assert slurm_cluster.wait_empty_queue(20) == ""
    rec = json.loads((tmp_path / "runs" / "c1" / "run.json").read_text())
    assert rec["result"] == "interrupted" and rec["exit_code"] == 130


OK_PROGRAM = """\
import os, sys, time
task = os.environ["TFCLUSTER_TASK"]
print("hello from", task, os.environ["TF_CONFIG"], flush=True)
from tfcluster.plan.contract import supervised
print("supervised:", supervised(), flush=True)   # the node agent stops the ps for the launcher
if task == "worker:0":
    time.sleep(1)
    sys.exit(0)
time.sleep(600)
"""


def test_slurm_inside_an_allocation_runs_srun(slurm_cluster, tmp_path):
    """Under salloc (SLURM_JOB_ID set) the launcher runs srun itself; the chief's success still
    ends the ps task and the other worker."""
    if not shutil.which("salloc"):
        pytest.skip("no salloc")
    (tmp_path / "prog.py").write_text(OK_PROGRAM)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\ngrace: 1\nbase_port: 2000\n")
    r = subprocess.run(["salloc", "-n", "3", "--overcommit", sys.executable, "-m", "tfcluster", "launch",
                        "cluster.yaml", "--backend", "slurm", "--run-id", "a1"], cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "inside Slurm job" in out and "run succeeded" in out
    assert '[ps:0] hello from ps:0 {"cluster":{"ps":["localhost:2000"],"worker":["localhost:2001",' \
           '"localhost:2002"]},"task":{"type":"ps","index":0}}' in out
    assert "[worker:1] supervised: True" in out and "supervised: False" not in out
    assert not (tmp_path / "runs" / "a1" / "exit_code").exists()   # no batch script here
    assert slurm_cluster.wait_empty_queue(10) == ""


RESTART_PROGRAM = """\
import os, sys, time
task = os.environ["TFCLUSTER_TASK"]
if task == "ps:0":
    time.sleep(600)
if task == "worker:1":
    mark = os.path.join(os.environ["TFCLUSTER_RUN_DIR"], "tried")
    if not os.path.exists(mark):
        open(mark, "w").close()
        print("worker:1 fails once", flush=True)
        sys.exit(1)
    time.sleep(2)
print(task, "done", flush=True)
"""


def test_slurm_all_workers_and_restart(slurm_cluster, tmp_path):
    """success: all-workers ends the run when the last worker is done (here worker:1, after one
    restart under restart.policy on-failure)."""
    (tmp_path / "prog.py").write_text(RESTART_PROGRAM)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\nsuccess: all-workers\n"
        "restart: {policy: on-failure, max_restarts: 1, backoff: 0, min_uptime: 0}\n")
    r = _launch(tmp_path / "cluster.yaml", "--run-id", "r1", timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "[worker:1] worker:1 fails once" in out and "restart 1 of 1 in 0.0s" in out
    assert "[worker:1] tfcluster: run succeeded (every worker exited 0)" in out, out[-3000:]
    assert "[worker:0] tfcluster: worker:0 exited 0 after" in out
    assert slurm_cluster.wait_empty_queue(10) == ""
    # the one record writer: the restart is in run.json, the tasks' events in events.jsonl
    rec = json.loads((tmp_path / "runs" / "r1" / "run.json").read_text())
    rows = {t["task"]: t for t in rec["tasks"]}
    assert rec["result"] == "succeeded" and rec["backend"] == "slurm"
    assert rows["worker:1"]["restarts"] == 1 and rows["worker:0"]["restarts"] == 0, rows
    assert rows["worker:1"]["state"] == "succeeded" and rows["ps:0"]["state"] == "stopped"
    assert rec["total_restarts"] == 1
    events = [json.loads(ln) for ln in (tmp_path / "runs" / "r1" / "events.jsonl").read_text().splitlines()]
    assert [e["attempt"] for e in events if e["event"] == "task_restarting"] == [1]
    order = [(e["task"], e["event"]) for e in events if e["event"] in ("task_started", "task_exited")]
    assert ("worker:1", "task_exited") in order and order[0][1] == "task_started"


FLAKY_PROGRAM = """\
import os, sys, time
task = os.environ["TFCLUSTER_TASK"]
count = os.environ["TFCLUSTER_RESTART_COUNT"]
print(task, "attempt", count, "of", os.environ["TFCLUSTER_MAX_RESTARTS"], flush=True)
if task == "ps:0":
    time.sleep(600)
if task.startswith("worker") and count == "0":
    time.sleep(4 if task == "worker:0" else 0)   # worker:1 takes the run's one restart first
    sys.exit(3)
print(task, "done", flush=True)
"""


def test_slurm_honours_restart_flags_and_the_run_budget(slurm_cluster, tmp_path):
    """The file says never; --restart on-failure --max-restarts 2 on the command line wins on
    Slurm as it does locally, a restarted task sees TFCLUSTER_RESTART_COUNT=1, and the file's
    restart.max_total_restarts (1) is one budget for the whole run across Slurm tasks."""
    (tmp_path / "prog.py").write_text(FLAKY_PROGRAM)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\nsuccess: all-workers\n"
        "restart: {policy: never, max_restarts: 0, max_total_restarts: 1, backoff: 0, min_uptime: 0}\n")
    dry = _launch(tmp_path / "cluster.yaml", "--dry-run", "--restart", "on-failure",
                  "--max-restarts", "2", timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert '"policy":"on-failure","max_restarts":2,"max_total_restarts":1,"backoff":0,"min_uptime":0' \
        in dry.stdout.replace(".0,", ",").replace(".0}", "}")
    r = _launch(tmp_path / "cluster.yaml", "--run-id", "b1", "--restart", "on-failure",
                "--max-restarts", "2", timeout=90)
    out = r.stdout + r.stderr
    # both workers fail at their first attempt; the run's budget allows one restart only
    assert r.returncode == 1, out[-3000:]
    assert "attempt 1 of 2" in out, out[-3000:]
    assert "not restarted: the run's restart budget is spent (1 of 1)" in out, out[-3000:]
    assert slurm_cluster.wait_empty_queue(10) == ""
    # --restart on-failure on the command line: the restarted worker is in run.json
    rec = json.loads((tmp_path / "runs" / "b1" / "run.json").read_text())
    assert sorted(t["restarts"] for t in rec["tasks"] if t["task"].startswith("worker")) == [0, 1]
    assert rec["total_restarts"] == 1 and rec["result"] == "failed"


def test_launch_slurm_takes_the_scheduler_options(slurm_cluster, tmp_path):
    """launch --backend slurm takes the same options as render slurm (file or flags, through
    the run plan): they show in the submitted job; a bad time is exit 2 before anything is
    submitted, and a partition Slurm does not have is one line, exit 2."""
    (tmp_path / "prog.py").write_text(OK_PROGRAM)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\ngrace: 1\n"
        f"base_port: {free_port_run(3, 26000 + os.getpid() % 2000)}\n"
        "slurm: {account: lab, sbatch: [--comment=from-the-file]}\n")
    r = _launch(tmp_path / "cluster.yaml", "--run-id", "o1", "--partition", "debug", "--time", "5",
                "--sbatch=--comment=tfc-launch", timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    job = re.search(r"submitted Slurm job (\d+)", r.stderr).group(1)
    show = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True,
                          timeout=30).stdout
    fields = dict(re.findall(r"(\w+)=(\S*)", show))
    assert (fields["Partition"], fields["TimeLimit"], fields["Account"], fields["Comment"]) == \
        ("debug", "00:05:00", "lab", "tfc-launch"), show
    bad = _launch(tmp_path / "cluster.yaml", "--run-id", "o2", "--time", "abc", timeout=60)
    assert bad.returncode == 2 and "--time: 'abc' is not a Slurm time limit" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "runs" / "o2").exists()
    nosuch = _launch(tmp_path / "cluster.yaml", "--run-id", "o3", "--partition", "nosuch", timeout=60)
    assert nosuch.returncode == 2, nosuch.stderr
    errors = [ln for ln in nosuch.stderr.splitlines() if ln.startswith("tfcluster: error:")]
    assert len(errors) == 1 and "sbatch refused the job" in errors[0] and "partition" in errors[0].lower()
    local = subprocess.run([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--partition",
                            "debug", "--dry-run"], cwd=str(tmp_path), capture_output=True, text=True,
                           timeout=60)
    assert local.returncode == 2 and "apply to --backend slurm only" in local.stderr
    assert slurm_cluster.wait_empty_queue(10) == ""


def test_killed_launcher_inside_an_allocation_ends_the_step(slurm_cluster, tmp_path):
    """Inside an allocation the launcher runs srun itself; `kill -9` of the launcher ends srun's
    job step and every task of it (srun gets SIGTERM when its parent dies)."""
    if not shutil.which("salloc"):
        pytest.skip("no salloc")
    prog = tmp_path / "prog.py"
    prog.write_text("import os, time\nprint('up', os.getpid(), flush=True)\ntime.sleep(300)\n")
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\n"
        f"base_port: {free_port_run(3, 28000 + os.getpid() % 2000)}\n")
    salloc = subprocess.Popen(["salloc", "-n", "3", "--overcommit", sys.executable, "-m", "tfcluster",
                               "launch", "cluster.yaml", "--backend", "slurm", "--run-id", "k1"],
                              cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        logs = [tmp_path / "runs" / "k1" / f"{stem}.log" for stem in ("ps-0", "worker-0", "worker-1")]

        def all_up():
            return all(log.exists() and "up " in log.read_text() for log in logs)
        deadline = time.time() + 60
        while time.time() < deadline and not all_up():
            time.sleep(0.2)
        assert all_up(), "the step did not start: " + " ".join(
            f"{log.name}={log.exists()}" for log in logs)
        task_pids = [int(line.split()[1]) for stem in ("ps-0", "worker-0", "worker-1")
                     for line in (tmp_path / "runs" / "k1" / f"{stem}.log").read_text().splitlines()
                     if line.startswith("up ")]
        launcher = next(c for c in psutil.Process(salloc.pid).children(recursive=True)
                        if "tfcluster" in " ".join(c.cmdline()) and "launch" in c.cmdline())
        launcher.kill()
        salloc.communicate(timeout=60)
        deadline = time.time() + 30
        while time.time() < deadline and any(psutil.pid_exists(p) for p in task_pids):
            time.sleep(0.2)
        assert not [p for p in task_pids if psutil.pid_exists(p)], "tasks outlived the launcher"
    finally:
        if salloc.poll() is None:
            os.killpg(salloc.pid, signal.SIGKILL)
            salloc.wait()
    assert slurm_cluster.wait_empty_queue(30) == ""


STALL_PROGRAM = """\
import json, os, socket, time
task = os.environ["TFCLUSTER_TASK"]
cfg = json.loads(os.environ["TF_CONFIG"])
me = cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(me.rsplit(":", 1)[1])))
s.listen()
if task == "worker:0":
    print('@tfcluster progress {"step": 5, "total": 100}', flush=True)
time.sleep(300)
"""


def test_slurm_honours_the_watchdog(slurm_cluster, tmp_path):
    """watchdog: on Slurm as locally -- a global step that stands still fails the run, naming
    the watchdog (the node agent applies the rulebook's checks)."""
    (tmp_path / "prog.py").write_text(STALL_PROGRAM)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\n"
        f"base_port: {free_port_run(3, 30000 + os.getpid() % 2000)}\n"
        "watchdog: {stall_timeout: 3}\n")
    r = _launch(tmp_path / "cluster.yaml", "--run-id", "w1", "--progress-interval", "0", timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    # 3 s, or twice the wait for the first report where that was longer (a loaded machine)
    assert re.search(r"watchdog: the global step has stood at 5 for [0-9.]+s", out), out[-3000:]
    # progress lines are consumed on Slurm too: a human line on stderr instead
    assert "@tfcluster progress" not in r.stdout and "tfcluster: worker:0: step 5/100" in r.stderr
    assert slurm_cluster.wait_empty_queue(10) == ""


def _stop_a_training_job(slurm_cluster, tmp_path, how):
    """trainer.py on 1 ps + 1 worker under Slurm, stopped by ``scancel *how`` once it trains:
    the chief ends before the ps is stopped and its final checkpoint is there. Returns the run's
    events, the launcher's output and run.json."""
    ckpt = tmp_path / "ckpt"
    base = free_port_run(2, 26000 + os.getpid() % 2000)
    (tmp_path / "cluster.yaml").write_text(textwrap.dedent(f"""\
        cluster: {{ps: 1, worker: 1}}
        program:
          command: [python, {os.path.join(ROOT, "trainer.py")}]
          args: [--train_steps=100000000, --checkpoint_dir={ckpt}, --save_checkpoint_secs=3600,
                 --save_summaries_steps=0, --print_placement=false, --progress_secs=0.2,
                 --step_delay=0.01]
        base_port: {base}
        logdir: runs
    """))
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    p = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--backend",
                          "slurm", "--run-id", "s1", "--no-live", "--echo-progress",
                          "--stop-timeout", "20"],
                         cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    run_dir = tmp_path / "runs" / "s1"
    trained = re.compile(r'"step": [1-9][0-9]+')
    try:
        deadline = time.time() + 120
        log = run_dir / "worker-0.log"
        while time.time() < deadline and not (log.exists() and trained.search(log.read_text())):
            if p.poll() is not None:
                break
            time.sleep(0.5)
        if not (log.exists() and trained.search(log.read_text())):
            p.terminate()
            pytest.fail("no training step: " + p.communicate(timeout=60)[0][-3000:])
        job = json.loads((run_dir / "run.json").read_text())["slurm_job"]
        assert job
        subprocess.run(["scancel", *how, str(job)], check=True, timeout=30)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert slurm_cluster.wait_empty_queue(30) == ""
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    chief_end = [e["time"] for e in events if e["task"] == "worker:0" and e["event"] == "task_exited"]
    ps_stop = [e["time"] for e in events if e["task"] == "ps:0" and e["event"] == "stop_sent"]
    assert chief_end and ps_stop, (events, out[-3000:])
    assert chief_end[0] < ps_stop[0], (events, out[-3000:])
    import tensorflow as tf
    latest = tf.train.latest_checkpoint(str(ckpt))
    assert latest and int(latest.rsplit("-", 1)[1]) >= 10, (latest, out[-3000:])
    rec = json.loads((run_dir / "run.json").read_text())
    assert {t["task"]: t["state"] for t in rec["tasks"]} == {"ps:0": "stopped", "worker:0": "stopped"}
    return events, out, rec


@pytest.mark.tf
def test_slurm_scancel_usr1_stops_the_chief_before_the_ps_and_keeps_its_last_checkpoint(slurm_cluster, tmp_path):
    """``scancel --batch --signal=USR1 JOB`` (what Slurm sends before a time limit, with
    --signal=B:USR1@LEAD) stops the job in the rulebook's order on every node: the chief first,
    which saves its final checkpoint through the ps, then the ps."""
    events, out, rec = _stop_a_training_job(slurm_cluster, tmp_path, ["--batch", "--signal=USR1"])
    assert rec["result"] == "interrupted", rec


@pytest.mark.tf
def test_slurm_plain_scancel_stops_the_chief_before_the_ps_and_keeps_its_last_checkpoint(slurm_cluster, tmp_path):
    """A plain ``scancel JOB`` -- what a preemption (PreemptMode CANCEL or REQUEUE) and a time
    limit without ``--signal`` do too -- sends SIGTERM to every process of the job at once. The
    ps ignores it (its agent started it so) and is stopped by its agent once the chief has
    ended: the chief saves its final checkpoint through the ps, within KillWait (5 s here)."""
    events, out, rec = _stop_a_training_job(slurm_cluster, tmp_path, [])
    chief_end = [e["time"] for e in events if e["task"] == "worker:0" and e["event"] == "task_exited"]
    ps_end = [e for e in events if e["task"] == "ps:0" and e["event"] == "task_exited"]
    assert ps_end and ps_end[0]["signal"] == "SIGHUP" and ps_end[0]["time"] > chief_end[0], events
    assert rec["result"] != "succeeded", rec


SEGMENT_PROGRAM = """\
import json, os, signal, sys, time
task = os.environ["TFCLUSTER_TASK"]
run_dir = os.environ["TFCLUSTER_RUN_DIR"]
print(task, "restart count", os.environ["TFCLUSTER_RESTART_COUNT"], flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(time.time()))
if task == "ps:0":
    while not stop:
        time.sleep(0.05)
    open(os.path.join(run_dir, "ps-stopped"), "a").write(f"{time.time()}\\n")
    sys.exit(0)
ckpt = os.path.join(run_dir, "ckpt.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
print(task, "resumes at step", step, flush=True)
while step < 200 and not stop:
    step += 1
    print('@tfcluster progress {"step": %d, "total": 200}' % step, flush=True)
    time.sleep(0.1)
json.dump({"step": step}, open(ckpt, "w"))
open(os.path.join(run_dir, "chief-saved"), "a").write(f"{time.time()} {step}\\n")
"""


def test_slurm_time_limit_warning_stops_in_order_and_requeues_a_segment(slurm_cluster, tmp_path):
    """slurm.requeue: Slurm's warning before the time limit (``--signal=B:USR1@LEAD``, sent here
    by scancel exactly as Slurm sends it) stops the run in order -- the chief saves its
    checkpoint before the ps stops -- and requeues the job; the next segment sees
    TFCLUSTER_RESTART_COUNT=1, resumes from the checkpoint and finishes; status shows one run
    with its segments."""
    (tmp_path / "prog.py").write_text(SEGMENT_PROGRAM)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 1}\nprogram: {command: [python, prog.py]}\n"
        f"base_port: {free_port_run(2, 30000 + os.getpid() % 2000)}\n"
        "slurm: {time: '30', signal_lead: 60, requeue: true, max_segments: 3}\n")
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    p = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", "cluster.yaml", "--backend",
                          "slurm", "--run-id", "q1", "--no-live"], cwd=str(tmp_path), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run_dir = tmp_path / "runs" / "q1"
    try:
        deadline = time.time() + 60
        log = run_dir / "worker-0.log"
        while time.time() < deadline and not (log.exists() and '"step": 30,' in log.read_text()):
            if p.poll() is not None:
                break
            time.sleep(0.3)
        if not (log.exists() and '"step": 30,' in log.read_text()):
            p.terminate()
            pytest.fail("no progress: " + p.communicate(timeout=60)[0][-3000:])
        job = json.loads((run_dir / "run.json").read_text())["slurm_job"]
        subprocess.run(["scancel", "--batch", "--signal=USR1", str(job)], check=True, timeout=30)
        out, _ = p.communicate(timeout=300)     # a requeued job waits ~10 s (cred_expire)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out[-4000:]
    saved = (run_dir / "chief-saved").read_text().split("\n")
    stopped = (run_dir / "ps-stopped").read_text().split("\n")
    first_save, first_step = float(saved[0].split()[0]), int(saved[0].split()[1])
    assert 30 <= first_step < 200 and first_save < float(stopped[0]), out[-3000:]
    assert "requeueing the job (segment 1, at most 3)" in out, out[-3000:]
    assert "[worker:0] worker:0 restart count 1" in out and f"resumes at step {first_step}" in out
    assert int(saved[1].split()[1]) == 200
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "succeeded" and rec["segments"] == 2, rec
    assert slurm_cluster.wait_empty_queue(30) == ""
    st = subprocess.run([sys.executable, "-m", "tfcluster", "status", str(run_dir)],
                        capture_output=True, text=True, timeout=60)
    assert st.returncode == 0 and "2 segments (requeued 1 time" in st.stdout, st.stdout + st.stderr
