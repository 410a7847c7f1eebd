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
import functools
import ipaddress
import os
import re
import reprlib
import shlex
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from tfcluster.clusterfile import clusterspec, quick, vocabulary
from tfcluster.errors import ConfigError, UserError
from tfcluster.clusterfile.vocabulary import KNOWN_JOBS, SINGLE_TASK_JOBS

if TYPE_CHECKING:
    from tfcluster.clusterfile.models import ClusterFile, RestartSpec

VERSION = 1
# TensorFlow's rule for job names (tensorflow/core/util/device_name_utils.cc: IsJobName):
# a letter, then letters, digits or underscores.
# \Z, not $: "$" would also match before a trailing newline.
JOB_NAME = re.compile(r"\A[A-Za-z][A-Za-z0-9_]*\Z")
# A job name becomes part of file names (worker-1.log), Slurm and Kubernetes names (63 there).
MAX_JOB_NAME = 40
# A GPU entry of CUDA_VISIBLE_DEVICES: an index, a list of them, a UUID (GPU-..., MIG-...).
GPU_ENTRY = re.compile(r"\A[A-Za-z0-9_.:/-]+(,[A-Za-z0-9_.:/-]+)*\Z")
# Job names with a meaning in TensorFlow's TF_CONFIG (vocabulary.KNOWN_JOBS); other names are
# allowed (the seed's "local"). The vocabulary (jobs, policies, success rules) is vocabulary.py's.
# A YAML file's aliases may not expand to more values than this ("billion laughs").
MAX_EXPANDED_VALUES = 100_000
# ... nor to more text than this (a long string referenced many times): no program can take
# more in its arguments and environment (Linux: ARG_MAX is 2 MiB).
MAX_EXPANDED_CHARS = 4_000_000
# Near-misses of TensorFlow's job names: TFJob's replica types, plurals, the seed's flag names.
JOB_SPELLINGS = {"master": "chief", "workers": "worker", "chiefs": "chief", "evaluators": "evaluator",
                 "parameter_server": "ps", "parameter_servers": "ps", "ps_hosts": "ps",
                 "worker_hosts": "worker", "chief_hosts": "chief", "evaluator_hosts": "evaluator"}
# Top-level keys of a Kubernetes TFJob manifest.
TFJOB_KEYS = ("apiVersion", "kind", "metadata", "spec", "tfReplicaSpecs")


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
            raise UserError(f"{_short(text)} is not a task; write JOB:INDEX, for example worker:1")
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
    restart: Union[RestartSpec, quick.Section]   # the model, or the quick reader's section

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
    restart: Union[RestartSpec, quick.Section]   # the model, or the quick reader's section
    logdir: str                           # absolute
    grace: float
    base_port: int
    spec: Union[ClusterFile, quick.QuickSpec] = field(repr=False)   # the file's values
    count_jobs: Tuple[str, ...] = ()      # jobs given as a count in the file
    warnings: Tuple[str, ...] = ()        # legal but probably not meant (a job named 'PS')

    @functools.cached_property
    def secret_names(self) -> frozenset:
        """Variables declared secret in the file (``secrets:``), and those whose value holds a
        secret variable's value (:func:`tfcluster.clusterfile.secrets.holders`)."""
        from tfcluster.clusterfile import secrets
        declared = frozenset(self.spec.secrets)
        envs = {t.env for t in self.tasks}
        return declared | frozenset(secrets.holders((dict(e) for e in envs), declared))

    # ---- tasks
    @property
    def tasks(self) -> List[Task]:
        """All tasks, chief first, then ps, worker, evaluator, other jobs."""
        order = vocabulary.sort_jobs(self.jobs)
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
        """TensorFlow's rule: the chief task, else worker:0; else task 0 of the first job other
        than ps and evaluator (:func:`tfcluster.clusterfile.clusterspec.chief_task`)."""
        return TaskId.parse(clusterspec.chief_task(self.jobs))

    @property
    def resolved(self) -> bool:
        return all(t.endpoint is not None for t in self.tasks)

    # ---- TensorFlow views
    def cluster_spec_dict(self) -> Dict[str, List[str]]:
        """The dict for ``tf.train.ClusterSpec`` (evaluator left out, TensorFlow's rule)."""
        self._need_endpoints()
        return clusterspec.cluster_dict({job: [str(t.endpoint) for t in tasks]
                                      for job, tasks in self.jobs.items()})

    def cluster_spec(self):
        """A real ``tf.train.ClusterSpec`` (imports TensorFlow)."""
        import tensorflow as tf  # noqa: imported here so the CLI stays fast
        return tf.train.ClusterSpec(clusterspec.tf_cluster(self.cluster_spec_dict(), "worker"))

    def tf_config(self, task_id: Union[str, TaskId]) -> Dict[str, Any]:
        """The TF_CONFIG dict of a task (:func:`tfcluster.clusterfile.clusterspec.tf_config`)."""
        task = self.task(task_id)
        return clusterspec.tf_config(self.cluster_spec_dict(), task.job, task.index)

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

