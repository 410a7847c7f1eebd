"""Where the tasks of jobs given as a count go: ranks fill hosts in order (Slurm's block
distribution), jobs in sorted name order (chief, evaluator, ps, worker: TensorFlow's
``SlurmClusterResolver``'s order). One rule for the Slurm layout
(:mod:`tfcluster.backends.slurm.layout`, hosts from the allocation) and for ``--backend ssh``
with ``hosts: {NAME: {slots: N}}`` (hosts from the file). Pure: no I/O."""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple


def job_order(jobs) -> List[str]:
    """SlurmClusterResolver's order of jobs: sorted by name."""
    return sorted(jobs)


def rank_table(counts: Mapping[str, int]) -> List[Tuple[str, int]]:
    """(job, index) of every rank: jobs in :func:`job_order`, indexes within a job."""
    return [(job, i) for job in job_order(counts) for i in range(counts[job])]


def block_layout(counts: Mapping[str, int], slots: Sequence[Tuple[str, int]]
                 ) -> Dict[str, List[str]]:
    """job -> the host of each of its tasks: ranks (:func:`rank_table`) fill ``slots`` ((host,
    how many tasks it takes), in order) one host after the other. ValueError when the tasks
    outnumber the slots (the message counts both)."""
    places = [host for host, n in slots for _ in range(n)]
    table = rank_table(counts)
    if len(table) > len(places):
        raise ValueError(f"{len(table)} tasks for {len(places)} slots")
    out: Dict[str, List[str]] = {job: [] for job in job_order(counts)}
    for (job, _), host in zip(table, places):
        out[job].append(host)
    return out
