"""Pod settings for Kubernetes: the file's ``kubernetes:`` section and ``jobs.<job>.kubernetes``.

One section for all three renders (``render k8s`` TFJob, ``render jobset`` JobSet, ``render
trainjob`` Kubeflow Trainer v2): what a production pod needs besides image, command and env.
Pure: nothing here talks to a cluster or imports TensorFlow.

==================== ===================================== ====================================
file key             Kubernetes                            shape
==================== ===================================== ====================================
resources            container ``resources``               ``{requests: {cpu: 4, memory: 16Gi},
                                                           limits: {...}}`` (quantities)
node_selector        pod ``nodeSelector``                  label -> value
tolerations          pod ``tolerations``                   Kubernetes' Toleration list
volumes              pod ``volumes``                       Kubernetes' Volume list (sources:
                                                           persistentVolumeClaim, emptyDir,
                                                           configMap, secret, hostPath, nfs)
volume_mounts        container ``volumeMounts``            Kubernetes' VolumeMount list
service_account      pod ``serviceAccountName``            a name
image_pull_secrets   pod ``imagePullSecrets``              Secret names
priority_class       pod ``priorityClassName``             a name
labels, annotations  pod template metadata                 key -> value
affinity             pod ``affinity``                      Kubernetes' Affinity (as written)
image                container ``image``                   the job's image (``render --image``
                                                           replaces every job's)
port                 the ``tfjob-port`` / task port        the port the task's server listens on
                                                           (default 2222)
ports                container ``ports`` besides it        Kubernetes' ContainerPort list
env_from             container ``env`` with ``valueFrom``  name -> Kubernetes' EnvVarSource
entry                how the container starts              ``tfcluster`` (default): ``python -m
                                                           tfcluster.k8s.pod -- PROGRAM``; ``program``:
                                                           the program itself (TFJob only; no
                                                           command: the image's entrypoint)
restart_policy       TFJob replica ``restartPolicy``       Never, OnFailure, ExitCode, Always
                                                           (default: from ``restart.policy``)
queue                workload label                        (file-wide only) Kueue's
                     ``kueue.x-k8s.io/queue-name``         LocalQueue name
run_policy           TFJob ``runPolicy``; JobSet           (file-wide only) clean_pod_policy,
                     ``failurePolicy.maxRestarts``,        backoff_limit, active_deadline_seconds,
                     ``ttlSecondsAfterFinished``           ttl_seconds_after_finished,
                                                           min_available, priority_class,
                                                           schedule_timeout_seconds
enable_dynamic_worker TFJob ``enableDynamicWorker``        (file-wide only) true/false
==================== ===================================== ====================================

Merging (:func:`resolve`): ``jobs.<job>.kubernetes`` over ``kubernetes:`` -- mappings key by key
(``resources.requests``/``limits``, ``node_selector``, ``labels``, ``annotations``), volumes and
volume mounts by ``name``/``mountPath`` (the job's win), tolerations and pull secrets appended,
single values replaced. ``jobs.<job>.gpus`` adds the ``nvidia.com/gpu`` limit; a different
``nvidia.com/gpu`` in ``resources`` is an error.
"""
from __future__ import annotations

import re
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"

# Kubernetes' own formats (k8s.io/apimachinery: resource.Quantity, IsQualifiedName,
# IsDNS1123Label/Subdomain, IsValidLabelValue).
_NUMBER = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
_QUANTITY = re.compile(rf"[+-]?{_NUMBER}(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?{_NUMBER})?")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

Quantity = Union[str, int, float]


def _q(text: Any) -> str:
    text = str(text)
    return f"'{text}'" if text.isprintable() else repr(text)


def check_quantity(value: Any) -> str:
    text = str(value) if not isinstance(value, bool) else ""
    if not _QUANTITY.fullmatch(text):
        raise ValueError(f"{_q(value)} is not a Kubernetes quantity (for example 500m, 2, 16Gi)")
    return text


