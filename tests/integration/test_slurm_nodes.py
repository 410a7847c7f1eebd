"""Slurm across nodes: a real Slurm of three nodes (one slurmctld, three slurmd, each slurmd in
its own network namespace on a bridge; tests/helpers/slurm_nodes.py) that the ``three_nodes``
fixture (tests/integration/conftest.py) starts and stops. The file system is shared, so the run
folder is the nodes' shared folder, as on a cluster with a shared home.

Needs root, Slurm and munge; skips with the reason otherwise."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import PROGRAMS, ROOT

pytestmark = pytest.mark.multinode


def _launch(path, *extra, timeout=240):
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    return subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(path), "--backend", "slurm",
                           "--no-live", *extra], cwd=os.path.dirname(str(path)), env=env,
                          capture_output=True, text=True, timeout=timeout)


def _popen(path, *extra):
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    return subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", str(path), "--backend",
                             "slurm", "--no-live", *extra], cwd=os.path.dirname(str(path)), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(cond, timeout, proc=None, what=""):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.3)
    if cond():
        return True
    out = ""
    if proc is not None:
        if proc.poll() is None:
            proc.terminate()
        out = proc.communicate(timeout=120)[0][-3000:]
    pytest.fail(f"{what} did not happen: {out}")


def _started_on(run_dir):
    """{task: node} from the tasks' own 'started on NODE:PORT' lines."""
    out = {}
    for log in run_dir.glob("*.log"):
        m = re.search(r"tfcluster: started on (\w+):\d+", log.read_text(errors="replace"))
        if m:
            out[log.stem.replace("-", ":", 1)] = m.group(1)
    return out


@pytest.mark.tf
def test_slurm_trains_trainer_py_on_three_nodes(slurm3, tmp_path):
    """The template trainer.py, ps and two workers, one per node (srun across nodes): each task
    on its own node finds the others by node name, the run folder is shared between the nodes,
    the run succeeds and the chief's checkpoint has the last step."""
    ckpt = tmp_path / "ckpt"
    (tmp_path / "cluster.yaml").write_text(textwrap.dedent(f"""\
        cluster: {{ps: 1, worker: 2}}
        program:
          command: [python, {os.path.join(ROOT, "trainer.py")}]
          args: [--train_steps=300, --checkpoint_dir={ckpt}, --save_summaries_steps=0,
                 --progress_secs=0.5]
        base_port: 2222
        grace: 30
        logdir: runs
        slurm: {{sbatch: [--ntasks-per-node=1]}}
    """))
    r = _launch(tmp_path / "cluster.yaml", "--run-id", "x1")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    run_dir = tmp_path / "runs" / "x1"
    where = _started_on(run_dir)
    assert set(where) == {"ps:0", "worker:0", "worker:1"} and sorted(where.values()) == ["n1", "n2", "n3"], where
    # TF_CONFIG names the nodes; every task's log is in the one run folder
    assert '"ps":["n1:2222"]' in (run_dir / "ps-0.log").read_text() or "n1:2222" in out, out[-3000:]
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "succeeded", rec
    rows = {t["task"]: t for t in rec["tasks"]}
    assert rows["worker:0"]["state"] == "succeeded" and rows["ps:0"]["state"] == "stopped", rows
    assert {rows[t]["host"] for t in rows} == {"n1", "n2", "n3"}, rows
    import tensorflow as tf
    latest = tf.train.latest_checkpoint(str(ckpt))
    assert latest and int(latest.rsplit("-", 1)[1]) >= 300, latest
    assert slurm3.wait_empty_queue(20) == ""


def test_slurm_node_lost_mid_run_fails_the_run_and_names_the_node(slurm3, tmp_path):
    """A node dies mid-run (its link down, its slurmd and tasks killed): Slurm marks it down and
    ends the job (NODE_FAIL; no requeue asked for); the launcher names the node and the task that
    ran there, fails the run, and run.json and events.jsonl record the lost node."""
    shutil.copy(os.path.join(PROGRAMS, "steps_forever.py"), tmp_path / "prog.py")
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\nbase_port: 2222\n"
        "slurm: {sbatch: [--ntasks-per-node=1]}\n")
    p = _popen(tmp_path / "cluster.yaml", "--run-id", "l1")
    run_dir = tmp_path / "runs" / "l1"
    try:
        _wait_for(lambda: len(_started_on(run_dir)) == 3, 60, p, "the three tasks' start")
        where = _started_on(run_dir)
        victim = where["worker:1"]
        slurm3.lose_node(victim)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 1, out[-3000:]
    assert f"node {victim} was lost mid-run" in out and "it ran worker:1" in out, out[-3000:]
    assert "Slurm failed the job (node_fail)" in out, out[-3000:]
    assert f"lost node: {victim}" in out, out[-3000:]
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "failed", rec
    assert [(n["node"], n["tasks"]) for n in rec["lost_nodes"]] == [(victim, ["worker:1"])], rec
    assert rec["root_cause"].startswith(f"node {victim} lost"), rec
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("task"), e.get("node")) for e in events if e["event"] == "node_lost"] \
        == [("node_lost", "worker:1", victim)]
    assert slurm3.wait_empty_queue(30) == ""


