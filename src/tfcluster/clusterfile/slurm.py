"""Slurm scheduler options: the file's ``slurm:`` section and the matching flags, validated once.

Pure: no Slurm command is run here. ``cluster`` arguments need only ``.tasks`` whose items have
``.job``, ``.index`` and ``.gpus`` (a :class:`~tfcluster.clusterfile.cluster.Cluster`, or a run
plan). :class:`SlurmSpec` is the model (pydantic, part of ``cluster.yaml``); :func:`from_flags`
merges command-line flags over the file's section (flags win) and names the flag in its errors;
:func:`sbatch_options` gives the options for ``sbatch`` (:func:`sbatch_lines` as ``#SBATCH``
lines) including the GPU binding, and :func:`task_gpus` the ``CUDA_VISIBLE_DEVICES`` each task's
wrapper must set under that binding.

GPU binding (``jobs.<job>.gpus`` under Slurm)
  All TensorFlow tasks run as one Slurm job step (``srun --ntasks=N``), and Slurm binds the same
  GPU request to every task of a step. So:

  * ``slurm.gres`` given (``gpu:2``, ``gpu:a100:2``): ``--gres=...`` per node, as written. Every
    task on a node sees the node's allocated GPUs and the file's ``jobs.<job>.gpus`` ids pick
    among them (ps: none), exactly as on one machine.
  * ``slurm.gpus_per_task`` given, or else derived from the file (every task with GPU ids has the
    same number G of them): ``--gpus-per-task=G``. Slurm chooses each task's devices and sets its
    ``CUDA_VISIBLE_DEVICES``; tfcluster keeps it for the jobs that use GPUs (and jobs without
    ``gpus:``, which inherit) and hides the GPUs from ps tasks (``CUDA_VISIBLE_DEVICES=""``), so
    ps runs on CPU. The
    GPUs Slurm bound to those tasks stay idle: a step cannot give its tasks different counts
    (a heterogeneous job could; tfcluster does not build one). Different counts in the file are
    an error that suggests ``slurm.gres``.

Safety
  Every value ends up in an ``#SBATCH`` line that ``sbatch`` splits into words, inside a bash
  script: newlines, NUL and other control characters, whitespace, quotes, backslashes, ``$``,
  backquotes and ``;`` are rejected everywhere; each field also has the character set its Slurm
  option uses. Pass-through options (``sbatch:``) are long options only (``--mem=8G``,
  ``--exclusive``); those with a field of their own, and ``--ntasks`` (tfcluster sets it to the
  number of TensorFlow tasks), are refused with a hint.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tfcluster.errors import UserError


class _Task(Protocol):
    job: str
    index: int
    gpus: Any


class HasTasks(Protocol):
    """What these functions read of a cluster (a :class:`tfcluster.clusterfile.cluster.Cluster` or a
    run plan): its tasks' job, index and GPUs. A protocol, so that this module, which the file's
    models import for the ``slurm:`` section, imports nothing of the resolved cluster."""

    @property
    def tasks(self) -> Iterable[_Task]: ...

# sbatch --time: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
# "days-hours:minutes", "days-hours:minutes:seconds", or no limit.
_TIME_FORMATS = tuple(re.compile(p) for p in (
    r"\d+", r"\d+:\d+", r"\d+:\d+:\d+", r"\d+-\d+", r"\d+-\d+:\d+", r"\d+-\d+:\d+:\d+"))
_TIME_UNLIMITED = ("UNLIMITED", "INFINITE")
TIME_HELP = ("minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes, "
             "days-hours:minutes:seconds, or UNLIMITED")

_UNSAFE = re.compile(r"[\x00-\x20\x7f'\"`\\$;]")
_FIELD_CHARS = {
    "partition": (re.compile(r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*"),
                  "partition names (letters, digits, '_.+-'), comma-separated"),
    "account": (re.compile(r"[A-Za-z0-9_.+-]+"), "an account name (letters, digits, '_.+-')"),
    "qos": (re.compile(r"[A-Za-z0-9_.+-]+"), "a QOS name (letters, digits, '_.+-')"),
    "constraint": (re.compile(r"[A-Za-z0-9_.:,&|\[\]()*!=+-]+"),
                   "node features joined by & | , [] () and *count"),
    "gres": (re.compile(r"[A-Za-z0-9_.:,()=+-]+"), "gres specs such as gpu:2 or gpu:a100:2"),
}
_OPTION = re.compile(r"--([a-z][a-z0-9-]*)(=(.+))?")
# Pass-through options that have a field, or that tfcluster sets itself.
_RESERVED = {"partition": "slurm.partition (--partition)", "time": "slurm.time (--time)",
             "account": "slurm.account (--account)", "qos": "slurm.qos (--qos)",
             "constraint": "slurm.constraint (--constraint)",
             "gpus-per-task": "slurm.gpus_per_task (--gpus-per-task)", "gres": "slurm.gres (--gres)",
             "ntasks": None, "job-name": None}
FLAGS = {"partition": "--partition", "time": "--time", "account": "--account", "qos": "--qos",
         "constraint": "--constraint", "gpus_per_task": "--gpus-per-task", "gres": "--gres",
         "sbatch": "--sbatch", "signal_lead": "--signal-lead", "requeue": "--requeue",
         "max_segments": "--max-segments"}

#: seconds before the time limit at which the run is stopped in order (chief first, with its
#: last checkpoint; ps last), when a time limit is set
DEFAULT_SIGNAL_LEAD = 120
#: the signal Slurm sends the batch shell (only it: ``B:``) ``signal_lead`` seconds before the
#: time limit; the batch script turns it into an ordered stop through the run folder
LEAD_SIGNAL = "USR1"


def _q(text: str) -> str:
    """``text`` quoted for a one-line message (control characters escaped)."""
    return f"'{text}'" if text.isprintable() else repr(text)


def check_time(text: str) -> str:
    """``text`` if it is a time limit sbatch accepts; ValueError naming the formats otherwise.
    As in sbatch, fields may overflow (``1:75:00`` is 2 h 15 min) and ``0`` means no limit."""
    value = text.strip()
    if value.upper() in _TIME_UNLIMITED:
        return value.upper()
    if any(pattern.fullmatch(value) for pattern in _TIME_FORMATS):
        return value
    raise ValueError(f"{_q(text)} is not a Slurm time limit ({TIME_HELP})")


def check_value(field: str, text: str) -> str:
    if _UNSAFE.search(text):
        bad = _UNSAFE.search(text).group(0)
        raise ValueError(f"{text!r} contains {bad!r}, which could break the batch script")
    pattern, what = _FIELD_CHARS[field]
    if not pattern.fullmatch(text):
        raise ValueError(f"{_q(text)} is not {what}")
    return text


def check_option(text: str) -> str:
    """One pass-through sbatch option: ``--name`` or ``--name=value``."""
    if _UNSAFE.search(text):
        bad = _UNSAFE.search(text).group(0)
        raise ValueError(f"{text!r} contains {bad!r}, which could break the batch script; "
                         f"give one option per entry, as --name=value")
    m = _OPTION.fullmatch(text)
    if not m:
        raise ValueError(f"'{text}' is not a long sbatch option; write --name or --name=value "
                         f"(for example --mem=8G)")
    name = m.group(1)
    if name in _RESERVED:
        hint = _RESERVED[name]
        raise ValueError(f"'{text}': " + (f"use {hint} instead" if hint else
                                          f"tfcluster sets --{name} itself"))
    return text


class SlurmSpec(BaseModel):
    """Slurm scheduler options (``render slurm`` and ``launch --backend slurm``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    partition: Optional[str] = Field(None, description="sbatch --partition")
    time: Optional[str] = Field(None, description=f"sbatch --time: {TIME_HELP}")
    account: Optional[str] = Field(None, description="sbatch --account")
    qos: Optional[str] = Field(None, description="sbatch --qos")
    constraint: Optional[str] = Field(None, description="sbatch --constraint (node features)")
    gpus_per_task: Optional[int] = Field(
        None, ge=0, description="sbatch --gpus-per-task (default: the number of ids in "
        "jobs.<job>.gpus; ps tasks are kept on CPU)")
    gres: Optional[str] = Field(None, description="sbatch --gres per node, e.g. gpu:2 (instead of "
                                "--gpus-per-task; jobs.<job>.gpus ids then pick among the node's GPUs)")
    sbatch: List[str] = Field(default_factory=list,
                              description="other sbatch options, one per entry: --mem=8G, --exclusive")
    signal_lead: int = Field(
        DEFAULT_SIGNAL_LEAD, ge=10, le=65535,
        description="with a time limit: seconds before it at which the run stops in order (chief "
                    "first, with its last checkpoint; ps last): sbatch --signal=B:USR1@N")
    requeue: bool = Field(
        False, description="after that ordered stop, requeue the job (the next segment resumes "
                           "from the checkpoint; TFCLUSTER_RESTART_COUNT counts segments)")
    max_segments: int = Field(
        10, ge=1, le=1000, description="with requeue: at most this many segments (job runs) in all")

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, v: Any) -> Optional[str]:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"{v} is a number: write the time limit as a quoted string, for example "
                             f"'1:00:00' (YAML reads an unquoted 1:00:00 as the number 3600)")
        return check_time(v) if isinstance(v, str) else v

    @field_validator("partition", "account", "qos", "constraint", "gres")
    @classmethod
    def _value(cls, v: Optional[str], info) -> Optional[str]:
        return None if v is None else check_value(info.field_name, v)

    @field_validator("sbatch")
    @classmethod
    def _options(cls, v: List[str]) -> List[str]:
        return [check_option(o) for o in v]


