"""Issue 49, the fence fails closed: each finding of the second-user attack, reproduced with real
processes. Mallory is uid 65534 (nobody); the victim is root, or the ordinary user 4242 (no
passwd entry needed) for whom user namespaces are off or limited inside a user namespace of the
test's own (tests/helpers/userns.py: the machine's sysctl is not touched). No TensorFlow: tiny
programs stand in for the tasks (the fence is the launcher's). The pure rules:
tests/unit/test_fence.py."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from helpers import SRC
from helpers.other_user import system_python
from helpers.userns import limited

MALLORY = 65534
VICTIM = 4242
MALLORY_PY = "/usr/bin/python3"      # this environment's Python may be in a folder only root enters
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other users")
pytestmark = [as_root, pytest.mark.skipif(not os.path.exists("/proc/self/ns/net"),
                                          reason="no network namespaces")]

#: what ``tfcluster launch`` imports beyond the standard library (copied where another user can
#: read them: this environment may live under a folder only root can enter)
DEPENDENCIES = ("yaml", "_yaml", "psutil", "pydantic", "pydantic_core", "typing_extensions.py",
                "annotated_types", "typing_inspection", "rich", "markdown_it", "mdurl", "pygments")


def _as(uid):
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop


@pytest.fixture(scope="module")
def shared_tmp():
    """A folder under /tmp every user can enter (pytest's own tmp folders are root's alone)."""
    d = tempfile.mkdtemp(prefix="tfc-fence-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def victim_python(shared_tmp):
    """(python, PYTHONPATH) that user 4242 can run tfcluster with: the system's Python of this
    minor version over a readable copy of this tfcluster and its dependencies."""
    want = system_python()
    if want is None:
        pytest.skip("no system Python of this version (/usr/bin/python3.X) for another user")
    lib = os.path.join(shared_tmp, "lib")
    os.mkdir(lib)
    for name in DEPENDENCIES:
        mod = __import__(name[:-3] if name.endswith(".py") else name)
        src = mod.__file__
        if os.path.basename(src) == "__init__.py":
            shutil.copytree(os.path.dirname(src), os.path.join(lib, name),
                            ignore=shutil.ignore_patterns("__pycache__", "tests"))
        else:
            shutil.copy(src, lib)
    # this checkout's tfcluster too: the checkout may be under a folder only root can enter
    shutil.copytree(os.path.join(SRC, "tfcluster"), os.path.join(lib, "tfcluster"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for root, dirs, files in os.walk(lib):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755)
    path = lib
    probe = subprocess.run([want, "-c", "import tfcluster.cli.main, yaml, psutil, pydantic, rich"],
                           env={"PYTHONPATH": path, "PATH": os.environ["PATH"]},
                           preexec_fn=_as(VICTIM), capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"tfcluster cannot be imported by another user here: {probe.stderr[-300:]}")
    return want, path


@pytest.fixture
def home(shared_tmp):
    """The victim's (user 4242) home, 0755."""
    d = tempfile.mkdtemp(prefix="home-", dir=shared_tmp)
    os.chmod(d, 0o755)
    os.chown(d, VICTIM, VICTIM)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _victim_file(home, port, logdir, program, extra=""):
    f = os.path.join(home, "cluster.yaml")
    with open(f, "w") as fh:
        fh.write(f"cluster: {{worker: [localhost:{port}]}}\nprogram: {{command: {json.dumps(program)}}}\n"
                 f"logdir: {logdir}\n{extra}")
    os.chown(f, VICTIM, VICTIM)
    return f


def _victim_launch(victim_python, home, limit, *args, timeout=120):
    python, path = victim_python
    env = {"PATH": os.environ["PATH"], "HOME": home, "PYTHONPATH": path, "LANG": "C.UTF-8"}
    p = limited(limit, VICTIM, [python, "-m", "tfcluster", "launch", *args, "--no-live"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=home)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


# ------------------------------------------------------------------ finding 1: a planted record
def test_a_foreign_live_record_in_a_shared_logdir_does_not_block_a_launch(tmp_path, shared_tmp, ports):
    from pathlib import Path
    shared = Path(tempfile.mkdtemp(prefix="shared-", dir=shared_tmp))
    os.chmod(shared, 0o1777)
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: [localhost:{ports(1)[0]}]}}\n"
                 f"program: {{command: [python, -c, \"print('trained')\"]}}\nlogdir: {shared}\n"
                 f"network: host\n")
    # mallory writes the record herself: a running run of the victim's file, launcher pid 1
    plant = (f"import json, os\nos.mkdir({str(shared / 'zz')!r})\n"
             f"json.dump({{'run_id': 'zz', 'result': 'running', 'file': {str(f)!r}, 'launcher_pid': 1,"
             f" 'launcher_started': {psutil.Process(1).create_time()!r}, 'started': 4e9,"
             f" 'tasks': [{{'task': 'worker:0', 'state': 'running'}}]}}, open({str(shared / 'zz' / 'run.json')!r}, 'w'))")
    subprocess.run([MALLORY_PY, "-I", "-c", plant], check=True, preexec_fn=_as(MALLORY))
    assert os.stat(shared / "zz" / "run.json").st_uid == MALLORY
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live", "--run-id", "mine"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=SRC, TFCLUSTER_NO_SECURITY_NOTE="1"))
    assert r.returncode == 0, r.stderr
    assert "trained" in r.stdout
    assert f"{shared / 'zz'}: a run record of another user names this file as running; it is not " \
           f"yours and is ignored" in r.stderr, r.stderr
    assert json.loads((shared / "mine" / "run.json").read_text())["result"] == "succeeded"


