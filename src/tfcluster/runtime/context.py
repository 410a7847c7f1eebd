"""Who am I in the cluster: the task context, from TF_CONFIG or from the seed's flags.

No TensorFlow is imported here (``TaskContext.cluster_spec()`` imports it when called).

Two sources, TensorFlow's own formats:

* ``TF_CONFIG`` (set by ``tfcluster launch``)::

      {"cluster": {"ps": ["h:2222"], "worker": ["h:2223", "h:2224"]},
       "task": {"type": "worker", "index": 1}}

  An ``evaluator`` task gets a TF_CONFIG whose ``cluster`` does not list it.

* the seed's flags, when a task is started by hand::

      --ps_hosts=h:2222 --worker_hosts=h:2223,h:2224 [--chief_hosts=h:2225]
      --job_name=worker --task_index=1

When both are present, what the flags give wins, field by field: hosts given by
flags replace the cluster of TF_CONFIG; ``--job_name``/``--task_index`` replace its
task.

Is-chief rule (TensorFlow's): the task of job ``chief``; else ``worker:0`` when the
cluster has no ``chief`` job.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional

from tfcluster.clusterfile.vocabulary import REPLICA_JOBS, job_rank
from tfcluster.errors import UserError
from tfcluster.net.addresses import host_of, is_local


class ContextError(UserError):
    """TF_CONFIG or the task flags are missing or inconsistent."""


@dataclass(frozen=True)
class TaskContext:
    """One task's view of the cluster.

    ``cluster`` maps job name to its list of ``host:port`` (TensorFlow's ClusterSpec dict).
    ``job_name``/``task_index`` name this task; ``task_id`` is ``"worker:1"``.
    """

    cluster: Dict[str, List[str]]
    job_name: str
    task_index: int
    source: str = "TF_CONFIG"  #: "TF_CONFIG", "flags" or "TF_CONFIG+flags"
    rpc_layer: str = "grpc"
    extra: Dict[str, object] = field(default_factory=dict, compare=False)

    # --- identity -----------------------------------------------------------------
    @property
    def task_id(self) -> str:
        return f"{self.job_name}:{self.task_index}"

    @property
    def is_chief(self) -> bool:
        if self.job_name == "chief":
            return True
        return self.job_name == "worker" and self.task_index == 0 and not self.cluster.get("chief")

    @property
    def is_ps(self) -> bool:
        return self.job_name == "ps"

    @property
    def is_worker(self) -> bool:
        """True for tasks that run a model replica (job chief or worker)."""
        return self.job_name in REPLICA_JOBS

    @property
    def is_evaluator(self) -> bool:
        return self.job_name == "evaluator"

    # --- sizes --------------------------------------------------------------------
    @property
    def num_ps(self) -> int:
        return len(self.cluster.get("ps", []))

    @property
    def num_workers(self) -> int:
        """Number of model replicas: tasks of jobs ``chief`` and ``worker``."""
        return sum(len(self.cluster.get(j, [])) for j in REPLICA_JOBS)

    @property
    def replica_tasks(self) -> List[str]:
        """The replica tasks in replica order: ``chief:0`` first, then ``worker:0..``."""
        return [f"{j}:{i}" for j in REPLICA_JOBS for i in range(len(self.cluster.get(j, [])))]

    @property
    def worker_index(self) -> int:
        """This task's replica index in 0..num_workers-1 (for input sharding); -1 if not a replica."""
        tid = self.task_id
        reps = self.replica_tasks
        return reps.index(tid) if tid in reps else -1

    @property
    def live_workers(self) -> int:
        """How many replicas to shard input over: in an elastic run (``elastic:`` in the
        cluster file) the workers in the run when this attempt started
        (``TFCLUSTER_LIVE_WORKERS``), else :attr:`num_workers`."""
        n = _env_int("TFCLUSTER_LIVE_WORKERS")
        if n is None or n <= 0 or self.job_name != "worker":
            return self.num_workers
        return len(self.cluster.get("chief", [])) + n      # the chief is a replica too

    @property
    def live_worker_index(self) -> int:
        """This replica's shard in 0..live_workers-1: in an elastic run its place among the
        workers in the run (``TFCLUSTER_WORKER_RANK``), else :attr:`worker_index`."""
        r = _env_int("TFCLUSTER_WORKER_RANK")
        if r is None or self.job_name != "worker" or _env_int("TFCLUSTER_LIVE_WORKERS") is None:
            return self.worker_index
        r += len(self.cluster.get("chief", []))
        return r if 0 <= r < self.live_workers else self.worker_index

    # --- addresses and devices ----------------------------------------------------
    @property
    def address(self) -> Optional[str]:
        """This task's ``host:port``, None for a task not in the cluster (evaluator)."""
        hosts = self.cluster.get(self.job_name, [])
        return hosts[self.task_index] if 0 <= self.task_index < len(hosts) else None

    @property
    def port(self) -> Optional[int]:
        addr = self.address
        if not addr or ":" not in addr:
            return None
        try:
            return int(addr.rsplit(":", 1)[1])
        except ValueError:
            return None

    @property
    def in_cluster(self) -> bool:
        return self.address is not None

    @property
    def device(self) -> str:
        """This task's device prefix, e.g. ``/job:worker/task:1``."""
        return f"/job:{self.job_name}/task:{self.task_index}"

    def target(self, task_id: Optional[str] = None) -> str:
        """The session target (``grpc://host:port``) of ``task_id`` (default: this task)."""
        job, index = (task_id.split(":") if task_id else (self.job_name, self.task_index))
        return f"{self.rpc_layer}://{self.cluster[job][int(index)]}"

    def cluster_spec(self):
        """A ``tf.train.ClusterSpec`` of the cluster (imports TensorFlow)."""
        import tensorflow as tf

        return tf.train.ClusterSpec(self.cluster)

    def tf_config(self) -> str:
        """This context as a TF_CONFIG JSON string."""
        return json.dumps({"cluster": self.cluster,
                           "task": {"type": self.job_name, "index": self.task_index}})

    def local_task_count(self) -> int:
        """How many tasks of the cluster (this one included) run on this machine: what the
        launcher says (TFCLUSTER_LOCAL_TASKS), else the tasks whose host is this machine."""
        told = os.environ.get("TFCLUSTER_LOCAL_TASKS", "")
        if told.isdigit() and int(told) > 0:
            return int(told)
        hosts = [h for addrs in self.cluster.values() for h in addrs]
        n = sum(1 for h in hosts if is_local(host_of(h)))
        if not self.in_cluster:
            n += 1
        return max(1, n)

    def __str__(self) -> str:
        return self.task_id


# --- parsing ------------------------------------------------------------------------

def is_local_host(host: str) -> bool:
    """True when ``host`` names this machine (loopback, its hostname or one of its addresses)."""
    return is_local(host)


def _split_hosts(value) -> List[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = str(value).split(",")
    return [h.strip() for h in items if h and h.strip()]


def _check_cluster(cluster: Mapping[str, object], where: str) -> Dict[str, List[str]]:
    if not isinstance(cluster, Mapping) or not cluster:
        raise ContextError(f"{where}: 'cluster' must be a non-empty mapping of job name to host:port list")
    out: Dict[str, List[str]] = {}
    for job, hosts in cluster.items():
        if isinstance(hosts, Mapping):  # sparse form {index: address}
            try:
                hosts = [hosts[k] for k in sorted(hosts, key=int)]
            except (TypeError, ValueError):
                raise ContextError(f"{where}: cluster.{job}: task indices must be integers")
        if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) and h for h in hosts):
            raise ContextError(f"{where}: cluster.{job} must be a list of 'host:port' strings")
        if hosts:
            out[str(job)] = list(hosts)
    if not out:
        raise ContextError(f"{where}: the cluster has no tasks")
    return dict(sorted(out.items(), key=lambda kv: (job_rank(kv[0]), kv[0])))


