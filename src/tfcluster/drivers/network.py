"""Where a run on this machine listens: the launcher's side of :mod:`tfcluster.net.private`.

A plan whose network is ``private`` (:func:`tfcluster.plan.runplan.resolve_network`) runs its
supervisor inside a network namespace of the run's own: the launcher moves itself there just
before it makes the run folder and starts the first task, so every task (and the tf.data
service, and a restart) inherits it, and only the run's processes reach its ports. The launcher
keeps its pid, its files and its signals: ``stop``, ``attach``, ``logs`` and ``stack`` work from
outside as before; ``exec`` and ``profile`` enter the network (:func:`tfcluster.net.private.enter_namespaces`).

Where the launcher must not or cannot move (the Python API: the caller's program keeps its own
network; a process with several threads), it forks a child that moves and runs the supervisor,
and waits for it; the child is the run's launcher (its pid is the record's). Where the private network cannot be made
at all, a run that asked for it (``network: private``, ``--network private``) stops with one
line (exit 2); a run that got it by default goes on in the host network and says why.
"""
from __future__ import annotations

import os
import signal
import sys
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
    if not MOVE_THIS_PROCESS or (os.geteuid() != 0 and private.threads_here() > 1):
        return _in_child(plan, run)
    net, plan, note = _enter(plan)
    try:
        return run(plan, note)
    finally:
        if net is not None:
            net.close()


def _enter(plan: RunPlan) -> Tuple[Optional[private.Private], RunPlan, str]:
    try:
        net = private.enter(outbound=True)
    except private.PrivateNetworkError as e:
        if plan.network_asked:
            raise UserError(f"network: private: {e}; use --network host")
        return None, replace(plan, network="host", network_why=str(e)), ""
    return net, replace(plan, outbound=net.outbound), net.note


def _in_child(plan: RunPlan, run: Callable[[RunPlan, str], int]) -> int:
    """The run in a forked child that moves into the network; this process waits and passes
    on the signals it is sent by another process (the terminal's Ctrl-C reaches both)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)    # the terminal's signals reach the parent alone, which passes them on

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
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, _forward_to(pid)) for s in forwarded}
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
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _forward_to(pid: int):
    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:   # the child has just ended: nothing to pass on
            pass
    return forward
