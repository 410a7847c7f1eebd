"""ssh backend against real hosts on one machine: three network namespaces, each with its own
address and its own sshd (Debian's openssh-server) that accepts a key made for the test.

The namespaces and their sshd are made and removed by the ``hosts`` fixture
(tests/helpers/netns.py, shared with scripts/scale_ssh.py; needs root and ``ip``). Only network
namespaces: the file system and process ids are shared, so the tests can check remote
processes with psutil, and the programs are files in the test's tmp folder.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest

from helpers import PROGRAMS, ROOT, netns
from helpers.netns import _status
from helpers.sizing_runs import launch_until_settled
from tfcluster.clusterfile import config
from tfcluster.errors import UserError

# A tiny between-graph training program (ps serves, workers train a few steps).
with open(os.path.join(PROGRAMS, "tiny_tf.py")) as _f:
    TINY_TF = _f.read()

@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    yield from netns.namespace_hosts(tmp_path_factory)


def _yaml_remote(hosts) -> str:
    r = hosts.remote()
    return textwrap.dedent(f"""\
        remote:
          user: {r["user"]}
          identity_file: {r["identity_file"]}
          python: {r["python"]}
          ssh_options: [{", ".join(r["ssh_options"])}]
    """)


def _file(tmp_path, hosts, body: str, name="cluster.yaml") -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body) + _yaml_remote(hosts))
    return str(p)


def _backend(path):
    from tfcluster.backends.ssh import SshBackend
    return SshBackend(config.load(path), stop_timeout=3.0)


def _spec(name, argv, host, cwd, env=None):
    from tfcluster.backends.ssh import ProcessSpec
    return ProcessSpec(name=name, argv=argv, env=env or {}, cwd=cwd, host=host)


def _read_until(handle, needle: bytes, timeout=20.0) -> bytes:
    import select
    buf = b""
    deadline = time.time() + timeout
    fd = handle.stdout.fileno()
    while needle not in buf and time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
    return buf


# --------------------------------------------------------------------------------------

@pytest.mark.tf
def test_ssh_trains_1ps_2workers_across_three_hosts(hosts, tmp_path, own_tmp):
    """tfcluster launch --backend ssh: each task in its own namespace (all on port 2222)."""
    (tmp_path / "tiny_tf.py").write_text(TINY_TF)
    a, b, c = hosts.addrs
    path = _file(tmp_path, hosts, f"""\
        cluster:
          ps: [{a}:2222]
          worker: [{b}:2222, {c}:2222]
        program: {{command: [python, tiny_tf.py], args: ["10"]}}
        grace: 20
    """)
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", path, "--backend", "ssh",
                        "--no-live", "--run-id", "s1"], cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=180, env=dict(os.environ, TMPDIR=own_tmp))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "TRAINED worker:0" in out, out[-3000:]
    assert f"grpc://{b}:2222" in out or f"{b}:2222" in out
    assert hosts.wait_quiet() == {}, "processes left in the namespaces"
    assert not _ssh_clients(own_tmp), "ssh master connection left running"


@pytest.mark.tf
@pytest.mark.timeout(900)
def test_ssh_slots_place_counted_jobs_and_train_trainer_py_with_ports_chosen_on_the_hosts(hosts, tmp_path):
    """hosts: {A: {slots: 3}, B: {slots: 3}} with cluster: {ps: 1, worker: 4}: the tasks fill
    A then B in Slurm's block order (ps:0, worker:0, worker:1 on A; worker:2, worker:3 on B),
    each host's node agent chooses their ports there, trainer.py trains to its target, and the
    record has every task's host and port."""
    a, b = hosts.addrs[0], hosts.addrs[1]
    trainer = os.path.join(ROOT, "trainer.py")
    path = _file(tmp_path, hosts, f"""\
        cluster: {{ps: 1, worker: 4}}
        hosts: {{"{a}": {{slots: 3}}, "{b}": {{slots: 3}}}}
        program: {{command: [python, {trainer}], args: [--train_steps=300, --checkpoint_dir={tmp_path}/ckpt]}}
    """)
    v = subprocess.run([sys.executable, "-m", "tfcluster", "validate", "--file-only", path],
                       capture_output=True, text=True, timeout=60)
    assert v.returncode == 0 and f"worker:2  {b}, port chosen at the start" in v.stdout, v.stdout + v.stderr
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", path, "--no-live", "--run-id", "sl1"],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    rec = json.loads((tmp_path / "runs" / "sl1" / "run.json").read_text())
    hosts_of = {t["task"]: t["endpoint"].rsplit(":", 1)[0] for t in rec["tasks"]}
    assert hosts_of == {"ps:0": a, "worker:0": a, "worker:1": a, "worker:2": b, "worker:3": b}, hosts_of
    ports = [int(t["endpoint"].rsplit(":", 1)[1]) for t in rec["tasks"]]
    assert all(1 <= p <= 65535 for p in ports) and len(set(zip(hosts_of.values(), ports))) == 5
    assert max((t.get("progress") or {}).get("step", 0) for t in rec["tasks"]) >= 300
    assert hosts.wait_quiet() == {}, "processes left in the namespaces"