#: the most tasks a job may have (a count, or ``launch --workers N``)
MAX_JOB_TASKS = 100000
#: bytes: a cluster file larger than this is refused unread (100,000 listed tasks take ~2.5 MiB)
CLUSTER_FILE_LIMIT = 4 << 20


def load(path: str) -> Cluster:
    """Read, validate and resolve a cluster file. Raises ConfigError/UserError (exit 2).

    Read as run files are (:func:`tfcluster.safe_files.read_bytes`): a regular file only (a FIFO or
    ``/dev/zero`` is refused at once, never waited on or read without end), at most
    :data:`CLUSTER_FILE_LIMIT` bytes; a link the user made to a file is followed."""
    from tfcluster.safe_files import read_bytes
    data = read_bytes(path, CLUSTER_FILE_LIMIT, follow=True, what="a cluster file is a plain file")
    if data is None:
        raise UserError(f"{printable(path)}: no such file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{printable(path)}: not a text file ({e.reason} at byte {e.start})")
    return loads(text, source=path, base_dir=os.path.dirname(os.path.abspath(path)))


def loads(text: str, source: str = "<string>", base_dir: Optional[str] = None) -> Cluster:
    import yaml  # local: pyyaml is light, but only this path needs it

    shown = printable(source)
    try:
        data, lines, duplicates = _parse_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if mark is not None and _tab_indented(text, mark.line):
            problem += "; this line is indented with a tab: use spaces, not tabs, to indent YAML"
        raise ConfigError(shown, [printable(f"not valid YAML: {where}{problem}")])
    except (ValueError, TypeError, RecursionError, OverflowError) as e:  # odd scalars
        raise ConfigError(shown, [printable(f"not valid YAML: {type(e).__name__}: {str(e)[:120]}")])
    if duplicates:
        raise ConfigError(shown, [printable(f"not valid YAML: {d}") for d in duplicates])
    if data is None:
        raise ConfigError(shown, ["the file is empty; it needs at least a 'cluster:' mapping"])
    return from_dict(data, source=source, base_dir=base_dir, _lines=lines)


def _tab_indented(text: str, line: int) -> bool:
    """Whether line ``line`` (0-based) of ``text``, or the line before it, starts with
    whitespace that holds a tab (YAML forbids tabs in indentation)."""
    lines = text.split("\n", line + 1)[:line + 1]
    for candidate in lines[-2:]:
        indent = candidate[:len(candidate) - len(candidate.lstrip(" \t"))]
        if "\t" in indent:
            return True
    return False


def _parse_yaml(text: str) -> Tuple[Any, Dict[str, int], List[str]]:
    """``yaml.safe_load`` that also refuses aliases that expand beyond
    :data:`MAX_EXPANDED_VALUES` values or :data:`MAX_EXPANDED_CHARS` characters; returns the data,
    the line of each field (``cluster.worker[1]`` -> 3) and one message per duplicate key (all
    of them, not only the first; the data is then None)."""
    loader = _loader_class()(text)
    try:
        node = loader.get_single_node()
        if loader.duplicates:
            return None, {}, [m for _, _, m in sorted(loader.duplicates)]
        if node is None:
            return None, {}, []
        lines: Dict[str, int] = {}
        _node_lines(node, (), lines)
        return loader.construct_document(node), lines, []
    finally:
        loader.dispose()


