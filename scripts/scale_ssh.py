"""The launcher at scale over ssh (``scripts/benchmark.py --only scale``): ``tfcluster launch``
with the ssh backend supervising ``scale_ssh_tasks`` trivial tasks on each of 3 hosts. The hosts
are network namespaces joined by a bridge, each with its own address and its own sshd (Debian's
openssh-server, a key made for the run), as tests/integration/test_ssh.py makes them; only the network is
separate, so the task's mark files (scale_local) and pids are visible here. Needs root, ``ip``,
``ssh``, ``ssh-keygen`` and ``/usr/sbin/sshd``; otherwise skipped with one line. The namespaces,
the veth and every sshd are removed at the end, on error and on Ctrl-C.

Figures (no baseline script: the issue asks only for the figures): start to all running, a
``hold`` run's wall time, SIGTERM to the launcher to every task gone, and the launcher's CPU,
peak RSS, threads and open files (per task: the gross figure / tasks).
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import json
import time
from typing import Any, Callable, Dict, List, Optional

import scale_local

SSHD_CONFIG = """\
ListenAddress {addr}:22
HostKey {dir}/host_key
PidFile {dir}/sshd-{name}.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
MaxSessions 256
MaxStartups 256
LogLevel ERROR
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable() -> Optional[str]:
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [t for t in ("ip", "ssh", "ssh-keygen") if not shutil.which(t)]
    if missing or not os.path.exists("/usr/sbin/sshd"):
        return f"missing {', '.join(missing) or '/usr/sbin/sshd'} (apt-get install openssh-server iproute2)"
    probe = f"tfsprobe{os.getpid() % 100000}"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return "cannot make network namespaces here"
    _ip("netns", "del", probe, check=False)
    return None


class Hosts:
    """``n`` namespaces with an address and an sshd each, joined through a bridge in a hub
    namespace that the root namespace reaches through one veth."""

    def __init__(self, base: str, n: int = 3):
        self.dir = base
        tag = f"{os.getpid() % 10000}{random.randint(0, 9)}"
        self.hub = f"tfs{tag}hub"
        self.names = [f"tfs{tag}{c}" for c in "abcdefgh"[:n]]
        self.root_if = f"tfs{tag}r"
        used = _ip("-4", "addr").stdout + _ip("-4", "route").stdout
        nets = [f"10.234.{i}" for i in random.sample(range(1, 255), 50)]
        self.net = next(x for x in nets if f"{x}." not in used)
        self.addrs = [f"{self.net}.{i + 2}" for i in range(n)]
        self.sshd: List[subprocess.Popen] = []
        self.made_ns: List[str] = []

    def __enter__(self) -> "Hosts":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        d = self.dir
        _ip("netns", "add", self.hub)
        self.made_ns.append(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        _ip("link", "add", self.root_if, "type", "veth", "peer", "name", "up0", "netns", self.hub)
        _ip("-n", self.hub, "link", "set", "up0", "master", "br0", "up")
        _ip("addr", "add", f"{self.net}.1/24", "dev", self.root_if)
        _ip("link", "set", self.root_if, "up")
        for i, (ns, addr) in enumerate(zip(self.names, self.addrs)):
            _ip("netns", "add", ns)
            self.made_ns.append(ns)
            _ip("-n", self.hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.hub, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
        for key in ("host_key", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tfcluster-bench",
                            "-f", os.path.join(d, key)], check=True, timeout=30)
        shutil.copy(os.path.join(d, "id.pub"), os.path.join(d, "authorized_keys"))
        host_pub = open(os.path.join(d, "host_key.pub")).read().split()
        with open(os.path.join(d, "known_hosts"), "w") as f:
            for addr in self.addrs:
                f.write(f"{addr} {host_pub[0]} {host_pub[1]}\n")
        os.makedirs("/run/sshd", exist_ok=True)
        for ns, addr in zip(self.names, self.addrs):
            cfg = os.path.join(d, f"sshd-{ns}.conf")
            with open(cfg, "w") as f:
                f.write(SSHD_CONFIG.format(addr=addr, dir=d, name=ns))
            log = open(os.path.join(d, f"sshd-{ns}.log"), "wb")
            self.sshd.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", cfg],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        deadline = time.time() + 20
        import socket

        for addr in self.addrs:
            while True:
                try:
                    with socket.create_connection((addr, 22), timeout=1) as s:
                        if s.recv(4).startswith(b"SSH"):
                            break
                except OSError:
                    pass
                if time.time() > deadline:
                    raise RuntimeError(f"sshd on {addr} does not answer")
                time.sleep(0.2)

    def remote(self) -> Dict[str, Any]:
        d = self.dir
        return {"user": "root", "identity_file": f"{d}/id", "python": sys.executable,
                "ssh_options": ["IdentitiesOnly=yes", f"UserKnownHostsFile={d}/known_hosts",
                                "StrictHostKeyChecking=yes", "LogLevel=ERROR"]}

    def stop(self) -> None:
        for p in self.sshd:
            if p.poll() is None:
                p.terminate()
        for p in self.sshd:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for ns in self.made_ns:
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for ns in reversed(self.made_ns):
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.root_if, check=False)

    def left(self) -> List[str]:
        listed = _ip("netns", "list", check=False).stdout
        return [ns for ns in self.made_ns if ns in listed]


