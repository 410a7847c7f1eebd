"""The restart policy: what becomes of a task that failed while the run runs, and the budgets
that bound it.

It decides from the task's exit (:class:`tfcluster.core.events.Exited`: its return code, a lost
node, a port conflict its output showed), the task's restart rule (``restart:``: policy,
``max_restarts``, ``backoff``, ``min_uptime``), the run's restarts so far and its shared budget
(``max_total_restarts``; a Slurm node claims it through its driver, :class:`ClaimRestart`), and
whether the elastic policy lets the worker go. The rules themselves are
:func:`tfcluster.core.rules.decide_restart` and :func:`tfcluster.core.rules.decide_move`; the
machine carries the verdict out through its verbs (``restart``, ``claim_restart``, ``leave``,
``fail``), a move through the regroup (:meth:`tfcluster.core.policies.regroup.Regrouping.move`).
"""
from __future__ import annotations

from typing import List

from tfcluster.core import rules
from tfcluster.core.events import Action, ClaimRestart, Exited, RestartClaim, Say, log_event
from tfcluster.core.states import TaskState, TaskTrack, check_transition

#: how many times a run chooses its chosen ports again after one was taken (then it fails)
MAX_PORT_RECHOICES = 3


class RestartPolicy:
    """The restart rule and its budgets. ``rechoices``: the ports chosen again so far (at most
    :data:`MAX_PORT_RECHOICES` a run, not counted as restarts)."""

    def __init__(self) -> None:
        self.rechoices = 0

    def after_failure(self, run, t: TaskTrack, ev: Exited, out: List[Action]) -> None:
        """``t`` has failed (exit ``ev``) while the run runs: choose its ports again, let it go,
        move the cluster, restart it (or claim the restart), or fail the run -- in that order."""
        s = run.s
        if t.port_conflict and t.name in run.movable_ports and not s.shared_budget \
                and self.rechoices < MAX_PORT_RECHOICES:
            self.rechoices += 1
            run.regrouping.move(run, t, "", rules.Decision(
                True, f"its port {t.port} was taken before its server bound it: ports are chosen "
                      f"again ({self.rechoices} of {MAX_PORT_RECHOICES})"), ev.now, out, counted=False)
            return
        if ev.lost_node and run.may_shrink(t):
            run.leave(t, f"its host {ev.lost_node} was lost", ev.lost_node, out)
            return
        total = 0 if s.shared_budget else run.total_restarts
        if ev.lost_node and s.moves_nodes:
            d = rules.decide_move(t.rule, t.restarts, total, ev.lost_node)
            if d.restart and not s.shared_budget:
                run.regrouping.move(run, t, ev.lost_node, d, ev.now, out)
            else:
                run.fail(t, d.reason if not d.restart else
                         f"its node {ev.lost_node} was lost (this backend cannot move it)", out)
            return
        early = (not t.restarts and t.first_started is not None
                 and ev.now - t.first_started < t.rule.min_uptime)
        d = rules.decide_restart(t.rule, ev.returncode, t.restarts, total,
                                 port_conflict=t.port_conflict, early=early)
        if d.restart and s.shared_budget and t.rule.max_total_restarts is not None:
            run.claim_restart(t, d.delay, ev.now)
            out.append(ClaimRestart(t.name))
        elif d.restart:
            run.restart(t, d, ev.now, out)
        else:
            run.fail(t, d.reason, out)

    @staticmethod
    def claim_answered(run, t: TaskTrack, ev: RestartClaim, delay: float, out: List[Action]) -> None:
        """The driver took (``ev.granted``) one restart of the run's shared budget for ``t``, or
        could not: ``t`` restarts after ``delay``, or the restart never was and ``t`` failed."""
        if ev.granted:
            t.restarts += 1
            run.total_restarts += 1
            run.start_at(t, ev.now + delay)
            restart = f"restart {t.restarts} of {t.rule.max_restarts}"
            out.append(Say(f"{t.name}: {restart} in {delay:.1f}s"))
            out.append(log_event("task_restarting", t.name, reason=restart, attempt=t.restarts,
                                 delay=delay))
            return
        reason = ev.reason or (f"the run's restart budget is spent ({t.rule.max_total_restarts} "
                               f"of {t.rule.max_total_restarts})")
        t.state = check_transition(t.state, TaskState.FAILED, t.name)
        run.fail(t, reason, out)
