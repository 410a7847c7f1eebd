"""The Ray backend: Ray places the tasks and starts, signals and streams their processes; the run
core decides everything else.

A thin driver under tfcluster's own supervisor
(:class:`tfcluster.drivers.launcher.SupervisedLauncher`), as the local and ssh backends are:
restarts, watchdogs, the ordered stop, success, run.json and the events are the run machine's
(:mod:`tfcluster.core.machine`), not this module's.

What Ray does here (the placement groups and actors: :mod:`tfcluster.backends.ray_placement`):

* **placement**: one placement group for the run, one bundle per task (``ray:`` in the file:
  resources per job, the strategy; :mod:`tfcluster.clusterfile.ray`). A run Ray cannot place within
  ``ray.placement_timeout`` seconds ends with exit 2 naming the resources and the tasks.
* **one actor per task**, in the task's bundle, owned by the launcher's job (not detached: when
  the launcher ends, however it ends, Ray ends its actors and its placement group). The actor
  (:class:`TaskRunner`) reserves a free port on its node, and starts the task's process with
  the local backend there: own process group, parent-death signal, a reaper that kills the
  task's group when the actor dies, the same contract (TF_CONFIG, task flags, restart count,
  the progress pipe, ``TFCLUSTER_LAUNCHER_PID`` naming the actor, the task's supervisor).
* **endpoints after placement**: the plan's endpoints are replaced by each task's node address
  and reserved port (:meth:`tfcluster.plan.runplan.RunPlan.with_endpoints`) before anything
  starts, so TF_CONFIG, task flags, ``status`` and run.json show the endpoints actually used.
* **output**: a thread per task pulls the task's output and progress reports from its actor and
  writes them to two local pipes, which the supervisor reads as it reads a local task's (live
  view, per-task logs, progress and liveness); its exit arrives last, on a third pipe that
  wakes the supervisor's loop.
* **a lost node**: the actor's death is the task's exit (SIGKILL) with the cause named and the
  node given (:meth:`RayHandle.lost_node`). The task can only come back on another node, with
  another endpoint, so the run machine's rule (:func:`tfcluster.core.rules.decide_move`) restarts
  the whole cluster within the restart budget: every task stopped in order, then
  :meth:`tfcluster.backends.ray_placement.RayPlacement.place_again` -- old actors and placement
  group released, a new group placed (Ray leaves out the dead node), ports reserved, new
  endpoints -- and every task started with the new TF_CONFIG.
* **elastic runs** (``elastic: {min_workers: N}``): a *worker* lost with its node leaves the run
  instead (the run machine's shrink); its bundle stays in the group, and :meth:`RayBackend.host_back`
  starts a new actor in it, which Ray schedules once the bundle is placed again on a node with
  room; when it has answered, the worker starts there with its new endpoint (the machine's grow).
* **sized runs** (``elastic: {max_workers: M, scale: throughput}``): the spare workers are not in
  the run's group (a group is placed whole or not at all, and a run must start with what the
  cluster holds now): each has a placement group of one bundle, asked for at the start and
  placed by Ray whenever there is room (now, or when a node joins), and an actor in it. Once
  that actor has answered (:meth:`RayBackend.spares_placed`) the spare has an endpoint, and the
  sizing policy may add it -- through the shape's ``on_change``, as any worker at a new address.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from tfcluster.backends.base import Backend, Handle, ProcessSpec
from tfcluster.errors import UserError
from tfcluster.plan import contract

READ_WAIT = 0.5          # seconds an actor's read waits for output before it answers empty
READ_MAX = 1 << 20       # bytes of one pipe an actor's read returns at most
ACTOR_CONCURRENCY = 4    # a read may wait while a signal or a start comes in


# ---------------------------------------------------------------------- on the task's node

class TaskRunner:
    """The actor on a task's node (wrapped by ``ray.remote`` in :func:`_runner_class`): it holds
    one port, starts the task's process with the local backend, answers reads of its output,
    delivers signals to its process group."""

    def __init__(self, gpus: bool):
        from tfcluster.backends.local import LocalBackend
        self.backend = LocalBackend()
        self.gpus = gpus
        self.handle = None
        self.fds: Dict[str, int] = {}
        self.rc: Optional[int] = None
        self.exited_at: Optional[float] = None
        self.lock = threading.Lock()
        self.hold: List[socket.socket] = []

    def where(self, profiler: bool = False) -> Dict[str, Any]:
        """This node's address, a port reserved on it (held until the task starts), with
        ``profiler`` a second one for the task's profiler server, the interpreter, the node and
        the devices Ray gave this task."""
        import ray
        ctx = ray.get_runtime_context()
        for _ in range(2 if profiler else 1):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            self.hold.append(s)
        return {"ip": ray.util.get_node_ip_address(), "port": self.hold[0].getsockname()[1],
                "profiler_port": self.hold[1].getsockname()[1] if profiler else None,
                "python": sys.executable, "node_id": ctx.get_node_id(), "pid": os.getpid(),
                "cwd": os.getcwd(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def start(self, argv: List[str], env: Dict[str, str], cwd: str):
        """Start the task (its port is let go first); ``("ok", pid)`` or ``("error", kind,
        errno, text)`` for a program that cannot be started (the launcher raises it again)."""
        env = dict(env)
        if not self.gpus and contract.CUDA_VISIBLE_DEVICES not in env:
            env[contract.CUDA_VISIBLE_DEVICES] = ""     # Ray gave this task no GPU
        for s in self.hold:
            s.close()
        self.hold = []
        try:
            handle = self.backend.start(ProcessSpec(name="", argv=argv, env=env, cwd=cwd))
        except OSError as e:
            return ("error", type(e).__name__, e.errno, e.strerror or str(e))
        with self.lock:
            self.handle, self.rc, self.exited_at = handle, None, None
            self.fds = {"out": handle.stdout.fileno(), "progress": handle.progress.fileno()}
            for fd in self.fds.values():
                os.set_blocking(fd, False)
        return ("ok", handle.pid)

    def read(self, wait: float = READ_WAIT) -> Tuple[bytes, bytes, Optional[int]]:
        """What the task wrote since the last read (stdout and stderr; progress reports), and its
        exit status once it has exited and its pipes are read to the end."""
        fds = dict(self.fds)
        got = {"out": b"", "progress": b""}
        if fds:
            ready, _, _ = select.select(list(fds.values()), [], [], wait)
            for name, fd in fds.items():
                if fd not in ready:
                    continue
                try:
                    data = os.read(fd, READ_MAX)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    got[name] = data
                else:
                    self.fds.pop(name, None)
        with self.lock:
            handle = self.handle
        if handle is None:
            return got["out"], got["progress"], None
        rc = handle.poll()
        if rc is not None and self.exited_at is None:
            self.exited_at = time.monotonic()
        # its group was killed when the leader exited (LocalHandle.poll): the pipes end soon
        done = rc is not None and (not self.fds or time.monotonic() - self.exited_at > 5.0)
        if not fds and rc is None:
            time.sleep(min(wait, 0.05))
        return got["out"], got["progress"], rc if done else None

    def signal(self, sig: int) -> None:
        with self.lock:
            handle = self.handle
        if handle is not None:
            handle.signal(sig)

    def close(self) -> None:
        """Kill what is left of the task and let the reaper go (the launcher's clean end)."""
        with self.lock:
            handle = self.handle
        if handle is not None and handle.poll() is None:
            handle.signal(signal.SIGKILL)
            handle.wait(10)
        self.backend.close()


class tfcluster_task(TaskRunner):  # noqa: N801 - the name is what the node's process shows
    """:class:`TaskRunner` under the name Ray gives its process: Ray retitles an actor's process
    ``ray::<class name>``, and a task knows its supervisor by ``tfcluster`` in its command line
    (:func:`tfcluster.plan.contract.supervised`), so a task on Ray is supervised, as on the
    other backends: replicas leave stopping the ps to the launcher."""


def _runner_class():
    import ray
    return ray.remote(max_concurrency=ACTOR_CONCURRENCY, max_restarts=0)(tfcluster_task)


def _ray():
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray needs Ray on this machine: pip install 'tfcluster[ray]'")
    return ray


# ---------------------------------------------------------------------- in the launcher

class RayHandle(Handle):
    """A task started by its actor: output and progress arrive on local pipes (a thread pulls
    them from the actor), the exit on a third pipe (:meth:`exit_fd`)."""

    def cause(self, rc: int) -> str:
        return self.lost

    def lost_node(self) -> str:
        return self.where if self.lost else ""

    def __init__(self, actor, pid: int, name: str, node: str, ip: str = ""):
        self.actor, self.pid, self.name, self.node = actor, pid, name, node
        self.where = _where({"ip": ip, "node_id": node})
        self.returncode: Optional[int] = None
        self.lost = ""             # what became of the task beyond its exit status (a lost node)
        r, self._out_w = os.pipe()
        pr, self._prog_w = os.pipe()
        self._exit_r, self._exit_w = os.pipe()
        self.stdout = os.fdopen(r, "rb", buffering=0)
        self.progress = os.fdopen(pr, "rb", buffering=0)
        self._done = threading.Event()
        self._closed = False                # close() was called: see there
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._pull, name=f"ray-{name}", daemon=True)
        self._thread.start()

    def _pull(self) -> None:
        import ray
        rc = None
        try:
            while rc is None:
                try:
                    out, prog, rc = ray.get(self.actor.read.remote(READ_WAIT))
                except ray.exceptions.RayActorError as e:
                    rc = -signal.SIGKILL
                    self.lost = f"its Ray actor or node {self.node[:12]} was lost ({_first_line(e)})"
                    break
                _write_all(self._out_w, out)
                _write_all(self._prog_w, prog)
        finally:
            for fd in (self._out_w, self._prog_w):
                os.close(fd)
            self.returncode = rc if rc is not None else -signal.SIGKILL
            with self._close_lock:
                self._done.set()
                left_to_me = self._closed
                if not left_to_me:
                    os.write(self._exit_w, b"x")
            if left_to_me:   # closed before the task ended: the write end is this thread's to close
                os.close(self._exit_w)

    def exit_fd(self) -> Optional[int]:
        return self._exit_r

    def poll(self) -> Optional[int]:
        return self.returncode if self._done.is_set() else None

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        self._done.wait(timeout)
        return self.poll()

    def signal(self, sig: int) -> None:
        if not self._done.is_set():
            self.actor.signal.remote(int(sig))

    def close(self) -> None:
        """Close the exit pipe, once: a second call closes nothing (by then those numbers may
        name other files). While the pull thread still runs (Ray did not answer within the
        backend's wait) the write end stays open for it: it closes it when it ends."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            done = self._done.is_set()
        os.close(self._exit_r)
        if done:
            os.close(self._exit_w)


def _where(info: Dict[str, Any]) -> str:
    """A task's node as the run's record names it: ``ip (node id's first 12)``."""
    node = str(info.get("node_id", ""))[:12]
    return f"{info['ip']} ({node})" if info.get("ip") else node


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            return          # the supervisor stopped reading (it is ending): drop the rest
        view = view[n:]


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


class RayBackend(Backend):
    """Tasks started by their actors (see the module's docstring). ``runners``: task name ->
    (actor, what its :meth:`TaskRunner.where` said)."""

    name = "ray"

    def __init__(self, runners: Dict[str, Tuple[Any, Dict[str, Any]]], working_dir: str = "",
                 placement: Any = None):
        self.runners = runners
        self.placement = placement       # (ray_placement.RayPlacement) places the tasks again, spares
        self.handles: List[RayHandle] = []
        self._python = {info["ip"]: info["python"] for _, info in runners.values()}
        self.working_dir = working_dir   # runtime_env's folder here; each actor runs in its copy
        self._coming: Dict[str, Dict[str, Tuple[Any, Any]]] = {}   # lost node -> workers' new actors
        self._back: Dict[str, Tuple[Any, Dict[str, Any]]] = {}     # task -> its new actor, ready

    def python(self, host: str) -> List[str]:
        return [self._python.get(host, sys.executable)]

    def _map(self, word: str, name: str) -> str:
        """A path under the launcher's working_dir, as the task's node has it (runtime_env)."""
        base = self.working_dir
        if not base or name not in self.runners:
            return word
        there = self.runners[name][1]["cwd"]
        if word == base:
            return there
        if word.startswith(base + "/"):
            return there + word[len(base):]
        return word

    def describe(self, spec: ProcessSpec) -> Dict[str, object]:
        info = self.runners[spec.name][1] if spec.name in self.runners else {}
        return {"where": f"Ray node {info.get('ip', '(placed at launch)')}",
                "argv": [self._map(w, spec.name) for w in spec.argv], "cwd": self._map(spec.cwd, spec.name)}

    def start(self, spec: ProcessSpec) -> Handle:
        import ray
        actor, info = self.runners[spec.name]
        try:
            got = ray.get(actor.start.remote([self._map(w, spec.name) for w in spec.argv],
                                             dict(spec.env), self._map(spec.cwd, spec.name)))
        except ray.exceptions.RayActorError as e:
            return _Lost(spec.name, info, e)
        if got[0] == "error":
            _, kind, err, text = got
            cls = {"FileNotFoundError": FileNotFoundError, "PermissionError": PermissionError,
                   "NotADirectoryError": NotADirectoryError}.get(kind, OSError)
            raise cls(err, text, spec.argv[0])
        handle = RayHandle(actor, got[1], spec.name, info.get("node_id", ""), info.get("ip", ""))
        self.handles.append(handle)
        return handle

    def place_again(self, names: List[str]) -> Optional[Dict[str, Tuple[str, int]]]:
        """Every task has stopped (a node was lost): a new placement group, new actors, new
        ports (:meth:`tfcluster.backends.ray_placement.RayPlacement.place_again`); the new endpoints."""
        import ray
        if self.placement is None:
            return None
        try:
            runners = self.placement.place_again()
        except ray.exceptions.RayError as e:     # an actor of the new group lost at once
            raise UserError(f"ray: the tasks could not be placed again ({_first_line(e)})")
        self.runners.update(runners)      # (a spare worker keeps its own group and actor)
        self._python.update({info["ip"]: info["python"] for _, info in runners.values()})
        return {name: (info["ip"], info["port"]) for name, (_, info) in runners.items()}

    def host_back(self, node: str, names: List[str]) -> bool:
        """Elastic runs: whether the workers lost with Ray node ``node`` (``names``) can run again. The node
        itself does not come back (a raylet that starts again is a new node): their bundles of
        the run's group are placed again wherever Ray finds room (a node that joined), and a
        new actor in each reserves a port there. Started on the first call, looked at without
        waiting on the next ones; True once every new actor has answered. An actor lost before
        it answers is dropped and the next call tries again."""
        import ray
        if self.placement is None:
            return False
        coming = self._coming.get(node)
        if coming is None:
            names = [name for name in names if name in self.runners]
            if not names:
                return False
            coming = self._coming[node] = self.placement.come_back(names)
        refs = [ref for _, ref in coming.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if len(ready) < len(refs):
            return False
        try:
            infos = ray.get(refs)
        except ray.exceptions.RayError:
            for actor, _ in self._coming.pop(node).values():
                ray.kill(actor, no_restart=True)
            return False
        self.placement.answered([actor for actor, _ in coming.values()])
        self._back.update({name: (actor, info) for (name, (actor, _)), info in zip(coming.items(), infos)})
        del self._coming[node]
        return True

    def spares_placed(self) -> Dict[str, Tuple[str, int, Optional[int], str]]:
        """Sized runs: the spare workers whose actors answered since the last call (Ray placed
        their groups: room now, or a node that joined), task -> (node address, port, profiler
        port, where); each is started by its actor from now on. Looked at without waiting."""
        if self.placement is None:
            return {}
        out = {}
        for name, (actor, info) in self.placement.spares_answered().items():
            self.runners[name] = (actor, info)
            self._python[info["ip"]] = info["python"]
            out[name] = (info["ip"], info["port"], info.get("profiler_port"), _where(info))
        return out

    def spares_given_up(self) -> Dict[str, str]:
        """The spare workers given up since the last call (their actors kept being lost before
        they answered): task -> why."""
        if self.placement is None:
            return {}
        got, self.placement.given_up = self.placement.given_up, {}
        return got

    def place_tasks(self, plan, names: List[str]) -> Optional[Dict[str, Tuple[str, int, Optional[int]]]]:
        """The endpoints of workers coming back (:meth:`host_back`): their new actors' nodes and
        ports; each task is started by its new actor from now on."""
        out: Dict[str, Tuple[str, int, Optional[int]]] = {}
        for name in names:
            if name in self._back:
                self.runners[name] = self._back.pop(name)
                info = self.runners[name][1]
                self._python[info["ip"]] = info["python"]
                out[name] = (info["ip"], info["port"], info.get("profiler_port"))
        return out

    def close(self) -> None:
        for h in self.handles:
            h.wait(10)
            h.close()


class _Lost(Handle):
    """A task whose actor is gone (its node was lost): it "exits" at once, SIGKILLed, with the
    cause named; the run machine's restart rule decides what follows."""

    def cause(self, rc: int) -> str:
        return self.lost

    def lost_node(self) -> str:
        return self.where

    def __init__(self, name: str, info: Dict[str, Any], e: BaseException):
        self.pid = 0
        self.returncode = -signal.SIGKILL
        self.where = _where({"ip": info.get("ip", "?"), "node_id": info.get("node_id", "")})
        self.lost = (f"its Ray node {self.where} was lost; the task cannot start there again "
                     f"({_first_line(e)})")
        r, w = os.pipe()
        os.close(w)
        self.stdout = os.fdopen(r, "rb", buffering=0)

    def poll(self) -> Optional[int]:
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        return self.returncode

    def signal(self, sig: int) -> None:
        pass
