"""ssh across hosts: hosts that are lost mid-run (the link down, or sshd and tasks killed) and at
the start (a host that does not answer). Three network namespaces with an sshd each
(tests/helpers/netns.py), as in test_ssh.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import PROGRAMS, netns

pytestmark = pytest.mark.multinode


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    yield from netns.namespace_hosts(tmp_path_factory, prefix="tfl", subnet="10.235")


def cluster_file(tmp_path, hosts, body: str, **remote) -> str:
    r = dict(hosts.remote(), **remote)
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in r.items())
    p = tmp_path / "cluster.yaml"
    p.write_text(textwrap.dedent(body) + "remote:\n" + lines)
    return str(p)


def _events(run_dir):
    return [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("how", ["link-down", "sshd-killed"])
def test_ssh_host_lost_mid_run_is_named_and_the_others_stop_in_order(hosts, tmp_path, how):
    """worker:1's host is lost mid-run: the launcher notices (keep-alives unanswered within
    remote.alive_interval x remote.alive_count_max, or the connection closed), the summary names
    the host and the setting, and the other tasks stop in order (worker:0 before the ps)."""
    shutil.copy(os.path.join(PROGRAMS, "steps_forever.py"), tmp_path / "prog.py")
    a, b, c = hosts.addrs
    path = cluster_file(tmp_path, hosts, f"""\
        cluster: {{ps: [{a}:2222], worker: [{b}:2222, {c}:2222]}}
        program: {{command: [python, prog.py]}}
    """, alive_interval=1, alive_count_max=3)
    p = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", path, "--backend", "ssh",
                          "--no-live", "--run-id", "l1"], cwd=str(tmp_path), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    run_dir = tmp_path / "runs" / "l1"
    logs = [run_dir / f"{t}.log" for t in ("ps-0", "worker-0", "worker-1")]
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not all(ln.exists() and "up" in ln.read_text() for ln in logs):
            time.sleep(0.2)
        assert all(ln.exists() and "up" in ln.read_text() for ln in logs), "the tasks did not start"
        lost_at = time.time()
        if how == "link-down":
            hosts.link(2, up=False)
        else:
            hosts.kill_host(2)
        out, _ = p.communicate(timeout=90)
        noticed = time.time() - lost_at
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        hosts.link(2, up=True)
        hosts.restart_sshd(2)
    assert p.returncode == 1, out[-3000:]
    assert f"host {c} lost" in out, out[-3000:]
    assert "remote.alive_interval 1s x remote.alive_count_max 3" in out, out[-3000:]
    assert "first failure: worker:1" in out, out[-3000:]
    print(f"{how}: noticed after {noticed:.1f}s")
    events = _events(run_dir)
    stops = {e["task"]: e["time"] for e in events if e["event"] == "stop_sent"}
    assert "worker:0" in stops and "ps:0" in stops and stops["worker:0"] <= stops["ps:0"], events
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "failed" and f"host {c} lost" in (rec["root_cause"] or ""), rec
    # the hosts still up have nothing left (the lost one ends its side when it sees the close)
    left = hosts.wait_quiet(30)
    assert not {ns: v for ns, v in left.items() if ns != hosts.names[2]}, left


ELASTIC_PROG = """\
import os, sys, time
task = os.environ["TFCLUSTER_TASK"]
print("up", task, os.environ.get("TFCLUSTER_LIVE_WORKERS"), os.environ.get("TFCLUSTER_WORKER_RANK"),
      os.environ.get("TFCLUSTER_RESTART_COUNT"), flush=True)
done = os.path.join(os.path.dirname(os.path.abspath(__file__)), "done")
while True:
    if task == "worker:0" and os.path.exists(done):
        sys.exit(0)
    time.sleep(0.2)
