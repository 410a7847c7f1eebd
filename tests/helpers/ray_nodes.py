"""A real Ray cluster on this machine for the Ray backend's tests: a head and, when asked, more
raylets as further nodes, all on loopback (127.0.0.2, 127.0.0.3, ...; Ray turns 127.0.0.1 into
the machine's own address).

Each node is started by ``ray start`` in a session of its own (``start_new_session``: the
daemons it leaves behind keep that session id whatever process titles Ray gives them) and ended
by that session id: SIGTERM to every process of the session, then SIGKILL. Nothing of Ray is
imported into the test process (it would become a driver): questions to the cluster go through
an isolated Python (:func:`ask`).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import psutil

from tfcluster.net.ports import free_ports

# Ray's command as this interpreter runs it: its console script beside the interpreter when pip
# put it there, else its module (a virtualenv that borrows the system's site-packages has no
# script of its own)
_SCRIPT = os.path.join(os.path.dirname(sys.executable), "ray")
RAY = [_SCRIPT] if os.access(_SCRIPT, os.X_OK) else [sys.executable, "-m", "ray.scripts.scripts"]


@dataclass
class RayNodes:
    address: str                        # host:port of the head (RAY_ADDRESS)
    temp_dir: str
    dashboard_url: str = ""             # the dashboard and job server, when started
    sessions: List[int] = field(default_factory=list)

    def env(self, **more) -> Dict[str, str]:
        env = dict(os.environ, RAY_ADDRESS=self.address, **more)
        return env

    def processes(self, session: Optional[int] = None) -> List[psutil.Process]:
        sessions = self.sessions if session is None else [session]
        out = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) in sessions:
                    out.append(p)
            except (OSError, psutil.Error):
                pass
        return out

    def kill_node(self, i: int) -> None:
        """Node ``i`` is lost: SIGKILL to every process of its session (raylet, workers)."""
        self.kill_session(self.sessions[i])

    def kill_session(self, session: int) -> None:
        """SIGKILL to every process of one node's session, and wait for them."""
        procs = self.processes(session)
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=10)

    def stop(self) -> None:
        """End every daemon of every node by its session id; remove Ray's folder."""
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            procs = self.processes()
            for p in procs:
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass
            psutil.wait_procs(procs, timeout=wait)
        left = self.processes()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        assert not left, f"Ray daemons left: {left}"


def start(nodes=(("127.0.0.2", 4, None),), dashboard: bool = False) -> RayNodes:
    """Start a head on the first (ip, num_cpus, custom resources) and join the others to it;
    ``dashboard``: with Ray's dashboard and job server (``ray job submit``; ``dashboard_url``)."""
    temp = tempfile.mkdtemp(prefix="tfr-", dir="/tmp")   # short: Ray's socket paths must fit
    port, client, dash, metrics = free_ports(4)
    head_ip = nodes[0][0]
    cluster = RayNodes(address=f"{head_ip}:{port}", temp_dir=temp)
    cluster.dashboard_url = f"http://{head_ip}:{dash}" if dashboard else ""
    try:
        for i, (ip, cpus, resources) in enumerate(nodes):
            argv = _node_argv(ip, cpus)
            if i == 0:
                argv += ["--head", f"--port={port}",
                         # without the dashboard, Ray still starts its minimal one, on 8265 unless told
                         f"--dashboard-port={dash}",
                         *(["--include-dashboard=true", f"--dashboard-host={head_ip}"]
                           if dashboard else ["--include-dashboard=false"]),
                         f"--temp-dir={temp}", f"--ray-client-server-port={client}",
                         f"--metrics-export-port={metrics}"]
            else:
                argv += [f"--address={cluster.address}"]
            _ray_start(cluster, argv, ip, resources)
        if len(nodes) > 1:
            _wait_alive(cluster, len(nodes))
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _node_argv(ip: str, cpus: int) -> List[str]:
    # every port chosen free (the OS's for workers), none of Ray's fixed defaults: two Rays of
    # tests can run side by side on this machine (tests/conftest.py: SERIAL_GROUPS)
    return [*RAY, "start", f"--node-ip-address={ip}", f"--num-cpus={cpus}", "--num-gpus=0",
            "--disable-usage-stats", "--dashboard-agent-listen-port=0",
            "--min-worker-port=0", "--max-worker-port=0"]


# Ray's GCS takes a node for dead after health_check_failure_threshold failed checks, one each
# health_check_period_ms: 5 x 3 s by Ray's defaults. A killed node's raylet refuses the check at
# once, so 3 x 1 s says the same sooner (the tests that lose a node wait ~12 s less each); a live
# raylet that is slow to answer still has health_check_timeout_ms (10 s) for each check.
HEALTH_CHECKS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}


