"""Security with real processes: the lines `tfcluster commands` prints run in bash as they say
(secrets from the shell, hostile keys quoted, control characters kept); docs/SECURITY.md's firewall
recipe parses and, in a network namespace, closes the ports over IPv4, IPv6 and link-local; a real
TensorFlow server listens on IPv6 too. (The pure rules: tests/unit/test_security.py.)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

import helpers
from tfcluster.cli import main as cli

SECRET = "s3cr3t-VALUE-42"


def _file(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


# ---- the lines `tfcluster commands` prints, run in bash

def test_commands_reference_secrets_from_the_environment(tmp_path, capsys):
    out_file = tmp_path / "seen"
    path = _file(tmp_path, f"""\
        cluster: {{worker: [localhost:2223]}}
        program:
          command: [sh, -c, 'printf %s "$HF_TOKEN/$BUCKET" > {out_file}']
          env: {{HF_TOKEN: {SECRET}, BUCKET: gs://b}}
        secrets: [BUCKET]
        """)
    assert cli.main(["commands", path]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out and '"HF_TOKEN=${HF_TOKEN:?set HF_TOKEN (secret)}"' in out
    line = [ln for ln in out.splitlines() if not ln.startswith("#")][0]
    env = {"PATH": os.environ["PATH"], "HF_TOKEN": "from-shell", "BUCKET": "gs://shell"}
    r = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert out_file.read_text() == "from-shell/gs://shell"
    # without the variable in the shell, the line stops and says which one
    r = subprocess.run(["bash", "-c", line], env={"PATH": os.environ["PATH"]}, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and "set HF_TOKEN" in r.stderr


def test_commands_quote_hostile_env_keys_and_values(tmp_path, capsys):
    path = _file(tmp_path, """\
        cluster: {worker: [localhost:2223]}
        program:
          command: [env]
          env: {"$(touch pwned1)": 1, "A B;touch pwned2": "$(touch pwned3)", "`touch pwned4`": "'"}
        """)
    assert cli.main(["commands", path]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")][0]
    r = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.glob("pwned*"))
    seen = r.stdout
    assert "$(touch pwned1)=1" in seen and "A B;touch pwned2=$(touch pwned3)" in seen


def test_commands_keep_control_characters_on_one_line(tmp_path, capsys):
    path = _file(tmp_path, """\
        cluster: {worker: [localhost:2223]}
        program:
          command: [printf, '%s|', "two\\nlines", "esc\\e[2J", "back\\\\slash 'q'", "\\u202eRTL"]
          env: {"A": "x\\ny"}
        """)
    assert cli.main(["commands", path]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 2 and "\x1b" not in out and "\u202e" not in out
    line = out.splitlines()[1]
    r = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "two\nlines|esc\x1b[2J|back\\slash 'q'|\u202eRTL|"


# ---- the network: TensorFlow listens on IPv6 too, and docs/SECURITY.md's recipe closes both

DOCS = os.path.join(helpers.DOCS, "SECURITY.md")


def _recipe() -> str:
    with open(DOCS) as f:
        text = f.read()
    start = text.index("```nft\n") + len("```nft\n")
    return textwrap.dedent(text[start:text.index("```", start)])


def test_firewall_recipe_filters_ipv4_and_ipv6_and_parses(tmp_path):
    recipe = _recipe()
    assert "table inet" in recipe and "ip saddr" in recipe and "ip6 saddr" in recipe
    nft = shutil.which("nft")
    if not nft:
        pytest.skip("nft is not installed")
    f = tmp_path / "tfcluster.nft"
    f.write_text(recipe)
    r = subprocess.run([nft, "-c", "-f", str(f)], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 and "Operation not permitted" in r.stderr:
        pytest.skip("nft -c needs CAP_NET_ADMIN here")
    assert r.returncode == 0, r.stderr
    f.write_text(recipe.replace("ip6 saddr", "ip6 sadr"))  # the check can fail
    assert subprocess.run([nft, "-c", "-f", str(f)], capture_output=True, timeout=30).returncode != 0


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _reachable(family, addr, port, timeout=1.0) -> bool:
    import socket
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            if "%" in addr:  # link-local: (address, port, flowinfo, interface index)
                a, dev = addr.split("%")
                s.connect((a, port, 0, socket.if_nametoindex(dev)))
            else:
                s.connect((addr, port))
            return True
        except OSError:
            return False


def _loopback_reaches(ns: str, port: int, uid: int) -> bool:
    """Whether user ``uid`` connects to 127.0.0.1:port (and [::1]) inside namespace ``ns``."""
    code = (f"import encodings.idna, os, socket, sys\nos.setgid({uid}); os.setuid({uid})\nok = 0\n"
            f"for a in ('127.0.0.1', '::1'):\n"
            f"    try:\n        socket.create_connection((a, {port}), timeout=2).close(); ok += 1\n"
            f"    except OSError:\n        pass\nsys.exit(0 if ok == 2 else 1 if ok == 0 else 3)")
    rc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-I", "-c", code], timeout=30).returncode
    assert rc in (0, 1), "IPv4 and IPv6 loopback disagree"
    return rc == 0


LISTEN = """
import socket, sys, time
socks = []
for port in (2222, 2225):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual-stack, as gRPC listens
    s.bind(("::", port)); s.listen(); socks.append(s)
print("up", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"),
                    reason="needs root, nft and ip (a network namespace)")
def test_firewall_recipe_closes_the_ports_over_ipv4_ipv6_and_link_local(tmp_path):
    """The recipe, loaded in a network namespace whose dual-stack listener sits on 2222 (in the
    recipe's range) and 2225 (outside it): from outside the allowed sets, 2222 is closed over
    IPv4, IPv6 and IPv6 link-local; 2225 stays open (the network works). The old IPv4-only rule
    leaves 2222 open over IPv6."""
    import socket
    tag = f"tfcfw{os.getpid() % 100000}"
    ns, host_if = tag, f"{tag}h"
    if _ip("netns", "add", ns, check=False).returncode != 0:
        pytest.skip("cannot create a network namespace here")
    proc = None
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
        with open(f"/proc/sys/net/ipv6/conf/{host_if}/accept_dad", "w") as f:  # no wait for DAD
            f.write("0")
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c",
                        "echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_dad"], check=True, timeout=30)
        for where in ([], ["-n", ns]):
            dev = host_if if not where else "eth0"
            subprocess.run(["ip", *where, "link", "set", dev, "up"], check=True, timeout=30)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("addr", "add", "10.99.7.1/24", "dev", host_if)
        _ip("-n", ns, "addr", "add", "10.99.7.2/24", "dev", "eth0")
        _ip("addr", "add", "fd00:99:7::1/64", "dev", host_if, "nodad")
        _ip("-n", ns, "addr", "add", "fd00:99:7::2/64", "dev", "eth0", "nodad")
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", LISTEN],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "up"
        link_local = None
        for _ in range(40):  # the namespace's link-local address, once it is no longer tentative
            out = _ip("-n", ns, "-6", "addr", "show", "dev", "eth0", "scope", "link").stdout
            if "inet6 fe80" in out and "tentative" not in out:
                link_local = out.split("inet6 ", 1)[1].split("/", 1)[0] + "%" + host_if
                break
            time.sleep(0.1)
        assert link_local, "the namespace has no link-local address"
        targets = [(socket.AF_INET, "10.99.7.2"), (socket.AF_INET6, "fd00:99:7::2"),
                   (socket.AF_INET6, link_local)]
        for family, addr in targets:  # without a firewall, all open
            assert _reachable(family, addr, 2222), addr
        # on the namespace's own loopback, before the firewall: every user reaches 2222
        assert _loopback_reaches(ns, 2222, 65534) and _loopback_reaches(ns, 2222, 0)
        rules = tmp_path / "r.nft"
        rules.write_text(_recipe().replace("meta skuid != 1000", "meta skuid != 0"))   # the tasks' user: root here
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", str(rules)], check=True, timeout=30)
        for family, addr in targets:
            assert not _reachable(family, addr, 2222), f"{addr}:2222 is still reachable"
            assert _reachable(family, addr, 2225), addr
        # on loopback: another user of the machine is refused, the tasks' user gets in
        assert not _loopback_reaches(ns, 2222, 65534), "another local user reaches 2222 over loopback"
        assert _loopback_reaches(ns, 2225, 65534)
        assert _loopback_reaches(ns, 2222, 0)
        # the recipe's sets admit the cluster: allow this host's addresses and 2222 opens again
        subprocess.run(["ip", "netns", "exec", ns, "nft", "add", "element", "inet", "tfcluster",
                        "cluster4", "{ 10.99.7.1 }"], check=True, timeout=30)
        subprocess.run(["ip", "netns", "exec", ns, "nft", "add", "element", "inet", "tfcluster",
                        "cluster6", "{ fd00:99:7::1 }"], check=True, timeout=30)
        assert _reachable(socket.AF_INET, "10.99.7.2", 2222)
        assert _reachable(socket.AF_INET6, "fd00:99:7::2", 2222)
        # the old IPv4-only rule: IPv6 gets through
        subprocess.run(["ip", "netns", "exec", ns, "nft", "flush", "ruleset"], check=True, timeout=30)
        old = tmp_path / "old.nft"
        old.write_text("table inet filter {\n chain input {\n  type filter hook input priority filter;\n"
                       "  tcp dport 2222-2224 ip saddr != { 127.0.0.1, 10.0.0.0/24 } drop\n }\n}\n")
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", str(old)], check=True, timeout=30)
        assert not _reachable(socket.AF_INET, "10.99.7.2", 2222)
        assert _reachable(socket.AF_INET6, "fd00:99:7::2", 2222)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)
        _ip("link", "del", host_if, check=False)
        _ip("netns", "del", ns, check=False)


SERVER = """
import sys, tensorflow as tf
server = tf.distribute.Server({"worker": ["localhost:%s"]}, job_name="worker", task_index=0,
                              protocol="grpc", start=True)
print("up", flush=True)
sys.stdin.read()
"""


@pytest.mark.tf
def test_tensorflow_server_listens_on_ipv4_and_ipv6(ports):
    """What docs/SECURITY.md says: a server whose cluster names localhost listens on every
    interface, IPv6 included."""
    import socket
    port = ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-c", SERVER % port], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        out = subprocess.run(["ss", "-Htln", f"sport = :{port}"], capture_output=True, text=True,
                             timeout=30).stdout if shutil.which("ss") else ""
        assert _reachable(socket.AF_INET, "127.0.0.1", port)
        assert _reachable(socket.AF_INET6, "::1", port), out
        if out:
            assert "[::]:" in out or "*:" in out, out  # the wildcard, not loopback only
    finally:
        proc.kill()
        proc.wait(timeout=30)
