"""The sizing policy (``elastic.scale: throughput``): workers added while they make the run
faster, and the last one removed (and the run held) where they stop helping.

A run watchdog (:class:`tfcluster.core.policies.watchdog.RunWatchdog`, listed in
:data:`tfcluster.core.policies.watchdog.RUN_WATCHDOGS`): every look it reads the run's global
step (the highest its running tasks report in their current attempts, and when:
:func:`global_step`, the progress the machine already receives) and the workers in the run.
After each change of the workers it waits until every worker in the run has reported a step,
then measures the rate over ``scale_window`` seconds (and at least ``scale_every`` seconds
after the change: no thrashing): the least-squares slope of every (time, global step) the tasks
reported in the window (:meth:`Sizing.progressed`, fed by the machine's ``Progressed`` inputs,
so a replay of the logged inputs measures the same), not only the difference of its two ends:
each report counts, none alone moves it much. Then:

* the first measurement (or the first after the run changed by itself: a worker lost, a worker
  back) is the base: a spare worker is added (``scaled_up``) while the run has fewer than
  ``max_workers``;
* after an added worker, the rate is compared with the base: a gain of at least ``scale_gain``
  of one worker's rate (the base rate / the base workers) keeps it, and the next is added
  (``scaled_up``), or the run holds at ``max_workers`` (``scale_held``); a smaller gain is
  measured once more, over a window twice as long (the same window, going on: a short one can
  miss by 5-10% on a run that makes a few steps a second, and a worker removed wrongly is never
  tried again while the run holds, where one kept wrongly costs one more probe); still smaller,
  the worker just added is removed (``scaled_down``) and the run holds there until it changes by
  itself.

Each decision is an event with the rates it was based on (:data:`DECISIONS`), and a line for the
person watching. The policy asks the machine for ``scale_up`` (a spare worker, started as a
worker coming back is: :meth:`tfcluster.core.policies.on_change.ElasticMode.back`, so a shape
whose ``on_change`` restarts tasks restarts them) and ``scale_down`` (the worker is sent SIGTERM
and, once it has exited, is spare again: shown as a worker that left, not failed), through
:attr:`tfcluster.core.machine.RunMachine.ASKS` (:data:`ASKS` here). Rates are global steps per
second; no I/O, no clock.
"""
from __future__ import annotations

import signal
from typing import Dict, List, Optional, Tuple

from tfcluster.core import rules
from tfcluster.core.events import Action, Kill, Say, log_event
from tfcluster.core.states import TaskState, TaskTrack, check_transition

Asks = List[rules.WatchdogAction]

#: the sizing decisions, as events.jsonl rows (tfcluster.runs.eventlog.EVENTS has their keys)
DECISIONS = ("scaled_up", "scaled_down", "scale_held")