def _ray_start(cluster: RayNodes, argv: List[str], ip: str, resources) -> None:
    """``ray start`` in a session of its own (the node's daemons keep it), recorded in ``cluster``."""
    if resources:
        argv.append(f"--resources={json.dumps(resources)}")
    for attempt in (1, 2, 3):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0", **HEALTH_CHECKS))
        cluster.sessions.append(proc.pid)
        out, _ = proc.communicate(timeout=120)
        if proc.returncode == 0:
            return
        if attempt < 3 and "timed out during startup" in out:
            # `ray start` waits 30 s (hard-coded in Ray's node start-up) for its raylet to
            # register with the GCS, which a loaded machine can miss (twice in a row at a load
            # average of 16): that try's daemons are ended and the node is started again, twice
            cluster.kill_session(proc.pid)
            cluster.sessions.remove(proc.pid)
            continue
        raise RuntimeError(f"ray start ({ip}) failed:\n{out[-3000:]}")


def _wait_alive(cluster: RayNodes, n: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ask(cluster, "len([n for n in ray.nodes() if n['Alive']])") == n:
            return
        time.sleep(1)


def add(cluster: RayNodes, ip: str, cpus: int, resources=None, alive: Optional[int] = None) -> None:
    """A node joins ``cluster`` (a raylet at ``ip``); with ``alive``, wait until Ray counts that
    many nodes alive."""
    _ray_start(cluster, _node_argv(ip, cpus) + [f"--address={cluster.address}"], ip, resources)
    if alive:
        _wait_alive(cluster, alive)


def yield_to_ray(rows, niceness: int = 10) -> None:
    """The run's live task processes (run.json rows) at a lower priority, so that Ray's own
    daemons are not starved by training on this machine's 2 shared cores (a node joining timed
    out registering with a GCS that full-speed trainers left no CPU to: ``ray start`` waits 30 s).
    A real cluster gives its daemons cores of their own."""
    for row in rows.values():
        pid = row.get("pid")
        if row.get("state") == "running" and isinstance(pid, int):
            try:
                os.setpriority(os.PRIO_PROCESS, pid, niceness)
            except (ProcessLookupError, PermissionError):
                pass         # ended since the record was written, or not ours to change


def ask(cluster: RayNodes, expression: str):
    """The value of ``expression`` (JSON) in a driver connected to ``cluster`` (``ray`` and
    ``state`` -- ray._private.state -- in scope)."""
    code = ("import json, ray\nfrom ray._private import state\n"
            f"ray.init(address={cluster.address!r}, logging_level='ERROR', log_to_driver=False)\n"
            f"print('RESULT=' + json.dumps({expression}))\nray.shutdown()\n")
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT="):
            return json.loads(line[len("RESULT="):])
    raise RuntimeError(f"cannot ask Ray: {r.stdout[-2000:]}{r.stderr[-2000:]}")


LEFT = ("{'actors': [a['ActorID'] + ' ' + str(a.get('ClassName') or a.get('ActorClassName')) "
        "for a in ray._private.state.actors().values() if a['State'] != 'DEAD'], 'groups': [g for g, v in ray.util.placement_group_table().items() "
        "if v['state'] != 'REMOVED']}")


def leftovers(cluster: RayNodes) -> Optional[dict]:
    """The actors still alive and the placement groups not removed (None when there are none);
    waits a little: Ray ends a finished job's actors asynchronously."""
    deadline = time.time() + 30
    while True:
        got = ask(cluster, LEFT)
        if not got["actors"] and not got["groups"]:
            return None
        if time.time() > deadline:
            return got
        time.sleep(1)


def record(tmp_path):
    """The run's record under ``tmp_path/runs`` and its task rows by name."""
    (path,) = list((tmp_path / "runs").glob("*/run.json"))
    rec = json.loads(path.read_text())
    return rec, {t["task"]: t for t in rec["tasks"]}


def wait_rows(tmp_path, until, timeout=120):
    """run.json's task rows once ``until(rows)`` holds (or the last seen at the deadline)."""
    deadline = time.time() + timeout
    rows = {}
    while time.time() < deadline:
        runs = list((tmp_path / "runs").glob("*/run.json"))
        if runs:
            try:
                rows = {t["task"]: t for t in json.loads(runs[0].read_text())["tasks"]}
            except ValueError:
                rows = {}
            if rows and until(rows):
                break
        time.sleep(0.3)
    return rows


def launch_and_lose(cluster: RayNodes, path, tmp_path, ready, node, ready_timeout: float = 120,
                    timeout: float = 500):
    """Launch ``path`` on ``cluster`` (``--no-live``); once ``ready(rows)`` holds for run.json's
    task rows, kill node ``node(rows)`` (an index into the cluster's nodes); the launcher's exit
    status, its output, and the rows seen when the node was killed."""
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", str(path), "--no-live"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=cluster.env(), start_new_session=True)
    try:
        rows = wait_rows(tmp_path, ready, timeout=ready_timeout)
        cluster.kill_node(node(rows))
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, rows