@pytest.mark.tf
@pytest.mark.timeout(900)
def test_a_sized_run_grows_onto_the_spare_slots_of_another_host_with_nothing_restarted(hosts, tmp_path):
    """``elastic: {max_workers: 4, scale: throughput}`` over ssh: hosts A and B of 3 slots each,
    cluster {ps: 1, worker: 2}: the ps and the two workers on A, the spare worker:2 and worker:3
    on B (block order). TF1 asynchronous training whose workers are each held to a pace
    (tests/programs/tf1_paced.py: each worker added adds its rate) grows from 2 to 4 workers: the
    sizing policy adds worker:2 and worker:3, started on B by its node agent at the ports chosen
    there at the start, nothing restarted (one start each, the first tasks keep their pids), and
    holds at max_workers; every task's TF_CONFIG names the four workers."""
    a, b = hosts.addrs[0], hosts.addrs[1]
    stop = tmp_path / "STOP"
    path = _file(tmp_path, hosts, f"""\
        cluster: {{ps: 1, worker: 2}}
        hosts: {{"{a}": {{slots: 3}}, "{b}": {{slots: 3}}}}
        program: {{command: [python, {os.path.join(PROGRAMS, "tf1_paced.py")}, '1000000', '0.05', '{stop}']}}
        elastic: {{min_workers: 1, max_workers: 4, scale: throughput, scale_window: 2, scale_every: 2,
                   scale_gain: 0.3}}
    """)
    run_dir = str(tmp_path / "runs" / "sz1")
    rc, out, ev = launch_until_settled(path, run_dir, stop, cwd=tmp_path, timeout=400)
    assert rc == 0, out[-4000:]
    decisions = [(e["event"], e["task"], e.get("workers")) for e in ev
                 if e["event"] in ("scaled_up", "scaled_down", "scale_held")]
    assert decisions == [("scaled_up", "worker:2", 3), ("scaled_up", "worker:3", 4),
                         ("scale_held", None, 4)], out[-4000:]
    starts = sorted((e["task"], e["attempt"]) for e in ev if e["event"] == "task_started")
    assert starts == [("ps:0", 0), ("worker:0", 0), ("worker:1", 0), ("worker:2", 0), ("worker:3", 0)], starts
    assert not [e for e in ev if e["event"] in ("task_restarting", "cluster_restarting")]
    rec = json.loads(open(os.path.join(run_dir, "run.json")).read())
    rows = {t["task"]: t for t in rec["tasks"]}
    hosts_of = {n: t["endpoint"].rsplit(":", 1)[0] for n, t in rows.items()}
    assert hosts_of == {"ps:0": a, "worker:0": a, "worker:1": a, "worker:2": b, "worker:3": b}, hosts_of
    pids = {e["task"]: e["pid"] for e in ev if e["event"] == "task_started"}
    assert {n: t["pid"] for n, t in rows.items()} == pids
    for t in rows.values():
        assert json.loads(t["env"]["TF_CONFIG"])["cluster"]["worker"] == [
            rows[f"worker:{i}"]["endpoint"] for i in range(4)], t["env"]["TF_CONFIG"]
    for name in ("worker:2", "worker:3"):     # each trained from the run's global step, not 0
        log = open(rows[name]["log"]).read()
        assert int(log.split("FIRST_STEP ")[1].split()[0]) > 0, log[-2000:]
    assert rec["workers"]["max"] == 4 and rec["workers"]["in"] == 4, rec["workers"]
    assert hosts.wait_quiet() == {}, "processes left in the namespaces"


