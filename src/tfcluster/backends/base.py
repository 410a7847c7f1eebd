"""The backend interface: backends start processes; they know argv, env and host, never
TensorFlow, never the run's rules.

The supervisor (:mod:`tfcluster.drivers`, which drives the run machine: what to run, when a
run has succeeded, restarts) talks to a backend through :class:`Backend` and :class:`Handle`;
the local (:mod:`.local`), ssh (:mod:`.ssh`) and Ray (:mod:`.ray`) backends implement them.
:class:`Launcher` is the seam between the CLI (and the Python API) and a kind of backend,
Slurm's included. Here too: how every supervised process is started (:func:`start_child`) and
signalled (:func:`signal_group`, :func:`stop_group`). This module imports no other backend.
"""
from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Any, Dict, List, Optional, Tuple

from tfcluster.net.ports import accepts


@dataclass
class ProcessSpec:
    """One process to start: a task's argv (its interpreter resolved for where it runs), its
    environment additions (the task contract), its folder and its host."""

    name: str                     # "worker:1"
    argv: List[str]
    env: Dict[str, str]           # additions over the launcher's environment
    cwd: str
    host: str = "localhost"


class Handle:
    """A started task. ``stdout`` is its stdout and stderr merged (binary, EOF at the end)."""

    pid: int
    stdout: IO[bytes]

    def poll(self) -> Optional[int]:
        raise NotImplementedError

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        raise NotImplementedError

    def signal(self, sig: int) -> None:
        """Deliver ``sig`` to the whole task (its process group)."""
        raise NotImplementedError

    def cause(self, rc: int) -> str:
        """What the backend learnt of the task's end (e.g. its host lost), or ""."""
        return ""

    def lost_node(self) -> str:
        """The node the task ran on, when it was lost with it (the task can only come back
        elsewhere: the run machine's rules.decide_move), or ""."""
        return ""

    def exit_fd(self) -> Optional[int]:
        """A file descriptor that becomes readable when the task exits (a pidfd), or None;
        lets the launcher wake at once instead of polling."""
        return None


class Backend:
    """Starts tasks. ``python`` is the interpreter that replaces a plan's symbolic ``{python}``
    on ``host``. A backend resolves only what is truly its own: the interpreter (here) and, when
    it starts a task elsewhere, the remote folder (in :meth:`start` and :meth:`describe`)."""

    name = "base"
    checks_local_ports = False    # the supervisor checks this machine's ports before starting
    parallel_starts = False       # start() may be called from several threads at once

    def python(self, host: str) -> List[str]:
        return [sys.executable]

    def accepts(self, host: str, port: int) -> bool:
        """Whether ``host:port`` accepts connections (a task's server is up)."""
        return accepts(host, port)

    def describe(self, spec: ProcessSpec) -> Dict[str, object]:
        """How ``spec`` will run, for dry runs: at least argv, cwd and where."""
        return {"where": "this machine", "argv": spec.argv, "cwd": spec.cwd}

    def start(self, spec: ProcessSpec) -> Handle:
        raise NotImplementedError

    def start_many(self, specs: List[ProcessSpec]) -> Optional[List[Any]]:
        """Start a wave of tasks at once, when the backend has a faster way than :meth:`start`
        from a few threads (the ssh agents: every request first, then the answers): one answer
        per spec, in order, its handle or the OSError/UserError that kept it from starting.
        None: it has none."""
        return None

    def place(self, plan):
        """The plan with what only the hosts can say before the first start: the ports chosen
        there (the ssh agents'); this backend has nothing to add."""
        return plan

    def host_back(self, node: str, names: List[str]) -> bool:
        """Elastic runs: whether ``node``, lost with workers (``names``), takes tasks again.
        Called from the launcher's loop about every second; it must not wait. This backend
        never gets one back."""
        return False

    def spares_placed(self) -> Dict[str, Tuple[str, int, Optional[int], str]]:
        """Sized runs on a backend that places spare workers late (BackendKind.places_spares_late):
        the spares placed since the last call, task -> (host, port, profiler port, where);
        called about every second, it must not wait. This backend places none late."""
        return {}

    def spares_given_up(self) -> Dict[str, str]:
        """The spare workers it gave up placing since the last call: task -> why."""
        return {}

    def place_tasks(self, plan, names: List[str]) -> Optional[Dict[str, Tuple[str, int, Optional[int]]]]:
        """Ports for ``names`` again (workers about to rejoin the run on a node back): task ->
        (host, port, profiler port); None: their endpoints stay as they are."""
        return None

    def place_again(self, names: List[str]) -> Optional[Dict[str, Tuple[str, int]]]:
        """Every task has stopped because a task's node was lost: place ``names`` again (the
        lost node excluded) and return their new endpoints (task -> (host, port)); None: this
        backend cannot move a task (the run then fails); UserError: it could not."""
        return None

    def close(self) -> None:
        pass


