"""This machine's names and addresses, said once: which hosts are this machine, how an address
is spelt (every form the C resolver accepts), and which ``host:port`` pairs are the same port.
The cluster file, the plan, the runtime and the launcher all use these. No TensorFlow here."""
from __future__ import annotations

import functools
import ipaddress
import re
import socket
from typing import Optional, Set, Tuple, Union


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