SEGMENT_PROGRAM = """\
import json, os, signal, sys, time
task = os.environ["TFCLUSTER_TASK"]
run_dir = os.environ["TFCLUSTER_RUN_DIR"]
again = int(os.environ["TFCLUSTER_RESTART_COUNT"])
print(task, "restart count", again, "on", os.environ["SLURMD_NODENAME"], flush=True)
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
while step < 2000 and not stop:
    step += 1 if not again else 100      # a resumed segment finishes quickly
    print('@tfcluster progress {"step": %d, "total": 2000}' % min(step, 2000), flush=True)
    time.sleep(0.1)
json.dump({"step": min(step, 2000)}, open(ckpt, "w"))
open(os.path.join(run_dir, "chief-saved"), "a").write(f"{time.time()} {min(step, 2000)}\\n")
"""


def test_slurm_node_lost_with_requeue_resumes_on_the_other_nodes(slurm3, tmp_path):
    """``slurm.requeue: true``: a node lost mid-run (two nodes of three in use) is named, Slurm
    requeues the job, and the next segment runs on the nodes still up -- the spare one included
    -- resumes from the checkpoint and finishes; the record has the lost node and two segments."""
    (tmp_path / "prog.py").write_text(SEGMENT_PROGRAM)
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\nbase_port: 2222\n"
        "grace: 5\nslurm: {requeue: true, sbatch: [--ntasks-per-node=2]}\n")
    p = _popen(tmp_path / "cluster.yaml", "--run-id", "r1")
    run_dir = tmp_path / "runs" / "r1"
    try:
        _wait_for(lambda: len(_started_on(run_dir)) == 3 and (run_dir / "worker-0.log").exists()
                  and '"step": 20,' in (run_dir / "worker-0.log").read_text(), 60, p, "the first steps")
        where = _started_on(run_dir)
        victim = where["worker:1"]
        assert where["ps:0"] == where["worker:0"] != victim, where     # block: 2 tasks a node
        slurm3.lose_node(victim)
        out, _ = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert f"node {victim} was lost mid-run" in out and "it ran worker:1" in out, out[-3000:]
    assert "Slurm requeued the job" in out, out[-3000:]
    assert p.returncode == 0, out[-3000:]
    second = re.findall(r"\[(worker:\d)\] worker:\d restart count 1 on (\w+)", out)
    assert second and victim not in dict(second).values(), (second, out[-3000:])
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "succeeded" and rec["segments"] == 2, rec
    assert [n["node"] for n in rec["lost_nodes"]] == [victim], rec
    assert slurm3.wait_empty_queue(30) == ""


def test_doctor_inside_an_allocation_checks_every_node(slurm3, tmp_path):
    """``salloc -N 3 tfcluster doctor FILE --backend slurm``: one probe per node (srun), one row
    per node with its versions, the program file's hash and its ports; every node agrees."""
    (tmp_path / "prog.py").write_text("print('hi')\n")
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, prog.py]}\nbase_port: 2222\n")
    r = subprocess.run(["salloc", "-N", "3", sys.executable, "-m", "tfcluster", "doctor", "cluster.yaml",
                        "--backend", "slurm"], cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:]}
    assert {"n1", "n2", "n3"} <= set(rows), r.stdout
    assert all("2222:free" in rows[n] for n in ("n1", "n2", "n3")), r.stdout
    assert "every host agrees" in r.stderr
    assert slurm3.wait_empty_queue(30) == ""