_LOADER = None


def _loader_class():
    """yaml.SafeLoader (same tags, same values) with two refusals, built once on first use."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    class Refused(yaml.MarkedYAMLError):
        pass

    class Loader(yaml.SafeLoader):
        def __init__(self, stream):
            super().__init__(stream)
            self.duplicates: List[Tuple[int, int, str]] = []

        def compose_mapping_node(self, anchor):
            node = super().compose_mapping_node(anchor)
            seen: Dict[Any, Any] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                try:
                    key = self.yaml_constructors[key_node.tag](self, key_node)
                    hash(key)
                except Exception:  # odd key: construction reports it
                    key = (key_node.tag, key_node.value)
                if key in seen:
                    first, here = seen[key], key_node.start_mark
                    if len(self.duplicates) < 100:
                        self.duplicates.append((here.line, here.column,
                            f"line {here.line + 1}, column {here.column + 1}: duplicate key "
                            f"{_short(key)} (first on line {first.line + 1}); YAML keeps only the "
                            f"last, so write it once"))
                    continue
                seen[key] = key_node.start_mark
            return node

        def compose_document(self):
            node = super().compose_document()
            # Per node: (values, characters) once expanded; each node is measured once, so the
            # cost follows the file, not what its aliases expand to.
            sizes: Dict[int, Tuple[int, int]] = {}
            physical = [0, 0]

            def size(n, path) -> Tuple[int, int]:
                if id(n) in sizes:
                    return sizes[id(n)]
                if id(n) in path:
                    raise Refused(None, None, "an alias refers to a value that contains it "
                                  "(a recursive structure)", n.start_mark)
                physical[0] += 1
                total, chars = 1, 0
                if isinstance(n, (SequenceNode, MappingNode)):
                    path.add(id(n))
                    children = n.value if isinstance(n, SequenceNode) else \
                        [c for pair in n.value for c in pair]
                    for c in children:
                        values, text = size(c, path)
                        total += values
                        chars += text
                        if total > MAX_EXPANDED_VALUES and total > physical[0]:
                            raise Refused(None, None, f"aliases expand to more than "
                                          f"{MAX_EXPANDED_VALUES} values", c.start_mark)
                        if chars > MAX_EXPANDED_CHARS and chars > physical[1]:
                            raise Refused(None, None, f"aliases expand to more than "
                                          f"{MAX_EXPANDED_CHARS} characters of text (a long "
                                          f"value referenced many times)", c.start_mark)
                    path.discard(id(n))
                else:
                    chars = len(n.value)
                    physical[1] += chars
                sizes[id(n)] = (total, chars)
                return total, chars

            if node is not None:
                size(node, set())
            return node

    _LOADER = Loader
    return Loader


def _node_lines(node: Any, loc: Tuple[Any, ...], lines: Dict[str, int], depth: int = 0) -> None:
    """Line numbers of fields, a few levels deep (the levels error messages name)."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode
    if depth > 4 or len(lines) > 5000:
        return
    if isinstance(node, MappingNode):
        for k, v in node.value:
            if isinstance(k, ScalarNode):
                sub = loc + (k.value,)
                lines.setdefault(_loc_str(sub), k.start_mark.line + 1)
                _node_lines(v, sub, lines, depth + 1)
    elif isinstance(node, SequenceNode):
        for i, v in enumerate(node.value[:1000]):
            sub = loc + (i,)
            lines.setdefault(_loc_str(sub), v.start_mark.line + 1)
            _node_lines(v, sub, lines, depth + 1)