def from_flags(base: Optional[SlurmSpec] = None, **flags: Any) -> SlurmSpec:
    """``base`` (the file's ``slurm:``) with the flags that were given (not None) over it.
    ``sbatch`` flags are added to the file's, replacing the file's options of the same name.
    Raises UserError naming the flag (exit 2)."""
    given = {k: v for k, v in flags.items() if v is not None and (k != "sbatch" or v)}
    unknown = set(given) - set(FLAGS)
    if unknown:
        raise TypeError(f"unknown Slurm option(s): {', '.join(sorted(unknown))}")
    try:
        SlurmSpec.model_validate(given)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = err.get("loc") or ("?",)
        msg = str(err.get("msg", "invalid")).replace("Value error, ", "")
        raise UserError(f"{FLAGS.get(str(loc[0]), loc[0])}: {msg}")
    data = (base or SlurmSpec()).model_dump()
    for key, value in given.items():
        if key == "sbatch":
            names = {_option_name(o) for o in value}
            data["sbatch"] = [o for o in data["sbatch"] if _option_name(o) not in names] + list(value)
        else:
            data[key] = value
    return SlurmSpec.model_validate(data)


def _option_name(option: str) -> str:
    return option.split("=", 1)[0]


def _gpu_ids(gpus: Optional[str]) -> int:
    return len([g for g in (gpus or "").split(",") if g.strip()])


