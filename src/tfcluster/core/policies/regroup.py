"""The regroup: every task stopped to start again, the cluster placed again where it has to be.

Three things regroup a run: a task's node was lost and the restart policy lets the cluster move
(:func:`tfcluster.core.rules.decide_move`; Ray), a port chosen where a task runs was taken before
its server bound it (ports are chosen again), and an elastic change that restarts every task (or
the chief alone; :mod:`tfcluster.core.policies.on_change`). Each stops the tasks in the stop order
(:mod:`tfcluster.core.policies.stop`: chief and workers first, so the chief can save, ps last),
then asks the driver to place them again (:class:`tfcluster.core.events.Regroup`; ``place``
False: nothing moves, the driver answers at once) and, once it answers
(:class:`tfcluster.core.events.Regrouped`), starts every task waiting to start, each as a new
attempt with a new TF_CONFIG -- or fails the run when the cluster could not be placed.

It decides from the task that moves and its node, the driver's answer and the elastic mode's
words; the machine keeps the phase (RUN -> REGROUP -> REPLACE -> RUN).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from tfcluster.core import rules
from tfcluster.core.events import Action, Regroup, Regrouped, Say, log_event
from tfcluster.core.states import Phase, TaskState, TaskTrack, check_transition


class Regrouping:
    """The regroup under way: ``moving`` (task, node) whose loss (or port) regroups, and
    ``restart_for``, why an elastic change restarts every task ("" for a move)."""

    def __init__(self) -> None:
        self.moving: Optional[Tuple[str, str]] = None
        self.restart_for = ""

    def move(self, run, t: TaskTrack, node: str, d: rules.Decision, now: float,
             out: List[Action], counted: bool = True) -> None:
        """``t``'s node is lost (``d``: rules.decide_move allowed it to move), or (``node`` "")
        its chosen port was taken: stop every task, then place the cluster again. ``counted``: a
        restart of the run (a port chosen again is not)."""
        run.enter(Phase.REGROUP)
        self.moving = (t.name, node)
        if counted:
            run.total_restarts += 1
        t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
        t.start_at = float("inf")
        run.hold_restarts()
        out.append(Say(f"{t.name}: {d.reason}; stopping every task", error=True))
        out.append(log_event("cluster_restarting", t.name, node=node, reason=d.reason,
                             attempt=t.restarts + 1))
        run.stop_waves(now, out)

    def restart_all(self, run, name: str, why: str, out: List[Action],
                    only: Optional[List[str]] = None) -> None:
        """An elastic change (``why``, about ``name``) restarts every task (``only``: those
        tasks alone, with the workers waiting to start): stopped in order, then started again
        with TF_CONFIG listing the workers in the run alone; resumed from the last checkpoint.
        Not counted as a restart of the run."""
        run.enter(Phase.REGROUP)
        self.moving = (name, "")
        self.restart_for = why
        run.hold_restarts()
        which = "every task" if only is None else ", ".join(only)
        out.append(Say(f"{why}: restarting {which} with {run.workers_line()} "
                       f"(elastic.on_change: {run.s.on_change})"))
        out.append(log_event("cluster_restarting", name, node="", reason=why, attempt=0))
        run.stop_waves(run.now, out, only=only)

    def stopped(self) -> Optional[Regroup]:
        """Every task has stopped: what to ask the driver (None: no regroup under way)."""
        if self.moving is None:
            return None
        return Regroup(*self.moving, place=not self.restart_for)

    def placed(self, run, ev: Regrouped, out: List[Action]) -> None:
        """The driver's answer: start every task again, or fail the run."""
        name, node = self.moving
        self.moving = None
        t = run.tasks[name]
        run.enter(Phase.RUN)
        why, self.restart_for = self.restart_for, ""
        if why:                                   # elastic: every task again, the workers in the run
            starts = run.start_all(ev.now)
            out.extend(starts)
            out.append(Say(f"{why}: starting {run.elastic.started(starts)} with {run.workers_line()}"))
            out.append(log_event("cluster_restarted", name, node="", attempt=0))
            return
        if not ev.ok:
            t.state = check_transition(t.state, TaskState.FAILED, t.name)
            what = f"its node {node} was lost" if node else "its port was taken"
            run.fail(t, f"{what} and the cluster could not be placed again"
                        + (f": {ev.message}" if ev.message else ""), out)
            return
        starts = run.start_all(ev.now)
        how = f"without node {node}" if node else "with ports chosen again"
        out.append(Say(f"the cluster was placed again {how}: starting every task "
                       f"with the new TF_CONFIG (restart {t.restarts})"))
        out.append(log_event("cluster_restarted", name, node=node, attempt=t.restarts))
        out.extend(starts)
