"""The stop order: how the tasks here are stopped, at the run's end and before a regroup.

Two waves (:func:`tfcluster.core.rules.stop_waves`): chief, workers and evaluators first (a chief
that saves a last checkpoint on SIGTERM needs its ps), then the ps and the tf.data service. Each
wave gets SIGTERM (SIGKILL after a second Ctrl-C), ``stop_timeout`` seconds, then SIGKILL and
:data:`tfcluster.core.states.KILL_WAIT` seconds; when every wave is done, a last SIGKILL goes to
what is left of each process group. Where the driver reports tasks run elsewhere (Slurm), the ps
wave first waits up to ``peer_stop_wait`` for the non-ps tasks there to end.

It decides from the live tasks and their jobs, the settings (``stop_timeout``,
``peer_stop_wait``), the ends reported from elsewhere, the machine's ``kill_now`` and the clock
the events bring. It changes the stopped tasks' state (RUNNING -> STOPPING) and returns the
kills; the machine says what comes after the last wave (a regroup, or the run's end).
"""
from __future__ import annotations

import signal
from typing import List, Optional, Sequence

from tfcluster.core import rules
from tfcluster.core.events import Action, Kill, Say, log_event
from tfcluster.core.rules import format_duration as _duration
from tfcluster.core.states import KILL_WAIT, TaskState, TaskTrack, check_transition

CTRL_C_TWICE = "a second Ctrl-C killed every task at once"


class StopOrder:
    """The waves of one stop. ``wave``: the tasks of the wave being stopped that still live;
    ``wave_all``: every task stopped in this stop (each gets the last SIGKILL)."""

    def __init__(self) -> None:
        self.waves: List[List[str]] = []
        self.wave: List[str] = []
        self.wave_all: List[str] = []
        self.deadline = 0.0
        self.killed = False                      # the wave has had its SIGKILL
        self.peer_wait_until: Optional[float] = None

    def begin(self, run, now: float, out: List[Action], only: Optional[Sequence[str]] = None,
              fresh: bool = True) -> bool:
        """Stop the live tasks (``only`` these: one wave) in order; True when nothing was left to
        stop. ``fresh``: a new stop (a regroup's), not the run's end after one."""
        if only is None:
            live = [t for t in run.tasks.values() if t.state.alive]
            first, then = rules.stop_waves({t.job for t in live} | {"ps"})
            # the ps wave is there even when empty: next_wave knows it as the last one
            self.waves = [[t.name for t in live if t.job in first], [t.name for t in live if t.job in then]]
        else:
            self.waves = [[n for n in only if run.tasks[n].state.alive], []]
        self.wave = []
        if fresh:
            self.wave_all = []
        return self.next_wave(run, now, out)

    def next_wave(self, run, now: float, out: List[Action]) -> bool:
        """Stop the next wave with live tasks; True when every wave is done (after the last
        SIGKILL to every group stopped)."""
        while self.waves:
            wave = self.waves[0]
            if len(self.waves) == 1 and wave and self._peers_hold(run, now, out):
                return False
            self.waves.pop(0)
            live = [n for n in wave if run.tasks[n].state.alive]
            if not live:
                continue
            self.wave = list(live)
            self.wave_all.extend(live)
            sig = signal.SIGKILL if run.kill_now else signal.SIGTERM
            for name in live:
                self.stop_one(run, run.tasks[name], out, sig)
            self.killed = sig == signal.SIGKILL
            self.deadline = now + (KILL_WAIT if self.killed else run.s.stop_timeout)
            return False
        for name in self.wave_all:       # SIGKILL to whatever is left of each group after its leader
            out.append(Kill(name, signal.SIGKILL))
        self.wave_all = []
        return True

    def _peers_hold(self, run, now: float, out: List[Action]) -> bool:
        """The ps wave waits (up to peer_stop_wait) for non-ps tasks elsewhere to end."""
        still = peers_still_running(run)
        if not still:
            return False
        if self.peer_wait_until is None:
            s = run.s
            wait = s.peer_stop_wait if s.peer_stop_wait is not None else s.stop_timeout
            self.peer_wait_until = now + wait
            out.append(Say(f"waiting up to {wait:g}s for {', '.join(still)} to stop before the ps"))
        return now < self.peer_wait_until

    def advance(self, run, now: float, out: List[Action]) -> bool:
        """After each event while stopping: the next wave once this one has ended, SIGKILL at its
        deadline; True when every wave is done."""
        self.wave = [n for n in self.wave if run.tasks[n].state.alive]
        if not self.wave:
            return self.next_wave(run, now, out)
        if not self.killed and (now >= self.deadline or run.kill_now):
            timeout = f"{run.s.stop_timeout:g}s"
            for name in self.wave:
                t = run.tasks[name]
                out.append(Say(f"{t.name} (pid {t.pid}) still running {timeout} after SIGTERM: SIGKILL"))
                t.killed = f"still running {timeout} after SIGTERM"
                out.append(Kill(name, signal.SIGKILL))
                out.append(log_event("stop_sent", name, signal="SIGKILL"))
            self.killed = True
            self.deadline = now + KILL_WAIT
        elif self.killed and now >= self.deadline:
            for name in self.wave:
                t = run.tasks[name]
                out.append(Say(f"{t.name} (pid {t.pid}) did not die after SIGKILL", error=True))
            self.wave = []
            return self.next_wave(run, now, out)
        return False

    def late_start(self, run, t: TaskTrack, out: List[Action]) -> None:
        """``t`` started while the tasks were being stopped: it joins the wave being stopped."""
        self.wave.append(t.name)
        self.wave_all.append(t.name)
        self.stop_one(run, t, out, signal.SIGKILL if run.kill_now else signal.SIGTERM)

    def kill_wave(self, run, now: float, out: List[Action]) -> None:
        """A second Ctrl-C: SIGKILL to the wave being stopped, now."""
        for name in self.wave:
            run.tasks[name].killed = CTRL_C_TWICE
            out.append(Kill(name, signal.SIGKILL))
            out.append(log_event("stop_sent", name, signal="SIGKILL"))
        self.killed = True
        self.deadline = now + KILL_WAIT

    @staticmethod
    def stop_one(run, t: TaskTrack, out: List[Action], sig: int = signal.SIGTERM) -> None:
        out.append(Say(f"stopping {t.name} (pid {t.pid}): {signal.Signals(sig).name} to its "
                       f"process group"))
        if t.state == TaskState.RUNNING:
            t.state = check_transition(t.state, TaskState.STOPPING, t.name)
        if t.stalled_at is not None and not t.why:
            at = f" at step {t.stalled_step}" if t.stalled_step is not None else ""
            t.why = f"stopped making progress{at} {_duration(run.now - t.stalled_at)} before it was stopped"
        if sig == signal.SIGKILL:
            t.killed = CTRL_C_TWICE
        out.append(Kill(t.name, sig))
        out.append(log_event("stop_sent", t.name, signal=signal.Signals(sig).name))


def peers_still_running(run) -> List[str]:
    """Non-ps tasks elsewhere (Slurm: other nodes) not yet known to have ended."""
    if not run.s.peers_report:
        return []
    return [n for n, job in run.others.items()
            if job not in rules.SERVICE_JOBS and n not in run.peer_ok and n not in run.peers_left]
