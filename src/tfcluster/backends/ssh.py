"""ssh: start each remote task over OpenSSH, tied to its ssh session.

What runs where
  On the launching machine, one ``ssh`` client per task (batch mode: no password prompts),
  sharing one master connection per host (``ssh -M -N``, a child of the launcher, its socket in
  a private folder; it ends with the launcher, and every session of the host with it). On the
  remote host, ``python3 -c <wrapper>`` reads one JSON line from its stdin (argv, environment
  additions, folder: nothing secret appears in a command line on either side), starts the
  task in its own process group, and then keeps reading stdin:

  * a line with a signal number: deliver that signal to the task's whole process group
    (:meth:`SshHandle.signal`; ssh forwards no signals without a terminal);
  * end of file -- the launcher closed the session, or the ssh client, the launcher or the
    connection died: SIGTERM to the group, a bounded wait, SIGKILL. No remote orphans.

  When the task's leader exits, what is left of its group is killed and the wrapper exits with
  the task's code (128+N for a signal N; :meth:`SshHandle.poll` reports it as -N, as Popen
  does). ssh's own failures (unreachable host, refused key) exit 255.

Settings (cluster.yaml ``remote:`` for every host, ``hosts.<name>:`` per host, merged): ssh_host,
user, port, identity_file, ssh_options (``-o`` options), python (remote interpreter, default
python3; also replaces ``python``/``python3`` as the task's command) and workdir (the remote
folder that mirrors the cluster file's folder: paths under the file's folder in argv and the
task's folder are mapped there; without it paths are used as they are, as on a shared file
system). Tasks on this machine's own names and addresses run locally, not over ssh.
"""
from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Dict, List, Optional

from tfcluster.backends.base import Backend, Handle, ProcessSpec, signal_group, start_child, stop_group
from tfcluster.backends.local import LocalBackend
from tfcluster.clusterfile.config import Cluster
from tfcluster.clusterfile.models import RemoteSpec
from tfcluster.errors import UserError
from tfcluster.net.addresses import is_local

DEFAULT_PYTHON = "python3"
CONNECT_TIMEOUT = 10     # remote.connect_timeout: seconds a host has to answer at the start
ALIVE_INTERVAL = 5       # remote.alive_interval: seconds between keep-alives (ServerAliveInterval)
ALIVE_COUNT_MAX = 3      # remote.alive_count_max: unanswered keep-alives before a host is lost

# The remote side. Kept small; it runs with the remote python3's standard library only.
WRAPPER = r'''
import json, os, signal, subprocess, sys, threading
inp = sys.stdin.buffer
head = json.loads(inp.readline() or b"null")
if not head:
    sys.exit(255)
def say(m):
    sys.stderr.write("tfcluster (ssh wrapper): %s\n" % m)
    sys.stderr.flush()
try:
    os.chdir(head["cwd"])
except OSError as e:
    say("cannot enter the task's folder %s: %s" % (head["cwd"], e.strerror))
    sys.exit(126)
env = dict(os.environ)
env.update(head["env"])
env["TFCLUSTER_LAUNCHER_PID"] = str(os.getpid())   # this wrapper stops the task for the launcher
def pre():
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass
try:
    p = subprocess.Popen(head["argv"], env=env, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                         start_new_session=True, preexec_fn=pre)
except OSError as e:
    say("cannot start %s: %s" % (head["argv"][0], e.strerror))
    sys.exit(127)
def kill(s):
    try:
        os.killpg(p.pid, s)
    except OSError:
        pass
def watch():
    for line in inp:
        line = line.strip()
        if line.isdigit():
            kill(int(line))
    kill(signal.SIGTERM)
    try:
        p.wait(head.get("stop_timeout", 5))
    except subprocess.TimeoutExpired:
        pass
    kill(signal.SIGKILL)
threading.Thread(target=watch, daemon=True).start()
for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
    signal.signal(s, lambda n, f: kill(n))
rc = p.wait()
kill(signal.SIGKILL)
sys.stdout.flush()
os._exit(rc if rc >= 0 else 128 - rc)
'''
# "tfcluster" in the command line marks the wrapper as a task's supervisor (contract.supervised)
_BOOT = ('"tfcluster ssh wrapper";import base64;exec(base64.b64decode("%s"))'
         % base64.b64encode(WRAPPER.encode()).decode())


def remote_settings(cluster: Cluster, host: str) -> RemoteSpec:
    """``remote:`` merged with ``hosts.<host>:`` (per-host keys win)."""
    base = cluster.spec.remote.model_dump()
    per = cluster.spec.hosts.get(host)
    if per is not None:
        for k, v in per.model_dump(exclude_unset=True).items():
            if v is not None and v != []:
                base[k] = v
    return RemoteSpec.model_validate(base)


