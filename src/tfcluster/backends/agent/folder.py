"""The folder channel: how the node agents of one run tell each other things through the run
folder they share, and how the launcher reads what they left (their ends, their events).

Every message is a file in the run folder; every method returns a value and raises nothing
for a missing or unreadable file, except where saying so matters (a restart claim that cannot
be recorded is no restart).

=====================  ===================================================================
``.restart-K``         restart K of the run's budget (``max_total_restarts``), created
                       exclusively: tasks on different nodes count together
``.kill-JOB-I``        a watchdog elsewhere asks the agent of ``JOB:I`` to kill its program
``run_over-S``         the run has been decided in segment S (with the SIGURG that the
                       deciding agent sends to the job step, for agents that missed it)
``stop-S``             stop segment S in order (written by the batch script when Slurm's
                       ``--signal`` warns of the time limit, or by ``tfcluster stop``): the
                       agents stop chief and workers first, the ps after them
``JOB-I.exit.json``    a task's end: written when its program exits 0 (others may be waiting
                       for it, ``success: all-workers``) and when its agent finishes; it
                       names its segment, so a requeued job does not read the last one's
``JOB-I.events.jsonl`` the task's events (starts, exits, restarts, watchdog, stops), merged
                       into the run's events.jsonl by the launcher
``JOB-I.port-S.json``  the host and ports (its server's, its profiler's) a task's agent chose
                       on its node for segment S: every agent waits until each task has one,
                       then writes TF_CONFIG from them (the rendezvous)
=====================  ===================================================================
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from tfcluster import safe_files
from tfcluster.errors import UserError

OVER_MARK = "run_over"
STEP_OVER = "step_over"   # (elastic runs) the exit code the batch script ends srun with
SMALL = 1 << 20     # bytes: the most an exit record or a kill request may be (regular files only)
STOP_MARK = "stop"
EXIT_SUFFIX = ".exit.json"
EVENTS_SUFFIX = ".events.jsonl"


def stem(task: str) -> str:
    """``worker:1`` -> ``worker-1`` (the task's file names)."""
    return task.replace(":", "-")


class FolderChannel:
    """The folder channel of segment ``segment`` of a run, in the run folder ``path`` (a Slurm
    job requeued N times is in segment N: ``SLURM_RESTART_COUNT``)."""

    def __init__(self, path: str, segment: int = 0):
        self.path = path
        self.segment = segment

    def _p(self, name: str) -> str:
        return os.path.join(self.path, name)

    # ---- the run's restart budget
    def restarts_claimed(self) -> int:
        try:
            return sum(1 for n in os.listdir(self.path) if n.startswith(".restart-"))
        except OSError:
            return 0

    def claim_restart(self, limit: Optional[int]) -> Tuple[bool, str]:
        """Take one restart of a budget of ``limit`` (None: no budget). (granted, why not)."""
        if limit is None:
            return True, ""
        for k in range(limit):
            try:
                os.close(os.open(self._p(f".restart-{k}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL
                                 | getattr(os, "O_NOFOLLOW", 0), 0o600))
                return True, ""
            except FileExistsError:
                continue
            except OSError as e:
                return False, f"the restart could not be recorded in {self.path} ({e.strerror or e})"
        return False, f"the run's restart budget is spent ({limit} of {limit})"

    # ---- kill requests
    def request_kill(self, task: str, reason: str) -> Optional[str]:
        """Ask the agent of ``task`` to kill its program; the error, if it could not."""
        try:
            safe_files.write_file(self._p(f".kill-{stem(task)}"), reason.encode("utf-8", "replace"))
            return None
        except OSError as e:
            return str(e)

    def take_kill_request(self, task: str) -> Optional[str]:
        """The reason of a kill request for ``task`` (removed once read), or None."""
        path = self._p(f".kill-{stem(task)}")
        try:
            data = safe_files.read_bytes(path, SMALL)
            if data is None:
                return None
            os.unlink(path)
            return data.decode("utf-8", "replace").strip() or "watchdog"
        except (OSError, UserError):
            return None

    # ---- the run is over
    def _mark(self, name: str) -> Optional[str]:
        """Make the mark file ``name``; the error, if it could not be made."""
        try:
            os.close(os.open(self._p(name), os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
                             | getattr(os, "O_NOFOLLOW", 0), 0o600))   # a planted FIFO: no wait
        except OSError as e:
            return str(e)
        return None

    def mark_over(self) -> Optional[str]:
        return self._mark(f"{OVER_MARK}-{self.segment}")

    def over(self) -> bool:
        return os.path.exists(self._p(f"{OVER_MARK}-{self.segment}"))

    def request_stop(self) -> Optional[str]:
        return self._mark(f"{STOP_MARK}-{self.segment}")

    def stop_requested(self) -> bool:
        return os.path.exists(self._p(f"{STOP_MARK}-{self.segment}"))

    # ---- task ends
    def write_exit(self, task: str, record: Dict[str, Any]) -> Optional[str]:
        """Write ``task``'s end record (atomically); the error, if it could not be written."""
        try:   # a temporary file made O_EXCL|O_NOFOLLOW, renamed (tfcluster.safe_files)
            safe_files.write_file(self._p(stem(task) + EXIT_SUFFIX), json.dumps(record).encode())
        except OSError as e:
            return str(e)
        return None

    def exits(self, segment: Optional[int] = None) -> Dict[str, Dict[str, Any]]:
        """Every task's end record found, by task name (``segment``: only that segment's)."""
        out: Dict[str, Dict[str, Any]] = {}
        try:
            names = os.listdir(self.path)
        except OSError:
            return out
        for n in names:
            if not n.endswith(EXIT_SUFFIX):
                continue
            try:
                rec = json.loads(safe_files.read_bytes(self._p(n), SMALL) or b"null")
            except (OSError, ValueError, UserError):
                continue
            if isinstance(rec, dict) and isinstance(rec.get("task"), str) and (
                    segment is None or rec.get("segment", 0) == segment):
                out[rec["task"]] = rec
        return out

    def failures(self) -> List[Tuple[str, Dict[str, Any]]]:
        """The end records that say their task failed, oldest first."""
        out = [(t, r) for t, r in self.exits().items() if r.get("failed")]
        out.sort(key=lambda x: x[1].get("time") or 0)
        return out

    # ---- tasks lost with their node while the job runs on (elastic runs, sbatch --no-kill)
    def mark_lost(self, task: str, node: str, reason: str, when: float) -> Optional[str]:
        """The launcher saw ``task``'s node down while the job still runs: tell the other
        nodes' agents (their run machines decide what it means); the error, if any."""
        try:
            safe_files.write_file(self._p(f"{stem(task)}.lost-{self.segment}.json"), json.dumps(
                {"task": task, "node": node, "reason": reason, "time": when}).encode())
        except OSError as e:
            return str(e)
        return None

    def lost(self) -> List[Dict[str, Any]]:
        """This segment's tasks lost with their node, oldest first (then by name)."""
        out = list(self._records(f".lost-{self.segment}.json",
                                 lambda r: isinstance(r.get("node"), str)).values())
        out.sort(key=lambda r: (r.get("time") if isinstance(r.get("time"), (int, float)) else 0,
                                r["task"]))
        return out

    def step_over(self, code: int) -> Optional[str]:
        """Every task still in the job has ended but ``srun`` waits on for the tasks of a lost
        node (it does under ``--no-kill``): tell the batch script to end it with ``code``."""
        try:
            safe_files.write_file(self._p(f"{STEP_OVER}-{self.segment}"), f"{int(code)}\n".encode())
        except OSError as e:
            return str(e)
        return None

    # ---- the ports chosen on the nodes (the rendezvous)
    def publish_port(self, task: str, record: Dict[str, Any]) -> Optional[str]:
        """Write the host and ports ``task``'s agent chose for this segment; the error, if any."""
        try:
            safe_files.write_file(self._p(f"{stem(task)}.port-{self.segment}.json"),
                                  json.dumps(record).encode())
        except OSError as e:
            return str(e)
        return None

    def ports(self) -> Dict[str, Dict[str, Any]]:
        """The ports published for this segment, by task name."""
        return self._records(f".port-{self.segment}.json",
                             lambda r: isinstance(r.get("host"), str) and isinstance(r.get("port"), int))

    def _records(self, suffix: str, valid) -> Dict[str, Dict[str, Any]]:
        """The JSON records of the files named ``*suffix``, by their task, ``valid`` ones only."""
        out: Dict[str, Dict[str, Any]] = {}
        try:
            names = os.listdir(self.path)
        except OSError:
            return out
        for n in names:
            if not n.endswith(suffix):
                continue
            try:
                rec = json.loads(safe_files.read_bytes(self._p(n), SMALL) or b"null")
            except (OSError, ValueError, UserError):
                continue
            if isinstance(rec, dict) and isinstance(rec.get("task"), str) and valid(rec):
                out[rec["task"]] = rec
        return out

    # ---- events
    def events_path(self, task: str) -> str:
        return self._p(stem(task) + EVENTS_SUFFIX)

    def task_events(self) -> List[Dict[str, Any]]:
        """Every task's events, in time order."""
        out: List[Dict[str, Any]] = []
        try:
            names = sorted(os.listdir(self.path))
        except OSError:
            return out
        for n in names:
            if not n.endswith(EVENTS_SUFFIX):
                continue
            try:
                f = safe_files.open_regular(self._p(n))
                if f is None:
                    continue
                with f:
                    for line in safe_files.read_lines(f):     # a window at a time
                        try:
                            ev = json.loads(line)
                        except ValueError:
                            continue
                        if isinstance(ev, dict):
                            out.append(ev)
            except (OSError, UserError):
                continue
        out.sort(key=lambda e: e.get("time") if isinstance(e.get("time"), (int, float)) else 0)
        return out