"""


def _ours(hosts, i):
    """What runs on host ``i`` besides sshd (the agent, the task)."""
    import psutil
    out = []
    for pid in hosts.pids(hosts.names[i]):
        try:
            cmd = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            continue
        if not cmd.startswith("sshd"):
            out.append((pid, cmd[:80]))
    return out


def _wait_event(run_dir, name, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (run_dir / "events.jsonl").exists():
            got = [e for e in _events(run_dir) if e["event"] == name]
            if got:
                return got
        time.sleep(0.2)
    return []


def test_an_elastic_run_shrinks_when_a_host_is_lost_and_grows_back_when_it_answers(hosts, tmp_path):
    """elastic: {min_workers: 2}, 3 workers on 3 hosts: worker:2's host's link goes down: the
    run goes on with 2 workers (nothing else restarted), the agent there, cut off, stops its task
    itself; the link comes back: a new connection and agent there, worker:2 starts again (its
    second attempt, 3 live workers, rank 2) and the run ends at the chief's exit 0."""
    (tmp_path / "prog.py").write_text(ELASTIC_PROG)
    a, b, c = hosts.addrs
    path = cluster_file(tmp_path, hosts, f"""\
        cluster: {{ps: [{a}:2222], worker: [{a}:2223, {b}:2222, {c}:2222]}}
        program: {{command: [python, prog.py]}}
        elastic: {{min_workers: 2}}
        watchdog: {{startup_timeout: 0}}
    """, alive_interval=1, alive_count_max=3)
    p = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", path, "--backend", "ssh",
                          "--no-live", "--run-id", "e1"], cwd=str(tmp_path), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    run_dir = tmp_path / "runs" / "e1"
    logs = {t: run_dir / f"{t.replace(':', '-')}.log" for t in ("ps:0", "worker:0", "worker:1", "worker:2")}
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not all(ln.exists() and "up" in ln.read_text() for ln in logs.values()):
            time.sleep(0.2)
        assert all(ln.exists() and "up" in ln.read_text() for ln in logs.values()), "the tasks did not start"
        assert "up worker:2 3 2 0" in logs["worker:2"].read_text()
        hosts.link(2, up=False)
        shrunk = _wait_event(run_dir, "run_shrunk", 30)
        assert shrunk and shrunk[0]["task"] == "worker:2" and shrunk[0]["node"] == c, shrunk
        # cut off, the agent on c hears no ping for ~3 + 5 s and stops worker:2 itself (sshd's
        # side of the session stays until it notices: not ours)
        deadline = time.time() + 20
        while time.time() < deadline and _ours(hosts, 2):
            time.sleep(0.2)
        assert not _ours(hosts, 2), f"worker:2 or its agent outlived the partition: {_ours(hosts, 2)}"
        hosts.link(2, up=True)
        grew = _wait_event(run_dir, "run_grew", 60)
        assert grew and grew[0]["task"] == "worker:2" and grew[0]["workers"] == 3, grew
        deadline = time.time() + 30
        while time.time() < deadline and "up worker:2 3 2 1" not in logs["worker:2"].read_text():
            time.sleep(0.2)
        assert "up worker:2 3 2 1" in logs["worker:2"].read_text()
        (tmp_path / "done").write_text("")
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        hosts.link(2, up=True)
    assert p.returncode == 0, out[-3000:]
    assert f"worker:2 left the run (its host {c} was lost): going on with 2 of 3 workers, min 2" in out, out[-3000:]
    assert f"{c} answers again: starting worker:2; 3 of 3 workers, min 2" in out, out[-3000:]
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["result"] == "succeeded" and rec["workers"]["in"] == 3 and not rec["workers"]["left"]
    starts = [e for e in _events(run_dir) if e["event"] == "task_started"]
    assert sorted(e["task"] for e in starts) == ["ps:0", "worker:0", "worker:1", "worker:2", "worker:2"]
    assert hosts.wait_quiet(30) == {}