def _trainer_file(tmp_path, workers, steps, slurm, base_port=2222, step_delay=0.0):
    """trainer.py, one ps and ``workers`` workers, one task a node, checkpoints only at the end;
    ``step_delay``: a run that only Slurm ends sleeps between its steps, leaving the CPU to the
    tests beside it."""
    ckpt = tmp_path / "ckpt"
    (tmp_path / "cluster.yaml").write_text(textwrap.dedent(f"""\
        cluster: {{ps: 1, worker: {workers}}}
        program:
          command: [python, {os.path.join(ROOT, "trainer.py")}]
          args: [--train_steps={steps}, --checkpoint_dir={ckpt}, --save_checkpoint_secs=3600,
                 --save_summaries_steps=0, --print_placement=false, --progress_secs=0.5,
                 --step_delay={step_delay}]
        base_port: {base_port}
        grace: 30
        logdir: runs
        slurm: {{{slurm}sbatch: [--ntasks-per-node=1]}}
    """))
    return ckpt


def _checkpoint_step(ckpt):
    import tensorflow as tf
    latest = tf.train.latest_checkpoint(str(ckpt))
    return int(latest.rsplit("-", 1)[1]) if latest else None


def _first_ends(run_dir):
    """{task: (time, signal)} of each task's first end in the run's events (the first segment)."""
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    out = {}
    for e in events:
        if e["event"] == "task_exited" and e["task"] not in out:
            out[e["task"]] = (e["time"], e.get("signal"))
    return out, events


def _stop_step(out):
    """The global step at which the chief says Slurm's SIGTERM stopped it (0: it did not say)."""
    m = re.search(r"\[worker:0\] \S+ stopped by signal 15 at global_step=(\d+); the final "
                  r"checkpoint is written on close", out)
    return int(m.group(1)) if m else 0


TRAINED = re.compile(r'"step": [1-9][0-9]+')


@pytest.mark.tf
def test_slurm_partition_preemption_stops_trainer_in_order_and_the_requeued_job_resumes(slurm3, tmp_path):
    """A real partition preemption of a running trainer.py cluster (ps and two workers on three
    nodes, ``slurm.partition: low``, ``slurm.requeue: true``): a ``high`` job (PriorityTier 10)
    takes the nodes. Slurm SIGTERMs the tasks at once (GraceTime 20 s); the chief and the other
    worker end first, the chief with its final checkpoint, the ps after them (its agent's
    SIGHUP). The job is requeued, and once the high job is done the next segment restores that
    checkpoint, trains on from its global step and the run succeeds."""
    # the target: far enough that the first segment (stopped a few seconds after training shows;
    # two workers sleeping 10 ms a step make at most ~180 steps/s) cannot reach it, near enough
    # that the second one is short
    target = 3000
    ckpt = _trainer_file(tmp_path, 2, target, "partition: low, requeue: true, max_segments: 3, ",
                         step_delay=0.01)
    p = _popen(tmp_path / "cluster.yaml", "--run-id", "p1")
    run_dir = tmp_path / "runs" / "p1"
    high_out = tmp_path / "high.out"
    try:
        log = run_dir / "worker-0.log"
        _wait_for(lambda: log.exists() and TRAINED.search(log.read_text()), 120, p, "training")
        job = json.loads((run_dir / "run.json").read_text())["slurm_job"]
        subprocess.run(["sbatch", "--parsable", "-p", "high", "-N3", "--exclusive",
                        f"--output={high_out}", "--wrap", "echo high on $SLURM_JOB_NODELIST; sleep 5"],
                       capture_output=True, text=True, timeout=30, check=True)
        _wait_for(lambda: high_out.exists() and "high on n[1-3]" in high_out.read_text(), 120, p,
                  "the high job's start")
        saved = _checkpoint_step(ckpt)       # the low job's first segment is over
        out, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out[-4000:]
    assert saved and saved >= _stop_step(out) > 0, (saved, out[-4000:])
    assert "was preempted and stopped in order; requeueing the job (segment 1, at most 3)" in out, out[-4000:]
    assert f"job {job} was requeued" in out, out[-4000:]
    # The checkpoint's name carries the step the chief saved at; the global_step inside may be a
    # step later: under async training the other worker's step can land while the save reads.
    restored = re.search(r"\[worker:0\] \S+ restored \S+-(\d+) \(global_step=(\d+)\)", out)
    assert restored and int(restored.group(1)) == saved, out[-4000:]
    at = int(restored.group(2))
    assert saved <= at <= saved + 2, out[-4000:]
    assert re.search(rf"from global_step=({at}|{at + 1}) to {target}", out), out[-4000:]
    ends, events = _first_ends(run_dir)
    assert ends["ps:0"][1] == "SIGHUP" and ends["ps:0"][0] > max(ends["worker:0"][0], ends["worker:1"][0]), events
    assert _checkpoint_step(ckpt) >= target
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "succeeded" and rec["segments"] == 2, rec
    assert slurm3.wait_empty_queue(60) == ""