def ssh_argv(settings: RemoteSpec, host: str) -> List[str]:
    """The ssh client's argv up to (and including) the destination."""
    argv = ["ssh", "-T", "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={settings.connect_timeout or CONNECT_TIMEOUT}",
            "-o", f"ServerAliveInterval={settings.alive_interval or ALIVE_INTERVAL}",
            "-o", f"ServerAliveCountMax={settings.alive_count_max or ALIVE_COUNT_MAX}"]
    if settings.port:
        argv += ["-p", str(settings.port)]
    if settings.user:
        argv += ["-l", settings.user]
    if settings.identity_file:
        argv += ["-i", os.path.expanduser(settings.identity_file)]
    for opt in settings.ssh_options:
        argv += ["-o", opt]
    return argv + [settings.ssh_host or host]


def lost_after(settings: RemoteSpec) -> int:
    """About how long a silent host takes to count as lost (keep-alive interval x count)."""
    return (settings.alive_interval or ALIVE_INTERVAL) * (settings.alive_count_max or ALIVE_COUNT_MAX)


def remote_command(settings: RemoteSpec) -> str:
    """The command line the remote shell runs: the wrapper, on the remote python."""
    python = shlex.split(settings.python or DEFAULT_PYTHON)
    # -I: the remote folder (its home, a workdir) is not on the module path; stdlib only
    return " ".join(shlex.quote(w) for w in python) + " -I -c " + shlex.quote(_BOOT)


class SshHandle(Handle):
    """A remote task: ``pid`` is the local ssh client's; ``stdout`` the task's output."""

    def __init__(self, proc: subprocess.Popen, name: str, lost=None):
        self.proc = proc
        self.pid = proc.pid
        self.stdout = proc.stdout
        self.name = name
        self._lock = threading.Lock()
        self._lost = lost          # () -> why the task's host is lost, or ""

    def cause(self, rc: int) -> str:
        """What ended the task, when ssh knows: its host lost (the shared connection to it died:
        keep-alives unanswered, or the host's sshd gone)."""
        return self._lost() if rc == 255 and self._lost is not None else ""

    def _code(self, rc: Optional[int]) -> Optional[int]:
        if rc is None:
            return None
        self._close_stdin()
        if 128 < rc < 128 + 65:   # the wrapper's 128+N: killed by signal N
            return -(rc - 128)
        return rc

    def poll(self) -> Optional[int]:
        return self._code(self.proc.poll())

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        try:
            return self._code(self.proc.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig: int) -> None:
        """Deliver ``sig`` to the remote task's process group (through the session's stdin).
        SIGKILL also ends the session, so the remote side stops the task even if the line
        is lost, and the local ssh client is killed shortly after."""
        with self._lock:
            stdin = self.proc.stdin
            if stdin is not None and not stdin.closed:
                try:
                    stdin.write(f"{int(sig)}\n".encode())
                    stdin.flush()
                except (BrokenPipeError, OSError, ValueError):
                    pass   # the session has ended: the remote side has stopped the task already
        if sig == signal.SIGKILL:
            self._close_stdin()
            timer = threading.Timer(3.0, self._kill_client)
            timer.daemon = True
            timer.start()

    def _kill_client(self) -> None:
        if self.proc.poll() is None:   # its own session: the group is the ssh client
            signal_group(self.proc.pid, signal.SIGKILL)

    def _close_stdin(self) -> None:
        with self._lock:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    self.proc.stdin.close()
                except (BrokenPipeError, OSError):
                    pass   # the session is gone: closing its stdin was only to end it


