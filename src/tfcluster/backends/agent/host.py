"""The node agent of an ssh host: one process per host that starts and watches every task of
the run on that host, chooses their ports there, and talks to the launcher over its ssh
session's stdin and stdout (the Slurm node agent, :mod:`.node`, talks through the run folder).

It runs with the host's Python standard library only (tfcluster need not be installed there):
the launcher sends this file's source (``python3 -I -c``, :func:`boot_command`), with the port
probe's text (:mod:`tfcluster.net.port_probe`) in place of its import line. The launcher's
run machine decides (restarts, success, the stop order); the agent carries out and reports, one
JSON line a message:

launcher -> agent
  ``{"op": "hello", "stop_timeout": 5, "silence": S}``  -> ``{"ev": "hello", "pid": ..}``
      (``silence``: seconds without a message after which the agent stops everything, 0: never)
  ``{"op": "ping"}``                                    every keep-alive interval: still there
  ``{"op": "ports", "want": {TASK: {"port": P|null, "profiler": bool}}, "base": B|null}``
      each task's port checked free (a listed one) or chosen free here (from ``base`` when the
      file gives one, else a free port the kernel picks); held (bound) until the task starts
      -> ``{"ev": "ports", "ports": {TASK: [port, profiler port|null]}, "taken": {TASK: why}}``
  ``{"op": "start", "task": T, "argv": [..], "env": {..}, "cwd": ".."}``
      -> ``{"ev": "started", "task": T, "pid": N}`` or ``{"ev": "failed", "task": T, ...}``
  ``{"op": "signal", "task": T, "sig": N}``             the task's whole process group
agent -> launcher, besides the answers
  ``{"ev": "out", "task": T, "d": BASE64}``              the task's stdout and stderr, as written
  ``{"ev": "exit", "task": T, "rc": N}``                 after its output's end (-N: signal N)

End of stdin -- the launcher closed the session, or the ssh client, the launcher or the
connection died -- stops every task (SIGTERM to its group, the stop timeout, SIGKILL) and ends
the agent: no remote orphans. Each task dies with the agent too (``PR_SET_PDEATHSIG``).
"""
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from tfcluster.net.port_probe import bind_free, choose_ports  # shipped as text

MARK = "tfcluster node agent"     # in the agent's command line: contract.supervised() trusts it
READ = 65536


def _pdeathsig():
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:   # no prctl here: the end of stdin still stops the task
        pass


def find_setpriv():
    """A ``setpriv`` of this host that sets a parent-death signal (util-linux >= 2.33), or None.
    With it a task starts without Python code between fork and exec, so Python uses vfork
    instead of copying the agent (tfcluster.backends.base.start_child's fast start).
    ``TFCLUSTER_SETPRIV`` names another or, empty, none (as for the launcher)."""
    import shutil
    path = os.environ.get("TFCLUSTER_SETPRIV")
    path = shutil.which("setpriv") if path is None else (path or None)
    if path is None:
        return None
    try:
        ok = subprocess.run([path, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", ":"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return path if ok else None


def check_program(argv0, path, cwd):
    """Raise what exec would for ``argv0`` (FileNotFoundError, PermissionError): with a ``/``
    relative to ``cwd``, else on ``path`` (the task's PATH). setpriv would report it only as
    its exit code 127."""
    import errno

    def runnable(f):
        f = os.path.join(cwd, f)
        if not os.path.exists(f):
            return None
        return os.path.isfile(f) and os.access(f, os.X_OK)
    if "/" in argv0:
        found = runnable(argv0)
    else:
        seen = [runnable(os.path.join(d or ".", argv0)) for d in (path or os.defpath).split(os.pathsep)]
        if True in seen:
            return
        found = False if False in seen else None
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv0)
    if found is False:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), argv0)


