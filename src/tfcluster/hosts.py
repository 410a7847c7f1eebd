"""Which hosts are this machine, and who holds a port. No TensorFlow here."""
from __future__ import annotations

import functools
import ipaddress
import socket
from typing import Optional, Set, Tuple


@functools.lru_cache(maxsize=1)
def local_names() -> Set[str]:
    """Names and addresses that mean this machine."""
    names = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "0.0.0.0", "::"}
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.add(name.lower())
    try:
        import psutil
        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    names.add(a.address.split("%")[0].lower())
    except Exception:  # psutil missing or no permission: names above still work
        pass
    return names


def is_local(host: str) -> bool:
    """True when ``host`` is this machine: localhost, 127.0.0.0/8, ::1, its names and addresses."""
    h = host.strip("[]").split("%")[0].lower()
    try:
        ip = ipaddress.ip_address(h)
        return ip.is_loopback or ip.is_unspecified or str(ip) in local_names()
    except ValueError:
        pass
    return h in local_names()


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
    return f" by pid {pid} ({cmd[:80]})"


def free_port_run(count: int, start: int, host: str = "localhost") -> int:
    """The first port >= start such that start..start+count-1 are all free."""
    port = start
    while port + count - 1 <= 65535:
        busy = next((p for p in range(port, port + count) if port_in_use(p)), None)
        if busy is None:
            return port
        port = busy + 1
    raise OSError(f"no run of {count} free ports from {start}")


def endpoint_key(host: str, port: int) -> Tuple[str, int]:
    """Which port ``host:port`` is: every name of this machine (``localhost``, ``localhost.``,
    127.0.0.0/8, ``::1``, ``::ffff:127.0.0.1``, ``0.0.0.0``, ``::``, its own names and addresses)
    gives ``("<local>", port)``, because TensorFlow's server binds the port on every interface;
    other hosts give their normalised name or address."""
    h = host.strip().strip("[]").split("%")[0].lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(h)
        mapped = getattr(ip, "ipv4_mapped", None)
        h = str(mapped or ip)
    except ValueError:
        pass
    if is_local(h):
        return ("<local>", port)
    return (h, port)
