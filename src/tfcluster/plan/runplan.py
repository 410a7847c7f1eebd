"""The run plan: a cluster file plus the command line, resolved once.

:func:`build_plan` is the only place where the file's settings and the command line's
overrides meet (torch's ``config_from_args`` -> ``LaunchConfig``). Every consumer reads the
:class:`RunPlan` it returns: the local supervisor, ssh and per-host agents, the Slurm batch
script and node agent (as JSON, :meth:`RunPlan.to_dict`), ``--dry-run``, ``commands`` and
``render``. Nothing below the CLI sees argparse: the CLI turns its arguments into
:class:`LaunchOptions`. The task contract (TF_CONFIG, flags, ``TFCLUSTER_*``) is
:mod:`tfcluster.plan.contract`; the rules (restart, success, exit codes) are :mod:`tfcluster.core.rules`.
No TensorFlow here. See docs/PLAN.md.
"""
from __future__ import annotations

import datetime
import os
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from tfcluster.clusterfile import vocabulary
from tfcluster.clusterfile.checks import check_text
from tfcluster.clusterfile.cluster import Cluster, Endpoint, Task
from tfcluster.errors import UserError
from tfcluster.net.addresses import is_local
from tfcluster.net.ports import port_run, ports_besides
from tfcluster.plan import contract
from tfcluster.plan.backend_kind import HOST_SLOTS, KINDS, LOCAL_PORTS, BackendKind, backend_kind
from tfcluster.plan.launch_options import LaunchOptions
from tfcluster.plan.program_args import apply_args, parse_args, printable_word
from tfcluster.plan.sizing import Sizing, sizing_of, with_spare_workers

PLAN_VERSION = 2
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


@dataclass(frozen=True)
class Watchdog:
    """Deadlines after which tfcluster names the task it waits for (0: off)."""

    startup_timeout: float = 120.0
    waiting_timeout: float = 120.0
    stall_timeout: float = 300.0
    stall_warning: float = 0.4
    end_timeout: float = 60.0


@dataclass(frozen=True)
class TaskPlan:
    """One task, resolved: identity, endpoint, program, environment, folder, GPUs, restart rule
    and how many tasks share its host."""

    job: str
    index: int
    host: Optional[str]                      # None: the backend assigns it (Slurm)
    port: Optional[int]
    argv: Tuple[str, ...]                    # the program; contract.PYTHON for "python"
    env: Tuple[Tuple[str, str], ...]         # the file's env for this job
    cwd: str
    gpus: Optional[str]                      # CUDA_VISIBLE_DEVICES; None: inherit
    task_flags: bool
    restart: vocabulary.RestartRule
    local_tasks: int = 1                     # tasks of the cluster on this task's host
    profiler_port: Optional[int] = None      # the profiler server's port (profiler on), else None
    port_chosen: bool = False                # the port is chosen on the task's host at the start

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"

    @property
    def file_stem(self) -> str:
        return f"{self.job}-{self.index}"

    @property
    def endpoint(self) -> str:
        if self.host is not None and self.port is None:
            return f"{self.host}:<port chosen at the start>"
        return str(Endpoint(self.host, self.port)) if self.host is not None else ""

    @property
    def where(self) -> str:
        """``cluster.worker[1]``: the field of the file that made this task."""
        return f"cluster.{self.job}[{self.index}]"


