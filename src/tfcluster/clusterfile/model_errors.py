"""Pydantic's errors about a cluster file, one line each in tfcluster's words: the field's
path first (``program.comand: unknown key in program (did you mean 'command'?)``), the value
shown short, and the keys known where an unknown one was met (:func:`pydantic_problems`)."""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from tfcluster.clusterfile.checks import job_hint
from tfcluster.clusterfile.vocabulary import KNOWN_JOBS
from tfcluster.clusterfile.wording import did_you_mean, field_path, short

# Top-level keys of a Kubernetes TFJob manifest.
TFJOB_KEYS = ("apiVersion", "kind", "metadata", "spec", "tfReplicaSpecs")


def pydantic_problems(e: Any) -> List[str]:
    """One line per error of a pydantic ``ValidationError``, naming the field: an unknown key
    with the key it probably means (or the keys known there), a TFJob manifest or a job put
    beside ``cluster:`` recognised as such."""
    problems = []
    for err in e.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        where = field_path(loc)
        kind = err.get("type", "")
        if kind == "extra_forbidden" and len(loc) == 1 and loc[0] in TFJOB_KEYS:
            problems.append(f"{where}: unknown key; this looks like a Kubernetes TFJob, not a cluster "
                            f"file (docs/CLUSTER_YAML.md); 'tfcluster render k8s' writes a TFJob from one")
        elif kind == "extra_forbidden" and len(loc) == 1 and (
                loc[0] in KNOWN_JOBS or job_hint(str(loc[0]))):
            job = loc[0] if loc[0] in KNOWN_JOBS else job_hint(str(loc[0]))
            problems.append(f"{where}: unknown key; jobs go under cluster:, for example "
                            f"cluster: {{{job}: [host:port, ...]}}")
        elif kind == "extra_forbidden":
            key = loc[-1] if loc else "?"
            keys = _keys_for(loc)
            parent = field_path(loc[:-1])
            hint = did_you_mean(str(key), keys)
            problems.append(f"{where}: unknown key{' in ' + parent if parent else ''}{hint}"
                            + ("" if hint else f" (known: {', '.join(keys)})" if keys else ""))
        elif kind == "missing":
            problems.append(f"{where}: required")
        elif kind == "literal_error":
            expected = err.get("ctx", {}).get("expected", "")
            problems.append(f"{where}: {short(err.get('input'))} is not one of {expected}")
        else:
            msg = str(err.get("msg", "invalid")).replace("Value error, ", "")
            msg = msg[0].lower() + msg[1:] if msg else msg
            problems.append(f"{where}: {msg} (got {short(err.get('input'))})")
    return problems


def _keys_for(loc: Tuple[Any, ...]) -> Sequence[str]:
    """Allowed keys at the mapping that holds loc[-1]."""
    from tfcluster.clusterfile import kubernetes
    from tfcluster.clusterfile.kubernetes import KubernetesSpec, PodSettings
    from tfcluster.clusterfile.models import ClusterFile, JobSpec, ProgramSpec, RemoteSpec, RestartSpec, WatchdogSpec
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
            return kubernetes.keys_for(KubernetesSpec if model is ClusterFile else PodSettings,
                                        parent[i + 1:])
        else:
            return ()
        i += 1
    return list(model.model_fields)
