"""TensorFlow's shapes of a cluster: the ClusterSpec dict, a task's TF_CONFIG, and which task
is the chief. Pure functions of the cluster's endpoints, below both the resolved cluster
(:mod:`tfcluster.clusterfile.cluster`) and the task contract (:mod:`tfcluster.plan.contract`,
which hands them to every task)."""
from __future__ import annotations

import json
from typing import Dict, List, Mapping, Sequence

from tfcluster.clusterfile.vocabulary import DATA_DISPATCHER, DATA_WORKER


def cluster_dict(endpoints: Mapping[str, Sequence[str]]) -> Dict[str, List[str]]:
    """The ClusterSpec dict from job -> endpoints: ``evaluator`` is left out (TensorFlow's rule)."""
    return {job: list(eps) for job, eps in endpoints.items() if job != "evaluator"}


def tf_cluster(cluster: Mapping[str, Sequence[str]], job: str) -> Dict[str, List[str]]:
    """What task ``job`` sees of ``cluster``: a training task does not see the tf.data
    service's jobs (they are no TensorFlow servers of its cluster); a data-service task sees
    everything (it finds its own address there)."""
    if job in (DATA_DISPATCHER, DATA_WORKER):
        return {j: list(eps) for j, eps in cluster.items()}
    return {j: list(eps) for j, eps in cluster.items() if j not in (DATA_DISPATCHER, DATA_WORKER)}


def tf_config(cluster: Mapping[str, Sequence[str]], job: str, index: int) -> Dict[str, object]:
    """The TF_CONFIG dict of task ``job:index`` in ``cluster`` (a ClusterSpec dict)."""
    return {"cluster": tf_cluster(cluster, job), "task": {"type": job, "index": int(index)}}


def tf_config_json(cluster: Mapping[str, Sequence[str]], job: str, index: int) -> str:
    return json.dumps(tf_config(cluster, job, index), separators=(",", ":"))


def chief_task(jobs) -> str:
    """TensorFlow's chief among ``jobs`` (job names, in file order): ``chief:0``, else
    ``worker:0``; a cluster with neither (the guide's ``{local: [...]}``): task 0 of its first
    job other than ``ps`` and ``evaluator``."""
    jobs = list(jobs)
    if "chief" in jobs:
        return "chief:0"
    if "worker" in jobs:
        return "worker:0"
    other = [j for j in jobs if j not in ("ps", "evaluator", DATA_DISPATCHER, DATA_WORKER)]
    return f"{other[0]}:0" if other else "worker:0"