@pytest.mark.tf
def test_slurm_time_limits_with_and_without_the_warning_stop_in_order(slurm3, tmp_path):
    """Two real time limits, one minute each, run side by side (two jobs on the three nodes, so
    that the suite waits for one minute, not two):

    * with the warning (``slurm.time: 1`` minute, ``signal_lead: 50``, ``requeue``; the segment
      program): Slurm itself sends the warning; the chief (on one node) saves its checkpoint
      before the ps (on another) stops, the job is requeued, and the next segment resumes from
      the checkpoint and finishes;
    * without it (trainer.py, no ``slurm.time``; the limit is set on the running job with
      ``scontrol update TimeLimit=1``): Slurm ends the job itself (TIMEOUT), SIGTERM to every task
      at once and SIGKILL after KillWait. The chief (one node) stops and writes its final
      checkpoint before its ps (another node) is stopped by its agent."""
    warned = tmp_path / "warned"
    warned.mkdir()
    (warned / "prog.py").write_text(SEGMENT_PROGRAM)
    (warned / "cluster.yaml").write_text(
        "cluster: {ps: 1, worker: 1}\nprogram: {command: [python, prog.py]}\nbase_port: 2222\n"
        "slurm: {time: '1', signal_lead: 50, requeue: true, max_segments: 2,"
        " sbatch: [--ntasks-per-node=1]}\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    ckpt = _trainer_file(plain, 1, 100000000, "", base_port=2322,    # the other job's ports free
                         step_delay=0.01)
    first = _popen(warned / "cluster.yaml", "--run-id", "t1")
    p = _popen(plain / "cluster.yaml", "--run-id", "t2")
    run_dir = plain / "runs" / "t2"
    try:
        log = run_dir / "worker-0.log"
        _wait_for(lambda: log.exists() and TRAINED.search(log.read_text()), 120, p, "training")
        job = json.loads((run_dir / "run.json").read_text())["slurm_job"]
        info = subprocess.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True,
                              text=True, timeout=30).stdout
        assert "TimeLimit=UNLIMITED" in info, info      # no limit asked for, so no --signal
        subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], check=True, timeout=30)
        first_out, _ = first.communicate(timeout=300)
        out, _ = p.communicate(timeout=240)
    finally:
        for proc in (first, p):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # with the warning
    first_dir = warned / "runs" / "t1"
    assert first.returncode == 0, first_out[-4000:]
    saved = (first_dir / "chief-saved").read_text().split("\n")
    stopped = (first_dir / "ps-stopped").read_text().split("\n")
    first_save, first_step = float(saved[0].split()[0]), int(saved[0].split()[1])
    assert 0 < first_step < 2000 and first_save < float(stopped[0]), first_out[-3000:]
    assert "requeueing the job (segment 1, at most 2)" in first_out, first_out[-3000:]
    assert f"resumes at step {first_step}" in first_out and int(saved[1].split()[1]) == 2000, first_out[-3000:]
    nodes = re.findall(r"\[(ps:0|worker:0)\] \S+ restart count 0 on (\w+)", first_out)
    assert len(dict(nodes)) == 2 and len(set(dict(nodes).values())) == 2, nodes
    rec = json.loads((first_dir / "run.json").read_text())
    assert rec["result"] == "succeeded" and rec["segments"] == 2, rec
    # without it
    state = subprocess.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True,
                           text=True, timeout=30).stdout
    assert "JobState=TIMEOUT" in state, (state, out[-3000:])
    assert p.returncode != 0, out[-3000:]
    saved = _checkpoint_step(ckpt)
    assert saved and saved >= _stop_step(out) > 0, (saved, out[-3000:])
    ends, events = _first_ends(run_dir)
    assert ends["ps:0"][1] == "SIGHUP" and ends["ps:0"][0] > ends["worker:0"][0], events
    where = _started_on(run_dir)
    assert where["ps:0"] != where["worker:0"], where
    assert slurm3.wait_empty_queue(60) == ""


# four workers that sleep 10 ms a step (at most ~360 steps/s, two of them ~180): the shrink comes
# 10-30 s after the node is lost, well short of the target, and the run then ends in ~30 s
ELASTIC_TARGET = 8000


def _chief_step(run_dir) -> int:
    """The highest global step the chief (worker:0) has printed so far."""
    try:
        text = (run_dir / "worker-0.log").read_text(errors="replace")
    except OSError:
        return 0
    steps = [int(s) for s in re.findall(r'"step": (\d+)|step = (\d+)', text) for s in s if s]
    return max(steps, default=0)