def check_qualified_name(key: str, what: str = "key") -> str:
    """A label/annotation key: ``[prefix/]name``, name at most 63 characters, prefix a DNS name."""
    prefix, _, name = key.rpartition("/")
    if (not _NAME_PART.fullmatch(name) or len(name) > 63
            or (prefix and (len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)))
            or ("/" in key and not prefix)):
        raise ValueError(f"{_q(key)} is not a Kubernetes {what} ([prefix/]name: letters, digits, "
                         f"'-', '_', '.', at most 63 characters, with an optional DNS prefix)")
    return key


def check_name(value: str, what: str, label: bool = False) -> str:
    ok = (_LABEL.fullmatch(value) and len(value) <= 63) if label else (
        _SUBDOMAIN.fullmatch(value) and len(value) <= 253)
    if not ok:
        chars = "'-'" if label else "'-', '.'"
        raise ValueError(f"{_q(value)} is not a Kubernetes {what} name (lowercase letters, digits, "
                         f"{chars}, at most {63 if label else 253} characters)")
    return value


class _K8s(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Resources(_K8s):
    """A container's ``resources`` (Kubernetes' ResourceRequirements)."""

    requests: Dict[str, Quantity] = Field(default_factory=dict, description="resource -> quantity")
    limits: Dict[str, Quantity] = Field(default_factory=dict, description="resource -> quantity")

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, value: Dict[str, Quantity]) -> Dict[str, Quantity]:
        for key, q in value.items():
            check_qualified_name(key, "resource name")
            check_quantity(q)
        return value


class Toleration(_K8s):
    """Kubernetes' Toleration."""

    key: Optional[str] = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: Optional[str] = None
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = None
    tolerationSeconds: Optional[int] = None

    @model_validator(mode="after")
    def _rules(self) -> "Toleration":
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists has no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key needs operator: Exists")
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds goes with effect: NoExecute")
        return self


class PVCSource(_K8s):
    claimName: str
    readOnly: Optional[bool] = None

    @field_validator("claimName")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "PersistentVolumeClaim")


class EmptyDirSource(_K8s):
    medium: Optional[Literal["", "Memory"]] = None
    sizeLimit: Optional[Quantity] = None

    @field_validator("sizeLimit")
    @classmethod
    def _size(cls, v: Quantity) -> Quantity:
        check_quantity(v)
        return v


class KeyToPath(_K8s):
    key: str
    path: str
    mode: Optional[int] = None


class ConfigMapSource(_K8s):
    name: str
    items: Optional[List[KeyToPath]] = None
    defaultMode: Optional[int] = None
    optional: Optional[bool] = None


class SecretSource(_K8s):
    secretName: str
    items: Optional[List[KeyToPath]] = None
    defaultMode: Optional[int] = None
    optional: Optional[bool] = None


class HostPathSource(_K8s):
    path: str
    type: Optional[Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket",
                           "CharDevice", "BlockDevice"]] = None


class NFSSource(_K8s):
    server: str
    path: str
    readOnly: Optional[bool] = None


VOLUME_SOURCES = ("persistentVolumeClaim", "emptyDir", "configMap", "secret", "hostPath", "nfs")


class Volume(_K8s):
    """Kubernetes' Volume: a name and one source."""

    name: str
    persistentVolumeClaim: Optional[PVCSource] = None
    emptyDir: Optional[EmptyDirSource] = None
    configMap: Optional[ConfigMapSource] = None
    secret: Optional[SecretSource] = None
    hostPath: Optional[HostPathSource] = None
    nfs: Optional[NFSSource] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "volume", label=True)

    @model_validator(mode="after")
    def _one_source(self) -> "Volume":
        given = [s for s in VOLUME_SOURCES if getattr(self, s) is not None]
        if len(given) != 1:
            raise ValueError(f"volume '{self.name}' needs exactly one source of "
                             f"{', '.join(VOLUME_SOURCES)}" + (f" (got {', '.join(given)})" if given else ""))
        return self


class VolumeMount(_K8s):
    """Kubernetes' VolumeMount."""

    name: str
    mountPath: str
    readOnly: Optional[bool] = None
    subPath: Optional[str] = None

    @field_validator("mountPath")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"{_q(v)} is not an absolute path")
        return v