def test_a_port_chosen_on_a_host_and_taken_before_its_server_bound_it_is_chosen_again(hosts, tmp_path):
    """worker:0's server cannot bind the port its host's agent chose (another program took
    it meanwhile: TensorFlow's 'Could not start gRPC server'): the run stops its tasks, the
    agents choose the ports again, and every task starts with the new TF_CONFIG; the run
    succeeds instead of failing on the port."""
    a, b = hosts.addrs[0], hosts.addrs[1]
    path = _file(tmp_path, hosts, f"""\
        cluster: {{ps: 1, worker: 1}}
        hosts: {{"{a}": {{slots: 1}}, "{b}": {{slots: 1}}}}
        program: {{command: [python, {os.path.join(PROGRAMS, "listener.py")}]}}
        jobs: {{worker: {{env: {{MODE: bind-fail-once}}}}}}
    """)
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", path, "--no-live", "--run-id", "rc1"],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=180)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "was taken before its server bound it: ports are chosen again (1 of 3)" in out, out[-3000:]
    assert "placed again with ports chosen again" in out or "placed again:" in out
    rec = json.loads((tmp_path / "runs" / "rc1" / "run.json").read_text())
    assert rec["result"] == "succeeded" and rec.get("moves"), rec
    assert hosts.wait_quiet() == {}, "processes left in the namespaces"


def test_ssh_env_folder_and_exit_code(hosts, tmp_path):
    """Environment (quoted safely), the remote folder (workdir mapping), python, exit codes."""
    remote = tmp_path / "remote"
    remote.mkdir()
    prog = ("import os, sys\n"
            "print('CWD', os.getcwd()); print('PY', sys.executable)\n"
            "print('ENV', repr(os.environ['WEIRD'])); print('ARG', sys.argv[1:])\n"
            "from tfcluster.plan.contract import supervised; print('SUPERVISED', supervised())\n"
            "sys.exit(3)\n")
    (tmp_path / "p.py").write_text(prog)
    (remote / "p.py").write_text(prog)
    a = hosts.addrs[0]
    path = _file(tmp_path, hosts, f"cluster: {{worker: [{a}:2222]}}\nhosts: {{{a}: {{workdir: {remote}}}}}\n")
    backend = _backend(path)
    try:
        weird = "a b 'c' \"d\" $HOME `x` ; rm -rf /tmp/nothing"
        h = backend.start(_spec("worker:0", [sys.executable, str(tmp_path / "p.py"), "$1 x"], a,
                                str(tmp_path), {"WEIRD": weird}))
        assert h.wait(30) == 3
        out = h.stdout.read().decode()
    finally:
        backend.close()
    assert f"CWD {remote}" in out, out
    assert f"PY {sys.executable}" in out
    assert f"ENV {weird!r}" in out
    assert "ARG ['$1 x']" in out
    assert "SUPERVISED True" in out           # the remote wrapper stops it for the launcher


