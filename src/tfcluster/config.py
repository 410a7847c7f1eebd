"""cluster.yaml: load, validate and resolve a cluster file. No TensorFlow is imported here.

The file is TensorFlow's ClusterSpec dict (``cluster:``) plus what is needed to run it
(``program:``, ``jobs:``, ``success:``, ``restart:``, ``logdir:``). :func:`load` turns a
file into a :class:`Cluster`, the typed model every other part of tfcluster uses: its
tasks (``worker:1``), their endpoints, the ClusterSpec dict and each task's TF_CONFIG.

Structure and types are checked by pydantic (which also gives the JSON Schema that
editors use); the cluster itself (endpoints, ports, duplicates, job names) by hand, so
that every message names its field: ``cluster.worker[1]: port 70000 is out of range
1-65535``. All problems in a file are reported at once.
"""
from __future__ import annotations

import difflib
import ipaddress
import json
import os
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, SkipValidation, ValidationError
from typing_extensions import Annotated

from .errors import ConfigError, UserError
from .slurm_options import SlurmSpec

VERSION = 1
# TensorFlow's rule for job names (tensorflow/core/util/device_name_utils.cc: IsJobName):
# a letter, then letters, digits or underscores.
JOB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# Job names with a meaning in TensorFlow's TF_CONFIG; other names are allowed (the seed's "local").
KNOWN_JOBS = ("chief", "ps", "worker", "evaluator")
SINGLE_TASK_JOBS = ("chief", "evaluator")
JOB_ORDER = {"chief": 0, "ps": 1, "worker": 2, "evaluator": 3}
SUCCESS_RULES = ("chief", "all-workers")
RESTART_POLICIES = ("never", "on-failure", "exit-code")
DEFAULT_GRACE = 5.0
DEFAULT_BASE_PORT = 2222


# --------------------------------------------------------------------------------------
# The file's structure (pydantic). Unions are checked by hand (SkipValidation) for
# clearer messages; the annotations still give the JSON Schema.

EnvValue = Union[str, int, float, bool]
Command = Annotated[Union[List[str], str, None], SkipValidation]
GpuEntry = Union[int, str]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RestartSpec(_Strict):
    """What happens when a task fails (see docs/CLUSTER_YAML.md)."""

    policy: Literal["never", "on-failure", "exit-code"] = Field(
        "never", description="never | on-failure (any failure) | exit-code (TFJob: 1-127 permanent, "
        "128-255 and signals retried)")
    max_restarts: int = Field(3, ge=0, description="restarts allowed per task")
    max_total_restarts: Optional[int] = Field(
        None, ge=0, description="restarts allowed for the whole run (default: no limit beyond per task)")
    backoff: float = Field(1.0, ge=0, description="seconds before the first restart; doubles each time")


class WatchdogSpec(_Strict):
    """No silent hangs: deadlines after which tfcluster names the task it waits for."""

    startup_timeout: float = Field(
        120.0, ge=0, description="seconds a ps/worker task gets to open its port (0: no check)")
    waiting_timeout: float = Field(
        120.0, ge=0, description="seconds a task may report 'CreateSession still waiting for "
        "response from worker' about another task before that task is treated as failed (0: off)")
    stall_timeout: float = Field(
        300.0, ge=0, description="seconds the reported global step may stand still before the run "
        "is treated as hung (0: off; only once a task has reported progress)")


class ProgramSpec(_Strict):
    """What every task runs."""

    command: Command = Field(None, description="argv (list) or shell-like string; relative paths "
                             "resolve against the folder of this file; python/python3 means "
                             "tfcluster's own interpreter")
    args: List[str] = Field(default_factory=list, description="extra arguments after the command")
    env: Dict[str, EnvValue] = Field(default_factory=dict, description="environment additions")
    task_flags: bool = Field(False, description="append --job_name, --task_index and --<job>_hosts")
    cwd: Optional[str] = Field(None, description="working folder (default: the folder of this file)")