# ------------------------------------------------------------------ findings 2 and 3: fail closed
@pytest.mark.parametrize("limit, why, flags", [(0, "user namespaces are turned off", ()),
                                               (0, "user namespaces are turned off", ("--detach",)),
                                               (1, "nested user namespace", ())])
def test_without_user_namespaces_a_local_launch_starts_nothing(victim_python, home, ports, limit, why,
                                                               flags):
    """limit 0: user namespaces off for the victim (the tester's max_user_namespaces=0), in the
    foreground and detached; limit 1: the first namespace is made and the nested one refused (a
    half-made namespace, finding 3)."""
    mark = os.path.join(home, "started")
    f = _victim_file(home, ports(1)[0], os.path.join(home, "runs"),
                     ["python", "-c", f"open({mark!r}, 'w'); import time; time.sleep(1)"])
    rc, out, err = _victim_launch(victim_python, home, limit, f, *flags)
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--network host" in lines[0] and why in lines[0], err
    assert lines[0].startswith("tfcluster: error: network: private cannot be made here"), err
    assert "nothing was started" in lines[0]
    assert not os.path.exists(mark), "a task was started"
    assert not os.path.exists(os.path.join(home, "runs")) or not any(
        os.path.exists(os.path.join(home, "runs", d, "run.json")) for d in os.listdir(os.path.join(home, "runs")))