@pytest.mark.tf
def test_slurm_elastic_node_lost_mid_run_shrinks_the_run_which_ends_at_its_target(slurm3, tmp_path):
    """``elastic: {min_workers: 2}`` on Slurm: the job is submitted with ``--no-kill``; trainer.py
    async, 1 ps + 4 workers (worker:0 the chief) over the three nodes, two tasks a node. The node
    of worker:1 and worker:2 dies mid-run (its link down, its slurmd and tasks killed): Slurm keeps
    the job, the launcher names the node, the other nodes' run machines let the two workers leave
    (2 of 4, min 2), no task of the other nodes restarts, and the run reaches its target step and
    succeeds; run.json and events.jsonl list the shrink."""
    ckpt = tmp_path / "ckpt"
    (tmp_path / "cluster.yaml").write_text(textwrap.dedent(f"""\
        cluster: {{ps: 1, worker: 4}}
        program:
          command: [python, {os.path.join(ROOT, "trainer.py")}]
          args: [--train_steps={ELASTIC_TARGET}, --checkpoint_dir={ckpt}, --save_summaries_steps=0,
                 --progress_secs=0.5, --step_delay=0.01]
        base_port: 2222
        grace: 30
        logdir: runs
        elastic: {{min_workers: 2}}
        slurm: {{sbatch: [--ntasks-per-node=2]}}
    """))
    p = _popen(tmp_path / "cluster.yaml", "--run-id", "e1")
    run_dir = tmp_path / "runs" / "e1"
    try:
        _wait_for(lambda: len(_started_on(run_dir)) == 5, 90, p, "the five tasks' start")
        where = _started_on(run_dir)
        victim = where["worker:1"]
        assert where["worker:2"] == victim and victim not in (where["ps:0"], where["worker:0"]), where
        assert "#SBATCH --no-kill" in (run_dir / "job.sbatch").read_text()
        _wait_for(lambda: _chief_step(run_dir) >= 300, 120, p, "the chief's step 300")
        step_lost, t_lost = _chief_step(run_dir), time.time()
        slurm3.lose_node(victim)
        _wait_for(lambda: "left the run" in (run_dir / "worker-0.log").read_text(errors="replace"),
                  90, p, "the shrink")
        step_shrunk = _chief_step(run_dir)
        print(f"shrunk {time.time() - t_lost:.1f}s after the node was lost; chief step "
              f"{step_lost} -> {step_shrunk} of {ELASTIC_TARGET}")
        assert p.poll() is None and step_shrunk < ELASTIC_TARGET, "the run ended before the shrink"
        out, _ = p.communicate(timeout=400)
        print(f"ended {time.time() - t_lost:.1f}s after the node was lost")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out[-4000:]
    assert f"node {victim} was lost mid-run" in out and "it ran worker:1, worker:2" in out, out[-3000:]
    assert "Slurm kept the job (--no-kill)" in out, out[-3000:]
    assert "going on with 2 of 4 workers, min 2" in out, out[-3000:]
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "succeeded" and rec["exit_code"] == 0, rec
    assert rec["workers"]["in"] == 2 and rec["workers"]["of"] == 4 and rec["workers"]["min"] == 2, rec
    assert sorted(rec["workers"]["left"]) == ["worker:1", "worker:2"], rec
    assert [(n["node"], n["tasks"]) for n in rec["lost_nodes"]] == [(victim, ["worker:1", "worker:2"])], rec
    rows = {t["task"]: t for t in rec["tasks"]}
    assert rows["worker:0"]["state"] == "succeeded", rows
    for t in ("ps:0", "worker:0", "worker:3"):          # nothing on the other nodes restarted
        assert rows[t]["restarts"] == 0, rows[t]
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    shrunk = [e for e in events if e["event"] == "run_shrunk"]
    assert sorted(e["task"] for e in shrunk) == ["worker:1", "worker:2"], shrunk
    assert all(e["node"] == victim for e in shrunk), shrunk
    starts = [e.get("task") for e in events if e["event"] == "task_started"]
    assert sorted(starts) == ["ps:0", "worker:0", "worker:1", "worker:2", "worker:3"], starts
    import tensorflow as tf
    latest = tf.train.latest_checkpoint(str(ckpt))
    assert latest and int(latest.rsplit("-", 1)[1]) >= ELASTIC_TARGET, latest
    assert slurm3.wait_empty_queue(60) == ""
