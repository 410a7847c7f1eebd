"""What the drivers read of the run machine: its tasks as the live table shows them, which to
probe, the exit code and end record of a task (a Slurm node agent's), the workers in an elastic
run, the tasks seen to stall. :class:`RunView` is the read-only side of
:class:`tfcluster.core.machine.RunMachine` (its base class): nothing here changes the state.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from tfcluster.core import rules
from tfcluster.core.policies import sizing, watchdog
from tfcluster.core.rules import describe_exit
from tfcluster.core.states import Phase, RunState, TaskState


class RunView:
    """The queries of a run machine (``self.tasks``, ``self.s``, ``self.others``, ... are the
    machine's: :class:`tfcluster.core.machine.RunMachine`)."""

    def unopened(self) -> List[str]:
        """Running tasks whose server port the driver should probe (PortOpen): every task with
        a port (the startup watchdog holds only ps and worker tasks to it; for the others it
        tells :meth:`shown` when the task stops starting)."""
        return [t.name for t in self.tasks.values()
                if t.state == TaskState.RUNNING and t.port is not None and not t.up
                and not t.forced]

    def alive(self) -> List[str]:
        return [t.name for t in self.tasks.values() if t.state.alive]

    def shown(self, name: str) -> str:
        """The task's state as the live table shows it. A running task is ``starting`` until
        its server port accepts connections or it reports a step (TensorFlow takes seconds to
        load), ``serving`` once its port is open (a ps never reports steps), ``running`` once
        it reports progress, and ``stopping`` while the run stops (it waits for its wave or
        for its SIGTERM to end it)."""
        t = self.tasks[name]
        if t.spare and t.state != TaskState.RUNNING:
            return "left" if t.left else "spare"    # sized runs: out of the run, may be added
        if t.state != TaskState.RUNNING:
            return t.state.value
        if self.phase == Phase.STOP or t.forced:
            return TaskState.STOPPING.value
        if t.step is not None:
            return TaskState.RUNNING.value
        if t.up:
            return "serving"
        if t.port is not None:
            return "starting"
        return TaskState.RUNNING.value       # nothing to watch for: no port, no steps yet

    @property
    def decided(self) -> bool:
        return self.result != RunState.RUNNING

    def exit_code_of(self, name: str) -> int:
        """The exit code of a driver that runs ``name`` alone (a Slurm node agent): the
        task's own (128+N for a signal) when it caused the run's failure -- so Slurm's
        accounting names the task that failed -- else the run's."""
        t = self.tasks[name]
        if self.result == RunState.FAILED and self.root_cause == name and t.returncode is not None:
            return rules.task_exit_code(t.returncode)
        return self.exit_code if self.exit_code is not None else rules.EXIT_FAILED

    def end_row(self, name: str, final: bool) -> Dict[str, object]:
        """What a task's driver tells the others of the task's end (a Slurm node's exit record
        in the run folder; the Slurm launcher builds run.json's task row from it): its state and
        exit, whether it failed the run, and the reason -- the task's own ``why`` (a watchdog
        kill, a port conflict, an OOM kill, a refused restart) wins, then the run's verdict
        (``final``), then the wording of its exit. Not ``final``: it exited 0 while the run goes
        on (others may wait for it: all-workers)."""
        t = self.tasks[name]
        failed = final and self.result == RunState.FAILED and self.root_cause in (name, None)
        # "note": the task's own reason (why), under the name run.json and the end record have
        # always given it; "reason": that, or the run's words or the exit's
        return {
            "exit_code": self.exit_code_of(name) if final else rules.EXIT_OK,
            "returncode": t.returncode, "state": t.state.value,
            "exit": describe_exit(t.returncode), "note": t.why,
            "ok": t.state == TaskState.SUCCEEDED, "failed": bool(failed),
            "reason": t.why or (self.words if final else "") or describe_exit(t.returncode),
            "restarts": t.restarts, "pid": t.pid, "started": t.started,
            "first_started": t.first_started, "ended": t.ended, "final": final, "left": t.left,
            "decision": self.words if final and self.decided_here else None}

    def stalled(self) -> List[str]:
        """Lines for the end summary: every task seen to stop making progress while the run
        went on, and did not resume (the run may well have succeeded)."""
        return watchdog.stalled_lines(self)

    def workers_in(self) -> List[str]:
        """The workers still in the run: not left, not failed (running, starting, restarting,
        or done); with reports from elsewhere (Slurm), the workers run elsewhere too."""
        here = [x.name for x in self.tasks.values()
                if x.job == "worker" and not x.left and not x.spare and x.state != TaskState.FAILED]
        if self.s.peers_report:
            here += [n for n, job in self.others.items()
                     if job == "worker" and n not in self.peers_left and self.peer_ok.get(n, True)]
        return here

    def workers_total(self) -> int:
        """The run's workers (the file's, and those the sizing policy added), here and elsewhere."""
        return (sum(1 for x in self.tasks.values() if x.job == "worker" and not x.spare)
                + (sum(1 for j in self.others.values() if j == "worker") if self.s.peers_report else 0))

    def workers_line(self) -> str:
        """"3 of 4 workers, min 2" (elastic runs; "" otherwise)."""
        if self.s.min_workers is None:
            return ""
        top = f", max {self.s.max_workers}" if self.s.max_workers is not None else ""
        return f"{len(self.workers_in())} of {self.workers_total()} workers, min {self.s.min_workers}{top}"

    def workers_left(self) -> Dict[str, str]:
        """Elastic runs: the workers that left the run, here and elsewhere -> why."""
        out = {n: t.left for n, t in self.tasks.items() if t.left}
        out.update({n: why for n, (why, _node) in self.peers_left.items()})
        return out

    def sizing_fields(self) -> Optional[Dict[str, object]]:
        """Sized runs (``elastic.scale``): run.json's ``workers.sizing`` -- the rate measured over
        time with the workers beside it (``rates``: [time, workers, steps/s]) and every decision
        (``decisions``: [time, event, worker, workers after it, steps/s, reason]); else None."""
        if not self.s.scale:
            return None
        dog = next((d for d in self.watchdogs.run if isinstance(d, sizing.Sizing)), None)
        if dog is None:
            return None
        return {"scale": self.s.scale, "rates": [list(h) for h in dog.history],
                "decisions": [list(d) for d in dog.decisions]}

    def left_nodes(self) -> List[str]:
        """The nodes that workers left the run with (a driver asks its backend for them)."""
        return sorted({t.left_node for t in self.tasks.values() if t.left and t.left_node})
