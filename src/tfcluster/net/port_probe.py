"""The port probe, written once: whether a TensorFlow server could bind a port on this host, and
free ports held until a task binds them.

Standard library only, and plain enough for any python3 a host may have (no ``__future__``
import, no annotations): the launcher imports it (:mod:`tfcluster.net.ports`), and what runs on
hosts where tfcluster need not be installed gets this file's text in place of the line
``IMPORT_LINE`` (:func:`ship`): the node agent of an ssh host (:mod:`tfcluster.backends.agent.host`,
sent by :func:`tfcluster.backends.ssh.agent_source`) and ``tfcluster doctor``'s probe
(:data:`tfcluster.backends.doctor.PROBE`). ``tests/unit/test_port_probe.py`` checks that what is
shipped holds this file's text.
"""
import os
import socket

#: the line that stands for this module in a program sent to a host; :func:`ship` puts the
#: module's text in its place
IMPORT_LINE = "from tfcluster.net.port_probe import bind_free, choose_ports  # shipped as text"


def bind_free(port, hold=False):
    """Whether a TensorFlow server could bind ``port`` here: the IPv4 and IPv6 wildcards, with
    SO_REUSEADDR as gRPC binds (a socket in TIME-WAIT does not count). Without ``hold``: True or
    False. With ``hold``: the sockets that keep the port, listening (a listening socket is what
    keeps another SO_REUSEADDR bind out), or None when it is taken."""
    held = []
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:     # no IPv6 here
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
            if hold:
                s.listen(1)
            held.append(s)
        except OSError:
            s.close()
            for h in held:
                h.close()
            return None if hold else False
    if hold:
        return held
    for h in held:
        h.close()
    return True


def choose_ports(n, base=None, avoid=()):
    """``n`` ports free here and held, as ``[(port, [held sockets])]``: from ``base`` upward, or
    (no ``base``) picked by the kernel; none of ``avoid``. Raises OSError when there are not
    ``n`` free ones."""
    out, avoid = [], set(avoid)
    port = base
    for _ in range(20000):
        if len(out) == n:
            return out
        if base is None:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
        elif port > 65535:
            break
        if port not in avoid and bind_free(port):
            held = bind_free(port, hold=True)
            if held:
                out.append((port, held))
                avoid.add(port)
        if base is not None:
            port += 1
    for _, held in out:
        for s in held:
            s.close()
    raise OSError("no %d free ports%s here" % (n, "" if base is None else " from %d" % base))


def text():
    """This module's source, as it is shipped."""
    with open(os.path.splitext(__file__)[0] + ".py", encoding="utf-8") as f:
        return f.read()


def ship(program):
    """``program``, the source of something sent to a host, with its one ``IMPORT_LINE``
    replaced by this module's text. Raises ValueError when it has no such line."""
    if program.count(IMPORT_LINE) != 1:
        raise ValueError("a shipped program must hold the port probe's import line once")
    return program.replace(IMPORT_LINE, text())