@dataclass(frozen=True)
class RunPlan:
    """A whole run, resolved."""

    source: str                              # the cluster file ("" when built from a dict)
    base_dir: str
    backend: str
    tasks: Tuple[TaskPlan, ...]              # every task of the cluster, in listing order
    selected: Tuple[str, ...]                # the tasks this launcher starts
    chief: str
    success: str
    grace: float
    stop_timeout: float
    watchdog: Watchdog
    logdir: str
    run_id: str
    run_dir: str
    base_port: int
    cluster: Optional[Dict[str, List[str]]]  # the ClusterSpec dict; None: endpoints come later
    count_jobs: Tuple[str, ...] = ()
    only_hosts: Tuple[str, ...] = ()         # per-host mode: the --host names
    secret_names: Tuple[str, ...] = ()       # the file's secrets: (besides secret-looking names)
    run_id_given: bool = False               # --run-id given (else a default: a taken one is renumbered)
    extra: Dict[str, Any] = field(default_factory=dict, compare=False)  # backend settings (slurm:)
    network: str = "host"                    # private: a network of the run's own; host: the machine's
    network_why: str = ""                    # why host where private was the default (one line)
    network_asked: bool = False              # --network or the file's network: said which
    profiler: bool = False                   # the tasks' profiler servers are on
    outbound: str = ""                       # a private network's outbound helper (slirp4netns), once made
    namespaces: str = ""                     # what was made for it, once made: "net" or "user+net+user"
    base_port_given: bool = False            # the file wrote base_port: ports chosen on hosts start there
    run_token: str = field(default_factory=lambda: os.urandom(8).hex())   # TFCLUSTER_RUN_TOKEN
    min_workers: Optional[int] = None        # elastic: the fewest workers the run goes on with
    on_change: str = "go-on"                 # elastic.on_change: go-on, restart, restart-chief, restart-on-join
    sizing: Optional[Sizing] = None          # elastic.max_workers / scale (tfcluster.plan.sizing)

    @property
    def elastic_restart(self) -> bool:
        """elastic.on_change restart: a change restarts every task; TF_CONFIG lists the workers
        in the run alone."""
        return self.on_change == "restart"

    # ---- tasks
    @property
    def jobs(self) -> List[str]:
        out: List[str] = []
        for t in self.tasks:
            if t.job not in out:
                out.append(t.job)
        return out

    def task(self, name: str) -> TaskPlan:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)

    def job_tasks(self, job: str) -> List[TaskPlan]:
        return [t for t in self.tasks if t.job == job]

    @property
    def kind(self) -> BackendKind:
        """What the run's backend does (:mod:`tfcluster.plan.backend_kind`)."""
        return backend_kind(self.backend)

    @property
    def selected_tasks(self) -> List[TaskPlan]:
        chosen = set(self.selected)
        return [t for t in self.tasks if t.name in chosen]

    @property
    def skipped_tasks(self) -> List[TaskPlan]:
        chosen = set(self.selected)
        return [t for t in self.tasks if t.name not in chosen]

    # ---- the contract, per task
    def argv(self, task: TaskPlan, cluster: Optional[Dict[str, List[str]]] = None,
             live: Optional[List[str]] = None) -> List[str]:
        """The task's argv (symbolic interpreter), with task flags when the task asks."""
        cluster, index = self.tf_view(task, cluster if cluster is not None else self.cluster, live)
        if task.task_flags and cluster is None:
            raise ValueError("task flags need the cluster's endpoints")
        return contract.task_argv(task.argv, cluster or {}, task.job, index, task.task_flags)

    def live_workers(self, task: TaskPlan, live: Optional[List[str]]) -> List[str]:
        """The workers in the run, in index order: ``live`` (default: every worker of the plan),
        with ``task`` itself when it is a worker about to start."""
        names = [t.name for t in self.tasks if t.job == "worker" and not (self.sizing and self.sizing.spare(
            t.job, t.index))] if live is None else list(live)   # (not the spare workers of a sized run)
        if task.job == "worker":
            names.append(task.name)
        return sorted(set(names), key=lambda n: int(n.rsplit(":", 1)[1]))

    def tf_view(self, task: TaskPlan, cluster: Optional[Dict[str, List[str]]],
                live: Optional[List[str]]) -> Tuple[Optional[Dict[str, List[str]]], int]:
        """(ClusterSpec dict, TensorFlow task index) as ``task`` sees the run: the plan's, or in
        an elastic run that restarts on a change (``elastic.on_change: restart``; with
        ``restart-chief``, the chief alone) the workers in the run alone (``live``), numbered in
        order (worker:3 of worker:0,1,3 is index 2)."""
        sees_live = self.elastic_restart or (self.on_change == "restart-chief" and task.name == self.chief)
        if not sees_live or live is None or not cluster or "worker" not in cluster:
            return cluster, task.index
        names = self.live_workers(task, live)
        eps = {t.name: t.endpoint for t in self.tasks}
        view = dict(cluster)
        view["worker"] = [eps[n] for n in names]
        return view, (names.index(task.name) if task.job == "worker" else task.index)

    def env(self, task: TaskPlan, restart_count: int = 0,
            cluster: Optional[Dict[str, List[str]]] = None,
            local_tasks: Optional[int] = None, live: Optional[List[str]] = None) -> Dict[str, str]:
        """The task's environment additions (the task contract) for attempt ``restart_count``.
        Elastic runs: a worker's ``live`` workers (default: every worker of the plan) give its
        TFCLUSTER_LIVE_WORKERS and TFCLUSTER_WORKER_RANK."""
        place = None
        if self.min_workers is not None and task.job == "worker":
            names = self.live_workers(task, live)
            place = (len(names), names.index(task.name))
        view, index = self.tf_view(task, cluster if cluster is not None else self.cluster, live)
        return contract.task_env(
            task.job, index, view,
            file_env=dict(task.env), gpus=task.gpus, run_dir=self.run_dir,
            local_tasks=task.local_tasks if local_tasks is None else local_tasks,
            restart_count=restart_count,
            max_restarts=0 if task.restart.policy == "never" else task.restart.max_restarts,
            profiler=task.profiler_port, run_token=self.run_token, live=place)

    def secret_values(self, environ=None) -> List[str]:
        """What is masked in output, logs and records: secret values of the tasks' env, of the
        declared names in ``environ`` (the launcher's environment, which tasks inherit), and of
        secret-looking flags in the tasks' argv (one masking policy: tfcluster.clusterfile.secrets)."""
        from tfcluster.clusterfile import secrets
        values = secrets.values_to_mask([dict(t.env) for t in self.tasks], self.secret_names,
                                        os.environ if environ is None else environ)
        for t in self.tasks:
            values += secrets.argv_secret_values(t.argv, self.secret_names)
        return sorted(set(values), key=len, reverse=True)

    def with_run_dir(self, run_dir: str) -> "RunPlan":
        return replace(self, run_dir=run_dir, run_id=os.path.basename(run_dir))

    def with_endpoints(self, endpoints: Dict[str, Tuple[str, int]],
                       profiler_ports: Optional[Dict[str, int]] = None) -> "RunPlan":
        """The plan with every task's host and port replaced (``task name -> (host, port)``):
        the endpoints a backend learnt when it placed the tasks (Ray), with the profiler ports it
        chose there; the ClusterSpec, hence TF_CONFIG and task flags, follow."""
        keys: Dict[str, int] = {}
        for host, _ in endpoints.values():
            keys[host_key(host)] = keys.get(host_key(host), 0) + 1
        tasks = tuple(replace(t, host=endpoints[t.name][0], port=endpoints[t.name][1],
                              local_tasks=keys[host_key(endpoints[t.name][0])],
                              profiler_port=t.profiler_port if profiler_ports is None
                              else profiler_ports.get(t.name))
                      for t in self.tasks)
        jobs: Dict[str, List[str]] = {}
        for t in tasks:
            jobs.setdefault(t.job, []).append(t.endpoint)
        return replace(self, tasks=tasks, cluster=contract.cluster_dict(jobs))

    # ---- as data (the Slurm node agent reads this; compact: one entry per job)
    def to_dict(self) -> Dict[str, Any]:
        jobs: Dict[str, Any] = {}
        for job in self.jobs:
            tasks = self.job_tasks(job)
            first = tasks[0]
            r = first.restart
            jobs[job] = {
                "count": len(tasks), "argv": list(first.argv), "env": dict(first.env),
                "cwd": first.cwd, "task_flags": first.task_flags,
                "gpus": [t.gpus for t in tasks],
                "endpoints": None if first.host is None else [t.endpoint for t in tasks],
                "local_tasks": [t.local_tasks for t in tasks],
                "profiler_ports": [t.profiler_port for t in tasks],
                "port_chosen": [t.port_chosen for t in tasks],
                "restart": {"policy": r.policy, "max_restarts": r.max_restarts,
                            "max_total_restarts": r.max_total_restarts, "backoff": r.backoff,
                            "min_uptime": r.min_uptime},
            }
        return {
            "version": PLAN_VERSION, "source": self.source, "base_dir": self.base_dir,
            "backend": self.backend, "jobs": jobs, "selected": list(self.selected),
            "chief": self.chief, "success": self.success, "grace": self.grace,
            "stop_timeout": self.stop_timeout, "watchdog": vars(self.watchdog).copy(),
            "logdir": self.logdir, "run_id": self.run_id, "run_dir": self.run_dir,
            "base_port": self.base_port, "cluster": self.cluster,
            "count_jobs": list(self.count_jobs), "only_hosts": list(self.only_hosts),
            "secret_names": list(self.secret_names), "run_id_given": self.run_id_given,
            "extra": dict(self.extra), "network": self.network, "network_why": self.network_why,
            "network_asked": self.network_asked, "profiler": self.profiler,
            "base_port_given": self.base_port_given, "run_token": self.run_token,
            "min_workers": self.min_workers, "on_change": self.on_change,
            "sizing": self.sizing.to_dict() if self.sizing else None,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "RunPlan":
        if d.get("version") != PLAN_VERSION:
            raise ValueError(f"plan version {d.get('version')!r}, this tfcluster reads {PLAN_VERSION}")
        tasks = []
        for job, j in d["jobs"].items():
            r = vocabulary.RestartRule(**j["restart"])
            for i in range(j["count"]):
                host, port = None, None
                if j.get("endpoints"):
                    ep = j["endpoints"][i]
                    host, _, p = ep.rpartition(":")
                    host, port = host.strip("[]"), int(p)
                tasks.append(TaskPlan(
                    job=job, index=i, host=host, port=port, argv=tuple(j["argv"]),
                    env=tuple(j["env"].items()), cwd=j["cwd"], gpus=j["gpus"][i],
                    task_flags=bool(j["task_flags"]), restart=r, local_tasks=j["local_tasks"][i],
                    profiler_port=(j.get("profiler_ports") or [None] * j["count"])[i],
                    port_chosen=bool((j.get("port_chosen") or [False] * j["count"])[i])))
        return cls(source=d["source"], base_dir=d["base_dir"], backend=d["backend"],
                   tasks=tuple(tasks), selected=tuple(d["selected"]), chief=d["chief"],
                   success=d["success"], grace=float(d["grace"]),
                   stop_timeout=float(d["stop_timeout"]), watchdog=Watchdog(**d["watchdog"]),
                   logdir=d["logdir"], run_id=d["run_id"], run_dir=d["run_dir"],
                   base_port=int(d["base_port"]), cluster=d["cluster"],
                   count_jobs=tuple(d["count_jobs"]), only_hosts=tuple(d.get("only_hosts") or ()),
                   secret_names=tuple(d.get("secret_names") or ()),
                   run_id_given=bool(d.get("run_id_given", True)),
                   extra=dict(d.get("extra") or {}), network=d.get("network") or "host",
                   network_why=d.get("network_why") or "", network_asked=bool(d.get("network_asked")),
                   profiler=bool(d.get("profiler")), base_port_given=bool(d.get("base_port_given")),
                   run_token=str(d.get("run_token") or os.urandom(8).hex()),
                   min_workers=d.get("min_workers"),
                   on_change=str(d.get("on_change") or ("restart" if d.get("elastic_restart") else "go-on")),
                   sizing=Sizing.from_dict(d.get("sizing")))


# --------------------------------------------------------------------------------------

def assign_local_ports(cluster: Cluster, host_network: bool = True) -> Cluster:
    """Give count jobs consecutive free ports on localhost, from the file's base_port. In a
    private network (``host_network`` off) every port is free: the ports from base_port that
    the file's listed endpoints leave."""
    missing, taken = _unported(cluster)
    if not missing:
        return cluster
    try:
        first = port_run(len(missing), cluster.base_port, taken, probe=host_network)
    except OSError as e:
        raise UserError(f"base_port: {e}")
    ports = dict(zip(missing, range(first, first + len(missing))))
    return cluster.with_endpoints(lambda t: Endpoint("localhost", ports[t.name]))


def _unported(cluster: Cluster) -> Tuple[List[str], Set[int]]:
    """(the tasks without an endpoint, the ports the listed endpoints take)."""
    return ([t.name for t in cluster.tasks if t.endpoint is None],
            {t.endpoint.port for t in cluster.tasks if t.endpoint is not None})


def assign_placed_ports(cluster: Cluster, placed: Dict[str, str]) -> Cluster:
    """The placed tasks (:func:`place_on_hosts`) with ports from base_port on each host, in
    rank order: what ``commands`` and ``tf-config`` print (a launch chooses free ports on each
    host at the start instead)."""
    taken: Dict[str, set] = {}
    for t in cluster.tasks:
        if t.endpoint is not None:
            taken.setdefault(t.endpoint.host, set()).add(t.endpoint.port)
    ports: Dict[str, Endpoint] = {}
    for t in cluster.tasks:
        if t.endpoint is None:
            host = placed[t.name]
            used = taken.setdefault(host, set())
            port = cluster.base_port
            while port in used:
                port += 1
            used.add(port)
            ports[t.name] = Endpoint(host, port)
    return cluster.with_endpoints(lambda t: ports[t.name])


def place_on_hosts(cluster: Cluster) -> Dict[str, str]:
    """task name -> host for ``--backend ssh``: every listed task on its own host, the tasks of
    jobs given as a count on the slots of ``hosts: {NAME: {slots: N}}`` in file order
    (:func:`tfcluster.plan.placement.block_layout`; a listed task takes a slot of its host).
    Their ports are chosen on each host when the run starts. UserError without slots."""
    from tfcluster.plan.placement import block_layout
    hosts = cluster.spec.hosts
    slots = [(name, spec.slots) for name, spec in hosts.items() if spec.slots]
    counts = {job: len(cluster.jobs[job]) for job in cluster.count_jobs}
    if not slots:
        raise UserError(f"cluster.{cluster.count_jobs[0]}: a task count over ssh needs hosts with "
                        f"slots (hosts: {{node1: {{slots: 4}}, node2: {{slots: 4}}}}), or host:port "
                        f"entries")
    taken: Dict[str, int] = {}
    out: Dict[str, str] = {}
    for t in cluster.tasks:
        if t.endpoint is not None:
            out[t.name] = t.endpoint.host
            taken[t.endpoint.host] = taken.get(t.endpoint.host, 0) + 1
    left = [(name, max(0, n - taken.get(name, 0))) for name, n in slots]
    try:
        layout = block_layout(counts, left)
    except ValueError as e:
        raise UserError(f"hosts: {e} (the slots of hosts: take the tasks of "
                        f"{', '.join(cluster.count_jobs)})")
    for job, where in layout.items():
        for i, host in enumerate(where):
            out[f"{job}:{i}"] = host
    return out


def _on_placed_hosts(tasks: Tuple[TaskPlan, ...],
                     where: Dict[str, Tuple[str, Optional[int]]]) -> Tuple[TaskPlan, ...]:
    """The tasks at the (host, port) laid out for them (:func:`_lay_out`); a task given as a
    count without a port gets it on its host when the run starts (``port_chosen``)."""
    keys: Dict[str, int] = {}
    for host, _ in where.values():
        keys[host_key(host)] = keys.get(host_key(host), 0) + 1
    return tuple(replace(t, host=where[t.name][0], port=where[t.name][1],
                         local_tasks=keys[host_key(where[t.name][0])],
                         port_chosen=where[t.name][1] is None) for t in tasks)


def default_backend(cluster: Cluster, hosts: Sequence[str] = ()) -> str:
    """local when every host is this machine (or in per-host mode), else ssh."""
    if hosts:
        return "local"
    if cluster.resolved and not all(is_local(t.endpoint.host) for t in cluster.tasks):
        return "ssh"
    if not cluster.resolved and "hosts" in _given(cluster) and any(
            s.slots for s in cluster.spec.hosts.values()):
        return "ssh"              # counts placed on the slots of the file's hosts
    return "local"


def _given(cluster: Cluster):
    """The top-level keys the cluster file wrote (without building its models when the quick
    reader read it)."""
    data = getattr(cluster.spec, "_data", None)
    if isinstance(data, dict):
        return data.keys()
    return getattr(cluster.spec, "model_fields_set", ())


def host_key(host: str) -> str:
    """Tasks whose hosts have the same key share a machine."""
    return "\0local" if is_local(host) else host.lower()


def build_plan(cluster: Cluster, opts: Optional[LaunchOptions] = None,
               need_program: bool = True) -> RunPlan:
    """The one merge of a loaded cluster file with the command line. Raises UserError (exit 2)
    for what cannot run: no program, a count job on ssh, no task for this machine, a bad
    run id."""
    opts = opts or LaunchOptions()
    kind = backend_kind(opts.backend or getattr(cluster.spec, "backend", None)
                        or default_backend(cluster, opts.hosts))
    _check_backend(kind, cluster, opts)
    run_id = _checked_run_id(opts)
    logdir = os.path.abspath(check_text("--logdir", opts.logdir)) if opts.logdir else cluster.logdir
    edits = _checked_command(opts)
    run_id, run_dir = _run_dir(logdir, run_id, opts)
    success = opts.success or cluster.success
    if success not in vocabulary.SUCCESS_RULES:
        raise UserError(f"--success: '{success}' is not one of {', '.join(vocabulary.SUCCESS_RULES)}")
    min_workers = _min_workers(cluster, kind)
    sizing = sizing_of(cluster, kind)           # elastic.max_workers / scale (plan/sizing.py)
    cluster = with_spare_workers(cluster, sizing) if sizing else cluster   # in every ClusterSpec
    elastic = getattr(cluster.spec, "elastic", None)
    profiler = bool(getattr(cluster.spec, "profiler", False) if opts.profiler is None else opts.profiler)
    base_port_given = "base_port" in _given(cluster)
    wd = cluster.spec.watchdog
    asked = opts.network or getattr(cluster.spec, "network", None)
    network, network_why, where = _lay_out(cluster, kind, asked, opts.hosts)
    tasks = _tasks(cluster, opts, edits, where, need_program)
    selected = _selected(tasks, kind, opts)
    extra: Dict[str, Any] = {}
    if kind.takes_slurm_options:
        tasks, extra["slurm"] = _slurm(cluster, tasks, opts.slurm)
    if where is not None and kind.count_layout == LOCAL_PORTS:   # counts laid out on this machine
        cluster = cluster.with_endpoints(lambda t: Endpoint(*where[t.name]))
    endpoints = cluster.cluster_spec_dict() if cluster.resolved else None
    if profiler and not kind.chooses_ports_on_hosts:   # where hosts choose ports, their agents do
        wanted = [t.name for t in tasks if t.job != "evaluator"]   # an evaluator has no server
        used = {t.port for t in tasks if t.port}          # chosen with them, never derived from them
        try:
            chosen = dict(zip(wanted, ports_besides(len(wanted), used, probe=network == "host")))
        except OSError as e:
            raise UserError(f"--profiler: {e}")
        tasks = tuple(replace(t, profiler_port=chosen.get(t.name)) for t in tasks)
    return RunPlan(
        source=cluster.source, base_dir=cluster.base_dir, backend=kind.name, tasks=tasks,
        selected=selected, chief=str(cluster.chief), success=success,
        grace=cluster.grace if opts.grace is None else opts.grace,
        stop_timeout=opts.stop_timeout,
        watchdog=Watchdog(wd.startup_timeout, wd.waiting_timeout, wd.stall_timeout,
                          wd.stall_warning, wd.end_timeout),
        logdir=logdir, run_id=run_id, run_dir=run_dir, base_port=cluster.base_port,
        cluster=endpoints, count_jobs=tuple(cluster.count_jobs), only_hosts=tuple(opts.hosts),
        secret_names=tuple(sorted(cluster.secret_names)), run_id_given=opts.run_id is not None,
        extra=extra, network=network, network_why=network_why, network_asked=asked is not None,
        profiler=profiler, base_port_given=base_port_given, min_workers=min_workers,
        on_change=getattr(elastic, "on_change", "go-on") if elastic is not None else "go-on", sizing=sizing)


def _check_backend(kind: BackendKind, cluster: Cluster, opts: LaunchOptions) -> None:
    """What the backend cannot do with this file and command line, as a UserError."""
    if kind.places_tasks and opts.hosts:
        raise UserError(f"--host: per-host mode does not apply to --backend {kind.name} "
                        f"({kind.name.capitalize()} chooses the nodes)")
    if not kind.runs_data_service and any(job in vocabulary.DATA_SERVICE_JOBS for job in cluster.jobs):
        raise UserError(f"data_service: the tf.data service does not run with --backend {kind.name} "
                        f"yet; use --backend local, ssh or slurm, or leave data_service: out")


def _lay_out(cluster: Cluster, kind: BackendKind, asked: Optional[str], hosts: Sequence[str]
             ) -> Tuple[str, str, Optional[Dict[str, Tuple[str, Optional[int]]]]]:
    """Where the tasks listen: the network (private | host, why host where private was the
    default) and, with jobs given as a count, each task's (host, port) as the backend lays them
    out (None: the file's endpoints, or the scheduler's): over ssh on the slots of the file's
    hosts, ports chosen there at the start (:func:`place_on_hosts`); on this machine, the ports
    :func:`assign_local_ports` would give (Ray: placeholders until Ray placed the tasks). This
    machine is asked last: its addresses, then its ports."""
    chosen = _network_asked(kind.name, asked, hosts)
    where: Optional[Dict[str, Tuple[str, Optional[int]]]] = None
    missing: List[str] = []
    taken: Set[int] = set()
    if not cluster.resolved and kind.count_layout == HOST_SLOTS:
        placed = place_on_hosts(cluster)
        where = {t.name: (placed[t.name], t.endpoint.port if t.endpoint else None) for t in cluster.tasks}
    elif not cluster.resolved and kind.count_layout == LOCAL_PORTS:
        missing, taken = _unported(cluster)
    network, why = chosen or _network_here(cluster, asked)
    if missing:
        try:
            first = port_run(len(missing), cluster.base_port, taken, probe=network == "host")
        except OSError as e:
            raise UserError(f"base_port: {e}")
        ports = dict(zip(missing, range(first, first + len(missing))))
        where = {t.name: (t.endpoint.host, t.endpoint.port) if t.endpoint else ("localhost", ports[t.name])
                 for t in cluster.tasks}
    return network, why, where


def _checked_run_id(opts: LaunchOptions) -> str:
    run_id = opts.run_id or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if not RUN_ID.fullmatch(run_id):
        raise UserError(f"--run-id: '{printable_word(run_id)}' is not a run folder name (letters, digits, "
                        f"'.', '_', '+' and '-', starting with a letter or digit; no '/')")
    return run_id


def _checked_command(opts: LaunchOptions) -> List[Tuple[str, Optional[str]]]:
    """The command line's program parts checked (its folder, the words after '--'); the --arg
    edits parsed."""
    if opts.command_cwd:
        check_text("the working folder", opts.command_cwd)
    edits = parse_args(opts.args)
    for i, word in enumerate(opts.command):
        check_text(f"the command after '--' (word {i + 1})", word)
    return edits


def _run_dir(logdir: str, run_id: str, opts: LaunchOptions) -> Tuple[str, str]:
    """(run id, run folder): a timestamp taken twice in one second numbers the second (what the
    run folder will probably be called; tfcluster.safe_files makes it, and numbers it again if
    another launch takes the name first)."""
    run_dir = os.path.join(logdir, run_id)
    if opts.run_id is None:
        base, n = run_dir, 1
        while os.path.lexists(run_dir) and n < 1000:
            n += 1
            run_dir = f"{base}-{n}"
        run_id = os.path.basename(run_dir)
    return run_id, run_dir


def _tasks(cluster: Cluster, opts: LaunchOptions, edits: Sequence[Tuple[str, Optional[str]]],
           where: Optional[Dict[str, Tuple[str, Optional[int]]]], need_program: bool) -> Tuple[TaskPlan, ...]:
    """Every task's plan, at the host and port laid out for a count job; UserError when one has
    no program and ``need_program``."""
    keys: Dict[str, int] = {}
    if cluster.resolved:
        for t in cluster.tasks:
            k = host_key(t.endpoint.host)
            keys[k] = keys.get(k, 0) + 1
    tasks = tuple(_task_plan(cluster, t, opts, keys, edits) for t in cluster.tasks)
    if where is not None:
        tasks = _on_placed_hosts(tasks, where)
    if need_program:
        empty = next((t for t in tasks if not t.argv), None)
        if empty is not None:
            raise UserError(f"program.command: no program to run; set it in the file or give one "
                            f"after '--' (tfcluster launch {shlex.quote(cluster.source or 'FILE')} "
                            f"-- python trainer.py)")
    return tasks


def _selected(tasks: Tuple[TaskPlan, ...], kind: BackendKind, opts: LaunchOptions) -> Tuple[str, ...]:
    """The tasks this launcher starts: those on the --host hosts in per-host mode, every task
    when the backend reaches other hosts, else this machine's. UserError when none."""
    if opts.hosts:
        selected = tuple(t.name for t in tasks if t.host in opts.hosts)
    elif kind.reaches_other_hosts:
        selected = tuple(t.name for t in tasks)
    else:
        selected = tuple(t.name for t in tasks if is_local(t.host))
    if not selected:
        known = sorted({t.host for t in tasks if t.host})
        if opts.hosts:
            raise UserError(f"--host: no task of this file runs on {', '.join(opts.hosts)} "
                            f"(hosts: {', '.join(known)})")
        raise UserError(f"cluster: no task of this file runs on this machine (hosts: {', '.join(known)}); "
                        f"use --backend ssh to start remote tasks")
    return selected


def _min_workers(cluster: Cluster, kind: BackendKind) -> Optional[int]:
    """The file's ``elastic.min_workers`` checked against the run's workers (after ``--workers``)
    and its backend; None for a run that is not elastic."""
    elastic = getattr(cluster.spec, "elastic", None)
    if elastic is None:
        return None
    n = int(elastic.min_workers)
    workers = sum(1 for t in cluster.tasks if t.job == "worker")
    if not workers:
        raise UserError("elastic.min_workers: the run has no worker job; only workers are elastic "
                        "(the chief and the ps are not)")
    if n > workers:
        raise UserError(f"elastic.min_workers: {n} is more than the run's {workers} worker(s)")
    on_change = getattr(elastic, "on_change", "go-on")
    if not kind.elastic:
        elastic_ones = [k.name for k in KINDS.values() if k.elastic]
        raise UserError(f"elastic: not yet on the {kind.name} backend (it is on "
                        f"{', '.join(elastic_ones)}); remove elastic: to run there")
    if on_change not in kind.elastic_on_change:
        raise UserError(f"elastic.on_change: {on_change} is not on the {kind.name} backend (a lost "
                        f"node's workers leave and the others go on); use on_change: "
                        f"{' or '.join(kind.elastic_on_change)} there")
    return n


def _network_asked(backend: str, asked: Optional[str], hosts: Sequence[str] = ()) -> Optional[Tuple[str, str]]:
    """The run's network (private | host, why host where private was the default) where the
    asking decides it, else None (:func:`_network_here` looks at this machine). ``asked``:
    --network or the file's ``network:`` (None: private where it can be). A private network
    holds a run whose every task is on this machine at a loopback address (inside, only
    loopback exists) and needs the kernel's namespaces; asked for where it cannot be, it is one
    line, exit 2."""
    if asked is not None and asked not in vocabulary.NETWORKS:
        raise UserError(f"--network: '{asked}' is not one of {', '.join(vocabulary.NETWORKS)}")
    if asked == "host":
        return "host", ""
    if backend_kind(backend).reaches_other_hosts or hosts:
        if asked == "private":
            where = "per-host mode (--host)" if hosts else f"--backend {backend}"
            raise UserError(f"network: private is for a run whose tasks all run on this machine; "
                            f"{where} reaches other hosts (their users can connect: see "
                            f"tfcluster help security), so use network: host")
        return "host", ""
    return None


def _network_here(cluster: Cluster, asked: Optional[str]) -> Tuple[str, str]:
    """A run on this machine: private unless a listed task is at an address that is not a
    loopback one (:func:`_network_asked`)."""
    from tfcluster.net.addresses import is_loopback
    for t in cluster.tasks:
        if t.endpoint is not None and not is_loopback(t.endpoint.host):
            why = (f"{t.name} is at {t.endpoint}, not a loopback address (inside a private network "
                   f"only localhost, 127.0.0.0/8 and ::1 exist)")
            if asked == "private":
                raise UserError(f"network: private: {why}; write localhost, or use --network host")
            return "host", why
    from tfcluster.net.private import unavailable
    why = unavailable()
    if why and asked == "private":
        raise UserError(f"network: private: {why}; use --network host")
    # private by default even where it cannot be made: the launch then stops, it does not fall
    # back to the host network unseen (tfcluster.drivers.network.check_private)
    return "private", ""


def _task_plan(cluster: Cluster, t: Task, opts: LaunchOptions, keys: Dict[str, int],
               edits: Sequence[Tuple[str, Optional[str]]] = ()) -> TaskPlan:
    r = t.restart
    rule = vocabulary.RestartRule(
        policy=opts.restart or r.policy,
        max_restarts=r.max_restarts if opts.max_restarts is None else opts.max_restarts,
        max_total_restarts=cluster.restart.max_total_restarts, backoff=r.backoff,
        min_uptime=r.min_uptime)
    if opts.command:
        argv, cwd = list(opts.command), opts.command_cwd or os.getcwd()
    else:
        argv, cwd = list(t.command) + list(t.args), t.cwd
    argv = apply_args(argv, edits)
    host = t.endpoint.host if t.endpoint is not None else None
    return TaskPlan(
        job=t.job, index=t.index, host=host,
        port=t.endpoint.port if t.endpoint is not None else None,
        argv=tuple(contract.symbolic_argv(argv)), env=tuple(t.env), cwd=cwd, gpus=t.gpus,
        task_flags=t.task_flags if opts.task_flags is None else bool(opts.task_flags),
        restart=rule, local_tasks=keys.get(host_key(host), 1) if host is not None else 1)


def _slurm(cluster: Cluster, tasks: Tuple[TaskPlan, ...], spec) -> Tuple[Tuple[TaskPlan, ...], Dict[str, Any]]:
    """Slurm's scheduler options and GPU binding (tfcluster.clusterfile.slurm): the #SBATCH lines,
    GPUs per task, and each task's CUDA_VISIBLE_DEVICES (None: the one Slurm binds)."""
    from tfcluster.clusterfile import slurm
    spec = spec if spec is not None else cluster.spec.slurm
    gpus = slurm.task_gpus(cluster, spec)
    tasks = tuple(replace(t, gpus=gpus[t.job][t.index]) if t.job in gpus else t for t in tasks)
    return tasks, {"lines": slurm.sbatch_lines(cluster, spec),
                   "gpus_per_task": slurm.gpus_per_task(cluster, spec),
                   "requeue": spec.requeue, "max_segments": spec.max_segments,
                   "lead_signal": slurm.LEAD_SIGNAL if any(
                       ln.startswith("#SBATCH --signal=B:") for ln in slurm.sbatch_lines(cluster, spec))
                   else None}
