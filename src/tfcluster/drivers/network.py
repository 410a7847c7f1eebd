"""Where a run on this machine listens: the launcher's side of :mod:`tfcluster.net.private`.

A plan whose network is ``private`` (:func:`tfcluster.plan.runplan.build_plan` chose it) runs its
supervisor inside a network namespace of the run's own: the launcher moves itself there just
before it makes the run folder and starts the first task, so every task (and the tf.data
service, and a restart) inherits it, and only the run's processes reach its ports. The launcher
keeps its pid, its files and its signals: ``stop``, ``attach``, ``logs`` and ``stack`` work from
outside as before; ``exec`` and ``profile`` enter the network (:func:`tfcluster.net.private.enter_namespaces`).

Where the launcher must not move (the Python API: the caller's program keeps its own network),
root moves only the calling thread for the run (a network namespace is a thread's: what the
supervisor starts from it, threads and tasks, is inside) and brings it back after; another user
cannot come back from a user namespace, so the run goes to a forked child that moves, whose
output the caller's ``sys.stdout``/``sys.stderr`` get through pipes, and the caller waits; the
child is then the run's launcher (its pid is the record's).

The fence fails closed: where the private network cannot be made whole (user namespaces off, a
namespace limit reached), a local launch starts nothing and says why in one line, naming
``--network host`` (exit 2: :func:`check_private` before anything starts, :func:`_enter` when
the kernel refuses at the move). A run that is exposed (host mode chosen by the file or the
flag, ssh, Slurm, Ray, a task at a non-loopback address) says so on the terminal before its
first task starts, detached or not (:func:`exposure_note`); only a host mode that was chosen
can be silenced.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import replace
from typing import Callable, Optional, Tuple

from tfcluster.errors import UserError
from tfcluster.net import private
from tfcluster.plan.runplan import RunPlan

#: whether this process is the ``tfcluster`` command (set by :func:`tfcluster.cli.main.console`):
#: then the launcher itself moves into the run's network. Any other caller (the Python API
#: ``tfcluster.launch`` in a program, a test calling ``cli.main``) keeps its own network: the
#: run goes to a forked child that moves.
MOVE_THIS_PROCESS = False


def run_in_network(plan: RunPlan, run: Callable[[RunPlan, str], int]) -> int:
    """``run(plan, note)`` in the plan's network; ``note``: a line to say at start (a private
    network without outbound connections, or why a default private network is the host's)."""
    if plan.network != "private":
        return run(plan, "")
    root = os.geteuid() == 0
    if not MOVE_THIS_PROCESS and not root:
        return _in_child(plan, run)
    if MOVE_THIS_PROCESS and not root and private.threads_here() > 1:
        return _in_child(plan, run)
    net, plan, note = _enter(plan, back=not MOVE_THIS_PROCESS)
    try:
        return run(plan, note)
    finally:
        if net is not None:
            net.close()


def refusal(why: str) -> str:
    """The one line of a launch that stops because its private network cannot be made."""
    return (f"network: private cannot be made here: {why}; nothing was started. To run in this "
            f"machine's network, where every local user can connect to the tasks, launch with "
            f"--network host (or network: host in the file) and fence the ports (tfcluster help "
            f"security)")


def check_private(plan: RunPlan) -> None:
    """UserError (exit 2, nothing started) when the plan's private network cannot be made here
    (:func:`tfcluster.net.private.unavailable`): checked before a detached launcher starts."""
    if plan.network != "private":
        return
    why = private.unavailable()
    if why:
        raise UserError(refusal(why))


def exposed(plan: RunPlan) -> bool:
    """Whether other users can connect to the run's ports: any network but a private one."""
    return plan.network != "private"


def exposure_note(plan: RunPlan, silenced: bool, environ=None) -> Optional[str]:
    """Who can connect to an exposed run's ports, said before its first task starts (None for
    a private run, or a silenced note). ``silenced`` (--no-security-note) and
    ``TFCLUSTER_NO_SECURITY_NOTE`` count only where the host network was chosen (``network:
    host``, ``--network host``, a remote backend, ``--host``): a local run that is in the host
    network for another reason (a task at a non-loopback address) says so whatever they say."""
    from tfcluster.core.messages import security_note
    from tfcluster.runs import index
    if not exposed(plan):
        return None
    local = not plan.kind.reaches_other_hosts and not plan.only_hosts
    chosen = not local or plan.network_asked
    if not chosen:
        silenced, environ = False, {}
    ports = sorted({p for t in plan.selected_tasks for p in (t.port, t.profiler_port) if p})
    return security_note(plan.source, ports, silenced=silenced, environ=environ,
                         first_time=index.first_time, local=local, why_host=plan.network_why)


def _enter(plan: RunPlan, back: bool = False) -> Tuple[Optional[private.Private], RunPlan, str]:
    """Into the private network, whole, or UserError: never the host network instead."""
    try:
        net = private.enter(outbound=True, back=back)
    except private.PrivateNetworkError as e:
        raise UserError(refusal(str(e)))
    return net, replace(plan, outbound=net.outbound, namespaces=net.made), net.note


def _in_child(plan: RunPlan, run: Callable[[RunPlan, str], int]) -> int:
    """The run in a forked child that moves into the network; this process waits and passes
    on the signals it is sent by another process (the terminal's Ctrl-C reaches both)."""
    sys.stdout.flush()
    sys.stderr.flush()
    relays = [(os.pipe(), stream) for stream in (sys.stdout, sys.stderr)]
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)    # the terminal's signals reach the parent alone, which passes them on
            (out_r, out_w), _ = relays[0]
            (err_r, err_w), _ = relays[1]
            os.close(out_r)
            os.close(err_r)
            sys.stdout = os.fdopen(out_w, "w", buffering=1, encoding="utf-8", errors="replace")
            sys.stderr = os.fdopen(err_w, "w", buffering=1, encoding="utf-8", errors="replace")

            net, child_plan, note = _enter(plan)
            try:
                code = run(child_plan, note)
            finally:
                if net is not None:
                    net.close()
        except UserError as e:
            print(f"tfcluster: error: {e.message}", file=sys.stderr)
            code = 2
        except BaseException:      # a bug: its traceback, then the child's end
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    threads = []
    for (r, w), stream in relays:
        os.close(w)
        t = threading.Thread(target=_relay, args=(r, stream), daemon=True)
        t.start()
        threads.append(t)
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, _forward_to(pid)) for s in forwarded} if main else {}
    try:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:   # a signal came in; it was passed on: keep waiting
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for t in threads:
            t.join(10)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _relay(fd: int, stream) -> None:
    """What the child writes to its stdout or stderr, to this process's (a notebook's, a test's
    capture), a chunk at a time, until the child closes its end."""
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            data = f.read(65536)
            if not data:
                return
            try:
                stream.write(data.decode("utf-8", "replace"))
                stream.flush()
            except (OSError, ValueError):   # the caller's stream is closed: the rest is dropped
                pass


def _forward_to(pid: int):
    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:   # the child has just ended: nothing to pass on
            pass
    return forward