class ContainerPort(_K8s):
    """Kubernetes' ContainerPort (a port of the container besides the task's own)."""

    name: Optional[str] = None
    containerPort: int = Field(ge=1, le=65535)
    protocol: Optional[Literal["TCP", "UDP", "SCTP"]] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (len(v) > 15 or not _LABEL.fullmatch(v)):
            raise ValueError(f"{_q(v)} is not a Kubernetes port name (lowercase letters, digits, "
                             f"'-', at most 15 characters)")
        return v


ENV_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")
TFJOB_RESTART_POLICIES = ("Never", "OnFailure", "ExitCode", "Always")
ENTRIES = ("tfcluster", "program")


class PodSettings(_K8s):
    """Pod settings of one job (``jobs.<job>.kubernetes``), merged over ``kubernetes:``."""

    image: Optional[str] = Field(None, description="container image of the job's pods "
                                 "(render --image replaces it)")
    port: Optional[int] = Field(None, ge=1, le=65535, description="the port the task's server "
                                "listens on in its pod (TFJob's tfjob-port; default 2222)")
    ports: List[ContainerPort] = Field(default_factory=list, description="container ports besides "
                                       "the task's own")
    env_from: Dict[str, Dict[str, Any]] = Field(
        default_factory=dict, description="container variables from a source (name -> Kubernetes' "
        "valueFrom: secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef)")
    entry: Optional[Literal["tfcluster", "program"]] = Field(
        None, description="tfcluster (default): pods run 'python -m tfcluster.k8s.pod -- PROGRAM'; "
        "program: a TFJob's pods run the program itself (no command: the image's entrypoint)")
    restart_policy: Optional[Literal["Never", "OnFailure", "ExitCode", "Always"]] = Field(
        None, description="TFJob replica restartPolicy (default: from restart.policy)")
    affinity: Dict[str, Any] = Field(default_factory=dict, description="pod affinity (Kubernetes' "
                                     "Affinity, as written)")

    resources: Optional[Resources] = Field(None, description="container requests/limits")
    node_selector: Dict[str, str] = Field(default_factory=dict, description="pod nodeSelector")
    tolerations: List[Toleration] = Field(default_factory=list, description="pod tolerations")
    volumes: List[Volume] = Field(default_factory=list, description="pod volumes (a PVC for checkpoints)")
    volume_mounts: List[VolumeMount] = Field(default_factory=list, description="container volumeMounts")
    service_account: Optional[str] = Field(None, description="pod serviceAccountName")
    image_pull_secrets: List[str] = Field(default_factory=list, description="pod imagePullSecrets (names)")
    priority_class: Optional[str] = Field(None, description="pod priorityClassName")
    labels: Dict[str, str] = Field(default_factory=dict, description="pod labels")
    annotations: Dict[str, str] = Field(default_factory=dict, description="pod annotations")

    @model_validator(mode="before")
    @classmethod
    def _no_queue(cls, data: Any) -> Any:
        if cls is PodSettings and isinstance(data, dict) and "queue" in data:
            raise ValueError("queue is file-wide (kubernetes.queue): Kueue admits the whole "
                             "TFJob, JobSet or TrainJob, not one job of it")
        return data

    @field_validator("image")
    @classmethod
    def _image(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (not v.strip() or not v.isprintable() or " " in v):
            raise ValueError(f"{_q(v)} is not a container image reference")
        return v

    @field_validator("env_from")
    @classmethod
    def _env_from(cls, value: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
        for name, source in value.items():
            if len(source) != 1 or next(iter(source)) not in ENV_SOURCES:
                raise ValueError(f"env_from.{_q(name)}: give exactly one of {', '.join(ENV_SOURCES)}")
            if not isinstance(next(iter(source.values())), dict):
                raise ValueError(f"env_from.{_q(name)}: the source is a mapping")
        return value

    @field_validator("affinity")
    @classmethod
    def _affinity(cls, value: Dict[str, Any]) -> Dict[str, Any]:
        known = ("nodeAffinity", "podAffinity", "podAntiAffinity")
        for key in value:
            if key not in known:
                raise ValueError(f"affinity: unknown key {_q(key)} (one of {', '.join(known)})")
        return value

    @field_validator("node_selector", "labels")
    @classmethod
    def _labels(cls, value: Dict[str, str]) -> Dict[str, str]:
        for k, v in value.items():
            check_qualified_name(k, "label key")
            if v and (len(v) > 63 or not _NAME_PART.fullmatch(v)):
                raise ValueError(f"{_q(v)} (for {_q(k)}) is not a Kubernetes label value (letters, "
                                 f"digits, '-', '_', '.', at most 63 characters)")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: Dict[str, str]) -> Dict[str, str]:
        for k in value:
            check_qualified_name(k, "annotation key")
        return value

    @field_validator("service_account", "priority_class")
    @classmethod
    def _names(cls, v: Optional[str], info) -> Optional[str]:
        return v if v is None else check_name(v, info.field_name.replace("_", " "))

    @field_validator("image_pull_secrets")
    @classmethod
    def _secrets(cls, v: List[str]) -> List[str]:
        for name in v:
            check_name(name, "Secret")
        return v


class RunPolicy(_K8s):
    """A TFJob's ``runPolicy`` (Kubeflow's RunPolicy; ``schedulingPolicy`` flattened)."""

    clean_pod_policy: Optional[Literal["None", "Running", "All"]] = Field(
        None, description="cleanPodPolicy (default Running)")
    backoff_limit: Optional[int] = Field(None, ge=0, description="backoffLimit (default: from restart)")
    active_deadline_seconds: Optional[int] = Field(None, ge=1, description="activeDeadlineSeconds")
    ttl_seconds_after_finished: Optional[int] = Field(None, ge=0, description="ttlSecondsAfterFinished")
    min_available: Optional[int] = Field(None, ge=1, description="schedulingPolicy.minAvailable")
    priority_class: Optional[str] = Field(None, description="schedulingPolicy.priorityClass")
    schedule_timeout_seconds: Optional[int] = Field(None, ge=1,
                                                    description="schedulingPolicy.scheduleTimeoutSeconds")
    min_resources: Dict[str, Quantity] = Field(default_factory=dict,
                                               description="schedulingPolicy.minResources")

    @field_validator("min_resources")
    @classmethod
    def _quantities(cls, value: Dict[str, Quantity]) -> Dict[str, Quantity]:
        return Resources._quantities(value)

    def tfjob(self) -> Dict[str, Any]:
        """The TFJob ``runPolicy`` fields this gives (without cleanPodPolicy/backoffLimit)."""
        out: Dict[str, Any] = {}
        if self.active_deadline_seconds is not None:
            out["activeDeadlineSeconds"] = self.active_deadline_seconds
        if self.ttl_seconds_after_finished is not None:
            out["ttlSecondsAfterFinished"] = self.ttl_seconds_after_finished
        scheduling: Dict[str, Any] = {}
        if self.min_available is not None:
            scheduling["minAvailable"] = self.min_available
        if self.priority_class:
            scheduling["priorityClass"] = self.priority_class
        if self.schedule_timeout_seconds is not None:
            scheduling["scheduleTimeoutSeconds"] = self.schedule_timeout_seconds
        if self.min_resources:
            scheduling["minResources"] = {k: check_quantity(v) for k, v in self.min_resources.items()}
        if scheduling:
            out["schedulingPolicy"] = scheduling
        return out


class KubernetesSpec(PodSettings):
    """The file's ``kubernetes:`` section: pod settings for every job, and the Kueue queue."""

    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"description": "pod settings for render k8s/jobset/"
                                                 "trainjob (see docs/CLUSTER_YAML.md)"})
    queue: Optional[str] = Field(None, description="Kueue LocalQueue: the label kueue.x-k8s.io/queue-name "
                                 "on the TFJob / JobSet / TrainJob")
    run_policy: Optional[RunPolicy] = Field(None, description="TFJob runPolicy (backoff_limit and "
                                            "ttl_seconds_after_finished also for JobSet)")
    enable_dynamic_worker: Optional[bool] = Field(None, description="TFJob enableDynamicWorker")

    @field_validator("queue")
    @classmethod
    def _queue(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (len(v) > 63 or not _NAME_PART.fullmatch(v)):
            raise ValueError(f"{_q(v)} is not a Kueue queue name (a label value)")
        return v


# --------------------------------------------------------------------------------------
# Field names for did-you-mean (config's error messages).

def keys_for(model: type, parts: Sequence[Any]) -> List[str]:
    """The keys allowed in the mapping at ``parts`` below ``model`` ([] if not a model)."""
    for part in parts:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if info is None:
            return []
        inner = _model_in(info.annotation)
        if inner is None:
            return []
        model = inner
    return list(model.model_fields) if hasattr(model, "model_fields") else []


def _model_in(annotation: Any) -> Optional[type]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------------------
# Merging and checks

@dataclass
class Resolved:
    """One job's pod settings, merged (file-wide, then the job's)."""

    requests: Dict[str, str] = field(default_factory=dict)
    limits: Dict[str, str] = field(default_factory=dict)
    node_selector: Dict[str, str] = field(default_factory=dict)
    tolerations: List[Dict[str, Any]] = field(default_factory=list)
    volumes: List[Dict[str, Any]] = field(default_factory=list)
    volume_mounts: List[Dict[str, Any]] = field(default_factory=list)
    service_account: Optional[str] = None
    image_pull_secrets: List[str] = field(default_factory=list)
    priority_class: Optional[str] = None
    labels: Dict[str, str] = field(default_factory=dict)
    annotations: Dict[str, str] = field(default_factory=dict)
    image: Optional[str] = None
    port: Optional[int] = None
    ports: List[Dict[str, Any]] = field(default_factory=list)
    env_from: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    entry: str = "tfcluster"
    restart_policy: Optional[str] = None
    affinity: Dict[str, Any] = field(default_factory=dict)


def _dump(model: BaseModel) -> Dict[str, Any]:
    return model.model_dump(exclude_none=True)


def resolve(file: Optional[PodSettings], job: Optional[PodSettings]) -> Resolved:
    out = Resolved()
    for layer in (file, job):
        if layer is None:
            continue
        if layer.resources is not None:
            out.requests.update({k: check_quantity(v) for k, v in layer.resources.requests.items()})
            out.limits.update({k: check_quantity(v) for k, v in layer.resources.limits.items()})
        out.node_selector.update(layer.node_selector)
        out.tolerations += [t for t in map(_dump, layer.tolerations) if t not in out.tolerations]
        out.volumes = _by(out.volumes, [_dump(v) for v in layer.volumes], "name")
        out.volume_mounts = _by(out.volume_mounts, [_dump(m) for m in layer.volume_mounts], "mountPath")
        out.service_account = layer.service_account or out.service_account
        out.image_pull_secrets += [s for s in layer.image_pull_secrets if s not in out.image_pull_secrets]
        out.priority_class = layer.priority_class or out.priority_class
        out.labels.update(layer.labels)
        out.annotations.update(layer.annotations)
        out.image = layer.image or out.image
        out.port = layer.port or out.port
        out.ports = _by(out.ports, [_dump(p) for p in layer.ports], "containerPort")
        out.env_from.update(layer.env_from)
        out.entry = layer.entry or out.entry
        out.restart_policy = layer.restart_policy or out.restart_policy
        out.affinity = dict(layer.affinity) or out.affinity
    for v in out.volumes:     # quantities as strings (Kubernetes' int-or-string, written one way)
        if "emptyDir" in v and "sizeLimit" in v["emptyDir"]:
            v["emptyDir"]["sizeLimit"] = check_quantity(v["emptyDir"]["sizeLimit"])
    return out


def _by(old: List[Dict[str, Any]], new: List[Dict[str, Any]], key: str) -> List[Dict[str, Any]]:
    replaced = {n[key] for n in new}
    return [o for o in old if o[key] not in replaced] + new


def check(file: Optional[PodSettings], jobs: Dict[str, Optional[PodSettings]]) -> List[str]:
    """Problems only visible after merging: a mount of an unknown volume, two mounts at one path.
    ``jobs``: job name -> its ``jobs.<job>.kubernetes`` (None when absent), for every job."""
    problems: List[str] = []
    for job, own in jobs.items():
        merged = resolve(file, own)
        names = {v["name"] for v in merged.volumes}
        where = f"jobs.{job}.kubernetes" if own is not None and own.volume_mounts else "kubernetes"
        for m in merged.volume_mounts:
            if m["name"] not in names:
                known = ", ".join(sorted(names)) or "none"
                problems.append(f"{where}.volume_mounts: mount '{m['name']}' at {m['mountPath']} names "
                                f"no volume of job '{job}' (volumes: {known})")
    return problems


# --------------------------------------------------------------------------------------
# Writing them into a pod

def gpu_limit(settings: Resolved, gpus: int, where: str) -> Dict[str, str]:
    """The container's limits with ``nvidia.com/gpu`` from ``jobs.<job>.gpus`` (``gpus`` ids);
    raises ValueError when ``resources.limits`` names a different number."""
    limits = dict(settings.limits)
    given = limits.get(GPU_RESOURCE)
    if gpus and given is not None and given != str(gpus):
        raise ValueError(f"{where}.resources.limits: {GPU_RESOURCE} is {given}, but the job's gpus "
                         f"give each task {gpus} GPU ids; give one of them")
    if gpus:
        limits[GPU_RESOURCE] = str(gpus)
    return limits


def apply(template: Dict[str, Any], container: Dict[str, Any], settings: Resolved,
          gpus: int, where: str) -> None:
    """Write ``settings`` into a pod template (``{"metadata": ..., "spec": ...}``) and its
    container; ``gpus``: the ``nvidia.com/gpu`` limit from the file's ``gpus`` (0: none)."""
    _apply_container(container, settings, gpu_limit(settings, gpus, where))
    meta: Dict[str, Any] = {}
    if settings.labels:
        meta["labels"] = dict(settings.labels)
    if settings.annotations:
        meta["annotations"] = dict(settings.annotations)
    if meta:
        template["metadata"] = {**template.get("metadata", {}), **meta}
    _apply_pod_spec(template["spec"], settings)


def _apply_container(container: Dict[str, Any], settings: Resolved, limits: Dict[str, str]) -> None:
    """The container's part: resources (requests, ``limits``), image, ports, env from
    sources, volume mounts."""
    resources: Dict[str, Any] = {}
    if settings.requests:
        resources["requests"] = dict(settings.requests)
    if limits:
        resources["limits"] = {k: (int(v) if k == GPU_RESOURCE and v.isdigit() else v)
                               for k, v in limits.items()}
    if resources:
        container["resources"] = resources
    elif "resources" in container:
        del container["resources"]
    if settings.image:
        container["image"] = settings.image
    if settings.ports:
        container["ports"] = container.get("ports", []) + [dict(p) for p in settings.ports]
    if settings.env_from:
        env = [e for e in container.get("env", []) if e["name"] not in settings.env_from]
        container["env"] = env + [{"name": k, "valueFrom": dict(v)} for k, v in settings.env_from.items()]
    if settings.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in settings.volume_mounts]


def _apply_pod_spec(spec: Dict[str, Any], settings: Resolved) -> None:
    """The pod spec's part: service account, priority class, node selector, tolerations,
    affinity, image pull secrets, volumes."""
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.affinity:
        spec["affinity"] = dict(settings.affinity)
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    if settings.volumes:
        spec["volumes"] = [dict(v) for v in settings.volumes]


def workload_labels(file: Optional[KubernetesSpec]) -> Dict[str, str]:
    """Labels of the workload object itself (TFJob, JobSet, TrainJob): Kueue's queue."""
    return {QUEUE_LABEL: file.queue} if file is not None and file.queue else {}


def settings_for(spec: Any, job: str) -> Resolved:
    """The resolved pod settings of ``job`` from a parsed file (``models.ClusterFile``)."""
    own = spec.jobs.get(job)
    return resolve(spec.kubernetes, own.kubernetes if own is not None else None)
