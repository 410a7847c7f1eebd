"""``tfcluster render trainjob``: a TensorFlow ps/worker runtime for Kubeflow Trainer v2.

Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``) runs a ``TrainJob`` from a
``ClusterTrainingRuntime`` (or a namespaced ``TrainingRuntime``) whose template is a JobSet. It
ships runtimes for torch, DeepSpeed, JAX, MLX and XGBoost, none for TensorFlow; this module
renders one for the cluster file, and a TrainJob that refers to it. Nothing here imports
TensorFlow or talks to a cluster.

The mapping
  * The runtime's template is the JobSet of :mod:`tfcluster.k8s.jobset` (one replicated job per
    TensorFlow job: chief, ps, worker, evaluator; counts, GPUs, secrets, success and failure
    policies, pod settings), with two changes a runtime needs: the headless service keeps
    JobSet's default name (the JobSet is named after the TrainJob, which the runtime does not
    know), and every container is named ``node``.
  * The trainer: Trainer applies a TrainJob's ``spec.trainer`` (image, command, args, env,
    ``numNodes``) to the replicated job labelled ``trainer.kubeflow.org/trainjob-ancestor-step:
    trainer`` (its container must be named ``node``, its ``replicas`` 1: Trainer's admission
    rules). That is the job of tfcluster's chief task: ``chief`` (``numNodes: 1``), else
    ``worker`` (``numNodes`` = the workers). Trainer gives the trainer's pods its progress
    endpoint, and the chief is the task that reports a run's progress (a Keras
    ParameterServerStrategy coordinator, a TF1 chief); :mod:`tfcluster.k8s.trainer_progress` bridges
    its ``@tfcluster progress`` lines to ``status.trainerStatus``. The TrainJob carries the
    file's count: the layout every pod reads is the runtime's, so a different ``numNodes``
    needs a new render.
  * ``mlPolicy`` has ``numNodes`` only (no torch/mpi/jax policy), so Trainer's PlainML plugin
    applies: no framework variables are injected; each pod computes its TF_CONFIG with
    ``python -m tfcluster.k8s.pod`` exactly as in a JobSet, and its restart count from JobSet's
    ``jobset.sigs.k8s.io/restart-attempt`` annotation.
  * The runtime is specific to the file (its layout, program and policies); it is named
    ``tensorflow-<name>`` unless ``runtime_name`` is given, and labelled
    ``trainer.kubeflow.org/framework: tensorflow``.
  * The TrainJob gets the file's ``kubernetes.queue`` as Kueue's queue label; secrets come from
    the Secret ``<trainjob>-env`` in the TrainJob's namespace.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from tfcluster.clusterfile.config import Cluster
from tfcluster.errors import UserError
from tfcluster.k8s.jobset import jobset_spec
from tfcluster.k8s.render import _header, check_image, job_image, k8s_metadata, k8s_name
from tfcluster.plan import contract

API_VERSION = "trainer.kubeflow.org/v1alpha1"
API_GROUP = "trainer.kubeflow.org"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
FRAMEWORK = "tensorflow"
CONTAINER = "node"        # Trainer's name for the trainer container (constants.Node)


def trainer_job(cluster: Cluster) -> str:
    """The TensorFlow job that is Trainer's "trainer": the job of tfcluster's chief task (the
    ``chief``, else ``worker``), whose first pod reports the run's progress."""
    return contract.chief_task(cluster.jobs).split(":")[0]


def runtime_and_trainjob(cluster: Cluster, image: str, name: Optional[str] = None,
                         namespace: Optional[str] = None, runtime_name: Optional[str] = None,
                         namespaced: bool = False) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the runtime, the TrainJob) as dicts. ``namespaced``: a ``TrainingRuntime`` in the
    TrainJob's namespace instead of a ``ClusterTrainingRuntime``. Raises UserError for what
    cannot be expressed (names too long, different GPU counts within a job)."""
    check_image(cluster, image, "trainjob")
    metadata = k8s_metadata(cluster, name, namespace)
    job_name = metadata["name"]
    rt_name = runtime_name or k8s_name(f"{FRAMEWORK}-{job_name}")
    if runtime_name and k8s_name(runtime_name) != runtime_name:
        raise UserError(f"--runtime-name '{runtime_name}' is not a Kubernetes name (lowercase letters, "
                        f"digits and '-', starting with a letter, at most 63 characters); for example "
                        f"'{k8s_name(runtime_name)}'")
    trainer = trainer_job(cluster)
    spec = jobset_spec(cluster, image, job_name, "--name" if name else "the file's name",
                       subdomain=False, container_name=CONTAINER,
                       job_labels={trainer: {ANCESTOR_LABEL: ANCESTOR_TRAINER}})
    nodes = len(cluster.jobs[trainer])
    kind = "TrainingRuntime" if namespaced else "ClusterTrainingRuntime"
    rt_meta = k8s_metadata(cluster, rt_name, namespace if namespaced else None, workload=False)
    rt_meta["labels"] = {FRAMEWORK_LABEL: FRAMEWORK, **rt_meta["labels"]}
    runtime = {"apiVersion": API_VERSION, "kind": kind, "metadata": rt_meta,
               "spec": {"mlPolicy": {"numNodes": nodes}, "template": {"spec": spec}}}
    trainjob = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata,
                "spec": {"runtimeRef": {"apiGroup": API_GROUP, "kind": kind, "name": rt_name},
                         "trainer": {"image": job_image(cluster, trainer, image), "numNodes": nodes}}}
    return runtime, trainjob


def render_trainjob(cluster: Cluster, image: str, name: Optional[str] = None,
                    namespace: Optional[str] = None, runtime_name: Optional[str] = None,
                    namespaced: bool = False) -> str:
    """The runtime and the TrainJob as two YAML documents."""
    import yaml

    from tfcluster.k8s.jobset import secret_keys

    runtime, trainjob = runtime_and_trainjob(cluster, image, name, namespace, runtime_name, namespaced)
    how = "kubectl apply -f -"
    secret = secret_keys(cluster, trainjob["metadata"]["name"])
    if secret:
        ns = f" -n {namespace}" if namespace else ""
        keys = " ".join(f"--from-literal={k}=..." for k in secret[1])
        how = f"kubectl create secret generic {secret[0]}{ns} {keys}; then {how}"
    header = _header(cluster, how, wrapped=True) + (
        f"# The {runtime['kind']} '{runtime['metadata']['name']}' holds this file's layout "
        f"({trainjob['spec']['trainer']['numNodes']} {trainer_job(cluster)} pods): render again to change it.\n")
    dump = lambda m: yaml.safe_dump(m, sort_keys=False, default_flow_style=False, width=100)  # noqa: E731
    return header + dump(runtime) + "---\n" + dump(trainjob)
