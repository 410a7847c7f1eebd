"""A Slurm run's job: which job it is, and what Slurm says of it -- the one query of a job's
state, in one set of words, for the launcher that follows the job
(:mod:`tfcluster.backends.slurm.follower`) and for ``tfcluster status`` alike.

The words are Slurm's own job states (squeue's ``%T``, scontrol's ``JobState``, sacct's
``State``), each either :data:`LIVE` (the job's tasks run or will run) or :data:`ENDED`; and two
more answers: ``""`` when Slurm answers but does not know the job (it forgot it, or never had
it), ``None`` when Slurm could not be asked (no tool here, or none answered).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any, Dict, NamedTuple, Optional, Sequence

from tfcluster.plan.backend_kind import recorded_kind

#: job states in which the job's tasks still run or will run
LIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
                  "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
                  "RESV_DEL_HOLD", "SPECIAL_EXIT"})
#: job states in which the job has ended. SPECIAL_EXIT is in both: the job ended and was put
#: back held (it runs again once released), so a launcher that follows it stops there, and
#: ``status`` of a run whose launcher is gone still calls the job live.
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})

#: who ``tfcluster status`` asks: squeue (jobs Slurm still holds), then sacct (accounting,
#: which remembers ended jobs)
STATUS_TOOLS = ("squeue", "sacct")
#: who the launcher asks while it follows its job: scontrol (the state and the exit code)
FOLLOW_TOOLS = ("scontrol",)


def word_of(state: str) -> str:
    """The state word of an answer: ``CANCELLED by 0`` and ``CANCELLED+`` -> ``CANCELLED``."""
    return state.strip().split(" ")[0].upper().rstrip("+")


def is_live(state: str) -> bool:
    """Whether a job in ``state`` still runs or will run (:data:`LIVE`)."""
    return word_of(state) in LIVE


class JobState(NamedTuple):
    """What Slurm said of a job: ``word`` (a state word; ``""``: Slurm does not know the job;
    None: Slurm could not be asked) and, from scontrol, the job's ``exit_code`` (128+N for a
    signal N)."""

    word: Optional[str]
    exit_code: Optional[int] = None

    @property
    def over(self) -> bool:
        """The job has ended, or Slurm no longer knows it: nothing more to follow."""
        return self.word == "" or (self.word is not None and word_of(self.word) in ENDED)


def job_state(job_id: str, ask: Sequence[str] = STATUS_TOOLS, timeout: float = 10.0) -> JobState:
    """What Slurm says of ``job_id``, asked of the tools in ``ask`` in turn (those not installed
    here are passed over): the first that knows the job answers. ``""`` when one answered that
    it does not know the job (and none knew it), None when none answered."""
    answered = False
    for tool in ask:
        path = shutil.which(tool)
        if path is None:
            continue
        try:
            r = subprocess.run([path, *_QUESTIONS[tool](job_id)], capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):   # not answered: the next tool is asked
            continue
        state, knows = _ANSWERS[tool](r)
        if state is not None:
            return state
        answered = answered or knows
    return JobState("" if answered else None)


def _not_known(r: subprocess.CompletedProcess) -> bool:
    return "invalid job id" in (r.stderr + r.stdout).lower()


def _squeue(r: subprocess.CompletedProcess):
    words = r.stdout.split()
    if r.returncode == 0 and words:
        return JobState(words[0]), True
    return None, r.returncode == 0 or _not_known(r)


def _sacct(r: subprocess.CompletedProcess):
    words = r.stdout.split()
    if r.returncode != 0:
        return None, False
    return (JobState(words[0]) if words else None), True


def _scontrol(r: subprocess.CompletedProcess):
    if r.returncode != 0:
        return None, _not_known(r)
    state = re.search(r"\bJobState=(\S+)", r.stdout)
    code = re.search(r"\bExitCode=(\d+):(\d+)", r.stdout)
    exit_code = None
    if code:
        exit_code = int(code.group(1)) or (128 + int(code.group(2)) if int(code.group(2)) else 0)
    return JobState(state.group(1) if state else None, exit_code), True


_QUESTIONS = {"squeue": lambda job: ["-h", "-j", job, "-o", "%T"],
              "sacct": lambda job: ["-n", "-X", "-P", "-j", job, "-o", "State"],
              "scontrol": lambda job: ["show", "job", "-o", job]}
_ANSWERS = {"squeue": _squeue, "sacct": _sacct, "scontrol": _scontrol}


def slurm_job_id(record: Dict[str, Any], run_dir: Optional[str] = None) -> Optional[str]:
    """The Slurm job of a ``--backend slurm`` run: the record's ``slurm_job`` when it looks like
    a job id (``123``, ``123_4``); else, for a record written before the job id was known (a
    launcher killed while following its job), the id in the name of the job's output file in the
    run folder (``slurm-123.out``, written by Slurm once the job starts). None when neither."""
    job = record.get("slurm_job")
    if job is not None and not isinstance(job, bool):
        job = str(job)
        return job if re.fullmatch(r"[0-9]{1,12}(_[0-9]{1,9})?", job) else None
    if not recorded_kind(record.get("backend")).takes_slurm_options or not run_dir:
        return None
    try:
        names = os.listdir(run_dir)
    except OSError:
        return None
    ids = [m.group(1) for m in (re.fullmatch(r"slurm-([0-9]{1,12})\.out", n) for n in names) if m]
    return max(ids, key=int) if ids else None
