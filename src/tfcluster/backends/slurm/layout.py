"""Which TensorFlow task each Slurm task runs, and where (as TensorFlow's ``SlurmClusterResolver``).

Job entries are counts (``worker: 4``; a list counts its entries, its hosts are not used).
Ranks go to jobs in sorted job-name order (chief, evaluator, ps, worker), as
``SlurmClusterResolver`` does, so a program that uses that resolver agrees with ``TF_CONFIG``.
Node names come from the step's node list (expanded: :mod:`.nodes`), tasks per node from
``SLURM_STEP_TASKS_PER_NODE``; the tasks on a node get ports ``base_port``, ``base_port+1``, ...
Unlike the resolver, nodes keep Slurm's order instead of being sorted as strings, which is the
order ``--distribution=block`` places ranks in.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from tfcluster.plan import placement


def job_order(plan: Dict[str, Any]) -> List[str]:
    """SlurmClusterResolver's order of jobs (:func:`tfcluster.plan.placement.job_order`)."""
    return placement.job_order(plan["jobs"])


def ntasks(plan: Dict[str, Any]) -> int:
    return sum(j["count"] for j in plan["jobs"].values())


def rank_table(plan: Dict[str, Any]) -> List[Tuple[str, int]]:
    """(job, index) of every rank (:func:`tfcluster.plan.placement.rank_table`)."""
    return placement.rank_table({job: j["count"] for job, j in plan["jobs"].items()})


def layout(plan: Dict[str, Any], nodes: Sequence[str], per_node: Sequence[int]
           ) -> List[Tuple[str, int, str, int]]:
    """(job, index, host, port) of every rank: ranks fill nodes in order (block distribution),
    the tasks of a node get ports port_base, port_base+1, ..."""
    if len(nodes) != len(per_node):
        raise ValueError(f"{len(nodes)} nodes but tasks per node for {len(per_node)}")
    slots = [(host, plan["base_port"] + i) for host, n in zip(nodes, per_node) for i in range(n)]
    table = rank_table(plan)
    if len(slots) != len(table):
        raise ValueError(f"the step has {len(slots)} Slurm tasks but the cluster has {len(table)} "
                         f"TensorFlow tasks")
    return [(job, idx, host, port) for (job, idx), (host, port) in zip(table, slots)]

