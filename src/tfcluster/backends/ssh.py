"""ssh: the tasks of each remote host under one node agent, over one ssh session per host.

What runs where
  On the launching machine, one shared connection per host (``ssh -M -N``, a child of the
  launcher, its socket in a private folder; it ends with the launcher, and every session of
  the host with it), and over it one session per host that runs the host's node agent
  (:mod:`tfcluster.backends.agent.host`: ``python3 -I -c <its source>``, the host's standard
  library only). The agent chooses the ports of the host's tasks there when the run starts
  (a listed ``host:port`` keeps its port, checked free and held), starts every task of the host
  in its own process group, streams its output back, delivers signals to its group and reports
  its exit; the launcher's run machine decides, as for local tasks. Nothing secret appears in a
  command line on either side: argv, environment and folder travel in the session.
  When the session ends -- the launcher closed it, or the ssh client, the launcher or the
  connection died -- the agent stops every task of its host (SIGTERM to the group, the stop
  timeout, SIGKILL): no remote orphans. ssh's own failures (unreachable host, refused key) end
  the session with 255.

Settings (cluster.yaml ``remote:`` for every host, ``hosts.<name>:`` per host, merged): ssh_host,
user, port, identity_file, ssh_options (``-o`` options; those that run a command here only when
named in allow_ssh_commands), python (remote interpreter, default python3; also replaces
``python``/``python3`` as the task's command), workdir (the remote folder that mirrors the
cluster file's folder: paths under the file's folder in argv and the task's folder are mapped
there; without it paths are used as they are, as on a shared file system) and slots (how many
tasks of jobs given as a count the host takes: :func:`tfcluster.plan.runplan.place_on_hosts`).
Tasks on this machine's own names and addresses run locally, not over ssh.
"""
from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

from tfcluster.backends.base import Backend, Handle, ProcessSpec, start_child, stop_group
from tfcluster.backends.local import LocalBackend
from tfcluster.clusterfile.config import Cluster
from tfcluster.clusterfile.models import RemoteSpec
from tfcluster.errors import UserError
from tfcluster.net.addresses import is_local

DEFAULT_PYTHON = "python3"
CONNECT_TIMEOUT = 10     # remote.connect_timeout: seconds a host has to answer at the start
ALIVE_INTERVAL = 5       # remote.alive_interval: seconds between keep-alives (ServerAliveInterval)
ALIVE_COUNT_MAX = 3      # remote.alive_count_max: unanswered keep-alives before a host is lost
#: seconds beyond the launcher's own "host lost" time (alive_interval x alive_count_max) that
#: a node agent hears nothing from the launcher before it stops the host's tasks itself: a host
#: cut off from the launcher keeps no task running (a partition: sshd may not notice for hours)
AGENT_SILENCE_MARGIN = 5
ANSWER_TIMEOUT = 60.0    # seconds an agent has to answer a request (a start, the ports)


def agent_source() -> str:
    """The node agent's source, sent to each host (it runs there with the standard library):
    :mod:`tfcluster.backends.agent.host` with the port probe's text in place of its import."""
    from tfcluster.backends.agent import host
    from tfcluster.net import port_probe
    with open(host.__file__, encoding="utf-8") as f:
        return port_probe.ship(f.read())


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
    """The command line the remote shell runs: the node agent, on the remote python (-I: the
    remote folder, its home or a workdir, is not on the module path; stdlib only)."""
    from tfcluster.backends.agent.host import boot_command
    return boot_command(shlex.split(settings.python or DEFAULT_PYTHON), agent_source())


class AgentHandle(Handle):
    """A task under a host's node agent: ``pid`` is its pid there; ``stdout`` a local pipe the
    agent's output for it is written into; its exit comes from the agent (-N: signal N, as
    Popen says; 255: the session ended with the host)."""

    def __init__(self, link: "AgentLink", name: str, pid: int):
        self.link, self.name, self.pid = link, name, pid
        r, self._w = os.pipe()
        self.stdout = os.fdopen(r, "rb", buffering=0)
        self._exit_r, self._exit_w = os.pipe()
        self.rc: Optional[int] = None
        self._done = threading.Event()

    def feed(self, data: bytes) -> None:
        if self._w is not None:
            try:
                os.write(self._w, data)
            except OSError:        # the reader gave up on this attempt: its output is dropped
                pass

    def exited(self, rc: int) -> None:
        if self._done.is_set():
            return
        self.rc = rc
        if self._w is not None:
            os.close(self._w)
            self._w = None
        os.write(self._exit_w, b"x")
        self._done.set()

    def poll(self) -> Optional[int]:
        return self.rc

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        self._done.wait(timeout)
        return self.rc

    def signal(self, sig: int) -> None:
        self.link.send(op="signal", task=self.name, sig=int(sig))

    def cause(self, rc: int) -> str:
        return self.link.lost_words() if rc == 255 else ""

    def lost_node(self) -> str:
        """The host, when the task ended because the host was lost (its shared connection
        ended by itself), else "". Without elastic workers that is an ordinary failure."""
        return self.link.host if self.rc == 255 and self.link._lost() else ""

    def exit_fd(self) -> Optional[int]:
        return self._exit_r

    def drop(self) -> None:
        """A task that never started: its pipes closed."""
        self.exited(127)
        for fd in (self._exit_r, self._exit_w):
            os.close(fd)
        self.stdout.close()