def from_dict(data: Any, source: str = "", base_dir: Optional[str] = None,
              _lines: Optional[Dict[str, int]] = None) -> Cluster:
    """Validate a parsed file (a dict) into a Cluster."""
    base_dir = os.path.abspath(base_dir or os.getcwd())
    shown = printable(source)

    def fail(problems: List[str]):
        return ConfigError(shown, [printable(_with_line(p, _lines or {})) for p in _unique(problems)])

    if not isinstance(data, dict):
        raise fail([f"the file must be a mapping with a 'cluster:' key, not {_kind(data)}"])
    problems: List[str] = []
    non_str = [k for k in data if not isinstance(k, str)]
    if non_str:
        raise fail([f"key {_short(non_str[0])}: keys must be strings"])
    data = _with_data_service(data, problems)
    bad_text = _check_strings(data)
    if bad_text:  # NUL or lone surrogates: nothing else is worth checking, and printing may fail
        raise fail(bad_text)
    if "cluster" not in data:
        problems.append("cluster: required (job -> list of host:port), for example "
                        "cluster: {ps: [localhost:2222], worker: [localhost:2223]}")
    spec: Any = None if problems else quick.read(data)
    if spec is None:     # outside the quick subset, or something is wrong: the models say what
        from pydantic import ValidationError

        from tfcluster.clusterfile import kubernetes as k8s_options
        from tfcluster.clusterfile.models import ClusterFile
        try:
            spec = ClusterFile.model_validate(data)
        except ValidationError as e:
            problems.extend(p for p in _pydantic_problems(e) if not p.startswith("cluster: required"))
            spec = None
        if spec is not None and isinstance(data.get("cluster"), dict):
            problems.extend(k8s_options.check(spec.kubernetes, {
                job: (spec.jobs[job].kubernetes if job in spec.jobs else None)
                for job in data["cluster"] if isinstance(job, str)}))
    warnings: List[str] = []
    if "cluster" in data:
        problems.extend(_check_cluster(data["cluster"], warnings))
        problems.extend(_check_jobs(data.get("jobs"), data["cluster"]))
        problems.extend(_check_hosts(data.get("hosts"), data["cluster"]))
    for where, value in _command_fields(data):
        problems.extend(_check_command(where, value))
    problems.extend(_check_names(data))
    if problems:
        raise fail(problems)
    assert spec is not None
    cluster, more = _resolve(spec, data["cluster"], source, base_dir)
    if more:
        raise fail(more)
    if warnings:
        cluster = replace(cluster, warnings=tuple(printable(_with_line(w, _lines or {}))
                                                  for w in warnings))
    return cluster


def _with_line(problem: str, lines: Dict[str, int]) -> str:
    """``cluster.worker[1]: ...`` -> ``cluster.worker[1]: ... (line 4)`` when the line is known."""
    where = problem.split(": ", 1)[0]
    while where:
        if where in lines:
            return f"{problem} (line {lines[where]})"
        cut = max(where.rfind("."), where.rfind("["))
        where = where[:cut] if cut > 0 else ""
    return problem


def _no_override() -> Any:
    """A job without a ``jobs.<job>:`` entry: every key at the model's default."""
    return quick.Section("JobSpec", quick.defaults("JobSpec"))


