"""The cluster file's structure as pydantic models: the one source of its keys, types,
bounds and defaults, and of the JSON Schema editors use (``tfcluster schema``).

Imported only where a file needs them: :func:`tfcluster.clusterfile.config.from_dict` validates
with them unless the file is in the plain subset :mod:`tfcluster.clusterfile.quick` reads without
them (its rules, ``quick_rules.json``, are made from these models by :func:`quick_rules`), and
their messages name the field when something is wrong. Building these classes costs a
launch ~0.15 s; the quick reader none.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Literal, Optional, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SkipValidation
from typing_extensions import Annotated

from tfcluster.clusterfile.kubernetes import KubernetesSpec, PodSettings
from tfcluster.clusterfile.ray import RaySpec
from tfcluster.clusterfile.slurm import SlurmSpec
from tfcluster.clusterfile.vocabulary import DEFAULT_BASE_PORT, DEFAULT_GRACE

# The file's structure. Unions are checked by hand (SkipValidation) for
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
    backoff: float = Field(1.0, ge=0, allow_inf_nan=False,
                           description="seconds before the first restart; doubles each time")
    min_uptime: float = Field(1.0, ge=0, allow_inf_nan=False,
                              description="a task whose first run fails within this many seconds "
                              "is not restarted (a missing module or a bad flag fails the same way "
                              "every time); 0 restarts it anyway")


class WatchdogSpec(_Strict):
    """No silent hangs: deadlines after which tfcluster names the task it waits for."""

    startup_timeout: float = Field(
        120.0, ge=0, allow_inf_nan=False,
        description="seconds a ps/worker task gets to open its port (0: no check)")
    waiting_timeout: float = Field(
        120.0, ge=0, allow_inf_nan=False,
        description="seconds a task may report 'CreateSession still waiting for "
        "response from worker' about another task before that task is treated as failed (0: off)")
    stall_timeout: float = Field(
        300.0, ge=0, allow_inf_nan=False,
        description="seconds the reported global step may stand still before the run "
        "is treated as hung (0: off; only once a task has reported progress; a task at its "
        "final step is under end_timeout instead)")
    stall_warning: float = Field(
        0.4, ge=0, le=1, allow_inf_nan=False,
        description="fraction of stall_timeout after which a task whose own progress stopped "
        "while others go on (or the whole run, standing still) is named on the console (0: off)")
    end_timeout: float = Field(
        60.0, ge=0, allow_inf_nan=False,
        description="seconds a task that reported its final step (step = total) gets to exit by "
        "itself, also after the run has succeeded, before it is killed (0: off)")


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
    kubernetes: Optional[PodSettings] = Field(
        None, description="pod settings of this job (render k8s/jobset/trainjob), merged over kubernetes:")


class DataServiceSpec(_Strict):
    """The tf.data service (``data_service:``): a dispatcher and its workers, started with the
    cluster as the jobs ``tfdata_dispatcher`` and ``tfdata_worker`` (pod settings, restart and
    env through ``jobs.tfdata_dispatcher`` / ``jobs.tfdata_worker``)."""

    dispatcher: Union[Literal[1], str] = Field(1, description="1 (a port assigned at launch) or host:port")
    workers: Union[int, List[str]] = Field(1, description="a count, or a list of host:port")
    work_dir: Optional[str] = Field(None, description="the dispatcher's journal folder (fault tolerance: "
                                    "a restarted dispatcher recovers its jobs)")


class ElasticSpec(_Strict):
    """Elastic workers: the run goes on with fewer workers while at least ``min_workers`` live."""

    min_workers: int = Field(ge=1, description="the fewest workers the run goes on with: losing a "
                             "worker's host or node, or a worker out of its restarts, does not fail "
                             "the run while at least this many workers live (at most the file's "
                             "worker count); a worker whose host comes back is started again")
    on_change: Literal["go-on", "restart", "restart-chief", "restart-on-join"] = Field(
        "go-on", description="what the others do when a worker leaves or comes back: go-on, nothing "
        "(asynchronous training, ParameterServerStrategy); restart, every task is stopped and "
        "started again from the last checkpoint with TF_CONFIG listing the workers in the run alone "
        "(SyncReplicasOptimizer, MultiWorkerMirroredStrategy); restart-chief, a worker leaving "
        "changes nothing, and a worker coming back restarts the chief alone (the "
        "ParameterServerStrategy coordinator, from its checkpoint) with TF_CONFIG listing the "
        "workers in the run, so that it uses the worker at its new address; the ps and the "
        "other workers keep running; restart-on-join, a worker leaving changes nothing, and a "
        "worker coming back restarts every task from the last checkpoint with TF_CONFIG giving "
        "its new address (asynchronous training on Ray, where a worker comes back on another "
        "node: the ps know a worker by the address in their TF_CONFIG)")
    max_workers: Optional[int] = Field(
        None, ge=1, description="the most workers the run may have (at least the file's worker "
        "count and min_workers): the run starts with the file's workers, and the extra ones are in "
        "every task's ClusterSpec and TF_CONFIG from the start (their ports reserved) for "
        "elastic.scale to add; not on Slurm (an allocation does not grow)")
    scale: Optional[Literal["throughput"]] = Field(
        None, description="throughput: the launcher measures the global steps/s, adds a worker "
        "while each one added raises it by scale_gain of one worker's rate, and removes the last "
        "one added (and holds) when it does not (docs/FAULT_TOLERANCE.md, Sizing); needs max_workers")
    scale_gain: float = Field(0.5, ge=0.01, le=2, description="the share of one worker's rate (the "
                              "rate before / the workers before) that an added worker must add "
                              "to be kept")
    scale_window: float = Field(20.0, ge=0.5, description="seconds: the rate is measured over this "
                                "long (the slope of every step reported), once every worker in the "
                                "run reports steps after a change; twice as long before a worker "
                                "that seemed not to help is removed")
    scale_every: float = Field(30.0, ge=0, description="seconds: the least time between two "
                               "changes of the workers by elastic.scale (no thrashing)")


class RemoteSpec(_Strict):
    """How to reach a host over ssh and run tasks there (``remote:`` defaults, ``hosts.<name>:``
    per host; used by ``--backend ssh``)."""

    ssh_host: Optional[str] = Field(None, description="address or ssh alias to connect to "
                                    "(default: the host name from cluster:)")
    user: Optional[str] = Field(None, description="ssh login user (default: ssh's own choice)")
    port: Optional[int] = Field(None, ge=1, le=65535, description="ssh port (default 22)")
    identity_file: Optional[str] = Field(None, description="private key file (~ is expanded)")
    ssh_options: List[str] = Field(default_factory=list,
                                   description="extra ssh -o options, e.g. StrictHostKeyChecking=yes; "
                                   "an option that runs a command on this machine (ProxyCommand, "
                                   "ProxyJump, LocalCommand, KnownHostsCommand, ...) only when named "
                                   "in allow_ssh_commands; options that connect through a path or "
                                   "port another user could own (ControlPath, ControlMaster, "
                                   "IdentityAgent, forwards, ...) never; files ssh reads "
                                   "(UserKnownHostsFile, IdentityFile, ...) only where no other user "
                                   "could own or make them")
    allow_ssh_commands: List[str] = Field(
        default_factory=list, description="ssh options that run a command on this machine when ssh "
        "connects (launch, doctor), allowed by name, e.g. [ProxyCommand]: a file from elsewhere "
        "cannot run commands here without saying so")
    python: Optional[str] = Field(None, description="remote interpreter for python/python3 commands "
                                  "(default: python3)")
    workdir: Optional[str] = Field(None, description="remote folder that mirrors this file's folder: "
                                   "paths under it are mapped there, and tasks run there")
    connect_timeout: Optional[int] = Field(None, ge=1, le=3600, description="seconds a host has "
                                           "to answer at the start (ssh ConnectTimeout; default 10)")
    alive_interval: Optional[int] = Field(None, ge=1, le=3600, description="seconds between "
                                          "keep-alives to a host (ssh ServerAliveInterval; default 5)")
    slots: Optional[int] = Field(None, ge=1, le=4096, description="how many tasks of jobs given as a "
                                 "count this host takes (hosts.<name>: only); hosts fill in order, "
                                 "jobs in sorted name order, as Slurm's block distribution")
    alive_count_max: Optional[int] = Field(None, ge=1, le=100, description="keep-alives a host may "
                                           "leave unanswered (ssh ServerAliveCountMax; default 3): a "
                                           "host lost mid-run is noticed within about "
                                           "alive_interval x alive_count_max seconds")


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
    grace: float = Field(DEFAULT_GRACE, ge=0, allow_inf_nan=False,
                         description="seconds other workers get to finish "
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
    backend: Optional[Literal["local", "ssh", "slurm", "ray"]] = Field(
        None, description="the engine that runs the tasks (--backend wins; default: local, or ssh "
        "for remote hosts)")
    network: Optional[Literal["private", "host"]] = Field(
        None, description="where a run on this machine listens (--network wins): private, a "
        "network of the run's own that only its processes reach (the default where every endpoint "
        "is a loopback address; where the kernel refuses it, a launch starts nothing); host, this "
        "machine's network, where every local user can connect to the tasks (TensorFlow's servers "
        "trust whoever connects: docs/SECURITY.md). Runs across hosts (ssh, Slurm, Ray) use the hosts' networks")
    profiler: bool = Field(
        False, description="start TensorFlow's profiler server in every task (tfcluster profile "
        "RUN traces it), on a port chosen with the task ports; off, no profiler port is opened")
    ray: RaySpec = Field(default_factory=RaySpec,
                         description="Ray options (--backend ray): address, placement strategy, "
                         "resources per job, runtime_env")
    kubernetes: KubernetesSpec = Field(
        default_factory=KubernetesSpec,
        description="pod settings for every job (render k8s/jobset/trainjob): resources, "
        "node_selector, tolerations, volumes, volume_mounts, service_account, image_pull_secrets, "
        "priority_class, labels, annotations, queue")
    data_service: Optional[DataServiceSpec] = Field(
        None, description="the tf.data service: a dispatcher and workers started with the cluster; "
        "every task gets TFCLUSTER_DATA_SERVICE=grpc://host:port")
    elastic: Optional[ElasticSpec] = Field(
        None, description="elastic workers: {min_workers: N}; the run shrinks when a worker's host "
        "or Ray or Slurm node is lost or a worker is out of restarts, and grows back when the host answers "
        "again (Ray: a node with room joins; Slurm: never, an allocation does not gain nodes)")
    secrets: List[str] = Field(
        default_factory=list, description="names of environment variables whose values are secret: "
        "masked in logs, run records, dry runs and validate, and given as a Secret by render k8s "
        "(besides names that look secret, such as API_TOKEN)")


def json_schema() -> Dict[str, Any]:
    """JSON Schema of cluster.yaml (for editors: yaml-language-server)."""
    schema = ClusterFile.model_json_schema()
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return schema


# --------------------------------------------------------------------------------------
# The quick reader's rules (tfcluster.clusterfile.quick), made from the models above.

#: the sections a launch reads, which :mod:`tfcluster.clusterfile.quick` checks without pydantic; a
#: file with any other section (kubernetes, slurm, ray, remote, hosts) is validated by the models
QUICK_MODELS = (ClusterFile, ProgramSpec, JobSpec, RestartSpec, WatchdogSpec, DataServiceSpec, ElasticSpec)


def quick_rules() -> Dict[str, Any]:
    """The keys, types, bounds and defaults of :data:`QUICK_MODELS` as plain data (written to
    ``src/tfcluster/clusterfile/quick_rules.json``; a unit test keeps the two equal). Raises
    ValueError for anything the quick reader cannot check as pydantic would: a validator, a
    model that is not strict and closed, a constraint it does not know."""
    return {"root": ClusterFile.__name__,
            "models": {m.__name__: _model_rules(m) for m in QUICK_MODELS}}


def _model_rules(model: type) -> Dict[str, Any]:
    cfg = model.model_config
    if cfg.get("extra") != "forbid" or cfg.get("strict") is not True:
        raise ValueError(f"{model.__name__}: the quick reader needs extra='forbid', strict=True")
    d = model.__pydantic_decorators__
    if d.validators or d.field_validators or d.root_validators or d.model_validators:
        raise ValueError(f"{model.__name__}: a validator; take it out of QUICK_MODELS")
    fields: Dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if info.alias not in (None, name):
            raise ValueError(f"{model.__name__}.{name}: an alias")
        where = f"{model.__name__}.{name}"
        skip = any(m is SkipValidation or isinstance(m, SkipValidation) for m in info.metadata)
        bounds: Dict[str, Any] = {}
        for m in ([] if skip else info.metadata):
            bounds.update(_bounds(m, where))
        rule: Dict[str, Any] = {"kind": {"t": "skip"} if skip else _kind(info.annotation, bounds, where)}
        if info.is_required():
            rule["required"] = True
        elif info.default_factory is not None:
            made = info.default_factory()
            if isinstance(made, BaseModel):
                rule["default_model"] = type(made).__name__
                if made.model_dump() != type(made)().model_dump():
                    raise ValueError(f"{model.__name__}.{name}: a default model with values of its own")
            elif made in ([], {}):
                rule["default"] = made
            else:
                raise ValueError(f"{model.__name__}.{name}: default {made!r}")
        else:
            if not (info.default is None or type(info.default) in (str, int, float, bool)):
                raise ValueError(f"{model.__name__}.{name}: default {info.default!r}")
            rule["default"] = info.default
        fields[name] = rule
    return {"fields": fields}


def _bounds(meta: Any, where: str) -> Dict[str, Any]:
    """One constraint of a field as the quick reader's bounds. Only public names are read:
    annotated-types' ``Ge`` and ``Le``; any other constraint is tried on pydantic's public
    ``TypeAdapter``, and one that refuses exactly the non-finite floats (``allow_inf_nan=False``,
    whatever class a pydantic release gives it) is ``finite``. Anything else is refused with
    its name, so a constraint the quick reader does not know keeps its field with the models."""
    import annotated_types as at
    if isinstance(meta, at.Ge):
        return {"ge": meta.ge}
    if isinstance(meta, at.Le):
        return {"le": meta.le}
    if _refuses_only_non_finite(meta):
        return {"finite": True}
    raise ValueError(f"{where}: constraint {meta!r}")


def _refuses_only_non_finite(meta: Any) -> bool:
    from pydantic import TypeAdapter, ValidationError
    try:
        adapter = TypeAdapter(Annotated[float, meta])
    except Exception:   # not a constraint pydantic applies to a float: not this one
        return False

    def accepts(v: float) -> bool:
        try:
            adapter.validate_python(v)
            return True
        except ValidationError:
            return False
    return (all(accepts(v) for v in (0.0, -1.5, 1e300, -1e300, 3))
            and not any(accepts(v) for v in (math.inf, -math.inf, math.nan)))


def _kind(ann: Any, bounds: Dict[str, Any], where: str) -> Dict[str, Any]:
    """One annotation as a rule of the quick reader; ``bounds`` (ge, le, finite) go to its
    numbers, as pydantic puts a field's constraints on the number inside an Optional."""
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated:
        if any(m is SkipValidation or isinstance(m, SkipValidation) for m in args[1:]):
            return {"t": "skip"}
        more = dict(bounds)
        for m in args[1:]:
            more.update(_bounds(m, where))
        return _kind(args[0], more, where)
    if ann in (int, float):
        out = {"t": ann.__name__}
        out.update({k: v for k, v in bounds.items() if k != "finite" or ann is float})
        if any(math.isinf(v) for k, v in out.items() if k in ("ge", "le")):
            raise ValueError(f"{where}: an infinite bound")
        return out
    if ann in (str, bool, type(None)):
        return {"t": {str: "str", bool: "bool", type(None): "none"}[ann]}
    if origin is Literal:
        if not all(type(a) in (str, int) for a in args):
            raise ValueError(f"{where}: Literal of {args!r}")
        return {"t": "literal", "values": list(args)}
    if origin is Union:
        return {"t": "union", "of": [_kind(a, bounds, where) for a in args]}
    if origin in (list, List):
        return {"t": "list", "item": _kind(args[0], {}, where)}
    if origin in (dict, Dict) and args[0] is str:
        return {"t": "dict", "value": _kind(args[1], {}, where)}
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return {"t": "model", "name": ann.__name__} if ann in QUICK_MODELS else {"t": "slow"}
    raise ValueError(f"{where}: annotation {ann!r}")