def parse_tf_config(text: str) -> TaskContext:
    """A TaskContext from a TF_CONFIG JSON string (raises ContextError with the reason)."""
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ContextError(f"TF_CONFIG is not valid JSON: {e}")
    if not isinstance(cfg, dict):
        raise ContextError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster = _check_cluster(cfg.get("cluster") or {}, "TF_CONFIG")
    task = cfg.get("task") or {}
    if not isinstance(task, dict) or "type" not in task:
        raise ContextError("TF_CONFIG: 'task' must be an object with 'type' and 'index'")
    try:
        index = int(task.get("index", 0))
    except (TypeError, ValueError):
        raise ContextError(f"TF_CONFIG: task.index must be an integer, got {task.get('index')!r}")
    ctx = TaskContext(cluster=cluster, job_name=str(task["type"]), task_index=index,
                      source="TF_CONFIG", rpc_layer=str(cfg.get("rpc_layer") or "grpc"),
                      extra={k: v for k, v in cfg.items() if k not in ("cluster", "task", "rpc_layer")})
    _check_task(ctx, "TF_CONFIG")
    return ctx


def _check_task(ctx: TaskContext, where: str) -> None:
    if ctx.task_index < 0:
        raise ContextError(f"{where}: task index must be >= 0, got {ctx.task_index}")
    if ctx.job_name == "evaluator":
        return  # TensorFlow's rule: the evaluator is not part of the cluster
    hosts = ctx.cluster.get(ctx.job_name)
    if hosts is None:
        raise ContextError(f"{where}: task {ctx.task_id}: job {ctx.job_name!r} is not in the cluster "
                           f"(jobs: {', '.join(ctx.cluster)})")
    if ctx.task_index >= len(hosts):
        raise ContextError(f"{where}: task {ctx.task_id}: job {ctx.job_name!r} has only "
                           f"{len(hosts)} task(s)")