class Launcher:
    """How a whole run plan is run: the one seam between the CLI (and the Python API) and a
    kind of backend. The local and ssh backends run under tfcluster's supervisor
    (:class:`tfcluster.drivers.launcher.SupervisedLauncher`), and so does Ray once it has placed
    the tasks (:class:`tfcluster.drivers.ray_launcher.RayLauncher`); Slurm submits one job whose
    node agents drive the same run machine
    (:class:`tfcluster.backends.slurm.launcher.SlurmLauncher`). The CLI picks one by the plan's
    backend and asks it nothing else."""

    #: why ``launch --detach`` does not apply ("" when it does)
    no_detach = ""
    #: the groups of scheduler flags this launcher reads (from the plan), by the CLI's name of
    #: each group ("slurm": ``--partition``, ``--time``, ...); the CLI refuses the flags of a
    #: group that is not here
    scheduler_flags: Tuple[str, ...] = ()

    def describe(self) -> str:
        """What a run would do, for ``--dry-run``: starts nothing, writes nothing."""
        raise NotImplementedError

    def warnings(self) -> List[str]:
        """What the launcher should say before it starts (preflight)."""
        return []

    def run(self, view) -> int:
        """Run the plan to its end; the launch's exit code."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1

#: the signals every child starts with at their default disposition (SIGPIPE through Popen's
#: ``restore_signals``; SIGURG is the Slurm node agents' own signal)
DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGURG)

#: where ``setpriv`` is; "" disables the fast start (tests use it for the fallback)
SETPRIV_ENV = "TFCLUSTER_SETPRIV"


def child_setup(death_signal: int = signal.SIGKILL, ignore: Tuple[int, ...] = ()) -> None:
    """Runs in each task between fork and exec (the fallback start, see :func:`start_child`):
    ``death_signal`` when the launcher dies (PR_SET_PDEATHSIG), default signal dispositions but
    for ``ignore`` (ignored, which survives exec)."""
    why = ""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0) != 0:
            why = os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as e:   # no libc to load, or no prctl in it
        why = str(e)
    if why:   # said on the task's own output: it runs on, without its death signal
        os.write(2, f"tfcluster: no parent-death signal for this task ({why}): it may outlive "
                    f"a killed launcher\n".encode())
    # The launcher may have died between fork and prctl: then our parent is init already.
    if os.getppid() == 1:
        os._exit(137)
    # Default dispositions for signals the launcher handles or ignores itself.
    for sig in DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_IGN if sig in ignore else signal.SIG_DFL)


_setpriv_cache: Dict[str, Optional[str]] = {}


def setpriv() -> Optional[str]:
    """The path of a ``setpriv`` that sets a parent-death signal (util-linux >= 2.33), or None.
    Probed once per launcher (one tiny process); ``TFCLUSTER_SETPRIV`` names another or, empty,
    none."""
    where = os.environ.get(SETPRIV_ENV)
    key = "default" if where is None else where
    if key not in _setpriv_cache:
        from tfcluster.backends.agent.host import find_setpriv  # one probe: the ssh agents' too
        _setpriv_cache[key] = find_setpriv()
    return _setpriv_cache[key]


_found: Dict[tuple, float] = {}   # (program, PATH, folder) -> when it was last found runnable
FOUND_FOR = 2.0                  # seconds a lookup holds (a start wave: the same program 512 times)


def _check_program(argv0: str, env: Optional[Dict[str, str]], cwd: Optional[str]) -> None:
    """Raise what ``Popen`` would for a program that cannot be run (FileNotFoundError,
    PermissionError), as ``execvpe`` finds it: with a ``/`` relative to ``cwd``, else on the
    child's PATH. A program found runnable is not looked up again for :data:`FOUND_FOR` s
    (were it removed meanwhile, ``setpriv`` would report it: exit 127)."""
    here = cwd if cwd is not None else os.getcwd()
    key = (argv0, None if "/" in argv0 else (os.environ if env is None else env).get("PATH"), here)
    now = time.monotonic()
    if now - _found.get(key, -FOUND_FOR) < FOUND_FOR:
        return
    _lookup_program(argv0, env, here)
    if len(_found) > 256:
        _found.clear()
    _found[key] = now


def _lookup_program(argv0: str, env: Optional[Dict[str, str]], here: str) -> None:
    from tfcluster.backends.agent.host import check_program  # one lookup: the ssh agents' too
    check_program(argv0, os.pathsep.join(os.get_exec_path(env)), here)


def start_child(argv: List[str], *, death_signal: int = signal.SIGKILL, ignore: Tuple[int, ...] = (),
                **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen)`` for every process tfcluster supervises (tasks, ssh
    clients, srun), with one set of rules: the child gets ``death_signal`` when the launcher dies
    (also when it died while the child was being made: then the child never runs), starts with
    the default disposition of :data:`DEFAULT_SIGNALS` (but those in ``ignore``: ignored, which
    survives exec -- a Slurm node's ps outlives Slurm's SIGTERM), and a program that cannot be
    run raises ``FileNotFoundError``/``PermissionError`` here, as ``Popen`` does.

    Fast start (``setpriv`` there, none of those signals ignored by the launcher): no Python code
    runs between fork and exec, so CPython uses ``vfork`` instead of copying the launcher (at
    512 tasks: 15 ms a task against 3); ``setpriv --pdeathsig`` sets the death signal and execs
    the program (same pid, the environment untouched). Handlers revert on exec; SIGPIPE, which
    Python ignores, is restored by ``restore_signals``. Fallback: :func:`child_setup` as
    ``preexec_fn`` (a full fork).

    A launcher killed after the fork and before ``setpriv``'s ``prctl`` leaves the child without
    a death signal (``child_setup`` checks its parent for that; a line of ``sh`` could, but a
    shell drops environment variables whose names are not identifiers, ``BASH_FUNC_module%%``,
    and rewrites ``PWD``): the local backend's reaper covers it (it also kills, when the
    launcher dies, every process whose environment names that launcher)."""
    if "preexec_fn" in popen or "executable" in popen or popen.get("shell"):
        raise ValueError("start_child makes its own preexec_fn; executable and shell are not supported")
    if popen.get("restore_signals") is False:
        raise ValueError("start_child needs restore_signals")
    tool = setpriv()
    ignored = any(signal.getsignal(s) == signal.SIG_IGN for s in DEFAULT_SIGNALS if s != signal.SIGPIPE)
    if tool is None or ignored or ignore:
        return subprocess.Popen(argv, preexec_fn=functools.partial(child_setup, death_signal, tuple(ignore)),
                                **popen)
    _check_program(argv[0], popen.get("env"), popen.get("cwd"))
    name = signal.Signals(death_signal).name[3:]
    return subprocess.Popen([tool, "--pdeathsig", name, "--", *argv], **popen)