def _resolve(spec: Any, raw_cluster: Dict[str, Any], source: str,
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
        override = spec.jobs.get(job) or _no_override()
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
                task_gpus = "" if job in vocabulary.SERVICE_JOBS else None
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


DATA_SERVICE_PROGRAM = ["python", "-I", "-m", "tfcluster.runtime.data_service"]


def _with_data_service(data: Dict[str, Any], problems: List[str]) -> Dict[str, Any]:
    """The file with its ``data_service:`` as two jobs, ``tfdata_dispatcher`` (1 task) and
    ``tfdata_worker``, running tfcluster's built-in program, restarted on failure unless
    ``jobs.<job>`` says otherwise. Their shape is checked by the model afterwards."""
    ds, cluster = data.get("data_service"), data.get("cluster")
    if not isinstance(ds, dict) or not isinstance(cluster, dict):
        return data
    taken = [j for j in vocabulary.DATA_SERVICE_JOBS if j in cluster]
    if taken:
        problems.append(f"cluster.{taken[0]}: this job name belongs to data_service:; rename the job")
        return data
    dispatcher, workers = ds.get("dispatcher", 1), ds.get("workers", 1)
    cluster = {**cluster, vocabulary.DATA_DISPATCHER: [dispatcher] if isinstance(dispatcher, str) else dispatcher,
               vocabulary.DATA_WORKER: workers}
    jobs = dict(data.get("jobs") or {}) if isinstance(data.get("jobs") or {}, dict) else data.get("jobs")
    if isinstance(jobs, dict):
        for job, role in ((vocabulary.DATA_DISPATCHER, "dispatcher"), (vocabulary.DATA_WORKER, "worker")):
            spec = jobs.get(job) or {}
            if not isinstance(spec, dict):
                continue
            argv = DATA_SERVICE_PROGRAM + [role]
            if role == "dispatcher" and isinstance(ds.get("work_dir"), str):
                argv += ["--work_dir", ds["work_dir"]]
            restart = spec.get("restart")
            jobs[job] = {"command": argv, "args": [], "task_flags": False, **spec,
                         "restart": {"policy": "on-failure", **restart} if isinstance(restart, dict)
                         else restart if "restart" in spec else {"policy": "on-failure"}}
    return {**data, "cluster": cluster, "jobs": jobs}


def _duplicate_endpoints(cluster: Cluster) -> List[str]:
    """The same port twice on one host (TensorFlow binds 0.0.0.0:<port>, so host aliases clash too)."""
    from tfcluster.net.addresses import endpoint_key
    seen: Dict[Tuple[str, int], str] = {}
    problems = []
    for job, tasks in cluster.jobs.items():
        for t in tasks:
            if t.endpoint is None:
                continue
            key = endpoint_key(t.endpoint.host, t.endpoint.port)
            where = f"cluster.{job}[{t.index}]"
            if key in seen:
                problems.append(f"{where}: {t.endpoint} is already used by {seen[key]}"
                                + (" (the same port on this machine)" if key[0] == "<local>" else ""))
            else:
                seen[key] = where
    return problems


def is_loopback(host: str) -> bool:
    """True for names that mean "this machine" wherever they are read (tfcluster.net.addresses.is_loopback:
    ``localhost``, 127.0.0.0/8 in any spelling, ``::1``, ``0.0.0.0``, ``::``)."""
    from tfcluster.net.addresses import is_loopback as loopback
    return loopback(host)


# --------------------------------------------------------------------------------------
# Checks of the parts pydantic does not check.

def _job_hint(job: str) -> Optional[str]:
    """The TensorFlow job a name probably means ('Worker', 'workers', 'PS', 'ps_hosts'), or None."""
    if job in KNOWN_JOBS:
        return None
    low = job.lower()
    guess = JOB_SPELLINGS.get(low, low)
    if guess in KNOWN_JOBS:
        return guess
    close = difflib.get_close_matches(low, KNOWN_JOBS, n=1, cutoff=0.8)
    return close[0] if close else None


def _check_cluster(raw: Any, warnings: Optional[List[str]] = None) -> List[str]:
    from tfcluster.net.addresses import endpoint_key
    if not isinstance(raw, dict):
        return [f"cluster: must be a mapping of job -> list of host:port, not {_kind(raw)}"]
    if not raw:
        return ["cluster: no jobs; give at least a worker (or chief) job"]
    problems = []
    seen: Dict[Tuple[str, int], str] = {}
    loopback: Optional[Tuple[str, str]] = None     # (where, endpoint) of the first loopback entry
    remote: Optional[Tuple[str, str]] = None       # the same for the first other machine
    hints: Dict[str, str] = {}
    for job, entries in raw.items():
        where = f"cluster.{job}"
        if not isinstance(job, str) or not JOB_NAME.match(job):
            problems.append(f"cluster: job name {_short(job)} is not valid in TensorFlow "
                            f"(a letter, then letters, digits or '_')")
            continue
        if len(job) > MAX_JOB_NAME:   # it names log files, Slurm and Kubernetes objects
            problems.append(f"cluster: job name {_short(job)} is {len(job)} characters long; "
                            f"at most {MAX_JOB_NAME}")
            continue
        hint = _job_hint(job)
        if hint and hint not in raw:
            hints[job] = hint
        if isinstance(entries, bool) or entries is None:
            problems.append(f"{where}: empty job; give a list of host:port or a task count")
            continue
        if isinstance(entries, int):
            if entries < 1:
                problems.append(f"{where}: a task count must be at least 1, not {entries}")
            elif entries > MAX_JOB_TASKS:
                problems.append(f"{where}: {entries} tasks is more than tfcluster supports "
                                f"({MAX_JOB_TASKS})")
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
            key = endpoint_key(host, port)
            if key in seen:
                problems.append(f"{where}[{i}]: {format_endpoint(host, port)} is already used by {seen[key]}"
                                + (" (the same port on this machine)" if key[0] == "<local>" else ""))
            else:
                seen[key] = f"{where}[{i}]"
            if loopback is None and is_loopback(host):
                loopback = (f"{where}[{i}]", format_endpoint(host, port))
            elif remote is None and key[0] != "<local>":
                remote = (f"{where}[{i}]", format_endpoint(host, port))
    if loopback and remote:
        problems.append(f"{loopback[0]}: {loopback[1]} is this machine's loopback address, but "
                        f"{remote[0]} ({remote[1]}) is another machine: its tasks would dial their "
                        f"own loopback and hang; write this machine's name or address instead")
    others = [j for j in raw if j not in KNOWN_JOBS and j not in hints]
    if not problems and "worker" not in raw and "chief" not in raw and not others:
        problems.append(f"cluster: no worker and no chief job (jobs: {', '.join(map(str, raw))}); "
                        f"a run needs a worker or a chief")
        for job, hint in hints.items():
            problems.append(f"cluster.{job}: did you mean '{hint}'? (TensorFlow's job names are "
                            f"lowercase: {', '.join(KNOWN_JOBS)})")
    elif warnings is not None:
        for job, hint in hints.items():
            warnings.append(f"cluster.{job}: a job named '{job}' is an ordinary job to TensorFlow and "
                            f"tfcluster, not '{hint}' (job names are case-sensitive); rename it if "
                            f"you meant '{hint}'")
    return problems


def _check_hosts(hosts: Any, raw_cluster: Any) -> List[str]:
    """``hosts.<name>`` must name a host of ``cluster:`` (as ``jobs.<job>`` must name a job)."""
    if not isinstance(hosts, dict) or not isinstance(raw_cluster, dict):
        return []
    names = []
    for entries in raw_cluster.values():
        for entry in entries if isinstance(entries, list) else []:
            try:
                host = parse_endpoint(entry)[0]
            except ValueError:
                continue
            if host not in names:
                names.append(host)
    problems = []
    for host in hosts:
        if host not in names:
            known = f"hosts in cluster: {', '.join(names[:10])}" if names else "cluster: has no host:port entries"
            problems.append(f"hosts.{host}: no host '{host}' in cluster ({known}){_did_you_mean(host, names)}")
    return problems


# Names that end in a shell line, an ssh argv or a script: no control characters, no leading '-'.
_NAME_FIELDS = ("ssh_host", "user")
_PATH_FIELDS = ("identity_file", "workdir")


def _check_names(data: Dict[str, Any]) -> List[str]:
    problems: List[str] = []
    logdir = data.get("logdir")
    if isinstance(logdir, str):
        problems.extend(_check_path("logdir", logdir))
    program = data.get("program")
    if isinstance(program, dict):
        problems.extend(_check_env("program.env", program.get("env")))
        if isinstance(program.get("cwd"), str):
            problems.extend(_check_path("program.cwd", program["cwd"]))
    jobs = data.get("jobs")
    for job, spec in (jobs.items() if isinstance(jobs, dict) else ()):
        if isinstance(spec, dict):
            problems.extend(_check_env(f"jobs.{job}.env", spec.get("env")))
            if isinstance(spec.get("cwd"), str):
                problems.extend(_check_path(f"jobs.{job}.cwd", spec["cwd"]))
    secrets = data.get("secrets")
    if isinstance(secrets, list):
        for i, name in enumerate(secrets):
            if isinstance(name, str):
                problems.extend(_check_env_name(f"secrets[{i}]", name))
    remotes = [("remote", data.get("remote"))]
    hosts = data.get("hosts")
    remotes += [(f"hosts.{h}", v) for h, v in (hosts.items() if isinstance(hosts, dict) else ())]
    for where, spec in remotes:
        if not isinstance(spec, dict):
            continue
        for key in _NAME_FIELDS:
            value = spec.get(key)
            if isinstance(value, str):
                if not value.strip() or value.startswith("-") or _has_control(value) or " " in value:
                    problems.append(f"{where}.{key}: {_short(value)} is not a host or user name "
                                    f"(no spaces or control characters, not starting with '-')")
        for key in _PATH_FIELDS:
            if isinstance(spec.get(key), str):
                problems.extend(_check_path(f"{where}.{key}", spec[key]))
        options = spec.get("ssh_options")
        for i, opt in enumerate(options if isinstance(options, list) else []):
            if isinstance(opt, str) and (_has_control(opt) or opt.startswith("-")):
                problems.append(f"{where}.ssh_options[{i}]: {_short(opt)} is not an ssh -o option "
                                f"(Key=value, no control characters)")
        python = spec.get("python")
        if isinstance(python, str):
            try:
                words = shlex.split(python)
            except ValueError as e:
                problems.append(f"{where}.python: cannot be split into words ({e})")
            else:
                if not words:
                    problems.append(f"{where}.python: empty; give the remote interpreter, e.g. python3")
                elif _has_control(python):
                    problems.append(f"{where}.python: contains a control character")
    return problems


def _check_path(where: str, value: str) -> List[str]:
    if not value.strip():
        return [f"{where}: empty path"]
    if _has_control(value):
        return [f"{where}: {_short(value)} contains a control character (a newline?); "
                f"paths reach shell lines and scripts"]
    return []


def _check_env(where: str, env: Any) -> List[str]:
    if not isinstance(env, dict):
        return []
    problems = []
    for key in env:
        if isinstance(key, str):
            problems.extend(_check_env_name(f"{where}.{key}", key))
    return problems


def _check_env_name(where: str, name: str) -> List[str]:
    if not name:
        return [f"{where}: empty variable name"]
    if "=" in name:
        return [f"{where}: a variable name cannot contain '=' ({_short(name)})"]
    if _has_control(name) or name != name.strip():
        return [f"{where}: {_short(name)} is not a variable name (control characters or spaces)"]
    if name.startswith("-"):
        return [f"{where}: {_short(name)} is not a variable name (it starts with '-')"]
    return []


def _check_strings(data: Any, limit: int = 10) -> List[str]:
    """NUL bytes and lone surrogates anywhere (keys and values): no program can receive them."""
    problems: List[str] = []
    stack: List[Tuple[Tuple[Any, ...], Any]] = [((), data)]
    visited = 0
    # YAML aliases give the same object many times (a 100 KB string referenced 1,000 times):
    # each distinct object is checked once, so the cost follows the file, not its expansion.
    checked: Dict[int, str] = {}
    keep: List[Any] = []   # holds the checked objects, so that their ids stay theirs

    def bad(text: str) -> str:
        why = checked.get(id(text))
        if why is None:
            why = checked[id(text)] = _bad_text(text)
            keep.append(text)
        return why

    expanded: set = set()
    while stack and len(problems) < limit and visited < 2 * MAX_EXPANDED_VALUES:
        loc, value = stack.pop()
        visited += 1
        if isinstance(value, (dict, list)):
            if id(value) in expanded:   # an aliased mapping or list: its contents were seen
                continue
            expanded.add(id(value))
            keep.append(value)
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str):
                    why = bad(k)
                    if why:
                        problems.append(f"{_loc_str(loc + (printable(k),))}: the key {why}")
                        continue
                stack.append((loc + (k,), v))
        elif isinstance(value, list):
            stack.extend((loc + (i,), v) for i, v in enumerate(value))
        elif isinstance(value, str):
            why = bad(value)
            if why:
                problems.append(f"{_loc_str(loc) or 'the file'}: {why}")
    return sorted(problems)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _bad_text(text: str) -> str:
    if "\0" in text:
        return "contains a NUL byte, which no program argument, path or variable can hold"
    m = _SURROGATE.search(text)
    if m:
        return f"contains U+{ord(m.group(0)):04X}, a lone surrogate (not a character)"
    return ""


