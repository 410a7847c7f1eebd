"""A run on this machine in a network of its own (tfcluster.net.private,
tfcluster.drivers.network), with real processes and no TensorFlow: tests/programs/listener.py
binds its TF_CONFIG port as a server would. Another user (uid 65534) and the host's own
network reach none of the run's ports; ``tfcluster exec`` does; ``network: host`` behaves as
before and says who can connect; slirp4netns gives the tasks outbound connections to a test
host (a network namespace made here) and forwards no port back. (The same with TensorFlow's
servers and a TF1 client: tests/system/test_private_network_tf.py.)"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from helpers import PROGRAMS, SRC, write_cluster
from helpers.other_user import Readable, python_path, system_python

LISTENER = os.path.join(PROGRAMS, "listener.py")
OTHER = 65534                    # nobody: another user of the machine
SECOND = 4242                    # an ordinary user who launches (no passwd entry needed)

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/net"), reason="no network namespaces")


def _env(**more):
    return dict(os.environ, PYTHONPATH=SRC, **more)


def _launch_detached(cluster, *flags, env=None, cwd=None):
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", cluster, "-d", "--no-live", *flags],
                       capture_output=True, text=True, env=env or _env(), cwd=cwd, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def _wait_record(run_dir, timeout=60.0, running=3):
    deadline = time.time() + timeout
    rec = {}
    while time.time() < deadline:
        try:
            with open(os.path.join(run_dir, "run.json")) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            rec = {}
        rows = rec.get("tasks") or []
        if sum(1 for t in rows if t.get("state") == "running") >= running and all(
                t.get("output_at") for t in rows if t.get("state") == "running"):
            return rec
        time.sleep(0.2)
    pytest.fail(f"the run did not come up: {json.dumps(rec)[-1500:]}")


def _stop(run_dir, env=None, as_uid=None, python=sys.executable):
    subprocess.run([python, "-m", "tfcluster", "stop", run_dir, "--timeout", "60"],
                   capture_output=True, text=True, env=env or _env(), timeout=120,
                   preexec_fn=(lambda: os.setuid(as_uid)) if as_uid else None)


def _connects(port, host="127.0.0.1", as_uid=None) -> bool:
    """Whether a TCP connection to host:port succeeds, from this network, as ``as_uid``."""
    code = (f"import socket,sys\ntry:\n socket.create_connection(({host!r},{port}),timeout=2).close()\n"
            f"except OSError: sys.exit(1)")
    if as_uid is not None:     # the interpreter's files may be root's alone: load first, then drop
        code = (f"import encodings.idna, os, socket, sys\nos.setgid({as_uid}); os.setuid({as_uid})\n"
                + code)
    return subprocess.run([sys.executable, "-I", "-c", code], timeout=30).returncode == 0


def _listening_here(ports):
    """Ports of ``ports`` that something listens on in this (the host's) network."""
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A":                       # LISTEN
                    found.add(int(parts[1].rsplit(":", 1)[1], 16))
    return sorted(set(ports) & found)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_default_local_run_is_reached_by_nobody_else_and_by_exec(tmp_path, ports):
    p = ports(3)
    f = write_cluster(tmp_path, p, ["python", LISTENER])
    _launch_detached(f, "--run-id", "p1", "--profiler")
    run_dir = str(tmp_path / "runs" / "p1")
    try:
        rec = _wait_record(run_dir)
        assert rec["network"]["mode"] == "private", rec["network"]
        prof = [t["profiler_port"] for t in rec["tasks"] if t.get("profiler_port")]
        assert len(prof) == 3 and not set(prof) & set(p)
        # nothing of the run listens in the host's network; neither root nor another user connects
        assert _listening_here(p + prof) == []
        for port in p + prof:
            assert not _connects(port), port
            assert not _connects(port, as_uid=OTHER), port
            assert not _connects(port, "::1"), port
        # tfcluster exec runs a client inside: it reaches every task
        client = tmp_path / "client.py"
        client.write_text("import json, os, socket\n"
                          "c = json.loads(os.environ['TFCLUSTER_CLUSTER'])\n"
                          "for job, eps in c.items():\n"
                          "    for ep in eps:\n"
                          "        h, _, port = ep.rpartition(':')\n"
                          "        socket.create_connection((h, int(port)), timeout=3).close()\n"
                          "print('reached', sorted(c), os.getuid())\n")
        r = subprocess.run([sys.executable, "-m", "tfcluster", "exec", run_dir, "--", sys.executable,
                            str(client)], capture_output=True, text=True, env=_env(), timeout=60)
        assert r.returncode == 0 and "reached ['ps', 'worker'] 0" in r.stdout, r.stderr
        # another user cannot enter it
        r = subprocess.run([sys.executable, "-I", "-c",
                            f"import os, sys; sys.path.insert(0, {SRC!r})\n"
                            "from tfcluster.net import private\n"
                            f"os.setgid({OTHER}); os.setuid({OTHER})\n"
                            f"private.enter_namespaces({rec['launcher_pid']})"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "cannot be opened" in r.stderr, r.stderr
    finally:
        _stop(run_dir)
    assert json.load(open(os.path.join(run_dir, "run.json")))["result"] == "interrupted"


def test_a_host_network_run_says_who_can_connect_and_checks_its_ports(tmp_path, ports):
    p = ports(2)
    (tmp_path / "default").mkdir()
    plain = write_cluster(tmp_path / "default", p, ["python", LISTENER])
    f = write_cluster(tmp_path, p, ["python", LISTENER], extra="network: host\n")
    holder = socket.socket()
    holder.bind(("0.0.0.0", p[1]))
    holder.listen()
    try:
        # the file's network: host, and the flag on a file that says nothing (README's promise)
        for args in ([f], [plain, "--network", "host"]):
            r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", *args, "--no-live"],
                               capture_output=True, text=True, env=_env(), timeout=120)
            assert r.returncode == 2 and f"port {p[1]} (worker:0) is already in use" in r.stderr, \
                (args, r.stderr)
            assert "Traceback" not in r.stderr and not (tmp_path / "default" / "runs").exists()
    finally:
        holder.close()
    _launch_detached(f, "--run-id", "h1")
    run_dir = str(tmp_path / "runs" / "h1")
    try:
        rec = _wait_record(run_dir, running=2)
        assert rec["network"]["mode"] == "host"
        assert _connects(p[0])                         # as before: the host's network
        with open(os.path.join(run_dir, "console.log")) as fh:
            console = fh.read()
        assert "note: network: host: every user of this machine can connect to this run's tasks" in console
    finally:
        _stop(run_dir)


def test_in_a_private_network_a_taken_host_port_does_not_matter(tmp_path, ports):
    p = ports(2)
    f = write_cluster(tmp_path, p, ["python", LISTENER])
    holder = socket.socket()
    holder.bind(("0.0.0.0", p[1]))
    holder.listen()
    try:
        _launch_detached(f, "--run-id", "t1")
        rec = _wait_record(str(tmp_path / "runs" / "t1"), running=2)
        assert rec["network"]["mode"] == "private"
    finally:
        _stop(str(tmp_path / "runs" / "t1"))
        holder.close()


def test_a_private_run_asked_for_with_a_non_loopback_endpoint_is_one_line(tmp_path, ports):
    name = socket.gethostname()
    (tmp_path / "c.yaml").write_text(f"cluster: {{worker: [{name}:{ports(1)[0]}]}}\nnetwork: private\n"
                                     f"program: {{command: [python, {LISTENER}]}}\nlogdir: {tmp_path}/runs\n")
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(tmp_path / "c.yaml"), "--no-live"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 2 and "network: private: worker:0 is at" in r.stderr and "not a loopback" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as two other users")
def test_an_ordinary_users_run_keeps_its_uid_and_is_closed_to_another_user(tmp_path, ports):
    python = system_python()
    if python is None:
        pytest.skip("no system Python of this version (/usr/bin/python3.X) for another user here")
    readable = Readable(SECOND)      # this checkout as the user can read it, in any clone
    home = tempfile.mkdtemp(prefix="tfc-second-")
    try:
        path, listener = python_path(readable, SRC), readable(LISTENER)
        os.chmod(home, 0o755)
        os.chown(home, SECOND, SECOND)
        p = ports(3)
        f = os.path.join(home, "cluster.yaml")
        with open(f, "w") as fh:
            fh.write(f"cluster: {{ps: [localhost:{p[0]}], worker: [localhost:{p[1]}, localhost:{p[2]}]}}\n"
                     f"program: {{command: [python, {listener}]}}\nlogdir: {home}/runs\n")
        os.chown(f, SECOND, SECOND)
        env = {"PATH": os.environ["PATH"], "HOME": home, "PYTHONPATH": path, "LANG": "C.UTF-8"}

        def as_second():
            os.setgid(SECOND)
            os.setuid(SECOND)
        # in the foreground: a detached launcher starts an isolated Python (-I), which reads no PYTHONPATH
        launcher = subprocess.Popen([python, "-m", "tfcluster", "launch", f, "--no-live", "--run-id", "u1"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=home,
                                    preexec_fn=as_second, start_new_session=True)
        run_dir = os.path.join(home, "runs", "u1")
        try:
            rec = _wait_record(run_dir)
            assert rec["network"]["mode"] == "private"
            for t in rec["tasks"]:          # the tasks keep the launcher's uid (no root inside)
                with open(f"/proc/{t['pid']}/status") as fh:
                    uids = next(ln for ln in fh if ln.startswith("Uid:")).split()[1:]
                assert uids == [str(SECOND)] * 4, uids
            for port in p:
                assert not _connects(port, as_uid=OTHER) and not _connects(port)
        finally:
            _stop(run_dir, env=env, as_uid=SECOND, python=python)
            err = launcher.communicate(timeout=60)[1].decode()
        assert launcher.returncode == 143, err
    finally:
        shutil.rmtree(home, ignore_errors=True)
        readable.close()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("slirp4netns") or not shutil.which("ip"),
                    reason="needs root, ip and slirp4netns (apt install slirp4netns)")
def test_with_slirp4netns_tasks_reach_a_test_host_and_nothing_is_forwarded_back(tmp_path, ports):
    ns = f"tfcpn{os.getpid() % 100000}"
    host_if, peer_if = f"{ns}a", f"{ns}b"
    net = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
    server = None

    def ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)
    try:
        ip("netns", "add", ns)
        ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        ip("link", "set", peer_if, "netns", ns)
        ip("addr", "add", f"{net}.1/24", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("-n", ns, "addr", "add", f"{net}.2/24", "dev", peer_if)
        ip("-n", ns, "link", "set", peer_if, "up")
        www = tmp_path / "www"
        www.mkdir()
        (www / "index.html").write_text("hello from the test host\n")
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "http.server", "8089",
                                   "--bind", f"{net}.2", "--directory", str(www)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(1.0)
        p = ports(1)
        fetch = tmp_path / "fetch.py"
        fetch.write_text("import os, socket, time, urllib.request\n"
                         f"s = socket.socket(); s.bind(('0.0.0.0', {p[0]})); s.listen()\n"
                         f"print('FETCHED', urllib.request.urlopen('http://{net}.2:8089/', timeout=10).read().decode().strip(), flush=True)\n"
                         "time.sleep(3)\n")
        (tmp_path / "c.yaml").write_text(f"cluster: {{worker: [localhost:{p[0]}]}}\n"
                                         f"program: {{command: [python, {fetch}]}}\nlogdir: {tmp_path}/runs\n")
        proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", str(tmp_path / "c.yaml"),
                                 "--no-live", "--run-id", "s1"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=_env(), start_new_session=True)
        time.sleep(2.0)
        assert _listening_here(p) == [] and not _connects(p[0])   # the task's port is not forwarded
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "FETCHED hello from the test host" in out, out
        rec = json.load(open(tmp_path / "runs" / "s1" / "run.json"))
        assert rec["network"] == {"mode": "private", "outbound": "slirp4netns", "namespaces": "net"}
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