SPAWNER = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print("PIDS", os.getpid(), child.pid, flush=True)
time.sleep(300)
"""


def _start_spawner(backend, hosts, tmp_path, i=1):
    (tmp_path / "spawner.py").write_text(SPAWNER)
    h = backend.start(_spec(f"worker:{i}", ["python", str(tmp_path / "spawner.py")], hosts.addrs[i],
                            str(tmp_path)))
    line = _read_until(h, b"\n", 30).decode()
    assert line.startswith("PIDS"), line
    pids = [int(x) for x in line.split()[1:3]]
    assert all(psutil.pid_exists(p) for p in pids)
    ns_pids = hosts.pids(hosts.names[i])
    assert pids[0] in ns_pids and pids[1] in ns_pids, "the task does not run in the host's namespace"
    return h, pids


def _gone(pids, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not [p for p in pids if psutil.pid_exists(p) and _status(p) != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.1)
    return False


def test_ssh_signal_reaches_the_whole_remote_group(hosts, tmp_path):
    a = hosts.addrs[0]
    path = _file(tmp_path, hosts, f"cluster: {{worker: [{a}:2222, {hosts.addrs[1]}:2222]}}\n")
    backend = _backend(path)
    try:
        h, pids = _start_spawner(backend, hosts, tmp_path)
        assert h.poll() is None
        h.signal(signal.SIGTERM)
        assert h.wait(20) == -signal.SIGTERM
        assert _gone(pids), "the remote task's child survived SIGTERM to the task"
    finally:
        backend.close()
    assert hosts.wait_quiet() == {}


def test_ssh_session_death_stops_the_remote_group(hosts, tmp_path):
    """The launcher or its ssh client dying (SIGKILL) ends the session; the host's node agent
    then stops the task's whole group."""
    path = _file(tmp_path, hosts, f"cluster: {{worker: [{hosts.addrs[0]}:2222, {hosts.addrs[1]}:2222]}}\n")
    backend = _backend(path)
    try:
        h, pids = _start_spawner(backend, hosts, tmp_path)
        os.kill(h.link.proc.pid, signal.SIGKILL)   # the local ssh client of the agent's session dies
        h.wait(10)
        assert _gone(pids), "remote processes outlived their ssh session"
    finally:
        backend.close()
    assert hosts.wait_quiet() == {}


def test_ssh_unreachable_host_is_a_clear_error(hosts, tmp_path):
    a = hosts.addrs[0]
    (tmp_path / "other").write_text("")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "wrong")],
                   check=True, timeout=30)
    path = _file(tmp_path, hosts, f"cluster: {{worker: [{a}:2222]}}\n"
                                  f"hosts: {{{a}: {{identity_file: {tmp_path}/wrong}}}}\n")
    backend = _backend(path)
    try:
        with pytest.raises(UserError, match=rf"worker:0: cannot reach root@{a} over ssh.*Permission denied"):
            backend.start(_spec("worker:0", ["python", "-c", "pass"], a, str(tmp_path)))
    finally:
        backend.close()


