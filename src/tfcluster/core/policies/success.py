"""The success policy: when the run has succeeded (``success:``), and the grace period that
follows.

It decides from the settings (``success``: ``chief`` or ``all-workers``; the chief; ``grace``;
``watchdog.end_timeout``), the tasks here that exited 0 by themselves, the workers that left
the run (they no longer count) and, where the driver reports them (Slurm), the ends of the tasks
run elsewhere. The rules are :func:`tfcluster.core.rules.success_needs` and
:func:`tfcluster.core.rules.success_reached`; the machine asks :meth:`SuccessRule.reached` after
every event and decides the run when it gives words. After the success the tasks that may end by
themselves (:func:`tfcluster.core.rules.waits_for_grace`) get ``grace`` seconds, or until
``end_timeout`` after their final step, before the stop order stops them (:meth:`SuccessRule.grace_over`).
"""
from __future__ import annotations

from typing import Dict, List, Optional

from tfcluster.core import rules
from tfcluster.core.events import Action, Say
from tfcluster.core.states import TaskState, TaskTrack


class SuccessRule:
    """The success rule of one run, and its grace period.

    Without reports from elsewhere the tasks the rule needs are fixed: they are counted once
    (``needs``, asked on the first exit 0; ``needs_left`` of them have not exited 0), so that the
    rule is not asked of every task after every event."""

    def __init__(self) -> None:
        self.needs: Optional[set] = None
        self.needs_left = 0
        self.grace_until = 0.0
        self.grace_tasks: List[str] = []

    # ---- the rule
    def exited_ok(self, run, t: TaskTrack) -> None:
        """``t`` (here) exited 0 by itself."""
        if run.s.peers_report:
            return
        if self.needs is None:
            self.needs = self._needs(run)
            self.needs_left = len(self.needs)
        if t.name in self.needs:
            self.needs_left -= 1

    def recount(self, run) -> None:
        """The rule's tasks again, without the workers that left the run (or came back)."""
        if self.needs is None:
            return
        self.needs = self._needs(run)
        self.needs_left = sum(1 for n in self.needs if run.tasks[n].state != TaskState.SUCCEEDED)

    @staticmethod
    def _needs(run) -> set:
        return rules.success_needs(run.s.success, run.s.chief,
                                   [n for n, x in run.tasks.items() if not x.left and not x.spare],
                                   run.s.chief in run.tasks)

    def reached(self, run) -> Optional[str]:
        """Words that say why the run has succeeded, or None while it has not."""
        s = run.s
        if not s.peers_report and (self.needs is None or self.needs_left):
            return None
        chief_here = s.chief in run.tasks or (s.peers_report and s.chief in run.others)
        return rules.success_reached(s.success, s.chief, self._succeeded(run), chief_here)

    @staticmethod
    def _succeeded(run) -> Dict[str, bool]:
        out = {name: t.state == TaskState.SUCCEEDED for name, t in run.tasks.items() if not t.left}
        if run.s.peers_report:
            for name in run.others:
                if name not in run.peers_left:
                    out[name] = run.peer_ok.get(name, False)
        return out

    # ---- the grace period
    def begin_grace(self, run, now: float, out: List[Action]) -> bool:
        """Give the tasks that may end by themselves their grace; False: nobody to wait for."""
        s = run.s
        waiting = [t.name for t in run.tasks.values()
                   if t.state in (TaskState.RUNNING, TaskState.RESTARTING)
                   and rules.waits_for_grace(t.job)]
        if not waiting or s.grace <= 0:
            return False
        self.grace_tasks = waiting
        self.grace_until = now + s.grace
        # one deadline, the one grace_over applies: the grace, or later while a task at its
        # final step may still exit by itself (watchdog.end_timeout)
        ending = [n for n in waiting if self.ending_until(run, run.tasks[n]) > self.grace_until]
        if not ending:
            out.append(Say(f"giving {', '.join(waiting)} {s.grace:g}s to finish"))
            return True
        until = max(self.ending_until(run, run.tasks[n]) for n in ending)
        out.append(Say(f"giving {', '.join(waiting)} up to {round(until - now):g}s to finish: "
                       f"{', '.join(ending)} reached the final step, and may take "
                       f"{s.end_timeout:g}s from there to exit by itself "
                       f"(watchdog.end_timeout)"))
        return True

    @staticmethod
    def ending_until(run, t: TaskTrack) -> float:
        """A task at its final step may take until then to exit by itself (0: no such task)."""
        if t.ending_at is None or not run.s.end_timeout:
            return 0.0
        return t.ending_at + run.s.end_timeout

    def grace_over(self, run, now: float) -> bool:
        """Every task of the grace has ended, or its time is up."""
        running = [n for n in self.grace_tasks if run.tasks[n].state == TaskState.RUNNING]
        return not running or now >= max([self.grace_until] + [
            self.ending_until(run, run.tasks[n]) for n in running])
