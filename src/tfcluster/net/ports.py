"""Ports on this machine, said once: whether TensorFlow could bind a port, who holds it, free
ports for a cluster, and whether something accepts connections. No TensorFlow here."""
from __future__ import annotations

import os
import socket
from typing import Collection, List, Optional, Tuple

from tfcluster.net.addresses import is_local
from tfcluster.net.port_probe import bind_free


def port_holder(port: int) -> Optional[Tuple[int, str]]:
    """(pid, command line) of the process listening on TCP ``port``, when it can be found."""
    try:
        import psutil
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                if conn.pid:
                    try:
                        cmd = " ".join(psutil.Process(conn.pid).cmdline()) or psutil.Process(conn.pid).name()
                    except psutil.Error:
                        cmd = "?"
                    return conn.pid, cmd
                return None
    except Exception:
        return None
    return None


def port_in_use(port: int) -> bool:
    """True when TensorFlow could not bind ``port`` (it binds the wildcard address, v4 and v6)."""
    return not bind_free(port)


def describe_port_holder(port: int) -> str:
    holder = port_holder(port)
    if holder is None:
        return ""
    pid, cmd = holder
    return f" by pid {pid} ({short_command(cmd)})"


def short_command(cmd: str, width: int = 100) -> str:
    """A command line cut at a word, never inside an argument: the program's name without its
    folder, then whole words while they fit in ``width``, then how many were left out."""
    words = cmd.split()
    if not words:
        return "?"
    out = [os.path.basename(words[0]) or words[0]]
    for i, w in enumerate(words[1:], 1):
        if len(" ".join(out + [w])) > width:
            return " ".join(out) + f" ... ({len(words) - i} more argument{'s' if len(words) - i > 1 else ''})"
        out.append(w)
    return " ".join(out)


def free_port_run(count: int, start: int, host: str = "localhost") -> int:
    """The first port >= start such that start..start+count-1 are all free."""
    port = start
    while port + count - 1 <= 65535:
        busy = next((p for p in range(port, port + count) if port_in_use(p)), None)
        if busy is None:
            return port
        port = busy + 1
    raise OSError(f"no run of {count} free ports from {start}")


def port_run(count: int, start: int, taken: Collection[int] = (), probe: bool = True) -> int:
    """The first of ``count`` consecutive ports from ``start`` that holds none of ``taken``: free
    on this machine (``probe``: :func:`free_port_run`), or, without it (a private network, where
    every port is free), the first such run. OSError when no run is left below 65536."""
    first = start
    while True:
        if not probe and first + count - 1 > 65535:
            raise OSError(f"no run of {count} ports from {start}")
        if probe:
            first = free_port_run(count, first)
        clash = sorted(set(range(first, first + count)).intersection(taken))
        if not clash:
            return first
        first = clash[-1] + 1


def ports_besides(n: int, used: Collection[int], probe: bool = True) -> List[int]:
    """``n`` more ports beside the ``used`` ones: free ports of this machine that are not among
    them (``probe``: :func:`free_ports`), or, without it (a private network, where every port is
    free), the ports after the highest of them (after 2221 when none). OSError when none are left."""
    if probe:
        return [p for p in free_ports(n + len(used)) if p not in used][:n]
    free, port = [], max(used or {2221}) + 1
    while len(free) < n:
        if port > 65535:
            raise OSError("no ports are left above the tasks' own")
        if port not in used:
            free.append(port)
        port += 1
    return free


def free_ports(n: int) -> List[int]:
    """``n`` distinct TCP ports that a TensorFlow server could bind right now (chosen by the
    kernel, then checked on the IPv4 and IPv6 wildcard addresses)."""
    ports: List[int] = []
    for _ in range(max(1000, 3 * n)):
        if len(ports) == n:
            return ports
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port not in ports and not port_in_use(port):
            ports.append(port)
    raise OSError(f"could not find {n} free ports")


def accepts(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    if is_local(host):
        host = "localhost"
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