from tfcluster.terminal import has_control as _has_control, printable  # noqa: E402  (the one sanitiser)


def check_text(where: str, value: Optional[str]) -> Optional[str]:
    """For values that end in a shell line, a script or a manifest (Slurm's --job-name,
    --partition, --time, a run id): raise UserError naming ``where`` when ``value`` holds a
    control character (a newline would start a new command). Returns ``value``."""
    if value is not None and _has_control(str(value)):
        raise UserError(f"{where}: {_short(value)} contains a control character (a newline?); "
                        f"it would end up on a line of its own in the script")
    return value


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
        for i, entry in enumerate(gpus if isinstance(gpus, list) else []):
            if isinstance(entry, str) and entry.strip() and not GPU_ENTRY.match(entry.strip()):
                problems.append(f"jobs.{job}.gpus[{i}]: {_short(entry)} is not a GPU id (an index "
                                f"like 0 or '0,1', or a GPU-/MIG- UUID; no spaces or control "
                                f"characters)")
        if n is not None and isinstance(gpus, list) and len(gpus) > n:
            problems.append(f"jobs.{job}.gpus: {len(gpus)} entries for {n} "
                            f"task{'s' if n != 1 else ''}; give one entry per task")
    return problems


MAX_ENDPOINT_LENGTH = 300