def test_ssh_host_that_does_not_answer_fails_the_launch_fast(hosts, tmp_path):
    """A host whose link is down at the start: the launch fails after remote.connect_timeout,
    one line naming the task and the host, exit 2; the task already started elsewhere ends."""
    shutil.copy(os.path.join(PROGRAMS, "steps_forever.py"), tmp_path / "prog.py")
    a, b, c = hosts.addrs
    path = cluster_file(tmp_path, hosts, f"""\
        cluster: {{ps: [{a}:2222], worker: [{b}:2222]}}
        program: {{command: [python, prog.py]}}
    """, connect_timeout=2)
    hosts.link(1, up=False)
    try:
        start = time.time()
        r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", path, "--backend", "ssh",
                            "--no-live", "--run-id", "f1"], cwd=str(tmp_path), capture_output=True,
                           text=True, timeout=120)
        took = time.time() - start
    finally:
        hosts.link(1, up=True)
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("tfcluster: error:")]
    assert len(errors) == 1, r.stderr
    assert f"worker:0: cannot reach root@{b} over ssh" in errors[0] and \
        "remote.connect_timeout 2s" in errors[0], errors
    assert "Traceback" not in r.stderr
    print(f"refused after {took:.1f}s")
    assert hosts.wait_quiet(20) == {}


def _doctor(path, *extra):
    return subprocess.run([sys.executable, "-m", "tfcluster", *extra, path], capture_output=True,
                          text=True, timeout=180, cwd=os.path.dirname(path))


def test_doctor_names_the_host_whose_program_file_differs(hosts, tmp_path):
    """tfcluster doctor on two ssh hosts, each with its own copy of the program (workdir): with
    the same copies every host agrees (ports free and reachable across hosts, exit 0); with one
    copy changed, exit 1 naming that host and file; launch --doctor then starts nothing."""
    a, b, _ = hosts.addrs
    prog = "print('training')\n"
    (tmp_path / "prog.py").write_text(prog)
    for h in ("a", "b"):
        (tmp_path / h).mkdir()
        (tmp_path / h / "prog.py").write_text(prog)
    path = cluster_file(tmp_path, hosts, f"""\
        cluster: {{ps: [{a}:2222], worker: [{b}:2222]}}
        program: {{command: [python, prog.py]}}
        hosts: {{{a}: {{workdir: {tmp_path}/a}}, {b}: {{workdir: {tmp_path}/b}}}}
    """)
    good = _doctor(path, "doctor")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "every host agrees" in good.stderr
    table = good.stdout.splitlines()
    assert table[0].split()[:5] == ["HOST", "PYTHON", "TENSORFLOW", "TFCLUSTER", "PROGRAM"], table
    assert any(ln.startswith(a) and "2222:free" in ln for ln in table), table
    assert any(ln.startswith(b) and "2222:free" in ln for ln in table), table

    (tmp_path / "b" / "prog.py").write_text(prog + "print('changed on b')\n")
    bad = _doctor(path, "doctor")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    problems = [ln for ln in bad.stderr.splitlines() if ln.startswith("tfcluster doctor: host")]
    assert problems == [f"tfcluster doctor: host {b}: program file {tmp_path}/b/prog.py differs from "
                        f"the one here ({tmp_path}/prog.py)"], bad.stderr
    launch = subprocess.run([sys.executable, "-m", "tfcluster", "launch", path, "--backend", "ssh",
                             "--doctor", "--run-id", "d1"], capture_output=True, text=True,
                            timeout=180, cwd=str(tmp_path))
    assert launch.returncode == 1 and "launch not started" in launch.stderr, launch.stderr
    assert f"host {b}: program file" in launch.stderr
    assert not (tmp_path / "runs" / "d1" / "ps-0.log").exists()
    assert hosts.wait_quiet(20) == {}


def test_doctor_names_a_port_that_is_taken_on_its_host(hosts, tmp_path):
    """A task's port already held on its host: doctor names the host, port and task."""
    a, b, _ = hosts.addrs
    (tmp_path / "prog.py").write_text("pass\n")
    path = cluster_file(tmp_path, hosts, f"cluster: {{ps: [{a}:2222], worker: [{b}:2223]}}\n"
                                         f"program: {{command: [python, prog.py]}}\n")
    holder = subprocess.Popen(["ip", "netns", "exec", hosts.names[1], sys.executable, "-c",
                               "import socket, sys, time; s = socket.socket(); s.bind(('0.0.0.0', 2223)); "
                               "s.listen(); print('held', flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = _doctor(path, "doctor")
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"tfcluster doctor: host {b}: port 2223 of worker:0 is in use" in r.stderr, r.stderr
