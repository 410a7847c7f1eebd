"""The watchdogs: no silent hangs. Each watchdog is a class of its own that looks at the running
run every :data:`tfcluster.core.states.WATCH_EVERY` seconds (or when a Tick says so, in a
replay) and asks for what it found to be done: ``kill`` a hung task (its exit then goes through
the restart policy like any failure; a task elsewhere is killed by its own driver, AskKill) or
``fail_run`` (:class:`tfcluster.core.rules.WatchdogAction`).

* per task (:class:`TaskWatchdog`, :data:`TASK_WATCHDOGS`, in this order): :class:`Startup` (a
  ps or worker whose server never opens its port and that shows no progress; it settles the
  task: the later ones do not look at it), :class:`Waiting` (a task that others report as
  "CreateSession still waiting" on), :class:`Ending` (a task at its final step that does not
  exit);
* over the run (:class:`RunWatchdog`, :data:`RUN_WATCHDOGS`): :class:`StallWarning` (names a task
  whose progress stopped while others go on, and once the run standing still; it asks for
  nothing), :class:`Stall` (no progress anywhere for the stall deadline fails the run), and the
  sizing policy (:class:`tfcluster.core.policies.sizing.Sizing`: ``elastic.scale``).

They decide from the settings (``watchdog:``), the tasks' signs of life (steps, their cadence,
open ports, "still waiting" lines, the final step) and the clock the events bring; the checks
themselves are :mod:`tfcluster.core.rules`' (``check_startup``, ``check_waiting``,
``check_ending``, ``check_stall``, ``stuck_tasks``). A new watchdog, or another policy on this
clock (as the sizing policy is), is a new subclass added to a list here or given to the machine
(``RunMachine(..., watchdogs=Watchdogs(...))``): :class:`Watchdogs` consults them all, and the
machine carries out their requests by their kind (``RunMachine.ASKS``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from tfcluster.core import rules
from tfcluster.core.events import Action, Say, log_event
from tfcluster.core.policies.sizing import Sizing
from tfcluster.core.rules import describe_exit
from tfcluster.core.rules import format_duration as _duration
from tfcluster.core.states import TaskState, TaskTrack

Asks = List[rules.WatchdogAction]


class TaskWatchdog:
    """A watchdog that looks at each running task (not already being killed) in turn.
    ``settles``: when it asks for something about a task, the later watchdogs skip that task."""

    settles = False

    def begin(self, run, now: float) -> None:
        """Before a look at the tasks (what every task's look shares)."""

    def look(self, run, t: TaskTrack, now: float) -> Asks:
        """What to do about ``t`` now ([]: nothing)."""
        raise NotImplementedError


class RunWatchdog:
    """A watchdog that looks at the run as a whole, after the task watchdogs. It may say things
    itself (``out``: Say, LogEvent) and returns what it asks for."""

    def look(self, run, now: float, out: List[Action]) -> Asks:
        raise NotImplementedError

    def progressed(self, run) -> None:
        """A task reported progress (between looks; the sizing policy's measurement reads
        each report). Asks for nothing."""


class Startup(TaskWatchdog):
    """A ps or worker whose server has not opened its port within ``startup_timeout`` and that
    shows no progress is killed."""

    settles = True

    def look(self, run, t: TaskTrack, now: float) -> Asks:
        if not t.serves or t.up:
            return []
        a = rules.check_startup(t.name, now if t.started is None else t.started, False, now,
                                run.s.startup_timeout, t.port, last_progress_at=t.alive_at)
        return [a] if a is not None else []


class Waiting(TaskWatchdog):
    """A task that ``t`` has waited on ("CreateSession still waiting") for ``waiting_timeout``
    is killed (here, or through its own driver), or the run fails when nobody runs it; the wait
    is then forgotten."""

    def begin(self, run, now: float) -> None:
        self.here = {n: t.state == TaskState.RUNNING and not t.forced for n, t in run.tasks.items()}
        if run.s.remote_kill:      # tasks elsewhere: their own driver kills them (AskKill)
            self.here.update({n: n not in run.peer_ok and n not in run.peers_left for n in run.others})
        self.life = {n: t.alive_at for n, t in run.tasks.items()}

    def look(self, run, t: TaskTrack, now: float) -> Asks:
        got = rules.check_waiting(t.name, dict(t.waiting_on), now, run.s.waiting_timeout,
                                  self.here, run.where, self.life)
        for a in got:
            t.waiting_on.pop(a.task, None)
        return got


class Ending(TaskWatchdog):
    """A task that reached its final step ``end_timeout`` ago and has not exited is killed."""

    def look(self, run, t: TaskTrack, now: float) -> Asks:
        if t.ending_at is None:
            return []
        a = rules.check_ending(t.name, t.ending_at, now, run.s.end_timeout, t.step)
        return [a] if a is not None else []


class StallWarning(RunWatchdog):
    """Names a task whose own progress stopped while others go on, at ``stall_warning`` of the
    stall deadline; and once, the whole run standing still. Asks for nothing."""

    def __init__(self) -> None:
        self.warned = False          # the run-wide warning was given (until progress again)

    def look(self, run, now: float, out: List[Action]) -> Asks:
        s = run.s
        if run.best_step is None or not s.stall_timeout or not s.stall_warning:
            return []
        watched = watched_tasks(run)
        # a task with one sign of life has no rhythm yet (Keras verbose=2: one per epoch)
        lives = {t.name: (t.alive_at, t.cadence) for t in watched if t.cadence > 0}
        stuck, going = rules.stuck_tasks(lives, now, s.stall_timeout, s.stall_warning)
        for name in stuck:
            t = run.tasks[name]
            if t.stalled_at is not None:
                continue
            t.stalled_at, t.stalled_step = t.alive_at, t.step
            silent = now - t.alive_at
            verb = "goes on" if len(going) == 1 else "go on"
            out.append(Say(f"{rules.describe_silence(name, silent, t.step)} while "
                           f"{', '.join(going)} {verb}: it may be stuck; {stack_hint(run, [name])}",
                           error=True))
            out.append(log_event("task_stalled", name, step=t.step, silent=round(silent, 1)))
        if watched:
            self._run_still(run, watched, now, out)
        return []

    def _run_still(self, run, watched: List[TaskTrack], now: float, out: List[Action]) -> None:
        last = max(max(t.alive_at for t in watched), run.best_step_at)
        after = rules.stall_warning_after(run.s.stall_timeout, run.s.stall_warning)
        if now - last < after:
            self.warned = False
        elif not self.warned:
            self.warned = True
            out.append(Say(f"no task has made progress for {now - last:.0f}s (global step "
                           f"{run.best_step}); {stall_deadline_words(run, now)}; suspects: "
                           f"{', '.join(suspects(watched, now))}; {stack_hint(run)}", error=True))
            out.append(log_event("run_stalling", step=run.best_step, silent=round(now - last, 1)))


class Stall(RunWatchdog):
    """No sign of progress anywhere for the stall deadline fails the run; tasks at their final
    step are the end deadline's (:class:`Ending`), unless another task still trains."""

    def look(self, run, now: float, out: List[Action]) -> Asks:
        tasks = run.tasks.values()
        ending = any(t.ending_at is not None and t.state == TaskState.RUNNING for t in tasks)
        others = any(t.state == TaskState.RUNNING and not t.forced and t.ending_at is None
                     and t.job != "ps" for t in tasks)
        if not others and ending:
            return []
        gone = [f"{t.name} ({t.state.value}"
                f"{', ' + describe_exit(t.returncode) if t.returncode is not None else ''})"
                for t in tasks if t.state != TaskState.RUNNING]
        lives = [t.alive_at for t in tasks if t.alive_at is not None]
        stall = rules.check_stall(run.best_step, run.best_step_at, now, run.s.stall_timeout, gone,
                                  last_life_at=max(lives) if lives else None,
                                  cadence=max((t.longest_gap for t in tasks), default=0.0),
                                  suspects=suspects(watched_tasks(run), now))
        return [stall] if stall is not None else []


#: the watchdogs of a run, in the order they look
TASK_WATCHDOGS = (Startup, Waiting, Ending)
RUN_WATCHDOGS = (StallWarning, Stall, Sizing)   # Sizing: elastic.scale (policies.sizing)


class Watchdogs:
    """The watchdogs of one run: every task watchdog over each running task, then every run
    watchdog. ``task`` and ``run``: instances (default: one of each class listed above)."""

    def __init__(self, task: Optional[Sequence[TaskWatchdog]] = None,
                 run: Optional[Sequence[RunWatchdog]] = None) -> None:
        self.task = list(task) if task is not None else [cls() for cls in TASK_WATCHDOGS]
        self.run = list(run) if run is not None else [cls() for cls in RUN_WATCHDOGS]

    def look(self, run, now: float, out: List[Action]) -> Asks:
        """What every watchdog asks for now, in order."""
        asks: Asks = []
        for dog in self.task:
            dog.begin(run, now)
        for t in run.tasks.values():
            if t.state != TaskState.RUNNING or t.forced:
                continue
            for dog in self.task:
                got = dog.look(run, t, now)
                asks += got
                if got and dog.settles:
                    break
        for dog in self.run:
            asks += dog.look(run, now, out)
        return asks

    def progressed(self, run) -> None:
        """A task reported progress: every run watchdog hears it."""
        for dog in self.run:
            dog.progressed(run)


# ---------------------------------------------------------------------------- what they say
def watched_tasks(run) -> List[TaskTrack]:
    """The running tasks whose progress the stall checks read: they have shown life, are not at
    their final step, are not being killed."""
    return [t for t in run.tasks.values()
            if t.state == TaskState.RUNNING and not t.forced and t.ending_at is None
            and t.alive_at is not None]


def suspects(watched: List[TaskTrack], now: float) -> List[str]:
    """The tasks a stall message names, the longest silent first: those already seen to stop
    while others went on, else every watched task."""
    pick = [t for t in watched if t.stalled_at is not None] or watched
    pick = sorted(pick, key=lambda t: t.alive_at)
    return [rules.describe_silence(t.name, now - t.alive_at, t.step) for t in pick]


def stack_hint(run, names: Sequence[str] = ()) -> str:
    where = "where it is" if names else "where each task is"
    return f"{where}: tfcluster stack {run.run_ref or 'RUN'}" + "".join(f" {n}" for n in names)


def stall_clock(run) -> Tuple[float, float]:
    """(the last sign of progress, the stall deadline) as the stall watchdog reads them
    (:func:`rules.check_stall`): the run fails at their sum if nothing moves before."""
    lives = [t.alive_at for t in run.tasks.values() if t.alive_at is not None]
    since = max([run.best_step_at] + lives)
    cadence = max((t.longest_gap for t in run.tasks.values()), default=0.0)
    return since, rules.stall_deadline(run.s.stall_timeout, cadence)


def stall_deadline_words(run, now: float) -> str:
    """When the stall watchdog will fail the run if nothing moves, and by which rule: the
    deadline it will really apply (the timeout, or twice the slowest report so far)."""
    since, deadline = stall_clock(run)
    timeout = run.s.stall_timeout
    rule = f"watchdog.stall_timeout: {timeout:g}"
    if deadline > timeout:
        rule = f"twice its slowest report so far; {rule}"
    return (f"the run fails in {max(0.0, since + deadline - now):.0f}s if nothing moves, "
            f"{deadline:.0f}s after the last progress ({rule})")


def stalled_lines(run) -> List[str]:
    """Lines for the end summary: every task seen to stop making progress while the run went
    on, and did not resume (the run may well have succeeded)."""
    lines = []
    for t in run.tasks.values():
        if t.stalled_at is None:
            continue
        at = f" at step {t.stalled_step}" if t.stalled_step is not None else ""
        if t.ended is None:
            lines.append(f"{t.name} stopped making progress{at} "
                         f"{_duration(run.now - t.stalled_at)} ago (still {t.state.value})")
            continue
        lines.append(f"{t.name} stopped making progress{at} {_duration(t.ended - t.stalled_at)} "
                     f"before it ended ({t.state.value})")
    return lines
