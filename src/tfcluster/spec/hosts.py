"""Hosts and ports, said once: which hosts are this machine, whether a port is free, who
holds it, and free ports for a cluster. The launcher, the file model, the runtime (thread
pools sized by the tasks that share a host) and the tests all use these. No TensorFlow here."""
from __future__ import annotations

import functools
import os
import ipaddress
import re
import socket
from typing import List, Optional, Set, Tuple, Union


@functools.lru_cache(maxsize=1)
def local_names() -> Set[str]:
    """Names and addresses that mean this machine."""
    names = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "0.0.0.0", "::"}
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.add(name.lower())
    for addrs in (_interfaces() or {}).values():   # none listed: the names above still work
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                names.add(a.address.split("%")[0].lower())
    return names


_NUMERIC = re.compile(r"(0[xX][0-9a-fA-F]*|[0-9]+)(\.(0[xX][0-9a-fA-F]*|[0-9]+)){0,3}")


@functools.lru_cache(maxsize=1024)
def ip_of(host: str) -> Optional[Union[ipaddress.IPv4Address, ipaddress.IPv6Address]]:
    """The address ``host`` spells, or None for a name. Besides the usual forms this reads the
    short and numeric IPv4 forms that the C resolver (and so gRPC and ssh) accepts: ``127.1``,
    ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` all mean 127.0.0.1. An IPv4-mapped IPv6 address
    (``::ffff:127.0.0.1``) gives its IPv4 address."""
    h = host.strip().strip("[]").split("%")[0].lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        if not _NUMERIC.fullmatch(h):
            return None
        try:
            ip = ipaddress.IPv4Address(socket.inet_aton(h))
        except (OSError, ValueError):
            return None
    return getattr(ip, "ipv4_mapped", None) or ip


def is_loopback(host: str) -> bool:
    """True for names that mean "this machine" wherever they are read: ``localhost``, 127.0.0.0/8
    in any spelling (``127.1``, ``2130706433``), ``::1``, ``0.0.0.0``, ``::``."""
    h = host.strip().strip("[]").split("%")[0].lower().rstrip(".")
    if h in ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback") \
            or h.endswith(".localhost"):
        return True
    ip = ip_of(h)
    return ip is not None and (ip.is_loopback or ip.is_unspecified)


@functools.lru_cache(maxsize=1024)     # local_names() is read once a process too
def is_local(host: str) -> bool:
    """True when ``host`` is this machine: localhost, 127.0.0.0/8, ::1, its names and addresses."""
    h = host.strip().strip("[]").split("%")[0].lower()
    if is_loopback(h):        # no look at the interfaces (psutil) or the resolver (getfqdn)
        return True
    ip = ip_of(h)
    if ip is not None:
        return ip.is_loopback or ip.is_unspecified or str(ip) in local_names()
    return h.rstrip(".") in local_names() or h in local_names()


def host_of(address: str) -> str:
    """The host part of ``host:port`` or ``[v6]:port``."""
    address = address.strip()
    if address.startswith("["):
        return address[1:address.find("]")]
    return address.rsplit(":", 1)[0] if ":" in address else address


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
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
        except OSError:
            return True
        finally:
            s.close()
    return False


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


def reachable_beyond_loopback() -> bool:
    """True when this machine has a network address other than loopback (IPv4 or IPv6,
    link-local addresses included: TensorFlow's server listens on all of them)."""
    interfaces = _interfaces()
    if interfaces is None:      # they cannot be listed: assume reachable (the note is shown)
        return True
    for addrs in interfaces.values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                ip = a.address.split("%")[0]
                if not (ip.startswith("127.") or ip == "::1"):
                    return True
    return False


def _interfaces():
    """psutil's ``net_if_addrs()``, or None where it cannot be had (psutil missing, or the
    interfaces cannot be listed here)."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        return psutil.net_if_addrs()
    except (OSError, psutil.Error):
        return None


def endpoint_key(host: str, port: int) -> Tuple[str, int]:
    """Which port ``host:port`` is: every name of this machine (``localhost``, ``localhost.``,
    127.0.0.0/8, ``::1``, ``::ffff:127.0.0.1``, ``0.0.0.0``, ``::``, its own names and addresses)
    gives ``("<local>", port)``, because TensorFlow's server binds the port on every interface;
    other hosts give their normalised name or address."""
    h = host.strip().strip("[]").split("%")[0].lower().rstrip(".")
    ip = ip_of(h)
    if ip is not None:
        h = str(ip)
    if is_local(h):
        return ("<local>", port)
    return (h, port)
