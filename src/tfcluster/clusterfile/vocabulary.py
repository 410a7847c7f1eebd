"""The words of a cluster and its run: jobs, restart policies (and a task's restart settings),
success rules, backends.

Plain data with no rule in it, below both the cluster file (its models and the resolved
:mod:`~tfcluster.clusterfile.cluster`) and the rulebook (:mod:`tfcluster.core.rules`, which
re-exports it), so that the cluster file reads the words without importing the rules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

#: restart policies (``restart.policy``, ``--restart``)
RESTART_POLICIES = ("never", "on-failure", "exit-code")
#: success rules (``success:``, ``--success``)
SUCCESS_RULES = ("chief", "all-workers")
#: seconds other workers get to finish after the run has succeeded (``grace:``)
DEFAULT_GRACE = 5.0
#: the first port tried for jobs given as a count (``base_port:``)
DEFAULT_BASE_PORT = 2222
#: jobs with a meaning in TensorFlow's TF_CONFIG, in the order tfcluster lists them;
#: other job names (the guide's "local") come after them, in file order
KNOWN_JOBS = ("chief", "ps", "worker", "evaluator")
#: jobs whose tasks run a replica of the model (between-graph replication)
REPLICA_JOBS = ("chief", "worker")
#: jobs with at most one task (TensorFlow's rule)
SINGLE_TASK_JOBS = ("chief", "evaluator")
#: the tf.data service's jobs (the file's ``data_service:``): its dispatcher and its workers
DATA_DISPATCHER = "tfdata_dispatcher"
DATA_WORKER = "tfdata_worker"
DATA_SERVICE_JOBS = (DATA_DISPATCHER, DATA_WORKER)
#: jobs that serve the others and never end by themselves: started first, stopped by tfcluster
#: after the rest, never part of the success rule (ps, and the tf.data service)
SERVICE_JOBS = ("ps",) + DATA_SERVICE_JOBS
#: the backends ``launch --backend`` knows
BACKENDS = ("local", "ssh", "slurm", "ray")
#: where a run's tasks listen: a network namespace of the run's own (only its processes reach
#: its ports), or the machine's own network (every local user can connect)
NETWORKS = ("private", "host")


def job_rank(job: str) -> int:
    """Sort key of a job in listings (chief, ps, worker, evaluator, then the rest)."""
    return KNOWN_JOBS.index(job) if job in KNOWN_JOBS else len(KNOWN_JOBS)


def sort_jobs(jobs: Iterable[str]) -> list:
    """Jobs in listing order; unknown jobs keep their given order after the known ones."""
    jobs = list(jobs)
    return sorted(jobs, key=lambda j: (job_rank(j), jobs.index(j)))


@dataclass(frozen=True)
class RestartRule:
    """A task's effective restart settings: the file's ``restart:`` (or the job's), with the
    command line's ``--restart`` and ``--max-restarts`` applied."""

    policy: str = "never"
    max_restarts: int = 3
    max_total_restarts: Optional[int] = None
    backoff: float = 1.0
    min_uptime: float = 1.0       # a first run that fails sooner is not restarted (0: off)

    def __post_init__(self):
        if self.policy not in RESTART_POLICIES:
            raise ValueError(f"unknown restart policy {self.policy!r}")