def gpus_per_task(cluster: HasTasks, spec: SlurmSpec) -> int:
    """GPUs Slurm binds to every task (``--gpus-per-task``); 0 with ``gres`` or no GPUs."""
    if spec.gres:
        return 0
    if spec.gpus_per_task is not None:
        return spec.gpus_per_task
    counts: Dict[str, int] = {f"{t.job}:{t.index}": _gpu_ids(t.gpus) for t in cluster.tasks
                              if _gpu_ids(t.gpus)}
    distinct = sorted(set(counts.values()))
    if len(distinct) > 1:
        jobs = sorted({name.split(":")[0] for name in counts})
        detail = ", ".join(f"{n} has {c}" for n, c in counts.items())
        raise UserError(f"jobs.{jobs[0]}.gpus: under Slurm every task of the step gets the same number "
                        f"of GPUs, but {detail}; give every GPU task the same number of ids, or set "
                        f"slurm.gres (GPUs per node) and keep the ids")
    return distinct[0] if distinct else 0


def sbatch_options(cluster: HasTasks, spec: SlurmSpec) -> List[str]:
    """The sbatch options for ``spec`` and the cluster's GPUs (``--name=value`` words, usable as
    ``#SBATCH`` lines or as sbatch arguments)."""
    out = [f"--{FLAGS[k][2:]}={getattr(spec, k)}"
           for k in ("partition", "time", "account", "qos", "constraint") if getattr(spec, k)]
    if spec.gres:
        out.append(f"--gres={spec.gres}")
    if spec.time and spec.time.upper() not in ("0", "UNLIMITED", "INFINITE"):
        out.append(f"--signal=B:{LEAD_SIGNAL}@{spec.signal_lead}")
    if spec.requeue:
        out += ["--requeue", "--open-mode=append"]
    n = gpus_per_task(cluster, spec)
    if n:
        out.append(f"--gpus-per-task={n}")
    return out + list(spec.sbatch)


def sbatch_lines(cluster: HasTasks, spec: SlurmSpec) -> List[str]:
    return [f"#SBATCH {o}" for o in sbatch_options(cluster, spec)]


def task_gpus(cluster: HasTasks, spec: SlurmSpec) -> Dict[str, List[Optional[str]]]:
    """``CUDA_VISIBLE_DEVICES`` per job and task for the Slurm task wrapper. Under Slurm's
    ``--gpus-per-task`` binding: None keeps what Slurm set (tasks with ids, and tasks that
    inherit), ``""`` hides the GPUs (ps, and tasks of a job with ids beyond its list). Otherwise
    (``gres``, or no GPUs): the file's values, ids picking among the node's GPUs."""
    bound = gpus_per_task(cluster, spec) > 0
    out: Dict[str, List[Optional[str]]] = {}
    for t in sorted(cluster.tasks, key=lambda t: (t.job, t.index)):
        out.setdefault(t.job, []).append(("" if t.gpus == "" else None) if bound else t.gpus)
    return out