def parse_endpoint(entry: Any) -> Tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port). Raises ValueError with a short reason."""
    if isinstance(entry, bool) or not isinstance(entry, (str, int)):
        raise ValueError(f"must be a 'host:port' string, not {_kind(entry)}")
    text = str(entry).strip()
    if len(text) > MAX_ENDPOINT_LENGTH:   # a DNS name is at most 253 characters, a port 5
        raise ValueError(f"{_short(text)} is too long for host:port ({len(text)} characters)")
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
        long_label = next((p for p in host.split(".") if len(p) > 63), None)
        if long_label is not None:
            raise ValueError(f"'{_short(host)}' is not a valid host name: a DNS label (the part "
                             f"between dots) is at most 63 characters, not {len(long_label)}")
        if host.startswith(("-", ".")):
            raise ValueError(f"'{host}' is not a valid host name (it starts with '{host[0]}'; "
                             f"ssh would read a leading '-' as an option)")
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
    from tfcluster.clusterfile import kubernetes as k8s_options
    from tfcluster.clusterfile.kubernetes import KubernetesSpec, PodSettings
    from tfcluster.clusterfile.models import (ClusterFile, JobSpec, ProgramSpec, RemoteSpec, RestartSpec,
                                       WatchdogSpec)
    from tfcluster.clusterfile.ray import RaySpec
    from tfcluster.clusterfile.slurm import SlurmSpec
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
        elif model is ClusterFile and part == "ray":
            model = RaySpec
        elif part == "kubernetes":   # its own nested models: tfcluster.clusterfile.kubernetes
            return k8s_options.keys_for(KubernetesSpec if model is ClusterFile else PodSettings,
                                        parent[i + 1:])
        else:
            return ()
        i += 1
    return list(model.model_fields)


def _pydantic_problems(e: Any) -> List[str]:
    problems = []
    for err in e.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        where = _loc_str(loc)
        kind = err.get("type", "")
        if kind == "extra_forbidden" and len(loc) == 1 and loc[0] in TFJOB_KEYS:
            problems.append(f"{where}: unknown key; this looks like a Kubernetes TFJob, not a cluster "
                            f"file (docs/CLUSTER_YAML.md); 'tfcluster render k8s' writes a TFJob from one")
        elif kind == "extra_forbidden" and len(loc) == 1 and (
                loc[0] in KNOWN_JOBS or _job_hint(str(loc[0]))):
            job = loc[0] if loc[0] in KNOWN_JOBS else _job_hint(str(loc[0]))
            problems.append(f"{where}: unknown key; jobs go under cluster:, for example "
                            f"cluster: {{{job}: [host:port, ...]}}")
        elif kind == "extra_forbidden":
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


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 40
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 4
_REPR.maxlevel = 2


def _short(value: Any) -> str:
    """A short, one-line picture of a value; its cost does not grow with the value."""
    if isinstance(value, str):
        text = f"'{printable(value[:60])}'"
    else:
        text = printable(_REPR.repr(value))
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


def _env_str(value: Union[str, int, float, bool]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
