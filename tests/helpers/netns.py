"""Several ssh hosts on one machine: network namespaces joined by a bridge, each with its own
address and its own sshd (Debian's openssh-server) that accepts a key made for the run. Used by
tests/integration/test_ssh.py and by scripts/scale_ssh.py (the benchmark imports it with
tests/ on sys.path). Needs root, ``ip``, ``ssh``, ``ssh-keygen`` and /usr/sbin/sshd.

Topology::

    root ns  <prefix>r  <net>.1 ──┐
                                  │  bridge br0 in a "hub" namespace (its own, empty netfilter)
    ns a     eth0       <net>.2 ──┤
    ns b     eth0       <net>.3 ──┤
    ns c     eth0       <net>.4 ──┘

Only the network is separate: the file system and process ids are shared, so callers can
check remote processes with psutil. Nothing here imports pytest or TensorFlow.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import psutil

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
MaxSessions {sessions}
MaxStartups {sessions}
LogLevel ERROR
"""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable(prefix: str = "tfc") -> Optional[str]:
    """Why namespaces with sshd cannot be made here (one line), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [t for t in ("ip", "ssh", "ssh-keygen") if not shutil.which(t)]
    if missing or not os.path.exists("/usr/sbin/sshd"):
        return f"missing {', '.join(missing) or '/usr/sbin/sshd'} (apt-get install openssh-server iproute2)"
    probe = f"{prefix}probe{os.getpid() % 100000}"
    if ip("netns", "add", probe, check=False).returncode != 0:
        return "cannot make network namespaces here"
    ip("netns", "del", probe, check=False)
    return None


class NamespaceHosts:
    """``n`` namespaces with an address and an sshd each. ``prefix`` names the namespaces and
    links, ``subnet`` is the 10.x of the /24 picked, ``sessions`` sshd's MaxSessions; with
    ``sshd=False`` only the network is made (the three-node Slurm of helpers.slurm_nodes)."""

    def __init__(self, base: str, n: int = 3, prefix: str = "tfc", subnet: str = "10.233",
                 sessions: int = 64, sshd: bool = True):
        self.dir = base
        tag = f"{os.getpid() % 10000}{random.randint(0, 9)}"
        self.hub = f"{prefix}{tag}hub"
        self.names = [f"{prefix}{tag}{c}" for c in "abcdefgh"[:n]]
        self.root_if = f"{prefix}{tag}r"
        self.subnet, self.sessions = subnet, sessions
        self.net = self._free_subnet()
        self.addrs = [f"{self.net}.{i + 2}" for i in range(n)]
        self.gateway = f"{self.net}.1"
        self.sshd: List[Any] = []        # Popen, or Detached for an sshd restarted by a test
        self.made_ns: List[str] = []
        self.with_sshd = sshd

    def __enter__(self) -> "NamespaceHosts":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _free_subnet(self) -> str:
        used = ip("-4", "addr").stdout + ip("-4", "route").stdout
        for _ in range(100):
            net = f"{self.subnet}.{random.randint(1, 254)}"
            if f"{net}." not in used:
                return net
        raise RuntimeError(f"no free {self.subnet}.x.0/24 subnet")

    def start(self) -> None:
        ip("netns", "add", self.hub)
        self.made_ns.append(self.hub)
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")
        ip("-n", self.hub, "link", "set", "lo", "up")
        ip("link", "add", self.root_if, "type", "veth", "peer", "name", "up0", "netns", self.hub)
        ip("-n", self.hub, "link", "set", "up0", "master", "br0", "up")
        ip("addr", "add", f"{self.gateway}/24", "dev", self.root_if)
        ip("link", "set", self.root_if, "up")
        for i, (ns, addr) in enumerate(zip(self.names, self.addrs)):
            ip("netns", "add", ns)
            self.made_ns.append(ns)
            ip("-n", self.hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("-n", self.hub, "link", "set", f"p{i}", "master", "br0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
        if self.with_sshd:
            self._start_sshd()

    def link(self, i: int, up: bool) -> None:
        """Take host ``i``'s link to the bridge down (a host lost to the network) or up again."""
        ip("-n", self.hub, "link", "set", f"p{i}", "up" if up else "down")

    def kill_host(self, i: int) -> None:
        """Host ``i`` dies: its sshd and everything else in its namespace are killed."""
        ns = self.names[i]
        for pid in ip("netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        self.sshd[i].wait(10)

    def restart_sshd(self, i: int) -> None:
        """Host ``i``'s sshd again (after :meth:`kill_host`)."""
        if self.sshd[i].poll() is None:
            return
        self.sshd[i] = self._sshd(self.names[i], self.addrs[i], restart=True)
        deadline = time.time() + 20
        while not self._accepts(self.addrs[i]):
            if time.time() > deadline:
                raise RuntimeError(f"sshd on {self.addrs[i]} does not answer: {self.logs()}")
            time.sleep(0.2)

    def _sshd(self, ns: str, addr: str, restart: bool = False):
        cfg = os.path.join(self.dir, f"sshd-{ns}.conf")
        with open(cfg, "w") as f:
            f.write(SSHD_CONFIG.format(addr=addr, dir=self.dir, name=ns, sessions=self.sessions))
        argv = ["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", cfg]
        if restart:      # during a test: no child of the test process
            return detached(argv, os.path.join(self.dir, f"sshd-{ns}.log"))
        log = open(os.path.join(self.dir, f"sshd-{ns}.log"), "ab")
        try:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()

    def _start_sshd(self) -> None:
        d = self.dir
        # keys: one host key for every sshd, one client key
        for key in ("host_key", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tfcluster-test",
                            "-f", os.path.join(d, key)], check=True, timeout=30)
        shutil.copy(os.path.join(d, "id.pub"), os.path.join(d, "authorized_keys"))
        host_pub = open(os.path.join(d, "host_key.pub")).read().split()
        with open(os.path.join(d, "known_hosts"), "w") as f:
            for addr in self.addrs:
                f.write(f"{addr} {host_pub[0]} {host_pub[1]}\n")
        os.makedirs("/run/sshd", exist_ok=True)   # sshd's privilege separation folder
        for ns, addr in zip(self.names, self.addrs):
            self.sshd.append(self._sshd(ns, addr))
        deadline = time.time() + 20
        for addr in self.addrs:
            while not self._accepts(addr):
                if time.time() > deadline:
                    raise RuntimeError(f"sshd on {addr} does not answer: {self.logs()}")
                time.sleep(0.2)

    @staticmethod
    def _accepts(addr: str) -> bool:
        try:
            with socket.create_connection((addr, 22), timeout=1) as s:
                return s.recv(4).startswith(b"SSH")
        except OSError:
            return False

    def logs(self) -> str:
        out = []
        for ns in self.names:
            try:
                out.append(open(os.path.join(self.dir, f"sshd-{ns}.log")).read()[-500:])
            except OSError:
                pass
        return " | ".join(out)

    def remote(self) -> Dict[str, Any]:
        """The cluster file's ``remote:`` section for these hosts."""
        d = self.dir
        return {"user": "root", "identity_file": f"{d}/id", "python": sys.executable,
                "ssh_options": ["IdentitiesOnly=yes", f"UserKnownHostsFile={d}/known_hosts",
                                "StrictHostKeyChecking=yes", "LogLevel=ERROR"]}

    def pids(self, ns: str) -> List[int]:
        """Processes in namespace ``ns`` other than its sshd listener."""
        out = ip("netns", "pids", ns, check=False).stdout.split()
        keep = {p.pid for p in self.sshd}
        return [int(p) for p in out if int(p) not in keep and psutil.pid_exists(int(p))
                and _status(int(p)) != psutil.STATUS_ZOMBIE]

    def wait_quiet(self, timeout: float = 15.0) -> dict:
        """{namespace: [(pid, command)]} of what still runs after ``timeout`` ({}: nothing)."""
        deadline = time.time() + timeout
        while True:
            busy = {ns: self.pids(ns) for ns in self.names}
            busy = {k: v for k, v in busy.items() if v}
            if not busy or time.time() > deadline:
                return {ns: [(p, " ".join(_cmd(p))[:100]) for p in v] for ns, v in busy.items()}
            time.sleep(0.2)

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
        for ns in self.made_ns:     # anything still in a namespace, then the namespace itself
            for pid in ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for ns in reversed(self.made_ns):
            ip("netns", "del", ns, check=False)
        ip("link", "del", self.root_if, check=False)   # gone with the hub already, normally

    def left(self) -> List[str]:
        """The namespaces made here that still exist."""
        listed = ip("netns", "list", check=False).stdout
        return [ns for ns in self.made_ns if ns in listed]


