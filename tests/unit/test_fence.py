"""Issue 49's pure rules: ssh options that connect through or read what another user could own
are refused; the overflow uid means "unmapped" only outside the initial user namespace; the
kernel's socket tables name a connection's owner; only the caller's records decide whether a
launch may start; the exposure note is silenced only where the host network was chosen. (The
attacks as a second user: tests/integration/test_fence_processes.py.) No processes."""
from __future__ import annotations

import os
import socket
import struct
import time

import psutil
import pytest

from helpers import cli, load
from tfcluster.clusterfile.checks import SSH_PATH_OPTIONS, foreign_path
from tfcluster.net import owners
from tfcluster.runs.profile import socket_owner


# ------------------------------------------------------------------ ssh options
@pytest.mark.parametrize("option", ["ControlPath=/tmp/x", "controlmaster auto", "ControlPersist=10m",
                                    "IdentityAgent=/tmp/agent.sock", "ForwardAgent=/tmp/a",
                                    "LocalForward=8080 localhost:80", "DynamicForward 1080"])
def test_ssh_options_that_connect_through_a_path_are_refused_naming_it(tmp_path, capsys, option):
    f = tmp_path / "c.yaml"
    f.write_text(f'cluster: {{worker: ["h:2222"]}}\nprogram: {{command: [python, -c, pass]}}\n'
                 f'remote: {{ssh_options: ["{option}"]}}\n')
    rc, _, err = cli(capsys, "validate", f)
    key = option.replace("=", " ").split()[0]
    assert rc == 2 and f"remote.ssh_options[0]: {next(k for k in SSH_PATH_OPTIONS if k.lower() == key.lower())}" \
        in err, err
    assert "Traceback" not in err


def test_proxyjump_runs_a_command_and_needs_allowing(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text('cluster: {worker: ["h:2222"]}\nprogram: {command: [python, -c, pass]}\n'
                 'remote: {ssh_options: ["ProxyJump=bastion"]}\n')
    rc, _, err = cli(capsys, "validate", f)
    assert rc == 2 and "remote.ssh_options[0]: ProxyJump runs a command" in err, err
    f.write_text('cluster: {worker: ["h:2222"]}\nprogram: {command: [python, -c, pass]}\n'
                 'remote: {ssh_options: ["ProxyJump=bastion"], allow_ssh_commands: [ProxyJump]}\n')
    assert cli(capsys, "validate", f)[0] == 0


def test_a_known_hosts_file_is_refused_where_another_user_could_make_it(tmp_path):
    mine = tmp_path / "ssh"
    mine.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o700)
    assert foreign_path(str(mine / "known_hosts")) is None              # missing, in a folder of mine
    (mine / "known_hosts").write_text("")
    assert foreign_path(str(mine / "known_hosts")) is None
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    assert "others can write" in foreign_path(str(shared / "kh"))       # missing in /tmp: anyone makes it
    (shared / "kh").write_text("")
    assert foreign_path(str(shared / "kh")) is None                     # mine, in a sticky folder
    os.chmod(shared / "kh", 0o666)
    assert "can be written by others" in foreign_path(str(shared / "kh"))
    assert foreign_path("relative/kh") and foreign_path("/x/%h/kh")


def test_a_user_known_hosts_file_of_ones_own_is_accepted(tmp_path, capsys):
    (tmp_path / "kh").write_text("")
    os.chmod(tmp_path, 0o700)
    f = tmp_path / "c.yaml"
    f.write_text(f'cluster: {{worker: ["h:2222"]}}\nprogram: {{command: [python, -c, pass]}}\n'
                 f'remote: {{ssh_options: ["UserKnownHostsFile={tmp_path}/kh", "StrictHostKeyChecking=yes"]}}\n')
    rc, _, err = cli(capsys, "validate", f)
    assert rc == 0, err
    f.write_text('cluster: {worker: ["h:2222"]}\nprogram: {command: [python, -c, pass]}\n'
                 'remote: {ssh_options: ["UserKnownHostsFile=/tmp/no-such-kh-of-anyone"]}\n')
    rc, _, err = cli(capsys, "validate", f)
    assert rc == 2 and "UserKnownHostsFile '/tmp/no-such-kh-of-anyone': is in '/tmp', which others can write" \
        in err, err


# ------------------------------------------------------------------ uid mapping
def test_the_overflow_uid_is_unmapped_only_outside_the_initial_namespace():
    initial = "         0          0 4294967295\n"
    assert owners.identity_map(initial)
    assert not owners.unmapped(65534, initial, 65534)          # nobody, really
    inside = "      4242          0          1\n"                # a private run's U2 (as read inside)
    assert not owners.identity_map(inside)
    assert owners.unmapped(65534, inside, 65534)               # root, or another user: ask outside
    assert not owners.unmapped(4242, inside, 65534)
    assert not owners.unmapped(1000, inside, 65534)


def test_without_a_helper_nothing_unmapped_is_trusted(monkeypatch):
    monkeypatch.setattr(owners, "_outside", None)
    monkeypatch.setattr(owners, "_uid_map", lambda: "4242 0 1\n")
    monkeypatch.setattr(owners, "overflow_uid", lambda: 65534)
    assert owners.trusted(os.geteuid()) and owners.trusted(0)
    assert not owners.trusted(65534, fd=0)