class JobSpec(_Strict):
    """Per-job overrides of program keys, plus GPUs and restart policy."""

    command: Command = None
    args: Optional[List[str]] = None
    env: Dict[str, EnvValue] = Field(default_factory=dict, description="merged over program.env")
    task_flags: Optional[bool] = None
    cwd: Optional[str] = None
    gpus: Optional[List[GpuEntry]] = Field(
        None, description="CUDA_VISIBLE_DEVICES per task, one entry per task (ps: none unless given)")
    restart: Optional[RestartSpec] = None


class RemoteSpec(_Strict):
    """How to reach a host over ssh and run tasks there (``remote:`` defaults, ``hosts.<name>:``
    per host; used by ``--backend ssh``)."""

    ssh_host: Optional[str] = Field(None, description="address or ssh alias to connect to "
                                    "(default: the host name from cluster:)")
    user: Optional[str] = Field(None, description="ssh login user (default: ssh's own choice)")
    port: Optional[int] = Field(None, ge=1, le=65535, description="ssh port (default 22)")
    identity_file: Optional[str] = Field(None, description="private key file (~ is expanded)")
    ssh_options: List[str] = Field(default_factory=list,
                                   description="extra ssh -o options, e.g. StrictHostKeyChecking=yes")
    python: Optional[str] = Field(None, description="remote interpreter for python/python3 commands "
                                  "(default: python3)")
    workdir: Optional[str] = Field(None, description="remote folder that mirrors this file's folder: "
                                   "paths under it are mapped there, and tasks run there")


ClusterDict = Annotated[Dict[str, Union[List[str], Annotated[int, Field(ge=1)]]], SkipValidation]


class ClusterFile(_Strict):
    """A cluster.yaml file (version 1)."""

    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"title": "tfcluster cluster.yaml"})

    version: Literal[1] = Field(1, description="file format version")
    cluster: ClusterDict = Field(description="job -> list of host:port (TensorFlow's ClusterSpec "
                                 "dict), or a task count whose endpoints the backend assigns")
    program: ProgramSpec = Field(default_factory=ProgramSpec)
    jobs: Dict[str, JobSpec] = Field(default_factory=dict)
    success: Literal["chief", "all-workers"] = Field(
        "chief", description="chief: the chief (or worker:0) exiting 0 ends the run; "
        "all-workers: every worker must exit 0")
    restart: RestartSpec = Field(default_factory=RestartSpec)
    logdir: str = Field("runs", description="logs and run records go to <logdir>/<run-id>/")
    grace: float = Field(DEFAULT_GRACE, ge=0, description="seconds other workers get to finish "
                         "after the run has succeeded")
    base_port: int = Field(DEFAULT_BASE_PORT, ge=1, le=65535,
                           description="first port tried for jobs given as a count (local backend)")
    remote: RemoteSpec = Field(default_factory=RemoteSpec,
                               description="ssh settings for every remote host (--backend ssh)")
    hosts: Dict[str, RemoteSpec] = Field(default_factory=dict,
                                         description="per-host ssh settings, merged over remote:")
    watchdog: WatchdogSpec = Field(default_factory=WatchdogSpec)
    slurm: SlurmSpec = Field(default_factory=SlurmSpec,
                             description="Slurm scheduler options (render slurm, --backend slurm)")


def json_schema() -> Dict[str, Any]:
    """JSON Schema of cluster.yaml (for editors: yaml-language-server)."""
    schema = ClusterFile.model_json_schema()
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return schema


# --------------------------------------------------------------------------------------
# The resolved model.