SLEEPER = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print("up", os.environ["TFCLUSTER_TASK"], flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("how", ["ctrl-c", "launcher-killed"])
def test_ssh_launch_stopped_leaves_nothing_on_the_hosts(hosts, tmp_path, how, own_tmp):
    """Ctrl-C (SIGINT) to tfcluster launch, or SIGKILL to it: every remote group ends."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    a, b, c = hosts.addrs
    path = _file(tmp_path, hosts, f"""\
        cluster: {{ps: [{a}:2222], worker: [{b}:2222, {c}:2222]}}
        program: {{command: [python, sleeper.py]}}
    """)
    import glob
    tmp = own_tmp
    p = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", path, "--backend", "ssh", "--no-live",
                          "--run-id", "x"], cwd=str(tmp_path), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=dict(os.environ, TMPDIR=tmp))
    logs = [tmp_path / "runs" / "x" / f"{t}.log" for t in ("ps-0", "worker-0", "worker-1")]
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not all(ln.exists() and "up" in ln.read_text() for ln in logs):
            time.sleep(0.2)
        assert all(ln.exists() and "up" in ln.read_text() for ln in logs), "the tasks did not start"
        assert all(len(hosts.pids(ns)) >= 2 for ns in hosts.names)   # wrapper, program, its child
        if how == "ctrl-c":
            p.send_signal(signal.SIGINT)
            assert p.wait(30) != 0
        else:
            p.kill()
            p.wait(10)
        assert hosts.wait_quiet(20) == {}, "processes left in the namespaces"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if how == "launcher-killed":   # its socket folder: a killed launcher cannot remove it
            for d in glob.glob(os.path.join(tmp, "tfc-ssh-*")):   # (own_tmp goes after the test)
                shutil.rmtree(d, ignore_errors=True)
    assert not _ssh_clients(tmp), "ssh clients or master connections left running"


@pytest.fixture
def own_tmp():
    """A TMPDIR of the test's own for the launcher: its ssh control sockets go there, so that
    _ssh_clients(it) sees this test's ssh clients alone, not those of tests beside it (-n). A
    short path in the temporary folder (0700, mkdtemp): a socket's path has at most 107 bytes."""
    d = tempfile.mkdtemp(prefix="t")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _ssh_clients(tmp: str):
    """The ssh clients and master connections still running with a control socket under
    ``tmp`` (the launcher's TMPDIR, the own_tmp fixture)."""
    mark = os.path.join(tmp, "tfc-ssh-")
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if any(mark in w for w in (p.info["cmdline"] or [])) and _status(p.pid) != psutil.STATUS_ZOMBIE]


def test_ssh_dry_run_shows_the_remote_view_and_leaves_nothing(tmp_path):
    """--backend ssh --dry-run: each remote task as it will run there (ssh target, remote
    interpreter, remote folder), from the same plan; no connection, no socket folder."""
    if not shutil.which("ssh"):
        pytest.skip("no ssh client")
    (tmp_path / "train.py").write_text("print('hi')\n")
    f = tmp_path / "cluster.yaml"
    f.write_text(textwrap.dedent("""\
        cluster: {ps: [h1:2222], worker: [h1:2223, h2:2224]}
        program: {command: [python, train.py, --lr=0.1], env: {API_TOKEN: hunter22}}
        remote: {python: /opt/py/bin/python3, workdir: /srv/job, user: alice}
        hosts: {h2: {ssh_host: 10.9.9.9, port: 2200}}
    """))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--backend", "ssh",
                        "--dry-run", "--run-id", "d1"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, TMPDIR=str(tmp)))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "worker:1  (h2:2224)  ssh alice@10.9.9.9 (port 2200)" in out
    assert "ps:0  (h1:2222)  ssh alice@h1" in out
    assert "argv: /opt/py/bin/python3 /srv/job/train.py --lr=0.1" in out
    assert "cwd:  /srv/job" in out and sys.executable not in out
    assert "env:  TFCLUSTER_LOCAL_TASKS=2" in out and "env:  TFCLUSTER_RESTART_COUNT=0" in out
    assert "API_TOKEN=****" in out and "hunter22" not in out
    assert list(tmp.iterdir()) == []           # no ssh socket folder made
    assert not (tmp_path / "runs").exists()


def test_an_unreachable_host_is_one_line_before_anything_starts(tmp_path):
    """An ssh host that cannot be reached (a ProxyCommand that fails: no traffic leaves this
    machine) is a one-line error, exit 2, when the run's ports are chosen on the hosts: before
    a run folder is made or any task starts (nothing to clean up, no record of a run that
    never was)."""
    if not shutil.which("ssh"):
        pytest.skip("no ssh client")
    (tmp_path / "t.py").write_text("print('never')\n")
    f = tmp_path / "cluster.yaml"
    f.write_text("cluster: {ps: [h1:2222], worker: [h1:2223]}\n"
                 "program: {command: [python, t.py]}\n"
                 "remote: {ssh_options: [ProxyCommand=false], allow_ssh_commands: [ProxyCommand]}\n")
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--run-id", "s1"],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("tfcluster: error:")]
    assert len(errors) == 1 and "ps:0: cannot reach h1 over ssh" in errors[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "runs" / "s1").exists()