def stop_group(proc: subprocess.Popen, timeout: float = 5.0, kill_wait: float = 10.0,
               ask: Optional[int] = signal.SIGTERM) -> None:
    """Stop a child started in its own process group: ``ask`` (SIGTERM) to the group, up to
    ``timeout`` seconds, then SIGKILL; and SIGKILL to whatever is left of the group after its
    leader. ``ask`` None: the group was asked to stop another way (``scancel``), and is only
    waited for before the SIGKILL."""
    for sig, wait in ((ask, timeout), (signal.SIGKILL, kill_wait)):
        if sig is not None:
            signal_group(proc.pid, sig)
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    signal_group(proc.pid, signal.SIGKILL)


def ignores(pid: int, sig: int) -> bool:
    """Does process ``pid`` ignore ``sig`` now (``SigIgn`` of /proc/PID/status)? False when it
    cannot be told (no such process, no /proc)."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f:
                if line.startswith(b"SigIgn:"):
                    return bool(int(line.split()[1], 16) >> (int(sig) - 1) & 1)
    except (OSError, ValueError, IndexError):   # gone, or no /proc here: not known to ignore it
        pass
    return False


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group ``pgid`` (a task started in a session of its own); False
    when there is no such group any more -- it has ended -- or it is not ours to signal."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):   # gone, or its id now someone else's
        return False