@dataclass(frozen=True, order=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return format_endpoint(self.host, self.port)


def format_endpoint(host: str, port: int) -> str:
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


@dataclass(frozen=True, order=True)
class TaskId:
    """One task identity everywhere: ``worker:1``."""

    job: str
    index: int

    def __str__(self) -> str:
        return f"{self.job}:{self.index}"

    @property
    def file_stem(self) -> str:
        return f"{self.job}-{self.index}"

    @classmethod
    def parse(cls, text: str) -> "TaskId":
        m = re.fullmatch(r"\s*([A-Za-z][A-Za-z0-9_]*)\s*[:/]\s*(\d+)\s*", text or "")
        if not m:
            raise UserError(f"'{text}' is not a task; write JOB:INDEX, for example worker:1")
        return cls(m.group(1), int(m.group(2)))


@dataclass(frozen=True)
class Task:
    """One task of the cluster and everything needed to start it."""

    job: str
    index: int
    endpoint: Optional[Endpoint]          # None: a count job whose endpoint is not assigned yet
    command: Tuple[str, ...]              # empty: no program given in the file
    args: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...]
    task_flags: bool
    cwd: str
    gpus: Optional[str]                   # CUDA_VISIBLE_DEVICES, None: inherit
    restart: RestartSpec

    @property
    def id(self) -> TaskId:
        return TaskId(self.job, self.index)

    @property
    def name(self) -> str:
        return str(self.id)


@dataclass
class Cluster:
    """A validated cluster file."""

    source: str                           # the file's path ("" when built from a dict)
    base_dir: str
    jobs: Dict[str, List[Task]]           # file order
    success: str
    restart: RestartSpec
    logdir: str                           # absolute
    grace: float
    base_port: int
    spec: ClusterFile = field(repr=False)
    count_jobs: Tuple[str, ...] = ()      # jobs given as a count in the file

    # ---- tasks
    @property
    def tasks(self) -> List[Task]:
        """All tasks, chief first, then ps, worker, evaluator, other jobs."""
        order = sorted(self.jobs, key=lambda j: (JOB_ORDER.get(j, 4), list(self.jobs).index(j)))
        return [t for j in order for t in self.jobs[j]]

    def task(self, task_id: Union[str, TaskId]) -> Task:
        tid = task_id if isinstance(task_id, TaskId) else TaskId.parse(task_id)
        if tid.job not in self.jobs:
            hint = _did_you_mean(tid.job, self.jobs)
            raise UserError(f"no job '{tid.job}' in the cluster (jobs: {', '.join(self.jobs)}){hint}")
        n = len(self.jobs[tid.job])
        if tid.index >= n:
            raise UserError(f"no task {tid}: job '{tid.job}' has {n} task{'s' if n != 1 else ''} "
                            f"({tid.job}:0{'' if n == 1 else f'..{tid.job}:{n - 1}'})")
        return self.jobs[tid.job][tid.index]

    @property
    def chief(self) -> TaskId:
        """TensorFlow's rule: the chief task, else worker:0."""
        if "chief" in self.jobs:
            return TaskId("chief", 0)
        return TaskId("worker", 0)

    @property
    def resolved(self) -> bool:
        return all(t.endpoint is not None for t in self.tasks)

    # ---- TensorFlow views
    def cluster_spec_dict(self) -> Dict[str, List[str]]:
        """The dict for ``tf.train.ClusterSpec`` (evaluator left out, TensorFlow's rule)."""
        self._need_endpoints()
        return {job: [str(t.endpoint) for t in tasks]
                for job, tasks in self.jobs.items() if job != "evaluator"}

    def cluster_spec(self):
        """A real ``tf.train.ClusterSpec`` (imports TensorFlow)."""
        import tensorflow as tf  # noqa: imported here so the CLI stays fast
        return tf.train.ClusterSpec(self.cluster_spec_dict())

    def tf_config(self, task_id: Union[str, TaskId]) -> Dict[str, Any]:
        task = self.task(task_id)
        return {"cluster": self.cluster_spec_dict(), "task": {"type": task.job, "index": task.index}}

    def tf_config_json(self, task_id: Union[str, TaskId]) -> str:
        return json.dumps(self.tf_config(task_id), separators=(",", ":"))

    def task_flag_args(self, task_id: Union[str, TaskId]) -> List[str]:
        """The seed's flags: --job_name --task_index and --<job>_hosts for every job."""
        task = self.task(task_id)
        flags = [f"--job_name={task.job}", f"--task_index={task.index}"]
        for job, eps in self.cluster_spec_dict().items():
            flags.append(f"--{job}_hosts={','.join(eps)}")
        return flags

    def argv(self, task_id: Union[str, TaskId], command: Optional[Sequence[str]] = None,
             task_flags: Optional[bool] = None) -> List[str]:
        """The argv that starts a task: its command and args (or ``command``), plus task flags."""
        task = self.task(task_id)
        argv = list(command) if command else list(task.command) + list(task.args)
        if not argv:
            raise UserError("program.command: no program to run; set it in the file or give one "
                            "after '--' (tfcluster launch FILE -- python my_trainer.py)")
        if task.task_flags if task_flags is None else task_flags:
            argv += self.task_flag_args(task.id)
        return argv

    def env(self, task_id: Union[str, TaskId]) -> Dict[str, str]:
        """Environment additions for a task: the job's env, CUDA_VISIBLE_DEVICES, TF_CONFIG."""
        task = self.task(task_id)
        env = dict(task.env)
        if task.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = task.gpus
        env["TF_CONFIG"] = self.tf_config_json(task.id)
        return env

    def with_endpoints(self, assign: Callable[[Task], Endpoint]) -> "Cluster":
        """A copy whose unassigned endpoints (count jobs) are given by ``assign``."""
        jobs = {job: [t if t.endpoint is not None else replace(t, endpoint=assign(t)) for t in tasks]
                for job, tasks in self.jobs.items()}
        resolved = replace(self, jobs=jobs)
        problems = _duplicate_endpoints(resolved)
        if problems:
            raise ConfigError(self.source, problems)
        return resolved

    def _need_endpoints(self) -> None:
        if not self.resolved:
            jobs = ", ".join(j for j in self.count_jobs)
            raise UserError(f"cluster.{jobs}: given as a count; its endpoints are assigned at launch "
                            f"(use tfcluster launch, or list host:port entries)")


