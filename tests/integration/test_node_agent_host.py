"""The ssh hosts' node agent (tfcluster.backends.agent.host) as the launcher talks to it, here,
without ssh: the command line the launcher sends (the host's standard library only), its
ports chosen and held until the task starts (nobody else binds them meanwhile), a task's output
and exit, a signal to the task's group, and the end of its stdin stopping every task."""
from __future__ import annotations

import base64
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

import psutil

from tfcluster.backends import ssh


def _agent():
    cmd = ssh.remote_command(ssh.RemoteSpec(python=sys.executable))
    return subprocess.Popen(shlex.split(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)


def _send(p, **msg):
    p.stdin.write((json.dumps(msg) + "\n").encode())
    p.stdin.flush()


def _until(p, ev, task=None):
    while True:
        line = p.stdout.readline()
        assert line, f"the agent ended before {ev}"
        msg = json.loads(line)
        if msg["ev"] == ev and (task is None or msg.get("task") == task):
            return msg


def _binds(port) -> bool:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_the_agent_chooses_holds_starts_streams_signals_and_stops_everything_at_eof(tmp_path):
    p = _agent()
    try:
        _send(p, op="hello", stop_timeout=2)
        hello = _until(p, "hello")
        assert hello["pid"] > 0
        _send(p, op="ports", want={"worker:0": {"port": None, "profiler": True}}, base=None)
        got = _until(p, "ports")
        port, prof = got["ports"]["worker:0"]
        assert port and prof and port != prof and not got["taken"]
        assert not _binds(port) and not _binds(prof), "a chosen port is held until its task starts"
        prog = ("import os, socket, subprocess, sys, time\n"
                f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', {port})); s.listen()\n"
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
                "print('bound', os.environ['TFCLUSTER_LAUNCHER_PID'], flush=True)\n"
                "time.sleep(300)\n")
        _send(p, op="start", task="worker:0", argv=[sys.executable, "-c", prog], env={"A": "1"}, cwd=str(tmp_path))
        pid = _until(p, "started", "worker:0")["pid"]
        out = base64.b64decode(_until(p, "out", "worker:0")["d"]).decode()
        assert out == f"bound {hello['pid']}\n"         # it bound the released port; supervised by the agent
        kids = psutil.Process(pid).children()
        assert kids
        _send(p, op="signal", task="worker:0", sig=int(signal.SIGTERM))
        assert _until(p, "exit", "worker:0")["rc"] == -signal.SIGTERM
        time.sleep(0.3)
        assert not any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids), \
            "the task's child outlived a signal to its group"
        # a listed port that is taken: said, not used
        holder = socket.socket()
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        _send(p, op="ports", want={"ps:0": {"port": holder.getsockname()[1], "profiler": False}}, base=None)
        assert "is in use" in _until(p, "ports")["taken"]["ps:0"]
        holder.close()
        # a task still running when the session ends: stopped with its group
        _send(p, op="start", task="ps:0", argv=[sys.executable, "-c", "import time; time.sleep(300)"],
              env={}, cwd=str(tmp_path))
        ps = _until(p, "started", "ps:0")["pid"]
        p.stdin.close()
        assert p.wait(20) == 0
        assert not psutil.pid_exists(ps) or psutil.Process(ps).status() == psutil.STATUS_ZOMBIE
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
