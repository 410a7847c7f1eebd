"""Workers sized by throughput, as the plan holds it: ``elastic.max_workers`` and
``elastic.scale`` checked against the file's workers and the backend (:func:`sizing_of`), and the
extra workers laid into the cluster (:func:`with_spare_workers`) so that every task's ClusterSpec
and TF_CONFIG name them from the start -- a TF1 ps pulls a worker's tensors from the address in
its own ClusterSpec, so a worker the ps did not know could not join without restarting it.

The run starts the file's workers (``start_workers``); the others are *spare*
(:meth:`Sizing.spare`): their ports are reserved, nothing starts them until the sizing policy
(:mod:`tfcluster.core.policies.sizing`) adds them. No TensorFlow, no I/O.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, Optional

from tfcluster.errors import UserError
from tfcluster.plan.backend_kind import LOCAL_PORTS, BackendKind


@dataclass(frozen=True)
class Sizing:
    """The run's sizing: it starts ``start_workers`` workers and may run up to ``max_workers``;
    ``scale`` "throughput" adds them while each one raises the global steps/s by ``gain`` of one
    worker's rate, measured over ``window`` seconds, at most one change every ``every`` seconds."""

    start_workers: int
    max_workers: int
    scale: str = "throughput"
    gain: float = 0.5
    window: float = 20.0
    every: float = 30.0

    def spare(self, job: str, index: int) -> bool:
        """Whether task ``job:index`` is an extra worker, not started with the run."""
        return job == "worker" and index >= self.start_workers

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]]) -> Optional["Sizing"]:
        return None if not d else cls(**d)


def sizing_of(cluster, kind: BackendKind) -> Optional[Sizing]:
    """The file's ``elastic.max_workers`` / ``elastic.scale`` checked against the file's workers
    and what the backend ``kind`` does (UserError, one line naming the field, exit 2); None when
    the run is not sized."""
    elastic = getattr(cluster.spec, "elastic", None)
    top = getattr(elastic, "max_workers", None)
    scale = getattr(elastic, "scale", None)
    if elastic is None or (top is None and scale is None):
        return None
    if top is None:
        raise UserError("elastic.scale: needs elastic.max_workers, the most workers the run may have")
    if scale is None:
        raise UserError("elastic.max_workers: nothing adds the extra workers without "
                        "elastic.scale: throughput")
    workers = cluster.jobs.get("worker") or []
    if not workers:
        raise UserError("elastic.max_workers: the run has no worker job; only workers are sized")
    n = len(workers)
    if top < n:
        raise UserError(f"elastic.max_workers: {top} is fewer than the file's {n} worker(s)")
    if top < elastic.min_workers:
        raise UserError(f"elastic.max_workers: {top} is fewer than elastic.min_workers ({elastic.min_workers})")
    if kind.no_growth:
        raise UserError(f"elastic.max_workers: {kind.no_growth}; remove max_workers and scale "
                        f"to run on {kind.name}")
    strategy = getattr(getattr(cluster.spec, "ray", None), "strategy", "PACK")
    if kind.places_spares_late and strategy.startswith("STRICT_"):
        raise UserError(f"elastic.max_workers: ray.strategy {strategy} holds for one placement "
                        "group, and each spare worker is placed in a group of its own when the "
                        "cluster has room: use PACK or SPREAD")
    if "worker" not in cluster.count_jobs and kind.count_layout != LOCAL_PORTS:
        raise UserError("elastic.max_workers: give the worker job as a count (worker: "
                        f"{n}) so that the extra workers get their hosts and ports")
    return Sizing(start_workers=n, max_workers=int(top), scale=str(scale),
                  gain=float(elastic.scale_gain), window=float(elastic.scale_window),
                  every=float(elastic.scale_every))


def with_spare_workers(cluster, sizing: Sizing):
    """The cluster with the extra workers (``worker:N`` .. ``worker:M-1``) after the file's, copies
    of its last worker without an endpoint: the backend gives them ports as it gives a count job's
    (local: free ports of this machine, reserved with the others; ssh: the hosts' slots)."""
    workers = cluster.jobs["worker"]
    last = workers[-1]
    extra = [replace(last, index=i, endpoint=None) for i in range(len(workers), sizing.max_workers)]
    return replace(cluster, jobs={**cluster.jobs, "worker": list(workers) + extra})