class Sizing:
    """The sizing policy of one run (a run watchdog; it looks only when ``elastic.scale`` is
    ``throughput``). ``history``: (time, workers, rate) of every measurement, for the report."""

    def __init__(self) -> None:
        self.expect: Optional[frozenset] = None   # the workers in the run as the policy left them
        self.changed_at: Optional[float] = None   # the last change of the workers
        self.since: Optional[Tuple[float, int]] = None   # the measurement's start: (time, step)
        self.points: List[Tuple[float, int]] = []  # (time, global step) reported since then
        self.confirming = False                   # a short gain: the window goes on, twice as long
        self.base: Optional[Tuple[int, float]] = None    # (workers, rate) before the probe
        self.probing: Optional[str] = None        # the worker added, being measured
        self.held = False                         # no more probing until the run changes
        self.removing: Optional[Tuple[str, float]] = None   # (worker, when it was sent SIGTERM)
        self.room: Optional[frozenset] = None     # the tasks placed (Ray places spares late)
        self.fresh: frozenset = frozenset()       # spares placed while it held: probed first
        self.history: List[Tuple[float, int, float]] = []
        #: every decision: (time, event, worker or None, workers after it, rate, reason)
        self.decisions: List[Tuple[float, str, Optional[str], int, float, str]] = []

    # ------------------------------------------------------------------ the look
    def look(self, run, now: float, out: List[Action]) -> Asks:
        if run.s.scale != "throughput" or run.s.max_workers is None:
            return []
        before = self._state()
        asks = self._look(run, now, out)
        if self._state() != before:
            run.keep_tick()          # the look changed what the policy knows: a replay needs it
        return asks

    def _state(self) -> tuple:
        return (self.expect, self.since, self.base, self.probing, self.held, self.removing,
                self.room, self.fresh, self.confirming, len(self.history), len(self.decisions))

    def _decide(self, run, event: str, task: Optional[str], workers: int, measured: int,
                rate: float, base: Optional[Tuple[int, float]], why: str, out: List[Action]) -> None:
        """Log a decision (an events.jsonl row with the rates it was based on) and keep it."""
        base_n, base_rate = base if base is not None else (None, None)
        self.decisions.append((round(run.now, 3), event, task, workers, round(rate, 3), why))
        out.append(log_event(event, task, workers=workers, measured_workers=measured,
                             rate=round(rate, 3), base_workers=base_n,
                             base_rate=None if base_rate is None else round(base_rate, 3), reason=why))

    def _look(self, run, now: float, out: List[Action]) -> Asks:
        self._kill_if_slow(run, now, out)
        workers = frozenset(run.workers_in())
        if self.expect is None or workers != self.expect:
            self._run_changed(run, workers, now, out)
        self._room_changed(run, out)
        rate = self._measure(run, now)
        if rate is None:
            return []
        n = len(workers)
        if self.probing is not None and not self.confirming and self._short(run, rate):
            self.confirming = True                         # the same window, twice as long
            out.append(Say(f"elastic.scale: {self.probing} added {rate - self.base[1]:.2f} steps/s "
                           f"so far, less than {self._needed(run):.2f}: measuring it for another "
                           f"{run.s.scale_window:g}s before removing it"))
            return []
        self._window(global_step(run))                     # the next window starts here
        self.history.append((round(now, 3), n, round(rate, 3)))
        if self.probing is None:
            return self._from_base(run, n, rate, now, out)
        return self._after_probe(run, n, rate, now, out)

    def _run_changed(self, run, workers: frozenset, now: float, out: List[Action]) -> None:
        """The workers changed by themselves (the first look, a worker lost or back): measure
        again from a new base, and probe again."""
        if self.expect is not None:
            out.append(Say(f"elastic.scale: the workers changed ({run.workers_line()}); measuring "
                           f"the rate again"))
        self.expect, self.changed_at = workers, now
        self._window(None)
        self.base, self.probing, self.held = None, None, False

    def _room_changed(self, run, out: List[Action]) -> None:
        """A spare worker was placed (Ray: a node with room joined) while the run held: measure
        a new base and probe again."""
        room = frozenset(n for n, t in run.tasks.items() if t.placed)      # (only grows)
        new = room - self.room if self.room is not None else frozenset()
        self.room = room
        if new and self.held:
            out.append(Say("elastic.scale: room for another worker; measuring the rate again"))
            self._window(None)
            self.base, self.probing, self.held = None, None, False
            self.fresh = new      # the spare a node made room for, not one it removed before

    def _window(self, start: Optional[Tuple[float, int]]) -> None:
        """A new measurement window from ``start`` (time, global step); None: none yet."""
        self.since = start
        self.points = [start] if start is not None else []
        self.confirming = False

    def _needed(self, run) -> float:
        """The gain a worker added must bring: ``scale_gain`` of one worker's rate at the base."""
        base_n, base_rate = self.base
        return run.s.scale_gain * base_rate / max(base_n, 1)

    def _short(self, run, rate: float) -> bool:
        return rate - self.base[1] < self._needed(run)

    def progressed(self, run) -> None:
        """A task reported progress (the machine's ``Progressed``): while a window is open, the
        run's global step as it is now is one more point of the window's slope."""
        if self.since is None:       # (no window is ever opened in a run not sized)
            return
        got = global_step(run)
        if got is None or got == self.points[-1]:
            return
        if got[1] < self.since[1]:   # the tasks went back (restarted from a checkpoint): from here
            self._window(got)
        else:
            self.points.append(got)

    def _measure(self, run, now: float) -> Optional[float]:
        """The steady rate (global steps/s) since every worker in the run reported a step after
        the last change, once ``scale_window`` (and ``scale_every`` after the change) has passed;
        None before."""
        s = run.s
        now_step = global_step(run)
        if now_step is None:
            return None
        if self.since is None:
            if not all(_reports(run, n) for n in self.expect):
                return None
            self._window(now_step)
            return None
        t0 = self.since[0]
        window = s.scale_window * (2 if self.confirming else 1)
        if now - t0 < window or now - self.changed_at < s.scale_every:
            return None
        return slope(self.points)

    # ------------------------------------------------------------------ the decisions
    def _from_base(self, run, n: int, rate: float, now: float, out: List[Action]) -> Asks:
        self.base = (n, rate)
        if self.held or rate <= 0:
            return []
        if n >= run.s.max_workers:
            return self._hold(run, n, rate, f"at max_workers ({run.s.max_workers})", out)
        return self._add(run, n, rate, None, f"measuring what worker {n + 1} adds", out)

    def _after_probe(self, run, n: int, rate: float, now: float, out: List[Action]) -> Asks:
        base_n, base_rate = self.base
        needed = self._needed(run)
        gain = rate - base_rate
        if not self._short(run, rate):
            self.base = (n, rate)
            why = (f"worker {n} added {gain:.2f} steps/s (needed {needed:.2f}: scale_gain "
                   f"{run.s.scale_gain:g} of one worker's {base_rate / max(base_n, 1):.2f})")
            if n >= run.s.max_workers:
                return self._hold(run, n, rate, f"{why}; at max_workers ({run.s.max_workers})", out,
                                  base=(base_n, base_rate))
            return self._add(run, n, rate, (base_n, base_rate), why, out)
        name, self.probing = self.probing, None
        why = (f"{name} added {gain:.2f} steps/s, less than {needed:.2f} (scale_gain "
               f"{run.s.scale_gain:g} of one worker's {base_rate / max(base_n, 1):.2f}): removed; "
               f"holding at {_workers(n - 1)}")
        self.held, self.removing = True, (name, now)
        self._changed(run, now, set(self.expect) - {name})
        self.base = (base_n, base_rate)
        self._decide(run, "scaled_down", name, n - 1, n, rate, (base_n, base_rate), why, out)
        out.append(Say(f"elastic.scale: {why}"))
        return [rules.WatchdogAction("scale_down", name, why)]

    def _add(self, run, n: int, rate: float, base: Optional[Tuple[int, float]], why: str,
             out: List[Action]) -> Asks:
        spare, self.fresh = next_spare(run, self.fresh), frozenset()
        if spare is None:
            waiting = sorted((t.name for t in run.tasks.values() if t.spare and not t.placed),
                             key=_index)
            why = (f"no spare worker placed yet ({', '.join(waiting)}: no room in the cluster "
                   f"so far; a node with room that joins places it)" if waiting
                   else "no spare worker left to add")
            return self._hold(run, n, rate, why, out, base=base)
        self.probing = spare.name
        self._changed(run, run.now, set(self.expect) | {spare.name})
        self._decide(run, "scaled_up", spare.name, n + 1, n, rate, base, why, out)
        out.append(Say(f"elastic.scale: {rate:.2f} steps/s with {_workers(n)}; adding {spare.name} ({why})"))
        return [rules.WatchdogAction("scale_up", spare.name, why)]

    def _hold(self, run, n: int, rate: float, why: str, out: List[Action],
              base: Optional[Tuple[int, float]] = None) -> Asks:
        self.held, self.probing = True, None
        self._decide(run, "scale_held", None, n, n, rate, base, why, out)
        out.append(Say(f"elastic.scale: {rate:.2f} steps/s with {_workers(n)}; holding ({why})"))
        return []

    def _changed(self, run, now: float, workers: set) -> None:
        self.expect, self.changed_at = frozenset(workers), now
        self._window(None)

    def _kill_if_slow(self, run, now: float, out: List[Action]) -> None:
        """A removed worker that has not ended ``stop_timeout`` after its SIGTERM gets SIGKILL."""
        if self.removing is None:
            return
        name, at = self.removing
        t = run.tasks.get(name)
        if t is None or t.state != TaskState.STOPPING:
            self.removing = None
        elif now - at >= run.s.stop_timeout:
            self.removing = None
            out.append(Kill(name, signal.SIGKILL))


