"""A run machine for a resolved plan (:meth:`tfcluster.core.machine.RunMachine.from_plan`): the
plan's settings as the machine's :class:`tfcluster.core.states.Settings`, its tasks and their
restart rules, the other tasks' jobs and endpoints, and which workers a sized run holds spare.
Every driver builds its machine here, so each reads the plan the same way."""
from __future__ import annotations

from typing import Dict, Iterable, Optional

from tfcluster.core import rules
from tfcluster.core.states import Settings


def build(cls, plan, names: Optional[Iterable[str]] = None, *, shared: bool = False,
          peer_stop_wait: Optional[float] = None):
    """A ``cls`` (the run machine) for ``names`` (default: the plan's selected tasks).
    ``shared``: a Slurm node agent, which shares the restart budget, hears of the other tasks'
    ends and asks other nodes to kill a task through the run folder."""
    here = list(names) if names is not None else list(plan.selected)
    if shared and peer_stop_wait is None:
        peer_stop_wait = rules.peer_stop_wait(plan.grace, plan.stop_timeout)
    rule = plan.task(here[0]).restart if here else rules.RestartRule()
    wd = plan.watchdog
    settings = Settings(
        chief=plan.chief, success=plan.success, grace=plan.grace,
        stop_timeout=plan.stop_timeout, startup_timeout=wd.startup_timeout,
        waiting_timeout=wd.waiting_timeout, stall_timeout=wd.stall_timeout,
        stall_warning=wd.stall_warning, end_timeout=wd.end_timeout,
        max_total_restarts=rule.max_total_restarts, shared_budget=shared,
        peers_report=shared, remote_kill=shared, peer_stop_wait=peer_stop_wait,
        min_workers=getattr(plan, "min_workers", None), moves_nodes=not plan.kind.over_ssh,
        on_change=getattr(plan, "on_change", "go-on"), **sizing_settings(plan))
    by_name = {t.name: t for t in plan.tasks}       # (plan.task(n) is a scan: 512^2 at 512)
    tasks = [(n, by_name[n].job, by_name[n].restart, by_name[n].port) for n in here]
    mine = set(here)
    others = {t.name: t.job for t in plan.tasks if t.name not in mine}
    where = {t.name: t.endpoint for t in plan.tasks}
    m = cls(tasks, settings, others, where)
    m.movable_ports = {n for n in here if getattr(by_name[n], "port_chosen", False)}
    for n in here:                        # sized runs: the extra workers wait to be added
        m.tasks[n].spare = bool(plan.sizing and plan.sizing.spare(by_name[n].job, by_name[n].index))
        m.tasks[n].placed = not (m.tasks[n].spare and plan.kind.places_spares_late)   # (Ray: later)
    return m


def sizing_settings(plan) -> Dict[str, object]:
    """The Settings of a sized run (``elastic.max_workers`` / ``scale``: plan.sizing)."""
    z = getattr(plan, "sizing", None)
    if z is None:
        return {}
    return {"max_workers": z.max_workers, "scale": z.scale, "scale_gain": z.gain,
            "scale_window": z.window, "scale_every": z.every}