# --------------------------------------------------------------------------------------
# Loading.

def load(path: str) -> Cluster:
    """Read, validate and resolve a cluster file. Raises ConfigError/UserError (exit 2)."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file")
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not a cluster file")
    except PermissionError:
        raise UserError(f"{path}: cannot be read (permission denied)")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not a text file ({e.reason} at byte {e.start})")
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror or e})")
    return loads(text, source=path, base_dir=os.path.dirname(os.path.abspath(path)))


def loads(text: str, source: str = "<string>", base_dir: Optional[str] = None) -> Cluster:
    import yaml  # local: pyyaml is light, but only this path needs it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(source, [f"not valid YAML: {where}{problem}"])
    except (ValueError, TypeError, RecursionError, OverflowError) as e:  # odd scalars
        raise ConfigError(source, [f"not valid YAML: {type(e).__name__}: {str(e)[:120]}"])
    if data is None:
        raise ConfigError(source, ["the file is empty; it needs at least a 'cluster:' mapping"])
    return from_dict(data, source=source, base_dir=base_dir)


def from_dict(data: Any, source: str = "", base_dir: Optional[str] = None) -> Cluster:
    """Validate a parsed file (a dict) into a Cluster."""
    base_dir = os.path.abspath(base_dir or os.getcwd())
    if not isinstance(data, dict):
        raise ConfigError(source, [f"the file must be a mapping with a 'cluster:' key, not {_kind(data)}"])
    problems: List[str] = []
    non_str = [k for k in data if not isinstance(k, str)]
    if non_str:
        raise ConfigError(source, [f"key {non_str[0]!r}: keys must be strings"])
    if "cluster" not in data:
        problems.append("cluster: required (job -> list of host:port), for example "
                        "cluster: {ps: [localhost:2222], worker: [localhost:2223]}")
    try:
        spec = ClusterFile.model_validate(data)
    except ValidationError as e:
        problems.extend(p for p in _pydantic_problems(e) if not p.startswith("cluster: required"))
        spec = None
    if "cluster" in data:
        problems.extend(_check_cluster(data["cluster"]))
        problems.extend(_check_jobs(data.get("jobs"), data["cluster"]))
    for where, value in _command_fields(data):
        problems.extend(_check_command(where, value))
    if problems:
        raise ConfigError(source, _unique(problems))
    assert spec is not None
    cluster, more = _resolve(spec, data["cluster"], source, base_dir)
    if more:
        raise ConfigError(source, more)
    return cluster


def _resolve(spec: ClusterFile, raw_cluster: Dict[str, Any], source: str,
             base_dir: str) -> Tuple[Cluster, List[str]]:
    problems: List[str] = []
    jobs: Dict[str, List[Task]] = {}
    count_jobs = []
    for job, entries in raw_cluster.items():
        if isinstance(entries, int):
            count_jobs.append(job)
            endpoints: List[Optional[Endpoint]] = [None] * entries
        else:
            endpoints = [Endpoint(*parse_endpoint(e)) for e in entries]
        override = spec.jobs.get(job, JobSpec())
        gpus = override.gpus
        command = override.command if override.command is not None else spec.program.command
        args = override.args if override.args is not None else spec.program.args
        env = {**spec.program.env, **override.env}
        cwd = override.cwd or spec.program.cwd
        cwd = os.path.normpath(os.path.join(base_dir, cwd)) if cwd else base_dir
        tasks = []
        for i, ep in enumerate(endpoints):
            if gpus is not None:
                task_gpus: Optional[str] = _gpu_str(gpus[i]) if i < len(gpus) else ""
            else:
                task_gpus = "" if job == "ps" else None
            tasks.append(Task(
                job=job, index=i, endpoint=ep,
                command=tuple(_resolve_command(command, base_dir)),
                args=tuple(args), env=tuple((k, _env_str(v)) for k, v in env.items()),
                task_flags=override.task_flags if override.task_flags is not None
                else spec.program.task_flags,
                cwd=cwd, gpus=task_gpus, restart=override.restart or spec.restart))
        jobs[job] = tasks
    logdir = os.path.normpath(os.path.join(base_dir, os.path.expanduser(spec.logdir)))
    cluster = Cluster(source=source, base_dir=base_dir, jobs=jobs, success=spec.success,
                      restart=spec.restart, logdir=logdir, grace=spec.grace,
                      base_port=spec.base_port, spec=spec, count_jobs=tuple(count_jobs))
    problems.extend(_duplicate_endpoints(cluster))
    return cluster, problems


def _duplicate_endpoints(cluster: Cluster) -> List[str]:
    """The same port twice on one host (TensorFlow binds 0.0.0.0:<port>, so host aliases clash too)."""
    seen: Dict[Tuple[str, int], str] = {}
    problems = []
    for job, tasks in cluster.jobs.items():
        for t in tasks:
            if t.endpoint is None:
                continue
            key = (_host_key(t.endpoint.host), t.endpoint.port)
            where = f"cluster.{job}[{t.index}]"
            if key in seen:
                problems.append(f"{where}: {t.endpoint} is already used by {seen[key]}")
            else:
                seen[key] = where
    return problems


def _host_key(host: str) -> str:
    h = host.lower()
    if h in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return "loopback"
    try:
        if ipaddress.ip_address(h).is_loopback:
            return "loopback"
    except ValueError:
        pass
    return h


# --------------------------------------------------------------------------------------
# Checks of the parts pydantic does not check.

def _check_cluster(raw: Any) -> List[str]:
    if not isinstance(raw, dict):
        return [f"cluster: must be a mapping of job -> list of host:port, not {_kind(raw)}"]
    if not raw:
        return ["cluster: no jobs; give at least a worker (or chief) job"]
    problems = []
    seen: Dict[Tuple[str, int], str] = {}
    for job, entries in raw.items():
        where = f"cluster.{job}"
        if not isinstance(job, str) or not JOB_NAME.match(job):
            problems.append(f"cluster: job name {job!r} is not valid in TensorFlow "
                            f"(a letter, then letters, digits or '_')")
            continue
        if isinstance(entries, bool) or entries is None:
            problems.append(f"{where}: empty job; give a list of host:port or a task count")
            continue
        if isinstance(entries, int):
            if entries < 1:
                problems.append(f"{where}: a task count must be at least 1, not {entries}")
            elif entries > 100000:
                problems.append(f"{where}: {entries} tasks is more than tfcluster supports (100000)")
            elif job in SINGLE_TASK_JOBS and entries > 1:
                problems.append(f"{where}: at most one {job} task ({entries} given)")
            continue
        if isinstance(entries, str):
            entries = [e.strip() for e in entries.split(",")] if "," in entries else [entries]
            problems.append(f"{where}: must be a list, for example {job}: [{', '.join(entries)}]")
            continue
        if not isinstance(entries, list):
            problems.append(f"{where}: must be a list of host:port or a task count, not {_kind(entries)}")
            continue
        if not entries:
            problems.append(f"{where}: empty job; give at least one host:port")
            continue
        if job in SINGLE_TASK_JOBS and len(entries) > 1:
            problems.append(f"{where}: at most one {job} task ({len(entries)} given)")
        for i, entry in enumerate(entries):
            try:
                host, port = parse_endpoint(entry)
            except ValueError as e:
                problems.append(f"{where}[{i}]: {e}")
                continue
            key = (_host_key(host), port)
            if key in seen:
                problems.append(f"{where}[{i}]: {format_endpoint(host, port)} is already used by {seen[key]}"
                                + ("" if _host_key(host) != "loopback" or seen[key] == "?" else
                                   " (the same port on this machine)"))
            else:
                seen[key] = f"{where}[{i}]"
    if not problems and "worker" not in raw and "chief" not in raw:
        problems.append(f"cluster: no worker and no chief job (jobs: {', '.join(map(str, raw))}); "
                        f"a run needs a worker or a chief")
    return problems


def _check_jobs(jobs: Any, raw_cluster: Any) -> List[str]:
    if not isinstance(jobs, dict) or not isinstance(raw_cluster, dict):
        return []
    problems = []
    for job, spec in jobs.items():
        if job not in raw_cluster:
            problems.append(f"jobs.{job}: no job '{job}' in cluster{_did_you_mean(job, raw_cluster)}")
            continue
        entries = raw_cluster[job]
        n = entries if isinstance(entries, int) and not isinstance(entries, bool) else (
            len(entries) if isinstance(entries, list) else None)
        gpus = spec.get("gpus") if isinstance(spec, dict) else None
        if n is not None and isinstance(gpus, list) and len(gpus) > n:
            problems.append(f"jobs.{job}.gpus: {len(gpus)} entries for {n} "
                            f"task{'s' if n != 1 else ''}; give one entry per task")
    return problems


def parse_endpoint(entry: Any) -> Tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port). Raises ValueError with a short reason."""
    if isinstance(entry, bool) or not isinstance(entry, (str, int)):
        raise ValueError(f"must be a 'host:port' string, not {_kind(entry)}")
    text = str(entry).strip()
    if isinstance(entry, int) or text.isdigit():
        raise ValueError(f"'{text}' has no host; write host:port, for example localhost:{text}")
    if not text:
        raise ValueError("empty endpoint; write host:port")
    if text.startswith("["):
        m = re.fullmatch(r"\[([^\]]*)\](?::(.*))?", text)
        if not m:
            raise ValueError(f"'{text}' is not host:port (IPv6 is written [addr]:port)")
        host, port_text = m.group(1), m.group(2)
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise ValueError(f"'{host}' in '{text}' is not an IPv6 address")
    else:
        if text.count(":") > 1:
            raise ValueError(f"'{text}': write an IPv6 address in brackets, for example [::1]:2222")
        host, _, port_text = text.partition(":")
        if ":" not in text:
            port_text = None
        if not host:
            raise ValueError(f"'{text}' has no host; write host:port")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", host) or len(host) > 253:
            raise ValueError(f"'{host}' is not a valid host name or address")
    if port_text is None or port_text == "":
        raise ValueError(f"'{text}' has no port; write host:port, for example {text}:2222")
    if not re.fullmatch(r"\d+", port_text):
        raise ValueError(f"port '{port_text}' is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 1-65535")
    return host, port