# ------------------------------------------------------------------ the relay's peers
def _row(local, remote, uid):
    def hexed(ip, port):
        raw = socket.inet_pton(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip)
        words = struct.unpack(f"={len(raw) // 4}I", raw)
        return "".join(f"{w:08X}" for w in words) + f":{port:04X}"
    return f"   0: {hexed(*local)} {hexed(*remote)} 01 00000000:00000000 00:00000000 00000000 {uid:5d} 0 12345"


def test_a_sockets_owner_is_read_from_the_kernels_tables():
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
    tcp = "\n".join([head, _row(("127.0.0.1", 40000), ("127.0.0.1", 5000), 65534),
                     _row(("127.0.0.1", 40001), ("127.0.0.1", 5000), 4242)])
    tcp6 = "\n".join([head, _row(("::ffff:127.0.0.1", 40002), ("::ffff:127.0.0.1", 5000), 1000)])
    assert socket_owner([tcp, tcp6], ("127.0.0.1", 40000), ("127.0.0.1", 5000)) == 65534
    assert socket_owner([tcp, tcp6], ("127.0.0.1", 40001), ("127.0.0.1", 5000)) == 4242
    assert socket_owner([tcp, tcp6], ("127.0.0.1", 40002), ("127.0.0.1", 5000)) == 1000
    assert socket_owner([tcp, tcp6], ("127.0.0.1", 40003), ("127.0.0.1", 5000)) is None


def test_this_processs_own_connection_is_its_own():
    from tfcluster.runs.profile import peer_uid
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    c = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    try:
        assert peer_uid(conn) == os.geteuid()
    finally:
        for s in (c, conn, srv):
            s.close()


# ------------------------------------------------------------------ the foreign-record rule
def _plan(tmp_path, network="host"):
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    cluster = load(f"""
        cluster: {{worker: [localhost:2222]}}
        program: {{command: [python, -c, pass]}}
        logdir: {tmp_path / 'runs'}
        network: {network}
        """, tmp_path)
    return build_plan(cluster, LaunchOptions())


def _live_record(tmp_path, plan, name):
    from tfcluster.safe_files import write_json
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    write_json(str(d / "run.json"), {"run_id": name, "result": "running", "file": plan.source,
                                     "launcher_pid": 1, "launcher_started": psutil.Process(1).create_time(),
                                     "started": time.time(), "tasks": [{"task": "worker:0", "state": "running"}]})
    return str(d)


def test_a_record_not_the_callers_never_blocks_and_is_named(tmp_path, monkeypatch):
    from tfcluster.drivers import preflight
    from tfcluster.runs import find
    plan = _plan(tmp_path)
    d = _live_record(tmp_path, plan, "zz")
    assert "a run of this file is live: launcher pid 1" in preflight.live_run_problem(plan)   # the caller's own
    monkeypatch.setattr(find, "owned_by_caller", lambda run_dir: False)
    foreign = []
    assert preflight.live_run_problem(plan, foreign) is None
    assert foreign == [f"{d}: a run record of another user names this file as running; it is not "
                       f"yours and is ignored"]


# ------------------------------------------------------------------ the exposure note
def test_the_exposure_note_is_silenced_only_where_host_was_chosen(tmp_path, monkeypatch):
    from dataclasses import replace

    from tfcluster.drivers.network import exposure_note
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    chosen = _plan(tmp_path)
    assert chosen.network == "host" and chosen.network_asked
    assert "every user of this machine can connect" in exposure_note(chosen, silenced=False, environ={})
    assert exposure_note(chosen, silenced=True, environ={}) is None
    assert exposure_note(chosen, silenced=False, environ={"TFCLUSTER_NO_SECURITY_NOTE": "1"}) is None
    fell = replace(chosen, network_asked=False, network_why="worker:0 is at vm:2222, not a loopback address")
    line = exposure_note(fell, silenced=True, environ={"TFCLUSTER_NO_SECURITY_NOTE": "1"})
    assert line and "not a loopback address" in line
    assert exposure_note(replace(chosen, network="private"), silenced=False, environ={}) is None


# ------------------------------------------------------------------ tfcluster's own ssh control folder
def test_the_ssh_control_folder_is_made_only_where_no_other_user_can_change_it(tmp_path, monkeypatch):
    import tempfile

    from tfcluster.errors import UserError
    from tfcluster.safe_files import private_temp_dir
    open_to_all = tmp_path / "tmp"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(open_to_all))
    with pytest.raises(UserError, match="TMPDIR: .* world-writable without the sticky bit"):
        private_temp_dir("tfc-ssh-")
    os.chmod(open_to_all, 0o1777)
    d = private_temp_dir("tfc-ssh-")
    st = os.stat(d)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700


# ------------------------------------------------------------------ status shows the network
def test_status_says_which_network_the_record_says():
    from tfcluster.runs.status import network_line
    assert network_line({"backend": "local", "network": {"mode": "private", "outbound": None,
                                                         "namespaces": "user+net+user"}}) == \
        "network: private (only the run's processes reach its ports; outbound: none, loopback only)"
    assert network_line({"backend": "local", "network": {"mode": "host", "why": "worker:0 is at vm:1"}}) == \
        "network: host (every user of this machine can connect to its tasks; worker:0 is at vm:1)"
    assert network_line({"backend": "ssh", "network": {"mode": "host"}}) == \
        "network: host (every user of the run's hosts can connect to its tasks)"
    assert network_line({}) == ""