class Agent:
    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()
        self.procs = {}           # task -> Popen
        self.held = {}            # task -> [sockets] keeping its ports until it starts
        self.stop_timeout = 5.0
        self.silence = 0.0        # seconds without a word from the launcher that end it (0: never)
        self.heard = time.time()  # the launcher's last word
        self._setpriv = []        # found in the background: the probe overlaps hello and ports
        self._probe = threading.Thread(target=lambda: self._setpriv.append(find_setpriv()), daemon=True)
        self._probe.start()

    def send(self, **msg):
        line = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        with self.lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (OSError, ValueError):   # the session is gone: stdin's end stops everything
                pass

    def handle(self, msg):
        op = msg.get("op")
        if op == "hello":
            self.stop_timeout = float(msg.get("stop_timeout") or 5.0)
            self.silence = float(msg.get("silence") or 0.0)
            self.send(ev="hello", pid=os.getpid(), python=sys.version.split()[0],
                      host=socket.gethostname())
        elif op == "ports":
            self.ports(msg.get("want") or {}, msg.get("base"))
        elif op == "start":
            self.start(msg)
        elif op == "ping":       # the launcher is there (any message says so: see watch_silence)
            pass
        elif op == "signal":
            p = self.procs.get(msg.get("task"))
            if p is not None:
                try:
                    os.killpg(p.pid, int(msg["sig"]))
                except OSError:   # the task's group has gone: its exit is on its way
                    pass

    def ports(self, want, base):
        chosen, taken = {}, {}
        used = set()
        for task, need in want.items():
            port = need.get("port")
            ports = []
            if port:
                held = bind_free(int(port), hold=True)
                if not held:
                    taken[task] = "port %d is in use on %s" % (port, socket.gethostname())
                    continue
                self.held.setdefault(task, []).extend(held)
                ports.append(int(port))
                used.add(int(port))
            else:
                got = choose_ports(1, base, used)
                self.held.setdefault(task, []).extend(got[0][1])
                ports.append(got[0][0])
                used.add(got[0][0])
            if need.get("profiler"):
                got = choose_ports(1, None, used)
                self.held.setdefault(task, []).extend(got[0][1])
                ports.append(got[0][0])
                used.add(got[0][0])
            else:
                ports.append(None)
            chosen[task] = ports
        self.send(ev="ports", ports=chosen, taken=taken)

    def start(self, msg):
        task = msg["task"]
        for s in self.held.pop(task, []):     # the task binds them now
            s.close()
        env = dict(os.environ)
        env.update(msg.get("env") or {})
        env["TFCLUSTER_LAUNCHER_PID"] = str(os.getpid())    # this agent stops the task
        argv, cwd = msg["argv"], msg.get("cwd") or None
        try:
            self._probe.join()
            setpriv = self._setpriv[0]
            if setpriv and os.path.isdir(cwd or "."):
                check_program(argv[0], env.get("PATH"), cwd or os.getcwd())
                p = subprocess.Popen([setpriv, "--pdeathsig", "KILL", "--"] + argv, env=env, cwd=cwd,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            else:
                p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_pdeathsig)
        except OSError as e:
            self.send(ev="failed", task=task, errno=e.errno or 0, msg=e.strerror or str(e),
                      cwd_ok=os.path.isdir(msg.get("cwd") or "."))
            return
        self.procs[task] = p
        self.send(ev="started", task=task, pid=p.pid)
        threading.Thread(target=self.pump, args=(task, p), daemon=True).start()

    def pump(self, task, p):
        read = getattr(p.stdout, "read1", p.stdout.read)
        while True:
            try:
                data = read(READ)
            except (OSError, ValueError):
                data = b""
            if not data:
                break
            self.send(ev="out", task=task, d=base64.b64encode(data).decode())
        rc = p.wait()
        try:
            os.killpg(p.pid, signal.SIGKILL)      # what is left of its group
        except OSError:
            pass
        self.send(ev="exit", task=task, rc=rc)

    def shutdown(self):
        alive = [p for p in self.procs.values() if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.time() + self.stop_timeout
        for p in alive:
            try:
                p.wait(max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass


def watch_silence(agent):
    """The launcher pings every keep-alive interval: when nothing came for ``silence`` seconds
    the launcher or the way to it is gone (a partition that sshd may not notice for hours), so
    every task of this host stops and the agent ends, as at the end of its input."""
    while True:
        time.sleep(0.5)
        if agent.silence and time.time() - agent.heard > agent.silence:
            agent.shutdown()
            sys.stdout.flush()
            os._exit(0)


def main():
    agent = Agent(sys.stdout.buffer)
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda n, f: os.close(0))       # as the session's end: stop all
    threading.Thread(target=watch_silence, args=(agent,), daemon=True).start()
    try:
        for line in sys.stdin.buffer:
            agent.heard = time.time()
            line = line.strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            agent.handle(msg)
    except (OSError, ValueError):    # stdin closed by a signal: the same end
        pass
    agent.shutdown()
    sys.stdout.flush()
    os._exit(0)


def boot_command(python_words, source):
    """The command line that runs this file's ``source`` on a host with ``python_words``: the
    host's standard library only, no module path from the current folder (-I)."""
    import shlex
    boot = '"%s";import base64;exec(base64.b64decode("%s"))' % (
        MARK, base64.b64encode(source.encode()).decode())
    return " ".join(shlex.quote(w) for w in python_words) + " -I -c " + shlex.quote(boot)


if __name__ == "__main__":
    main()
