"""The ssh backend's settings per host and the ssh command line it builds (no ssh started; the
real sshd tests: tests/integration/test_ssh.py).
"""
from __future__ import annotations

from tfcluster.clusterfile import config


def test_remote_settings_merge_and_ssh_argv(tmp_path):
    from tfcluster.backends.ssh import remote_settings, ssh_argv, remote_command
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
    assert remote_command(s1).startswith("/opt/venv/bin/python -I -c '\"tfcluster ssh wrapper\";import base64;exec(")
