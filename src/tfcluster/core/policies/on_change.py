"""The elastic policy: which worker may leave the run, and what a worker leaving or coming back
changes (``elastic:`` in the cluster file).

Who may leave is one rule for every mode (:meth:`ElasticMode.may_leave`): a worker that is not
the chief, while the run runs and at least ``min_workers`` workers stay in it without it. What a
change does is the mode's, one class per ``elastic.on_change`` value (:data:`MODES`):

* ``go-on`` (:class:`GoOn`): a worker leaving changes nothing; one coming back starts alone;
* ``restart`` (:class:`RestartEvery`): any change stops every task in order and starts them
  again with the workers in the run (resumed from the last checkpoint);
* ``restart-chief`` (:class:`RestartChief`): a worker back restarts the chief alone with it;
* ``restart-on-join`` (:class:`RestartOnJoin`): a worker leaving changes nothing; workers back
  restart every task (a TF1 ps knows its workers by the addresses in its own TF_CONFIG).

It decides from the settings (``min_workers``, ``on_change``), the workers in the run
(:meth:`tfcluster.core.machine.RunMachine.workers_in`) and the chief's state; it asks the regroup
to restart some or every task (:meth:`tfcluster.core.policies.regroup.Regrouping.restart_all`),
or starts the workers back itself. A new mode is a new
subclass listed in :data:`MODES`; ``tests/unit/test_machine_policies.py`` checks that the cluster
file's modes and these are the same.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Type

from tfcluster.core.events import Action, Start
from tfcluster.core.states import Phase, TaskState, TaskTrack


class ElasticMode:
    """One ``elastic.on_change`` mode. ``name``: its value in the cluster file."""

    name = ""

    @staticmethod
    def may_leave(run, name: str, job: str) -> bool:
        """Whether task ``name`` of ``job`` leaves the run (rather than fail it): a worker, not
        the chief, of an elastic run (``min_workers`` set) that runs, while at least
        ``min_workers`` workers stay in it without it."""
        s = run.s
        if s.min_workers is None or job != "worker" or name == s.chief:
            return False
        if run.decided or run.phase != Phase.RUN:
            return False
        return len([n for n in run.workers_in() if n != name]) >= s.min_workers

    def left(self, run, name: str, out: List[Action]) -> None:
        """Worker ``name`` (here or elsewhere) has left the run: what else changes (nothing)."""

    def back(self, run, back: Sequence[TaskTrack], out: List[Action]) -> None:
        """The workers ``back`` (left with a node that answers again; already RESTARTING, their
        restart counted) come back: start them."""
        for t in back:
            out.append(Start(t.name, t.restarts))

    @staticmethod
    def started(starts: Sequence[Start]) -> str:
        """How the restart after a change names what it started."""
        return ", ".join(a.task for a in starts)

    @staticmethod
    def restart_with(run, back: Sequence[TaskTrack], out: List[Action],
                     only: Optional[List[str]] = None) -> None:
        """``back`` come back through a restart of every task (or of ``only`` these, with them):
        the start after it counts their restart once."""
        for t in back:
            t.restarts -= 1
        run.regrouping.restart_all(run, back[0].name, f"{', '.join(t.name for t in back)} came back", out, only=only)


class GoOn(ElasticMode):
    """``go-on``: the run goes on through every change; workers back start alone."""

    name = "go-on"


class RestartEvery(ElasticMode):
    """``restart``: every change (a worker leaving or back) restarts every task."""

    name = "restart"

    def left(self, run, name: str, out: List[Action]) -> None:
        run.regrouping.restart_all(run, name, f"{name} left", out)

    def back(self, run, back: Sequence[TaskTrack], out: List[Action]) -> None:
        self.restart_with(run, back, out)

    @staticmethod
    def started(starts: Sequence[Start]) -> str:
        return "every task"


class RestartChief(ElasticMode):
    """``restart-chief``: workers back restart the chief (while it runs) with them; a worker
    leaving changes nothing."""

    name = "restart-chief"

    def back(self, run, back: Sequence[TaskTrack], out: List[Action]) -> None:
        chief = run.tasks.get(run.s.chief)
        if chief is None or chief.state != TaskState.RUNNING:
            super().back(run, back, out)
            return
        self.restart_with(run, back, out, only=[chief.name])


class RestartOnJoin(ElasticMode):
    """``restart-on-join``: a worker leaving changes nothing; workers back restart every task."""

    name = "restart-on-join"

    def back(self, run, back: Sequence[TaskTrack], out: List[Action]) -> None:
        self.restart_with(run, back, out)


#: the modes by their name in the cluster file
MODES: Dict[str, Type[ElasticMode]] = {m.name: m for m in (GoOn, RestartEvery, RestartChief, RestartOnJoin)}


def mode(name: str) -> ElasticMode:
    """The policy of ``elastic.on_change: name`` (ValueError for a name it does not know)."""
    if name not in MODES:
        raise ValueError(f"elastic.on_change: unknown mode {name!r} (known: {', '.join(MODES)})")
    return MODES[name]()