def test_a_chosen_host_network_says_so_before_the_first_task_detached_too(tmp_path, ports):
    p = ports(1)[0]
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: [localhost:{p}]}}\nprogram: {{command: [python, -c, \"print('task line')\"]}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    env = dict(os.environ, PYTHONPATH=SRC)
    env.pop("TFCLUSTER_NO_SECURITY_NOTE", None)
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live", "--network", "host",
                        "--run-id", "h1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout
    note = r.stdout.index("note: network: host: every user of this machine can connect")
    assert note < r.stdout.index("started worker:0") < r.stdout.index("task line"), r.stdout
    # detached: on the terminal, not only in console.log
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live", "--network", "host",
                        "--run-id", "h2", "--detach"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "note: network: host: every user of this machine can connect" in r.stderr, r.stderr
    # chosen host mode may be silenced
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live", "--network", "host",
                        "--run-id", "h3"], capture_output=True, text=True, timeout=120,
                       env=dict(env, TFCLUSTER_NO_SECURITY_NOTE="1"))
    assert r.returncode == 0 and "note:" not in r.stderr, r.stderr
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            rec = json.loads((tmp_path / "runs" / "h2" / "run.json").read_text())
        except (OSError, ValueError):
            rec = {}
        if rec.get("result") == "succeeded":
            break
        time.sleep(0.2)
    assert rec.get("network") == {"mode": "host"}, rec
    st = subprocess.run([sys.executable, "-m", "tfcluster", "status", str(tmp_path / "runs" / "h2")],
                        capture_output=True, text=True, env=env, timeout=60)
    assert "network: host (every user of this machine can connect to its tasks)" in st.stdout, st.stdout


def test_a_fall_back_to_the_host_network_cannot_be_silenced(tmp_path, ports):
    """A task at a non-loopback address puts a default local run in the host network: that is
    said whatever TFCLUSTER_NO_SECURITY_NOTE says."""
    name = socket.gethostname()
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{worker: [{name}:{ports(1)[0]}]}}\nprogram: {{command: [python, -c, \"pass\"]}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(f), "--no-live", "--no-security-note"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=SRC, TFCLUSTER_NO_SECURITY_NOTE="1"))
    assert r.returncode == 0, r.stderr
    assert "every user of this machine can connect" in r.stderr and "not a loopback address" in r.stderr, r.stderr


# ------------------------------------------------------------------ finding 6: root's folders inside
def test_an_ordinary_users_private_run_trusts_roots_shared_logdir_not_mallorys(victim_python, home,
                                                                              shared_tmp, ports):
    roots = tempfile.mkdtemp(prefix="root-1777-", dir=shared_tmp)
    os.chmod(roots, 0o1777)
    mallorys = tempfile.mkdtemp(prefix="mallory-1777-", dir=shared_tmp)
    os.chmod(mallorys, 0o1777)
    os.chown(mallorys, MALLORY, MALLORY)
    caps = ["python", "-c", "print([l.strip() for l in open('/proc/self/status') if l.startswith(('CapEff', 'Uid'))])"]
    f = _victim_file(home, ports(1)[0], roots, caps)
    rc, out, err = _victim_launch(victim_python, home, 10, f, "--run-id", "r1")
    assert rc == 0, (out, err)
    assert "owned by another user" not in err
    rec = json.load(open(os.path.join(roots, "r1", "run.json")))
    assert rec["network"]["mode"] == "private" and rec["network"]["namespaces"] == "user+net+user", rec
    assert os.stat(os.path.join(roots, "r1")).st_uid == VICTIM
    # the task kept the victim's uid and has no capability (finding 3's "tasks as uid 0 with caps")
    assert f"'Uid:\\t{VICTIM}\\t{VICTIM}\\t{VICTIM}\\t{VICTIM}', 'CapEff:\\t0000000000000000'" in out, out
    # mallory's shared folder is still refused: inside, she shows as 65534 just as root does
    f = _victim_file(home, ports(1)[0], mallorys, caps)
    rc, out, err = _victim_launch(victim_python, home, 10, f, "--run-id", "r2")
    assert rc == 2 and "is owned by another user" in err, (out, err)
    assert not os.path.exists(os.path.join(mallorys, "r2", "run.json"))
    # no helper of the launcher is left behind
    left = [p for p in psutil.process_iter(["uids", "status"])
            if p.info["uids"] and p.info["uids"].real == VICTIM and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert not left, left


# ------------------------------------------------------------------ finding 4: ssh ControlPath
def test_an_ssh_control_path_of_another_user_is_refused_before_ssh_runs(tmp_path, shared_tmp):
    plant = tempfile.mkdtemp(prefix="x-", dir=shared_tmp)
    os.chown(plant, MALLORY, MALLORY)
    sock_path = os.path.join(plant, "sock")
    listener = subprocess.Popen(
        [MALLORY_PY, "-I", "-c",
         "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen()\n"
         "print('up', flush=True)\ns.settimeout(15)\n"
         "try:\n    s.accept()\n    print('connected', flush=True)\nexcept OSError:\n    print('nobody', flush=True)\n",
         sock_path], stdout=subprocess.PIPE, text=True, preexec_fn=_as(MALLORY))
    try:
        assert listener.stdout.readline().strip() == "up"
        f = tmp_path / "c.yaml"
        f.write_text("cluster: {worker: ['farhost:2222']}\nprogram: {command: [python, -c, pass]}\n"
                     f"remote: {{ssh_options: [\"ControlPath={sock_path}\", \"ControlMaster=auto\"]}}\n"
                     f"backend: ssh\nlogdir: {tmp_path / 'runs'}\n")
        env = dict(os.environ, PYTHONPATH=SRC)
        for cmd in (["validate", str(f)], ["doctor", str(f)]):
            r = subprocess.run([sys.executable, "-m", "tfcluster", *cmd], capture_output=True, text=True,
                               env=env, timeout=60)
            assert r.returncode == 2, (cmd, r.stdout, r.stderr)
            assert "remote.ssh_options[0]: ControlPath" in r.stderr, r.stderr
            assert "remote.ssh_options[1]: ControlMaster" in r.stderr, r.stderr
            assert "Traceback" not in r.stderr
    finally:
        listener.kill()
        out = listener.communicate()[0]
    assert "connected" not in out


# ------------------------------------------------------------------ finding 5: the profile relay
def test_the_profile_relay_forwards_only_the_users_own_connections():
    from tfcluster.runs.profile import _Relay
    task = socket.socket(socket.AF_INET6)
    task.bind(("::1", 0))
    task.listen()
    task.settimeout(3)
    relay = _Relay("::1", task.getsockname()[1])
    try:
        # mallory connects to the relay and writes: nothing reaches the task
        code = (f"import socket\nc = socket.create_connection(('127.0.0.1', {relay.port}), timeout=5)\n"
                "c.sendall(b'ReadFile /etc/shadow')\nprint(repr(c.recv(10)))")
        r = subprocess.run([MALLORY_PY, "-I", "-c", code], capture_output=True, text=True, timeout=30,
                           preexec_fn=_as(MALLORY))
        assert r.stdout.strip() in ("b''", ""), (r.stdout, r.stderr)
        with pytest.raises(socket.timeout):
            task.accept()
        assert relay.refused == 1
        # the user's own connection is relayed
        mine = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        conn, _ = task.accept()
        mine.sendall(b"trace")
        assert conn.recv(10) == b"trace"
        mine.close()
        conn.close()
    finally:
        relay.close()
        task.close()