def _command_fields(data: Dict[str, Any]):
    program = data.get("program")
    if isinstance(program, dict) and "command" in program:
        yield "program.command", program["command"]
    jobs = data.get("jobs")
    if isinstance(jobs, dict):
        for job, spec in jobs.items():
            if isinstance(spec, dict) and "command" in spec:
                yield f"jobs.{job}.command", spec["command"]


def _check_command(where: str, value: Any) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as e:
            return [f"{where}: cannot be split into words ({e})"]
        return [] if words else [f"{where}: empty command"]
    if isinstance(value, list):
        if not value:
            return [f"{where}: empty command"]
        for i, w in enumerate(value):
            if not isinstance(w, str):
                return [f"{where}[{i}]: must be a string, not {_kind(w)}"]
        return []
    return [f"{where}: must be a list of words or a string, not {_kind(value)}"]


def _resolve_command(command: Union[str, List[str], None], base_dir: str) -> List[str]:
    """Words of the command; relative paths that exist beside the file become absolute."""
    if command is None:
        return []
    words = shlex.split(command) if isinstance(command, str) else list(command)
    out = []
    for w in words:
        if w and not w.startswith("-") and not os.path.isabs(w) and ("/" in w or "." in w):
            candidate = os.path.join(base_dir, w)
            if os.path.exists(candidate):
                w = os.path.normpath(candidate)
        out.append(w)
    return out