def detached(argv: List[str], log: str) -> "Detached":
    """Start ``argv`` in a session of its own whose parent (sh) has exited at once, output to
    ``log``: a daemon restarted during a test is then no child of the test process."""
    r = subprocess.run(["sh", "-c", 'setsid "$@" </dev/null >>"$0" 2>&1 & echo $!', log, *argv],
                       capture_output=True, text=True, timeout=30, check=True)
    return Detached(int(r.stdout.split()[0]))


class Detached:
    """A daemon no longer our child, used as a Popen: poll(), wait(), terminate(), kill() by its
    pid (trusted only while it is the process seen at the start, by psutil)."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None
        try:
            self._proc: Optional["psutil.Process"] = psutil.Process(pid)
        except psutil.Error:
            self._proc, self.returncode = None, -1

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                if self._proc is None or not self._proc.is_running() or \
                        self._proc.status() == psutil.STATUS_ZOMBIE:
                    self.returncode = -1
            except psutil.Error:
                self.returncode = -1
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.time() + timeout
        while self.poll() is None:
            if time.time() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.1)
        return -1

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                self._proc.send_signal(sig)
            except psutil.Error:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _status(pid):
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return psutil.STATUS_ZOMBIE


def _cmd(pid):
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return ["?"]


def namespace_hosts(tmp_path_factory, prefix: str = "tfc", subnet: str = "10.233"):
    """A generator for a module fixture: yields started :class:`NamespaceHosts`, stops them and
    checks no namespace is left; skips (pytest) where they cannot be made."""
    import pytest
    why = unavailable(prefix)
    if why:
        pytest.skip(why)
    base = str(tmp_path_factory.mktemp(f"ssh{prefix}"))
    os.chmod(base, 0o755)
    h = NamespaceHosts(base, prefix=prefix, subnet=subnet)
    try:
        h.start()
    except Exception as e:
        h.stop()
        pytest.skip(f"could not set up namespaces with sshd: {e}")
    yield h
    h.stop()
    assert not h.left(), f"namespaces left behind: {h.left()}"
