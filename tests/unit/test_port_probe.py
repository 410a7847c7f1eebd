"""The port probe is written once, in tfcluster.net.port_probe: the launcher imports it, and the
programs sent to hosts where tfcluster need not be installed -- the ssh node agent and
``tfcluster doctor``'s probe -- carry that module's text in place of its import line."""
import socket

import pytest

from tfcluster.backends import doctor, ssh
from tfcluster.net import port_probe, ports

SHIPPED = {"the ssh node agent": ssh.agent_source, "doctor's probe": lambda: doctor.PROBE}


def listening():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("0.0.0.0", 0))
    s.listen(1)
    return s


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_what_is_shipped_holds_the_module_text_and_no_probe_of_its_own(name):
    program = SHIPPED[name]()
    with open(port_probe.__file__, encoding="utf-8") as f:
        text = f.read()
    assert port_probe.text() == text
    assert program.count(text) == 1, name
    rest = program.replace(text, "")
    for own in ("def bind_free", "def choose_ports", "SO_REUSEADDR", "IPV6_V6ONLY", "import tfcluster",
                "from tfcluster"):
        assert own not in rest, f"{name} has {own!r} besides the port probe's text"
    compile(program, name, "exec")


def test_ship_wants_the_import_line_once():
    with pytest.raises(ValueError):
        port_probe.ship("import socket\n")
    with pytest.raises(ValueError):
        port_probe.ship(port_probe.IMPORT_LINE + "\n" + port_probe.IMPORT_LINE + "\n")


def test_the_launcher_and_the_probe_agree_on_a_taken_port():
    s = listening()
    try:
        port = s.getsockname()[1]
        assert ports.port_in_use(port)
        assert port_probe.bind_free(port) is False and port_probe.bind_free(port, hold=True) is None
    finally:
        s.close()
    held = port_probe.choose_ports(2, None, avoid=[port])
    try:
        assert len({p for p, _ in held}) == 2 and port not in {p for p, _ in held}
        assert all(ports.port_in_use(p) for p, _ in held)     # held until a task binds them
    finally:
        for _, socks in held:
            for x in socks:
                x.close()
