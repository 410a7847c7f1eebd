"""The resolved cluster: what a cluster file becomes once loaded (:mod:`tfcluster.clusterfile.config`)
and what every other part of tfcluster reads. A :class:`Cluster` holds its jobs' :class:`Task`
objects (``worker:1``, a :class:`TaskId`), their :class:`Endpoint`, and gives TensorFlow's views
of them: the ClusterSpec dict and each task's TF_CONFIG. Also the ``host:port`` spelling of an
endpoint (:func:`parse_endpoint`, :func:`format_endpoint`). No TensorFlow is imported here
(except by :meth:`Cluster.cluster_spec`, which returns TensorFlow's own object)."""
from __future__ import annotations

import functools
import ipaddress
import re
import socket
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

from tfcluster.clusterfile import clusterspec, quick, vocabulary
from tfcluster.clusterfile.wording import did_you_mean, kind_of, short
from tfcluster.errors import ConfigError, UserError
from tfcluster.net.addresses import endpoint_key

if TYPE_CHECKING:
    from tfcluster.clusterfile.models import ClusterFile, RestartSpec

#: characters: a DNS name is at most 253, a port 5
MAX_ENDPOINT_LENGTH = 300


@dataclass(frozen=True, order=True)
class Endpoint:
    """A task's ``host:port``; ``str()`` writes it back (IPv6 hosts in brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        return format_endpoint(self.host, self.port)


def format_endpoint(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets (``[::1]:2222``)."""
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def check_host_name(host: str) -> None:
    """A host name as RFC 1123 has it (labels of 1-63 letters, digits and hyphens, not starting
    or ending with a hyphen, at most 253 characters; one final dot allowed), or an IPv4 address (as
    ``inet_aton`` reads one). Raises ValueError with a short reason."""
    if host.startswith("-"):
        raise ValueError(f"{short(host)} is not a valid host name (it starts with '-'; ssh "
                         f"would read a leading '-' as an option)")
    name = host[:-1] if host.endswith(".") and not host.endswith("..") else host
    if len(name) > 253:
        raise ValueError(f"{short(host)} is not a valid host name: at most 253 characters, "
                         f"not {len(name)}")
    labels = name.split(".")
    if all(label.isascii() and label.isdigit() for label in labels):
        try:          # as the resolver reads it: 127.1 is 127.0.0.1
            socket.inet_aton(name)
        except OSError:
            raise ValueError(f"{short(host)} is not a valid IPv4 address") from None
        return
    for label in labels:
        if not label:
            raise ValueError(f"{short(host)} is not a valid host name: an empty label (two dots "
                             f"together, or a dot at its start)")
        if len(label) > 63:
            raise ValueError(f"{short(host)} is not a valid host name: a DNS label (the part "
                             f"between dots) is at most 63 characters, not {len(label)}")
        if not _LABEL.fullmatch(label):
            raise ValueError(f"{short(host)} is not a valid host name: {short(label)} is not "
                             f"letters, digits and inner hyphens (RFC 1123)")


def parse_endpoint(entry: Any) -> Tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port). Raises ValueError with a short reason."""
    if isinstance(entry, bool) or not isinstance(entry, (str, int)):
        raise ValueError(f"must be a 'host:port' string, not {kind_of(entry)}")
    text = str(entry).strip()
    if len(text) > MAX_ENDPOINT_LENGTH:
        raise ValueError(f"{short(text)} is too long for host:port ({len(text)} characters)")
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
        check_host_name(host)
    if port_text is None or port_text == "":
        raise ValueError(f"'{text}' has no port; write host:port, for example {text}:2222")
    if not re.fullmatch(r"[0-9]+", port_text):       # ASCII digits: int() takes any script's
        raise ValueError(f"port '{port_text}' is not a number (digits 0-9)")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 1-65535")
    return host, port


@dataclass(frozen=True, order=True)
class TaskId:
    """One task identity everywhere: ``worker:1``.

    Args:
        job: the job's name (``ps``, ``worker``, ``chief``, ``evaluator``, ...).
        index: the task's index in its job, from 0.

    ``str(TaskId("worker", 1))`` is ``"worker:1"``; :meth:`parse` reads that form back."""

    job: str
    index: int

    def __str__(self) -> str:
        return f"{self.job}:{self.index}"

    @property
    def file_stem(self) -> str:
        """The task's name in file names: ``worker-1``."""
        return f"{self.job}-{self.index}"

    @classmethod
    def parse(cls, text: str) -> "TaskId":
        """``worker:1`` (or ``worker/1``) as a TaskId. Raises UserError for anything else."""
        m = re.fullmatch(r"\s*([A-Za-z][A-Za-z0-9_]*)\s*[:/]\s*(\d+)\s*", text or "")
        if not m:
            raise UserError(f"{short(text)} is not a task; write JOB:INDEX, for example worker:1")
        return cls(m.group(1), int(m.group(2)))


@dataclass(frozen=True)
class Task:
    """One task of the cluster and everything needed to start it: its job and index, its
    endpoint (None for a job given as a count until its port is chosen), program, environment,
    GPUs and restart rule, as the cluster file resolved them. Made by :func:`tfcluster.load`
    (``cluster.tasks``); not made by programs."""

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
        """The task's identity."""
        return TaskId(self.job, self.index)

    @property
    def name(self) -> str:
        """The task's identity as text: ``worker:1``."""
        return str(self.id)


@dataclass
class Cluster:
    """A validated cluster file: what :func:`tfcluster.load`, :func:`tfcluster.loads` and
    :func:`tfcluster.from_dict` return, and what :func:`tfcluster.launch` takes.

    ``jobs`` maps each job to its :class:`Task` list (``tasks`` is every task in file order);
    ``cluster_spec_dict()`` is TensorFlow's ClusterSpec dict and ``tf_config(task)`` a task's
    TF_CONFIG. Read-only for programs: a changed file is loaded again."""

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
        """The task ``task_id`` names (``"worker:1"`` or a TaskId). Raises UserError (naming
        the cluster's jobs and sizes) when the cluster has no such task or the name is malformed."""
        tid = task_id if isinstance(task_id, TaskId) else TaskId.parse(task_id)
        if tid.job not in self.jobs:
            hint = did_you_mean(tid.job, self.jobs)
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
        """Whether every task has its endpoint (no job given as a count waits for ports)."""
        return all(t.endpoint is not None for t in self.tasks)

    # ---- TensorFlow views
    def cluster_spec_dict(self) -> Dict[str, List[str]]:
        """The dict for ``tf.train.ClusterSpec`` (evaluator left out, TensorFlow's rule)."""
        self._need_endpoints()
        return clusterspec.cluster_dict({job: [str(t.endpoint) for t in tasks]
                                      for job, tasks in self.jobs.items()})

    def cluster_spec(self):
        """A real ``tf.train.ClusterSpec`` (imports TensorFlow)."""
        import tensorflow as tf  # imported here so the CLI stays fast
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
        problems = duplicate_endpoints(resolved)
        if problems:
            raise ConfigError(self.source, problems)
        return resolved

    def _need_endpoints(self) -> None:
        if not self.resolved:
            jobs = ", ".join(j for j in self.count_jobs)
            raise UserError(f"cluster.{jobs}: given as a count; its endpoints are assigned at launch "
                            f"(use tfcluster launch, or list host:port entries)")


def duplicate_endpoints(cluster: Cluster) -> List[str]:
    """The same port twice on one host (TensorFlow binds 0.0.0.0:<port>, so host aliases clash too)."""
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
