"""The result a run is shown with (``status``, ``runs``, ``report``, ``attach``): run.json's
``result``; ``lost`` for a ``running`` record whose launcher is gone; for a Slurm run whose
launcher is gone, what Slurm says of its job (:mod:`tfcluster.runs.slurm_job`). And how long
it ran, or was last seen."""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional

from tfcluster.runs.liveness import launcher_alive
from tfcluster.runs.slurm_job import is_live, job_state, slurm_job_id
from tfcluster.safe_files import RUN_FILE

#: Exit code of ``tfcluster status`` per result (2 is bad input, as everywhere in tfcluster).
STATUS_EXIT = {"succeeded": 0, "failed": 1, "running": 3, "interrupted": 4, "lost": 5,
               "unknown": 6, "stopping": 3}
#: results a launcher writes when it decides, before it has stopped every task and closed the
#: record with its end and exit code
DECIDED = ("succeeded", "failed", "interrupted")


def decide_result(recorded: Any, alive: Optional[bool], job_id: Optional[str] = None,
                  slurm_state: Optional[str] = None, closed: bool = True) -> str:
    """The result status shows, from what it knows (pure: no process, no Slurm call).

    ``recorded``: run.json's ``result``; ``alive``: whether its launcher runs (None: cannot be
    told); ``job_id``: the Slurm job the launcher submitted, if any; ``slurm_state``: what Slurm
    says of that job (:func:`tfcluster.runs.slurm_job.job_state`) -- a state word (``RUNNING``),
    ``""`` when Slurm no longer knows the job, None when Slurm could not be asked (no
    squeue/sacct here, or they failed).

    A ``running`` record whose launcher is gone is ``lost``, except a Slurm run: its tasks live
    in the job, not in the launcher. Its result is ``running`` while Slurm says the job is live,
    ``lost`` once the job ended (or Slurm forgot it), ``unknown`` when Slurm cannot be asked.

    A decided record not ``closed`` yet (its result written, its ``ended`` not: the launcher
    still stops the tasks) whose launcher runs is ``stopping`` (exit code 3, as running)."""
    if recorded in DECIDED and not closed and alive is True:
        return "stopping"
    if recorded != "running" or alive is not False:
        return str(recorded)
    if not job_id:
        return "lost"
    if slurm_state is None:
        return "unknown"
    return "running" if is_live(slurm_state) else "lost"


def slurm_says(job_id: str) -> Optional[str]:
    """What Slurm says of a run's job, for ``status``: the state word of the one job-state query
    (squeue, then sacct; ``""``: Slurm does not know the job; None: it cannot be asked)."""
    return job_state(job_id).word


def derive_result(record: Dict[str, Any], alive: Optional[bool] = None,
                  probe=None, run_dir: Optional[str] = None) -> str:
    """The run's result as status reports it (:func:`decide_result`): the record's, ``lost``
    for a ``running`` record whose launcher is gone, and for a Slurm run whose launcher is gone,
    what Slurm says of its job. ``alive`` overrides the launcher check (for callers that already
    did it); ``probe(job_id)`` replaces the question to Slurm (:func:`slurm_says`)."""
    result = record.get("result")
    if result != "running":
        return result
    return assess(record, probe, run_dir, alive)["result"]


def last_update(run_dir: str) -> Optional[float]:
    """When run.json was last written (the last moment a lost run is known to have lived)."""
    try:
        return os.path.getmtime(os.path.join(run_dir, RUN_FILE))
    except OSError:
        return None


def run_duration(run_dir: str, record: Dict[str, Any], result: str,
                 now: Optional[float] = None) -> Optional[float]:
    started = record.get("started")
    if started is None:
        return None
    if record.get("ended") is not None:
        return record["ended"] - started
    if result in ("lost", "unknown"):
        seen = last_update(run_dir)
        return None if seen is None else seen - started
    return (now or time.time()) - started


def assess(record: Dict[str, Any], probe=None, run_dir: Optional[str] = None,
           alive: Optional[bool] = None) -> Dict[str, Any]:
    """What status knows of a run beyond its record: ``result`` (derived), ``launcher_alive``
    (true, false, or null when it cannot be checked) and, for a Slurm run whose launcher is
    gone, ``slurm_job`` and ``slurm_state`` (null when Slurm cannot be asked). ``alive``, for a
    running record (or a decided one not closed yet: ``stopping``), overrides the launcher
    check."""
    closed = record.get("ended") is not None or record.get("result") not in DECIDED
    if record.get("result") != "running" and closed:
        alive = None
    elif alive is None:
        alive = launcher_alive(record)
    job = slurm_job_id(record, run_dir) if alive is False and closed else None
    state = (probe or slurm_says)(job) if job else None
    out = {"result": decide_result(record.get("result"), alive, job, state, closed=closed),
           "launcher_alive": alive}
    if job:
        out.update(slurm_job=job, slurm_state=state)
    return out
