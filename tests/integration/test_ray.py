"""``launch --backend ray`` on a real Ray head started by the test (one node on 127.0.0.2,
4 logical CPUs, no dashboard): trainer.py to its target with the endpoints Ray gave, a flaky
worker restarted, a killed task restarted, Ctrl-C in order with the final checkpoint, a
launcher SIGKILLed, a run Ray cannot place; after each, no actor, placement group or task
process is left."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers import PROGRAMS, ROOT, ray_nodes

pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(900)

TRAINER = os.path.join(ROOT, "trainer.py")


@pytest.fixture(scope="module")
def ray_head():
    cluster = ray_nodes.start()
    yield cluster
    cluster.stop()


def write(tmp_path, text, name="cluster.yaml"):
    p = tmp_path / name
    p.write_text(text + f"\nlogdir: {tmp_path / 'runs'}\n")
    return str(p)


def launch(cluster, path, *more, env=None):
    return subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", path, "--no-live", *more],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env or cluster.env())


def finish(proc, timeout=300):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"the launch did not end in {timeout}s:\n{out[-4000:]}")
    return proc.returncode, out


def record(tmp_path):
    for path in sorted((tmp_path / "runs").glob("*/run.json")):
        try:
            return json.loads(path.read_text())
        except ValueError:
            return None
    return None


def tasks(rec):
    return {t["task"]: t for t in rec["tasks"]}


def wait_for(tmp_path, check, timeout=180, what="the run"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        rec = record(tmp_path)
        if rec is not None and check(rec):
            return rec
        time.sleep(0.3)
    pytest.fail(f"{what} did not happen in {timeout}s: {record(tmp_path)}")


def step(rec):
    return max([t["progress"]["step"] for t in rec["tasks"] if t.get("progress")] or [0])


def nothing_left(cluster, rec):
    assert ray_nodes.leftovers(cluster) is None
    pids = [t["pid"] for t in rec["tasks"] if t.get("pid")]
    deadline = time.time() + 20
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
              for p in pids) and time.time() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE], pids


def test_trainer_reaches_its_target_on_ray_with_the_endpoints_ray_gave(ray_head, tmp_path):
    path = write(tmp_path, f"cluster: {{ps: 1, worker: 2}}\n"
                           f"program: {{command: [python, {TRAINER}], "
                           f"args: [--train_steps=300, '--checkpoint_dir={tmp_path / 'ckpt'}']}}")
    rc, out = finish(launch(ray_head, path, "--backend", "ray", "--profiler"))
    assert rc == 0, out[-4000:]
    rec = record(tmp_path)
    assert rec["backend"] == "ray"
    rows = tasks(rec)
    assert rows["worker:0"]["progress"]["step"] >= 300
    eps = {name: row["endpoint"] for name, row in rows.items()}
    assert all(ep.startswith("127.0.0.2:") for ep in eps.values()), eps
    # --profiler: each actor reserved a second port on its node for the task's profiler server
    for name, row in rows.items():
        prof = row.get("profiler_port")
        assert isinstance(prof, int) and str(prof) != row["endpoint"].rsplit(":", 1)[1], (name, row)
        assert row["env"]["TFCLUSTER_PROFILER_PORT"] == str(prof), (name, row["env"])
    # TF_CONFIG names the endpoints Ray gave, and so does the launcher's first line
    conf = json.loads(rows["worker:1"]["env"]["TF_CONFIG"])
    assert conf["cluster"] == {"ps": [eps["ps:0"]], "worker": [eps["worker:0"], eps["worker:1"]]}
    assert f"ps:0@{eps['ps:0']}" in out
    assert "ps:0 (pid" in out and rows["ps:0"]["exit"] == "SIGTERM"    # ps stopped by tfcluster
    nothing_left(ray_head, rec)


def test_a_task_on_ray_knows_it_is_supervised(ray_head, tmp_path):
    """The actor that starts a task is its supervisor (TFCLUSTER_LAUNCHER_PID), as the launcher,
    the ssh wrapper and the Slurm node agent are: replicas leave stopping the ps to tfcluster."""
    prog = "from tfcluster.contract import supervised; print('supervised:', supervised())"
    path = write(tmp_path, "cluster: {worker: 1}\n"
                           f"program: {{command: [python, -c, {json.dumps(prog)}]}}")
    rc, out = finish(launch(ray_head, path, "--backend", "ray"))
    assert rc == 0, out[-4000:]
    assert "supervised: True" in out, out[-4000:]
    nothing_left(ray_head, record(tmp_path))


def test_a_flaky_worker_is_restarted_and_sync_training_ends(ray_head, tmp_path):
    flaky = tmp_path / "flaky.py"
    flaky.write_text(
        "import os, sys\n"
        "print('cuda=%r' % os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True)\n"
        "if os.environ['TFCLUSTER_TASK'] == 'worker:1' and os.environ['TFCLUSTER_RESTART_COUNT'] == '0':\n"
        "    print('worker:1: failing on purpose', flush=True)\n"
        "    sys.exit(3)\n"
        f"os.execv(sys.executable, [sys.executable, {TRAINER!r}] + sys.argv[1:])\n")
    path = write(tmp_path, f"backend: ray\nray: {{address: {ray_head.address}, strategy: PACK}}\n"
                           f"cluster: {{ps: 1, worker: 2}}\n"
                           f"restart: {{policy: on-failure, max_restarts: 2, backoff: 0.5, "
                           f"min_uptime: 0}}\n"
                           f"program: {{command: [python, {flaky}], "
                           f"args: [--mode=sync, --train_steps=200, '--checkpoint_dir={tmp_path / 'ckpt'}']}}")
    env = ray_head.env()
    del env["RAY_ADDRESS"]            # the file's ray.address
    rc, out = finish(launch(ray_head, path, env=env))
    assert rc == 0, out[-4000:]
    rec = record(tmp_path)
    rows = tasks(rec)
    assert rec["backend"] == "ray"
    assert rows["worker:1"]["restarts"] == 1 and rows["worker:0"]["restarts"] == 0
    assert "failing on purpose" in out and "restarted worker:1" in out
    assert rows["worker:0"]["progress"]["step"] >= 200
    for name in rows:          # Ray gave no task a GPU: none sees one
        with open(rows[name]["log"]) as log:
            assert "cuda=''" in log.read(), name
    nothing_left(ray_head, rec)


def test_a_killed_task_is_restarted_then_ctrl_c_stops_in_order_with_the_final_checkpoint(ray_head, tmp_path):
    ckpt = tmp_path / "ckpt"
    path = write(tmp_path, f"backend: ray\ncluster: {{ps: 1, worker: 2}}\n"
                           f"restart: {{policy: on-failure, max_restarts: 2, backoff: 0.5}}\n"
                           f"program: {{command: [python, {TRAINER}], "
                           f"args: [--train_steps=10000000, --step_delay=0.01, '--checkpoint_dir={ckpt}']}}")
    proc = launch(ray_head, path)
    try:
        rec = wait_for(tmp_path, lambda r: step(r) >= 100, what="training")
        victim = tasks(rec)["worker:1"]["pid"]
        os.kill(victim, signal.SIGKILL)         # the task's process on its node
        rec = wait_for(tmp_path, lambda r: tasks(r)["worker:1"]["restarts"] == 1
                       and tasks(r)["worker:1"]["state"] == "running"
                       and tasks(r)["worker:1"].get("progress") is not None
                       and tasks(r)["worker:1"]["progress"]["step"] > 0, what="worker:1's restart")
        at = step(rec)
        proc.send_signal(signal.SIGINT)
        rc, out = finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert rc == 130, out[-4000:]
    rec = record(tmp_path)
    rows = tasks(rec)
    assert rows["worker:1"]["restarts"] == 1
    assert "restarted worker:1" in out and "first failure" not in out
    # chief before ps: the ps was stopped only after the chief had ended (and saved)
    assert rows["worker:0"]["ended"] <= rows["ps:0"]["ended"], rows
    run_dir = os.path.dirname(rows["worker:0"]["log"])
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        events = [json.loads(line) for line in f]
    sent = [e["task"] for e in events if e["event"] == "stop_sent"]
    assert sent and sent[-1] == "ps:0" and set(sent[:-1]) <= {"worker:0", "worker:1"}, sent
    saved = int(re.search(r'model_checkpoint_path: ".*-(\d+)"', (ckpt / "checkpoint").read_text()).group(1))
    assert saved >= at, (saved, at)
    nothing_left(ray_head, rec)


def test_a_launcher_killed_with_sigkill_leaves_no_actor_group_or_task(ray_head, tmp_path):
    path = write(tmp_path, f"backend: ray\ncluster: {{ps: 1, worker: 1}}\n"
                           f"program: {{command: [python, {TRAINER}], args: [--train_steps=10000000, --step_delay=0.01]}}")
    proc = launch(ray_head, path)
    try:
        rec = wait_for(tmp_path, lambda r: step(r) >= 20, what="training")
        # what the dashboard lists: one actor per task, named, and the run's placement group
        shown = ray_nodes.ask(ray_head, "{'actors': sorted(a.get('Name') for a in state.actors().values() "
                              "if a['State'] == 'ALIVE'), 'groups': [(v['name'], len(v['bundles'])) for v "
                              "in ray.util.placement_group_table().values() if v['state'] == 'CREATED']}")
        assert shown["actors"] == ["tfcluster ps:0", "tfcluster worker:0"], shown
        assert shown["groups"] == [[f"tfcluster-{rec['run_id']}", 2]], shown
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    nothing_left(ray_head, rec)


def test_a_run_ray_cannot_place_fails_in_time_naming_the_task_and_resources(ray_head, tmp_path):
    path = write(tmp_path, f"backend: ray\nray: {{placement_timeout: 3, jobs: {{worker: {{num_gpus: 1}}}}}}\n"
                           f"cluster: {{ps: 1, worker: 1}}\n"
                           f"program: {{command: [python, {TRAINER}]}}")
    start = time.time()
    rc, out = finish(launch(ray_head, path), timeout=120)
    assert rc == 2, out
    assert "could not be placed within 3s" in out and "worker:0: CPU 1, GPU 1" in out, out
    assert "ps:0: CPU 1;" in out      # ps asks no GPU
    assert "Traceback" not in out
    assert time.time() - start < 60
    assert ray_nodes.leftovers(ray_head) is None


def test_detach_then_status_logs_and_stop_by_run_id(ray_head, tmp_path):
    path = write(tmp_path, f"backend: ray\ncluster: {{ps: 1, worker: 1}}\n"
                           f"program: {{command: [python, {os.path.join(PROGRAMS, 'listener.py')}]}}")

    def tfcluster(*args):
        return subprocess.run([sys.executable, "-m", "tfcluster", *args], capture_output=True,
                              text=True, timeout=120, env=ray_head.env())

    r = tfcluster("launch", path, "--detach", "--run-id", "rb1", "--stop-timeout", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    rec = wait_for(tmp_path, lambda r: all(t["state"] == "running" for t in r["tasks"]),
                   what="both tasks running")
    status = tfcluster("status", "rb1")
    assert status.returncode == 3, status.stderr      # 3: running
    for row in rec["tasks"]:
        assert row["endpoint"].startswith("127.0.0.2:") and row["endpoint"] in status.stdout
    logs = wait_for(tmp_path, lambda r: "listening" in tfcluster("logs", "rb1", "worker:0").stdout,
                    what="worker:0's log")
    stop = tfcluster("stop", "rb1")
    assert stop.returncode == 0 and "ended: interrupted" in stop.stderr, stop.stderr
    rec = record(tmp_path)
    assert rec["result"] == "interrupted" and rec["backend"] == "ray"
    nothing_left(ray_head, logs)