class SshBackend(Backend):
    """Tasks on other hosts over OpenSSH; tasks on this machine run locally."""

    name = "ssh"

    def __init__(self, cluster: Cluster, stop_timeout: float = 5.0):
        if not shutil.which("ssh"):
            raise UserError("--backend ssh: the OpenSSH client 'ssh' is not installed here")
        self.cluster = cluster
        self.stop_timeout = stop_timeout
        self.control_dir: Optional[str] = None                   # made at the first connection
        self._masters: Dict[str, List[str]] = {}                 # host -> ssh argv
        self._procs: List[subprocess.Popen] = []                 # master connections
        self._by_host: Dict[str, tuple] = {}                     # host -> (master, its stderr)
        self._lock = threading.Lock()
        self._local = LocalBackend()

    # ---- what runs there: the remote interpreter and folder are this backend's own
    def settings(self, host: str) -> RemoteSpec:
        return remote_settings(self.cluster, host)

    def is_remote(self, host: str) -> bool:
        return host in self.cluster.spec.hosts or not is_local(host)

    def python(self, host: str) -> List[str]:
        if not self.is_remote(host):
            return self._local.python(host)
        return shlex.split(self.settings(host).python or DEFAULT_PYTHON)

    def remote_spec(self, spec: ProcessSpec) -> Dict[str, object]:
        """argv, env and folder as the remote host sees them (paths under the file's folder
        mapped to ``workdir``)."""
        s = self.settings(spec.host)
        return {"argv": [self._map_path(w, s) for w in spec.argv], "env": dict(spec.env),
                "cwd": self._map_path(spec.cwd, s), "stop_timeout": self.stop_timeout}

    def describe(self, spec: ProcessSpec) -> Dict[str, object]:
        if not self.is_remote(spec.host):
            return self._local.describe(spec)
        s = self.settings(spec.host)
        target = f"{s.user + '@' if s.user else ''}{s.ssh_host or spec.host}" + (
            f" (port {s.port})" if s.port else "")
        r = self.remote_spec(spec)
        return {"where": f"ssh {target}", "argv": r["argv"], "cwd": r["cwd"]}

    def _map_path(self, word: str, s: RemoteSpec) -> str:
        if not s.workdir:
            return word
        base = self.cluster.base_dir.rstrip("/")
        if word == base:
            return s.workdir
        if word.startswith(base + "/"):
            return s.workdir.rstrip("/") + word[len(base):]
        return word

    # ---- Backend
    def accepts(self, host: str, port: int) -> bool:
        return self._local.accepts(host, port)

    def start(self, spec: ProcessSpec) -> Handle:
        if not self.is_remote(spec.host):
            return self._local.start(spec)
        s = self.settings(spec.host)
        base = self._master(spec.host, s, spec.name)
        argv = base + ["--", remote_command(s)]
        proc = start_child(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        head = json.dumps(self.remote_spec(spec), separators=(",", ":")) + "\n"
        try:
            proc.stdin.write(head.encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # ssh failed at once; its exit code and message tell why
        return SshHandle(proc, spec.name, lambda host=spec.host: self.host_lost(host))

    def _master(self, host: str, s: RemoteSpec, task: str) -> List[str]:
        """ssh argv for ``host``'s tasks, after starting its shared connection (once per host).

        The master connection is a child of the launcher (``ssh -M -N``, with the launcher's
        death signal), not a ControlPersist daemon: when the launcher ends or dies, it ends, and
        with it every session of that host."""
        with self._lock:
            if host in self._masters:
                return self._masters[host]
            base = ssh_argv(s, host)
            if self.control_dir is None:
                self.control_dir = tempfile.mkdtemp(prefix="tfc-ssh-")   # 0700: our sockets only
            path = os.path.join(self.control_dir, f"m{len(self._procs)}")
            mux = ["-o", f"ControlPath={path}"]
            err = tempfile.TemporaryFile()
            master = start_child(base[:-1] + mux + ["-o", "ControlMaster=yes", "-o", "ControlPersist=no",
                                                    "-N", base[-1]],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                 start_new_session=True, close_fds=True)
            deadline = time.time() + (s.connect_timeout or CONNECT_TIMEOUT) + 20
            why = None
            while True:
                if master.poll() is not None:
                    err.seek(0)
                    lines = err.read().decode("utf-8", "replace").strip().splitlines()
                    why = lines[-1] if lines else f"ssh exit code {master.returncode}"
                    break
                check = subprocess.run(base[:-1] + mux + ["-O", "check", base[-1]], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
                if check.returncode == 0:
                    break
                if time.time() > deadline:
                    why = "timed out"
                    _stop_master(master)
                    break
                time.sleep(0.1)
            if why is not None:
                err.close()
                target = f"{s.user + '@' if s.user else ''}{s.ssh_host or host}"
                if s.ssh_host and s.ssh_host != host:
                    target += f" (host {host})"
                raise UserError(f"{task}: cannot reach {target} over ssh (batch mode, "
                                f"no password prompts, remote.connect_timeout "
                                f"{s.connect_timeout or CONNECT_TIMEOUT}s): {why}; check "
                                f"remote:/hosts: in the file and the key")
            self._procs.append(master)
            self._by_host[host] = (master, err)
            argv = base[:-1] + mux + ["-o", "ControlMaster=no", base[-1]]
            self._masters[host] = argv
            return argv

    def host_lost(self, host: str, wait: float = 3.0) -> str:
        """Why ``host`` counts as lost -- its shared connection ended by itself (ssh's last
        words: keep-alives unanswered, connection closed or reset) -- or "" while it lives."""
        with self._lock:
            master, err = self._by_host.get(host, (None, None))
        if master is None:
            return ""
        try:
            master.wait(wait)       # a session's end may come a moment before its master's
        except subprocess.TimeoutExpired:
            return ""
        try:
            err.seek(0)
            lines = err.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            lines = []
        s = self.settings(host)
        return (f"host {host} lost" + (f" ({lines[-1].strip()})" if lines else "")
                + f"; a silent host counts as lost after ~{lost_after(s)}s "
                f"(remote.alive_interval {s.alive_interval or ALIVE_INTERVAL}s x "
                f"remote.alive_count_max {s.alive_count_max or ALIVE_COUNT_MAX})")

    def close(self) -> None:
        """End the shared connections (and so any session still open) and remove their sockets."""
        with self._lock:
            procs, self._procs, self._masters = list(self._procs), [], {}
            errs, self._by_host = [e for _, e in self._by_host.values()], {}
        for p in procs:
            _stop_master(p)
        for e in errs:
            e.close()
        if self.control_dir is not None:
            shutil.rmtree(self.control_dir, ignore_errors=True)
            self.control_dir = None
        self._local.close()


def _stop_master(master: subprocess.Popen) -> None:
    """End a host's master connection (a session of its own: its group is the ssh client and
    a ``ProxyCommand`` it runs): SIGTERM, SIGKILL after 10 s."""
    if master.poll() is None:
        stop_group(master, timeout=10.0)