def _workers(n: int) -> str:
    return f"{n} worker" + ("" if n == 1 else "s")


def global_step(run) -> Optional[Tuple[float, int]]:
    """(when, step): the run's global step as its running tasks report it in their current
    attempts -- not the best step ever seen, which stands still after a restart from a
    checkpoint until the steps since it are redone -- and when it was reported; None before."""
    got = [(t.step, t.step_at) for t in run.tasks.values() if t.job != "evaluator"
           and t.state == TaskState.RUNNING and t.step is not None and t.step_at is not None]
    if not got:
        return None
    step, at = max(got)
    return at, step


def slope(points: List[Tuple[float, int]]) -> Optional[float]:
    """The least-squares slope of (time, step) ``points`` (steps/s); None with fewer than two
    times. Two points: the difference of the two."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_s = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread <= 0:
        return None
    return sum((t - mean_t) * (v - mean_s) for t, v in points) / spread


def _reports(run, name: str) -> bool:
    """Worker ``name`` (here) runs and has reported progress since it started (a worker
    elsewhere is taken as reporting)."""
    t = run.tasks.get(name)
    return t is None or (t.state == TaskState.RUNNING and t.alive_at is not None)


def _index(name: str) -> int:
    return int(name.rsplit(":", 1)[1])


def next_spare(run, prefer: frozenset = frozenset()) -> Optional[TaskTrack]:
    """The spare worker to add next: the lowest index placed and not being stopped, of those in
    ``prefer`` (placed just now) where there are any."""
    spares = [t for t in run.tasks.values() if t.spare and t.placed and t.state in SPARE_STATES]
    spares = [t for t in spares if t.name in prefer] or spares
    return min(spares, key=lambda t: _index(t.name), default=None)


# ---------------------------------------------------------------------------- the machine's side
def ask_scale_up(run, a: rules.WatchdogAction, out: List[Action]) -> bool:
    """``scale_up``: spare worker ``a.task`` joins the run, started as a worker coming back is
    (the ``on_change`` mode's ``back``: alone, or with the tasks it restarts)."""
    t = run.tasks.get(a.task)
    if t is None or not t.spare or not t.placed or t.state not in SPARE_STATES:
        return False
    t.spare, t.left, t.why = False, "", ""
    if t.state != TaskState.PENDING:
        t.restarts += 1          # a new attempt (TFCLUSTER_RESTART_COUNT), not from its budget
    if t.state != TaskState.RESTARTING:
        t.state = check_transition(t.state, TaskState.RESTARTING, t.name)
    t.start_at = float("inf")
    run.success.recount(run)
    run.elastic.back(run, [t], out)
    return False


def ask_scale_down(run, a: rules.WatchdogAction, out: List[Action]) -> bool:
    """``scale_down``: worker ``a.task`` leaves the run: SIGTERM now; spare again once it ended
    (:func:`removed_exited`)."""
    t = run.tasks.get(a.task)
    if t is None or t.state != TaskState.RUNNING:
        return False
    t.spare, t.left = True, "removed by elastic.scale"     # (why: its scaled_down event)
    t.state = check_transition(t.state, TaskState.STOPPING, t.name)
    run.success.recount(run)
    out.append(Kill(t.name, signal.SIGTERM))
    return False


def removed_exited(run, t: TaskTrack, out: List[Action]) -> None:
    """A worker the policy removed has ended: LEFT, as a worker that left the run is (a
    ``run_shrunk`` event, the line), spare again; the ``on_change`` mode hears that it left."""
    t.state = check_transition(t.state, TaskState.LEFT, t.name)
    t.start_at = float("inf")
    out.append(run._exit_event(t, TaskState.LEFT))
    run._went(t.name, "removed by elastic.scale", "", "", out)


def spare_placed(run, ev, out: List[Action]) -> None:
    """:class:`tfcluster.core.events.SparePlaced`: spare worker ``ev.task`` has a place and an
    endpoint now (Ray placed its bundle): the policy may add it (and re-probes if it held)."""
    t = run.tasks.get(ev.task)
    if t is None or t.placed:
        return
    t.placed = True
    out.append(log_event("spare_placed", t.name, node=ev.node))
    if not run.decided:
        out.append(Say(f"room for {t.name} on {ev.node} (its bundle is placed): elastic.scale may add it"))


#: the states of a spare worker the policy may add: never started, or removed by it (LEFT) or
#: stopped to move while spare (RESTARTING)
SPARE_STATES = (TaskState.PENDING, TaskState.RESTARTING, TaskState.LEFT)

#: the kinds of request the sizing policy makes (tfcluster.core.machine.RunMachine.ASKS)
ASKS: Dict[str, object] = {"scale_up": ask_scale_up, "scale_down": ask_scale_down}