def task_context(*, ps_hosts=None, worker_hosts=None, chief_hosts=None, evaluator_hosts=None,
                 job_name: Optional[str] = None, task_index: Optional[int] = None,
                 environ: Optional[Mapping[str, str]] = None) -> TaskContext:
    """This task's context: TF_CONFIG from ``environ`` (default ``os.environ``), overridden by flags.

    ``*_hosts`` are comma-separated strings or lists; ``None`` or empty means "not given".
    ``job_name``/``task_index`` ``None`` means "not given" (``task_index`` defaults to 0
    when only ``job_name`` is given). Raises ContextError when the task cannot be told.
    """
    env = os.environ if environ is None else environ
    base: Optional[TaskContext] = None
    text = env.get("TF_CONFIG", "")
    if text.strip():
        cfg_probe = None
        try:
            cfg_probe = json.loads(text)
        except ValueError:   # bad JSON: read below, where the error names TF_CONFIG
            pass
        if isinstance(cfg_probe, dict) and "task" not in cfg_probe and job_name:
            # cluster only; the task comes from flags
            base = TaskContext(cluster=_check_cluster(cfg_probe.get("cluster") or {}, "TF_CONFIG"),
                               job_name=job_name, task_index=int(task_index or 0))
        else:
            base = parse_tf_config(text)

    flag_cluster = {job: _split_hosts(v) for job, v in
                    (("chief", chief_hosts), ("worker", worker_hosts), ("ps", ps_hosts),
                     ("evaluator", evaluator_hosts))}
    flag_cluster = {j: h for j, h in flag_cluster.items() if h}
    flags_given = bool(flag_cluster) or bool(job_name) or task_index is not None
    if not flags_given:
        if base is None:
            raise ContextError("no cluster: set TF_CONFIG (tfcluster launch does) or pass "
                               "--ps_hosts, --worker_hosts, --job_name and --task_index")
        return base

    if flag_cluster:
        cluster = _check_cluster({j: h for j, h in flag_cluster.items() if j != "evaluator"}, "flags")
    elif base is not None:
        cluster = base.cluster
    else:
        raise ContextError("--job_name given but no cluster: pass --ps_hosts and --worker_hosts "
                           "(or set TF_CONFIG)")
    if job_name:
        job, index = job_name, int(task_index or 0)
    elif base is not None:
        job = base.job_name
        index = base.task_index if task_index is None else int(task_index)
    else:
        raise ContextError("--job_name is required with --ps_hosts/--worker_hosts "
                           "(one of: " + ", ".join(cluster) + ")")
    source = "flags" if base is None else "TF_CONFIG+flags"
    ctx = TaskContext(cluster=cluster, job_name=job, task_index=index, source=source,
                      rpc_layer=base.rpc_layer if base else "grpc")
    _check_task(ctx, "flags")
    return ctx


def parse_cluster(text: str) -> Dict[str, List[str]]:
    """A cluster dict from JSON (``{"ps": [...], ...}`` or a whole TF_CONFIG) or from
    ``ps=h:p,h:p;worker=h:p`` (used by the in-graph example's ``--cluster`` flag)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise ContextError(f"--cluster is not valid JSON: {e}")
        if isinstance(obj, dict) and "cluster" in obj:
            obj = obj["cluster"]
        return _check_cluster(obj, "--cluster")
    cluster: Dict[str, List[str]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        if "=" not in part:
            raise ContextError(f"--cluster: expected job=host:port,... but got {part!r}")
        job, hosts = part.split("=", 1)
        cluster[job.strip()] = _split_hosts(hosts)
    return _check_cluster(cluster, "--cluster")


def _env_int(name: str) -> Optional[int]:
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return None
