"""The ssh backend's settings per host and the ssh command line it builds (no ssh started; the
real sshd tests: tests/integration/test_ssh.py).
"""
from __future__ import annotations

from tfcluster.clusterfile import config


def test_remote_settings_merge_and_ssh_argv(tmp_path):
    from tfcluster.backends.ssh import remote_command, remote_settings, ssh_argv
    p = tmp_path / "c.yaml"
    p.write_text("cluster: {worker: [h1:2222, h2:2222]}\n"
                 "remote: {user: alice, python: /opt/venv/bin/python, ssh_options: [A=b]}\n"
                 "hosts: {h2: {user: bob, port: 2200, ssh_host: 10.0.0.2, workdir: /srv/x}}\n")
    c = config.load(str(p))
    s1, s2 = remote_settings(c, "h1"), remote_settings(c, "h2")
    assert (s1.user, s1.port, s1.python) == ("alice", None, "/opt/venv/bin/python")
    assert (s2.user, s2.port, s2.python, s2.workdir) == ("bob", 2200, "/opt/venv/bin/python", "/srv/x")
    argv = ssh_argv(s2, "h2")
    assert argv[-1] == "10.0.0.2" and "BatchMode=yes" in argv and ["-p", "2200"] == argv[argv.index("-p"):][:2]
    assert ["-l", "bob"] == argv[argv.index("-l"):][:2] and "A=b" in argv
    assert remote_command(s1).startswith("/opt/venv/bin/python -I -c '\"tfcluster node agent\";import base64;exec(")


# ---- ssh options that run a command on this machine (ProxyCommand, ...): only when allowed by name
import pytest  # noqa: E402

from helpers import cli  # noqa: E402


@pytest.mark.parametrize("option", ["ProxyCommand=sh -c 'id > /tmp/PWN_%h'", "proxycommand nc %h %p",
                                    "LocalCommand=touch /tmp/x", "PermitLocalCommand=yes",
                                    "KnownHostsCommand=/bin/id", "PKCS11Provider=/tmp/evil.so"])
def test_an_ssh_option_that_runs_a_command_is_refused_unless_allowed(tmp_path, capsys, option):
    p = tmp_path / "c.yaml"
    p.write_text("cluster: {ps: [node1:2222], worker: [node2:2222]}\nbackend: ssh\n"
                 f"remote: {{ssh_options: [{option!r}]}}\n".replace("'", '"', 2) if "'" not in option
                 else "cluster: {ps: [node1:2222], worker: [node2:2222]}\nbackend: ssh\n"
                 f'remote: {{ssh_options: ["{option}"]}}\n')
    key = option.replace("=", " ").split()[0]
    for cmd in (["validate", str(p)], ["doctor", str(p)], ["launch", str(p), "--dry-run", "--", "python", "t.py"],
                ["commands", str(p)]):
        code, out, err = cli(capsys, *cmd)
        assert code == 2 and "Traceback" not in err, (cmd, err)
        assert f"remote.ssh_options[0]: {key.lower()}" in err.lower() and "allow_ssh_commands" in err, err
    # named in allow_ssh_commands: accepted, and validate shows the whole ssh command line
    text = p.read_text().rstrip("}\n") + f", allow_ssh_commands: [{key}]}}\n"
    p.write_text(text)
    code, out, err = cli(capsys, "validate", "--file-only", str(p))
    assert code == 0, err
    assert "ssh to node1: ssh " in out and option.split("=")[0].split()[0] in out


def test_allow_ssh_commands_names_only_options_that_run_commands(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text("cluster: {worker: [node1:2222]}\nbackend: ssh\nremote: {allow_ssh_commands: [ForwardAgent]}\n")
    code, _, err = cli(capsys, "validate", str(p))
    assert code == 2 and "remote.allow_ssh_commands[0]: 'ForwardAgent' is not an ssh option that runs a command" in err