class AgentLink:
    """The session to one host's node agent: requests go down its stdin, a reader thread
    hands what comes up (output, exits, answers) to the task handles and the waiting
    requests."""

    def __init__(self, host: str, argv: List[str], stop_timeout: float, lost,
                 ping_every: float = 0.0, silence: float = 0.0):
        self.host, self._lost = host, lost
        self.err = tempfile.TemporaryFile()
        self.proc = start_child(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                start_new_session=True, close_fds=True)
        self.handles: Dict[str, AgentHandle] = {}
        self.answers: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.cond = threading.Condition()
        self.gone = False
        self.hello: Optional[Dict[str, Any]] = None     # the agent's greeting, once it came
        self._wlock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True, name=f"agent {host}")
        self.reader.start()
        self.send(op="hello", stop_timeout=stop_timeout, silence=silence)
        if ping_every > 0:       # the agent stops its tasks when the launcher goes silent
            threading.Thread(target=self._ping, args=(ping_every,), daemon=True,
                             name=f"agent {host} ping").start()

    def _ping(self, every: float) -> None:
        while not self.gone and self.proc.poll() is None:
            time.sleep(every)
            self.send(op="ping")

    def send(self, **msg: Any) -> None:
        line = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        with self._wlock:
            stdin = self.proc.stdin
            if stdin is None or stdin.closed:
                return
            try:
                stdin.write(line)
                stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass    # the session has ended: the agent stops the host's tasks by itself

    def greeted(self, timeout: float) -> bool:
        """Whether the agent has answered the session's greeting (waiting up to ``timeout``)."""
        if self.hello is None:
            self.hello = self.ask("hello", "", timeout=timeout)
        return self.hello is not None

    def ask(self, kind: str, key: str, timeout: float = ANSWER_TIMEOUT) -> Optional[Dict[str, Any]]:
        """The answer ``kind`` (for task ``key``), or None when the session ended first."""
        deadline = time.time() + timeout
        with self.cond:
            while (kind, key) not in self.answers and not self.gone:
                left = deadline - time.time()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.answers.pop((kind, key), None)

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            ev, task = msg.get("ev"), msg.get("task", "")
            h = self.handles.get(task)
            if ev == "out" and h is not None:
                h.feed(base64.b64decode(msg.get("d") or ""))
            elif ev == "exit" and h is not None:
                h.exited(int(msg.get("rc", 1)))
            else:
                with self.cond:
                    # a start's answer, "started" or "failed", is waited for as "started"
                    self.answers[("started", task) if ev in ("started", "failed") else (ev, "")] = msg
                    self.cond.notify_all()
        with self.cond:
            self.gone = True
            self.cond.notify_all()
        self.proc.wait()
        for h in list(self.handles.values()):
            h.exited(255)

    def lost_words(self) -> str:
        why = self._lost()
        if why:
            return why
        try:
            self.err.seek(0)
            lines = self.err.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            lines = []
        return f"the node agent's session with {self.host} ended" + (f" ({lines[-1]})" if lines else "")

    def begin(self, spec_name: str, payload: Dict[str, Any]) -> AgentHandle:
        """Ask the agent to start a task and return at once: the task's handle, registered
        before the request goes, so none of its output or its exit is missed; :meth:`started`
        waits for the answer. Many begun one after the other start side by side."""
        h = AgentHandle(self, spec_name, 0)
        self.handles[spec_name] = h
        self.send(op="start", task=spec_name, **payload)
        return h

    def started(self, h: AgentHandle) -> AgentHandle:
        """``h`` once its agent has started it (its pid there); OSError when the agent could not
        (a missing program or folder); ended with 255 when the session ended first."""
        got = self.ask("started", h.name)
        if got is None:          # no answer: the session ended (the host lost) or hung
            h.exited(255)
            return h
        if got.get("ev") == "failed" or "pid" not in got:
            if self.handles.get(h.name) is h:
                del self.handles[h.name]
            h.drop()
            raise OSError(int(got.get("errno") or 0), str(got.get("msg") or "cannot start"))
        h.pid = int(got["pid"])
        return h

    def start(self, spec_name: str, payload: Dict[str, Any]) -> AgentHandle:
        return self.started(self.begin(spec_name, payload))

    def close(self) -> None:
        """End the session: the agent stops every task of the host, then exits."""
        with self._wlock:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    self.proc.stdin.close()
                except (BrokenPipeError, OSError):   # the session is gone already
                    pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            stop_group(self.proc, ask=None)
        self.reader.join(10)
        self.err.close()


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
        self._agents: Dict[str, AgentLink] = {}                  # host -> its node agent
        self._pending: Dict[str, tuple] = {}                     # host -> a master not yet up
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
                "cwd": self._map_path(spec.cwd, s)}

    def describe(self, spec: ProcessSpec) -> Dict[str, object]:
        if not self.is_remote(spec.host):
            return self._local.describe(spec)
        s = self.settings(spec.host)
        target = f"{s.user + '@' if s.user else ''}{s.ssh_host or spec.host}" + (
            f" (port {s.port})" if s.port else "")
        r = self.remote_spec(spec)
        return {"where": f"ssh {target} (its node agent)", "argv": r["argv"], "cwd": r["cwd"]}

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
        return self.agent(spec.host, spec.name).start(spec.name, self.remote_spec(spec))

    parallel_starts = True      # a start wave: every request sent, then the answers (start_many)

    def start_many(self, specs: List[ProcessSpec]) -> List[Any]:
        """Start ``specs`` side by side: every remote task's request goes to its host's agent
        first, then the answers are collected, so the hosts start their tasks at once, each at
        its own pace, instead of one round trip per task. One answer per spec, in order: its
        handle, or the OSError/UserError that kept it from starting. Tasks on this machine start
        here, from this thread."""
        begun: List[Any] = []
        for spec in specs:
            if not self.is_remote(spec.host):
                begun.append(None)
                continue
            try:
                begun.append(self.agent(spec.host, spec.name).begin(spec.name, self.remote_spec(spec)))
            except (OSError, UserError) as e:
                begun.append(e)
        out: List[Any] = []
        for spec, b in zip(specs, begun):
            try:
                if b is None:
                    out.append(self._local.start(spec))
                elif isinstance(b, AgentHandle):
                    out.append(b.link.started(b))
                else:
                    out.append(b)
            except (OSError, UserError) as e:
                out.append(e)
        return out

    def agent(self, host: str, task: str = "", greet: bool = True) -> AgentLink:
        """``host``'s node agent: its session started (over the shared connection) the first
        time, and (``greet``) its answer waited for. Call from the thread that lives as long as
        the run (the launcher's): a child dies with the thread that started it."""
        with self._lock:
            link = self._agents.get(host)
        if link is not None:
            return link
        s = self.settings(host)
        base = self._master(host, s, task or host)
        with self._lock:
            link = self._agents.get(host)
            if link is None:
                link = AgentLink(host, base + ["--", remote_command(s)], self.stop_timeout,
                                 lambda h=host: self.host_lost(h, wait=0.5),
                                 ping_every=s.alive_interval or ALIVE_INTERVAL,
                                 silence=lost_after(s) + AGENT_SILENCE_MARGIN)
                self._agents[host] = link
        if greet and not link.greeted((s.connect_timeout or CONNECT_TIMEOUT) + 20) and not link.handles:
            raise UserError(f"{task or host}: the node agent on {host} did not start "
                            f"({link.lost_words()}); check remote.python ({s.python or DEFAULT_PYTHON}) there")
        return link

    def place(self, plan):
        """The plan with the ports its tasks get on their hosts, chosen there by each host's
        agent (a task of a job given as a count, and every profiler port) or checked free there
        (a listed ``host:port``), all hosts at once; every port is held by its agent until its
        task starts. A task on this machine gets a free port here."""
        from concurrent.futures import ThreadPoolExecutor

        from tfcluster.net.ports import free_ports
        remote, local = self._wanted(plan)
        base = plan.base_port if plan.base_port_given else None
        links = self._start_agents(remote)

        def ask(host: str) -> Dict[str, Any]:
            link = links[host]
            s = self.settings(host)
            if not link.greeted((s.connect_timeout or CONNECT_TIMEOUT) + 20):
                raise UserError(f"{next(iter(remote[host]))}: the node agent on {host} did not start "
                                f"({link.lost_words()}); check remote.python ({s.python or DEFAULT_PYTHON}) there")
            link.send(op="ports", want=remote[host], base=base)
            got = link.ask("ports", "")
            if got is None:
                raise UserError(f"{host}: its node agent did not choose ports ({link.lost_words()})")
            return got
        chosen: Dict[str, List[Optional[int]]] = {}
        if remote:
            with ThreadPoolExecutor(max_workers=min(16, len(remote))) as pool:
                for got in pool.map(ask, remote):
                    taken = got.get("taken") or {}
                    if taken:
                        name = next(iter(taken))
                        raise UserError(f"{plan.task(name).where}: {taken[name]} ({name}); nothing was "
                                        f"started")
                    chosen.update({k: list(v) for k, v in (got.get("ports") or {}).items()})
        if local:
            ports = iter(free_ports(2 * len(local)))
            for t in local:
                chosen[t.name] = [next(ports) if t.port_chosen else t.port,
                                  next(ports) if plan.profiler and t.job != "evaluator" else None]
        self._placed = plan
        if not chosen:
            return plan
        endpoints = {t.name: (t.host, chosen[t.name][0] if t.name in chosen else t.port) for t in plan.tasks}
        profilers = {t.name: chosen[t.name][1] for t in plan.tasks if t.name in chosen and chosen[t.name][1]}
        self._placed = plan.with_endpoints(endpoints, profilers)
        return self._placed

    def _wanted(self, plan) -> Tuple[Dict[str, Dict[str, Dict[str, Any]]], List[Any]]:
        """The ports :meth:`place` chooses: per remote host, task -> its port (None: chosen
        there) and whether it wants a profiler port; and this machine's tasks that want one."""
        remote: Dict[str, Dict[str, Dict[str, Any]]] = {}
        local = []
        for t in plan.tasks:
            if self.is_remote(t.host):
                remote.setdefault(t.host, {})[t.name] = {"port": None if t.port_chosen else t.port,
                                                         "profiler": plan.profiler and t.job != "evaluator"}
            elif t.port_chosen or (plan.profiler and t.job != "evaluator"):
                local.append(t)
        return remote, local

    def _start_agents(self, remote: Dict[str, Dict[str, Dict[str, Any]]]) -> Dict[str, AgentLink]:
        """Each remote host's agent, not yet greeted. Processes are started from this thread (a
        child's death signal follows the thread that started it): the shared connections
        first, all at once, then each host's agent as soon as its connection is up."""
        for host in remote:
            self._master(host, self.settings(host), next(iter(remote[host])), wait=False)
        links: Dict[str, AgentLink] = {}
        while len(links) < len(remote):
            for host in remote:
                if host not in links and self._master_up(host, self.settings(host), next(iter(remote[host]))):
                    links[host] = self.agent(host, next(iter(remote[host])), greet=False)
            if len(links) < len(remote):
                time.sleep(0.01)
        return links

    def host_back(self, host: str, names: List[str]) -> bool:
        """Elastic runs: whether ``host``, lost, takes tasks again: a new shared connection and
        node agent there, started from the launcher's thread and looked at without waiting;
        True once the agent has greeted. A connection that fails is tried again on a later call."""
        with self._lock:
            link = self._agents.get(host)
            master = self._by_host.get(host)
        if link is not None and not link.gone and master is not None and master[0].poll() is None:
            return link.greeted(0)
        self._forget(host)
        s = self.settings(host)
        try:
            self._master(host, s, host, wait=False)
            if not self._master_up(host, s, host):
                return False
        except UserError:         # not yet: a later call starts another connection
            return False
        return self.agent(host, host, greet=False).greeted(0)

    def _forget(self, host: str) -> None:
        """Drop ``host``'s ended connection and agent, so that :meth:`host_back` starts anew."""
        with self._lock:
            link = self._agents.pop(host, None) if self._agents.get(host) is not None and (
                self._agents[host].gone) else None
            dead = self._by_host.get(host)
            if dead is not None and dead[0].poll() is not None:
                self._by_host.pop(host, None)
                self._masters.pop(host, None)
                if dead[0] in self._procs:
                    self._procs.remove(dead[0])
                dead[1].close()
        if link is not None:
            link.close()

    def place_tasks(self, plan, names: List[str]) -> Optional[Dict[str, Tuple[str, int, Optional[int]]]]:
        """Ports again for ``names`` (workers rejoining on a host back), by their host's agent:
        the port each had, when it is free there (the others, a TF2 coordinator above all, know
        that address), else, for a port chosen at the start, another free one; a listed port
        that is taken is not given up (UserError: asked again on a later look)."""
        out: Dict[str, Tuple[str, int, Optional[int]]] = {}
        base = plan.base_port if plan.base_port_given else None
        for name in names:
            t = plan.task(name)
            if not self.is_remote(t.host):
                continue
            link = self.agent(t.host, name)
            prof = plan.profiler and t.job != "evaluator"
            for port in ([t.port, None] if t.port_chosen else [t.port]):
                link.send(op="ports", want={name: {"port": port, "profiler": prof}}, base=base)
                got = link.ask("ports", "")
                if got is None:
                    raise UserError(f"{t.host}: its node agent did not choose ports ({link.lost_words()})")
                taken = got.get("taken") or {}
                if not taken:
                    break
            if taken:
                raise UserError(f"{name}: {taken[name]}")
            port, profiler = got["ports"][name]
            out[name] = (t.host, int(port), profiler)
        return out

    def place_again(self, names: List[str]) -> Optional[Dict[str, Tuple[str, int]]]:
        """A chosen port was taken before its task's server bound it: every task has stopped;
        the ports chosen at the start are chosen again, on the same hosts (a listed port stays).
        None when nothing was chosen here (this backend cannot move a task to another host)."""
        plan = getattr(self, "_placed", None)
        if plan is None or not any(t.port_chosen for t in plan.tasks):
            return None
        again = self.place(replace(plan, tasks=tuple(
            replace(t, port=None if t.port_chosen else t.port) for t in plan.tasks)))
        return {t.name: (t.host, t.port) for t in again.tasks if t.name in names}

    def _master(self, host: str, s: RemoteSpec, task: str, wait: bool = True) -> List[str]:
        """ssh argv for ``host``'s sessions, after starting its shared connection (once per host)
        and, with ``wait``, waiting until it is up (without: started only, ``[]``; a later call,
        or :meth:`_master_up`, waits).

        The master connection is a child of the launcher (``ssh -M -N``, with the launcher's
        death signal), not a ControlPersist daemon: when the launcher ends or dies, it ends, and
        with it every session of that host."""
        with self._lock:
            if host in self._masters:
                return self._masters[host]
            pending = self._pending.get(host)
            if pending is None:
                base = ssh_argv(s, host)
                if self.control_dir is None:
                    from tfcluster.safe_files import private_temp_dir
                    self.control_dir = private_temp_dir("tfc-ssh-")   # 0700, in a folder others cannot change
                path = os.path.join(self.control_dir, f"m{len(self._procs) + len(self._pending)}")
                mux = ["-o", f"ControlPath={path}"]
                err = tempfile.TemporaryFile()
                master = start_child(base[:-1] + mux + ["-o", "ControlMaster=yes", "-o", "ControlPersist=no",
                                                        "-N", base[-1]],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                     start_new_session=True, close_fds=True)
                deadline = time.time() + (s.connect_timeout or CONNECT_TIMEOUT) + 20
                self._pending[host] = (base, mux, master, err, deadline)
        if not wait:
            return []
        while True:
            argv = self._master_up(host, s, task)
            if argv:
                return argv
            time.sleep(0.01)

    def _master_up(self, host: str, s: RemoteSpec, task: str) -> List[str]:
        """One look at ``host``'s shared connection, started by :meth:`_master`: its sessions'
        ssh argv once it is up, ``[]`` while it is not yet; UserError when it failed or did not
        come up in time (``remote.connect_timeout``)."""
        with self._lock:
            if host in self._masters:
                return self._masters[host]
            pending = self._pending.get(host)
            if pending is None:     # its start failed, and said so, in another call
                raise UserError(f"{task}: cannot reach {host} over ssh")
            base, mux, master, err, deadline = pending
        why = None
        if master.poll() is not None:
            err.seek(0)
            lines = err.read().decode("utf-8", "replace").strip().splitlines()
            why = lines[-1] if lines else f"ssh exit code {master.returncode}"
        # the master makes its socket once the host has let it in: looked for often (cheap),
        # then confirmed by ssh itself
        elif not (os.path.exists(mux[1].split("=", 1)[1]) and subprocess.run(
                base[:-1] + mux + ["-O", "check", base[-1]], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0):
            if time.time() <= deadline:
                return []
            why = "timed out"
        with self._lock:
            if host in self._masters:
                return self._masters[host]
            self._pending.pop(host, None)
            if why is not None:
                _stop_master(master)
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
        """End the node agents' sessions (each stops its host's tasks), then the shared
        connections (and so any session still open), and remove their sockets."""
        with self._lock:
            agents, self._agents = list(self._agents.values()), {}
        for link in agents:
            link.close()
        with self._lock:
            procs, self._procs, self._masters = list(self._procs), [], {}
            procs += [p[2] for p in self._pending.values()]
            self._pending = {}
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