# --------------------------------------------------------------------------------------
# Pydantic errors -> one line each, naming the field.

def _keys_for(loc: Tuple[Any, ...]) -> Sequence[str]:
    """Allowed keys at the mapping that holds loc[-1]."""
    parent = loc[:-1]
    model: Any = ClusterFile
    i = 0
    while i < len(parent):
        part = parent[i]
        if model is ClusterFile and part == "program":
            model = ProgramSpec
        elif model is ClusterFile and part == "jobs":
            model = JobSpec
            i += 1  # skip the job name
        elif part == "restart":
            model = RestartSpec
        elif model is ClusterFile and part == "remote":
            model = RemoteSpec
        elif model is ClusterFile and part == "hosts":
            model = RemoteSpec
            i += 1  # skip the host name
        elif model is ClusterFile and part == "watchdog":
            model = WatchdogSpec
        elif model is ClusterFile and part == "slurm":
            model = SlurmSpec
        else:
            return ()
        i += 1
    return list(model.model_fields)


def _pydantic_problems(e: ValidationError) -> List[str]:
    problems = []
    for err in e.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        where = _loc_str(loc)
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            key = loc[-1] if loc else "?"
            keys = _keys_for(loc)
            parent = _loc_str(loc[:-1])
            hint = _did_you_mean(str(key), keys)
            problems.append(f"{where}: unknown key{' in ' + parent if parent else ''}{hint}"
                            + ("" if hint else f" (known: {', '.join(keys)})" if keys else ""))
        elif kind == "missing":
            problems.append(f"{where}: required")
        elif kind == "literal_error":
            expected = err.get("ctx", {}).get("expected", "")
            problems.append(f"{where}: {_short(err.get('input'))} is not one of {expected}")
        else:
            msg = str(err.get("msg", "invalid")).replace("Value error, ", "")
            msg = msg[0].lower() + msg[1:] if msg else msg
            problems.append(f"{where}: {msg} (got {_short(err.get('input'))})")
    return problems


def _loc_str(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else f"'{value}'"
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _unique(items: List[str]) -> List[str]:
    seen, out = set(), []
    for i in items:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def _gpu_str(entry: Union[int, str]) -> str:
    return str(entry).strip()


def _env_str(value: EnvValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
