"""Whether this machine is reachable beyond loopback (the launcher's security note): read from
the interfaces; only an unlistable interface table counts as "reachable" (the safe answer), not
any error."""
from __future__ import annotations

import socket
import types

import pytest

from tfcluster.net import addresses


def _addr(ip, family=socket.AF_INET):
    return types.SimpleNamespace(family=family, address=ip)


@pytest.mark.parametrize("table, reachable", [
    ({"lo": [_addr("127.0.0.1"), _addr("::1", socket.AF_INET6)]}, False),
    ({"lo": [_addr("127.0.0.1")], "eth0": [_addr("10.1.2.3")]}, True),
    ({"eth0": [_addr("fe80::1%eth0", socket.AF_INET6)]}, True),     # link-local counts
    ({}, False),
    (None, True),                   # cannot be listed: assume reachable, the note is shown
])
def test_reachable_beyond_loopback_reads_the_interfaces(monkeypatch, table, reachable):
    monkeypatch.setattr(addresses, "_interfaces", lambda: table)
    assert addresses.reachable_beyond_loopback() is reachable


def test_a_bug_while_reading_the_interfaces_is_not_taken_for_an_answer(monkeypatch):
    def broken():
        raise RuntimeError("a bug")
    monkeypatch.setattr(addresses, "_interfaces", broken)
    with pytest.raises(RuntimeError):
        addresses.reachable_beyond_loopback()