def bench_scale_ssh(cfg: Dict[str, Any], tmp: str, popen, done, tfcluster_argv: List[str],
                    log: Callable[[str], None]) -> Dict[str, Any]:
    why = unavailable()
    if why:
        return {"skipped": why}
    per_host = cfg["scale_ssh_tasks"]
    hold = cfg["scale_hold"]
    base = os.path.join(tmp, "ssh")
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    res: Dict[str, Any] = {"hosts": 3, "tasks_per_host": per_host, "tasks": 3 * per_host,
                           "hold_seconds": hold}
    runs: Dict[str, List[Dict[str, Any]]] = {"run": [], "stop": []}
    with Hosts(base) as hosts:
        res["namespaces"] = list(hosts.made_ns)
        n = 3 * per_host
        for i in range(cfg["scale_reps"]):
            for stop in (False, True):
                tag = f"ssh-{'stop' if stop else 'run'}-{i}"
                mark = os.path.join(tmp, "marks", tag)
                os.makedirs(mark, exist_ok=True)
                os.chmod(mark, 0o777)
                cluster = {"worker": [f"{a}:{2222 + k}" for a in hosts.addrs for k in range(per_host)]}
                path = os.path.join(tmp, f"scale-{tag}.yaml")
                with open(path, "w") as f:
                    json.dump({"cluster": cluster,
                               "program": {"command": scale_local.task_command(mark, 0 if stop else hold)},
                               "watchdog": {"startup_timeout": 0}, "success": "all-workers",
                               "remote": hosts.remote(), "logdir": os.path.join(tmp, "runs")}, f)
                r = scale_local.one_run(popen, done, tfcluster_argv + ["launch", path, "--no-live",
                                                                       "--backend=ssh", "--grace=0"],
                                        n, mark, stop, 180.0, cfg["scale_sample"])
                if r.get("error"):
                    log(f"  scale {tag}: {r['error']}")
                runs["stop" if stop else "run"].append(r)
    left = hosts.left()
    med = scale_local._med
    r_ = scale_local._r
    ok = {k: [x for x in v if not x.get("error")] for k, v in runs.items()}
    allok = ok["run"] + ok["stop"]
    n = 3 * per_host

    def m(key, which=None):
        xs = allok if which is None else ok[which]
        return med([x.get(key) for x in xs])

    cpu = m("cpu_seconds", "run")
    hwm = m("hwm_kb")
    res.update({
        "start_seconds": r_(m("start_seconds"), 3),
        "wall_seconds": r_(m("wall_seconds", "run"), 3),
        "stop_seconds": r_(m("stop_seconds", "stop"), 3),
        "launcher_cpu_seconds": r_(cpu, 3),
        "cpu_ms_per_task": r_(None if cpu is None else 1000 * cpu / n, 3),
        "launcher_peak_rss_kb": hwm,
        "rss_kb_per_task_gross": r_(None if hwm is None else hwm / n, 1),
        "threads": m("threads"), "open_files": m("fds"),
        "tree_cpu_seconds": r_(m("tree_cpu_seconds", "run"), 3),
        "failed_runs": sum(1 for v in runs.values() for x in v if x.get("error")),
        "errors": sorted({x["error"][:200] for v in runs.values() for x in v if x.get("error")})[:3],
        "namespaces_left": left,
    })
    return res
