"""What a backend does, as the plan asks it: one :class:`BackendKind` per name of
``launch --backend`` (:data:`tfcluster.clusterfile.vocabulary.BACKENDS`).

The plan (:func:`tfcluster.plan.runplan.build_plan`), ``doctor``, ``validate``, ``status`` and
``stack`` ask these questions -- does the backend place the tasks itself, choose their ports on
their hosts, take Slurm's options, grow elastically -- instead of comparing names, so a new
backend is a new entry here, not new branches in each of them. The processes themselves are
started by the backends under :mod:`tfcluster.backends`. No TensorFlow here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

from tfcluster.clusterfile import vocabulary
from tfcluster.errors import UserError

#: the ``elastic.on_change`` modes (clusterfile/models.py: ElasticSpec)
ALL_ON_CHANGE = ("go-on", "restart", "restart-chief", "restart-on-join")

#: how jobs given as a count (``worker: 4``) get their hosts and ports
SCHEDULER = "scheduler"        # the scheduler lays them out when the job starts (Slurm)
HOST_SLOTS = "host-slots"      # on the slots of the file's ``hosts:``, ports chosen there (ssh)
LOCAL_PORTS = "local-ports"    # free ports of this machine (local; Ray: placeholders it replaces)


@dataclass(frozen=True)
class BackendKind:
    """What one backend does, for the plan and the commands that read a run."""

    name: str
    #: it chooses the nodes (Slurm, Ray): every task is started, per-host mode (--host) is not
    #: for it, and the ports of this machine are not the tasks'
    places_tasks: bool
    #: its tasks may run on other machines: the run is on the host network and starts every task
    #: (local starts this machine's tasks only)
    reaches_other_hosts: bool
    #: ports are chosen where the tasks run (node agents, Ray), so the plan chooses none
    #: (no profiler ports here)
    chooses_ports_on_hosts: bool
    #: tfcluster reaches the file's hosts itself, over ssh (doctor checks they reach each other)
    over_ssh: bool
    #: the run is a Slurm job: ``slurm:`` options, #SBATCH lines, srun on its nodes
    takes_slurm_options: bool
    #: where jobs given as a count go: SCHEDULER, HOST_SLOTS or LOCAL_PORTS
    count_layout: str
    #: the ``elastic.on_change`` modes it carries out (empty: not elastic)
    elastic_on_change: Tuple[str, ...]
    #: it runs the tf.data service's jobs
    runs_data_service: bool
    #: a worker that comes back is placed anew, at a new address (which a TF1 ps or a PSS
    #: coordinator does not know: elastic.on_change go-on cannot grow there)
    rejoins_at_new_address: bool = False
    #: why workers beyond the file's cannot be started there (elastic.max_workers), "" where they can
    no_growth: str = ""
    #: the spare workers of a sized run (elastic.max_workers) are placed by the backend once the
    #: cluster has room for them (Ray: a placement group of their own each, placed when a node
    #: with room joins): their endpoints are known only then, not when the plan is made
    places_spares_late: bool = False

    @property
    def elastic(self) -> bool:
        """Whether workers may leave and come back (``elastic:``)."""
        return bool(self.elastic_on_change)


KINDS: Dict[str, BackendKind] = {k.name: k for k in (
    BackendKind("local", places_tasks=False, reaches_other_hosts=False, chooses_ports_on_hosts=False,
                over_ssh=False, takes_slurm_options=False, count_layout=LOCAL_PORTS,
                elastic_on_change=ALL_ON_CHANGE, runs_data_service=True),
    BackendKind("ssh", places_tasks=False, reaches_other_hosts=True, chooses_ports_on_hosts=True,
                over_ssh=True, takes_slurm_options=False, count_layout=HOST_SLOTS,
                elastic_on_change=ALL_ON_CHANGE, runs_data_service=True),
    BackendKind("slurm", places_tasks=True, reaches_other_hosts=True, chooses_ports_on_hosts=True,
                over_ssh=False, takes_slurm_options=True, count_layout=SCHEDULER,
                elastic_on_change=("go-on",), runs_data_service=True,
                no_growth="a Slurm allocation does not grow (its nodes are fixed when the job starts)"),
    BackendKind("ray", places_tasks=True, reaches_other_hosts=True, chooses_ports_on_hosts=True,
                over_ssh=False, takes_slurm_options=False, count_layout=LOCAL_PORTS,
                elastic_on_change=ALL_ON_CHANGE, runs_data_service=False, rejoins_at_new_address=True,
                places_spares_late=True),
)}


def backend_kind(name: str) -> BackendKind:
    """The kind of backend ``name``. Raises UserError (one line, exit 2) for a name that is not
    one of vocabulary.BACKENDS."""
    kind = KINDS.get(name)
    if kind is None:
        raise UserError(f"--backend: '{name}' is not one of {', '.join(vocabulary.BACKENDS)}")
    return kind


def recorded_kind(name: object) -> BackendKind:
    """The kind of a backend named in a run's record (run.json), local when it names none or
    one this version does not know."""
    return KINDS.get(name, KINDS["local"]) if isinstance(name, str) else KINDS["local"]
