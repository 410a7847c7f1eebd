"""``tfcluster render``: the same cluster.yaml as a Kubeflow TFJob or a Slurm batch script.

Nothing here imports TensorFlow or talks to a cluster; both renderers return text.

* :func:`render_k8s` -- a ``kubeflow.org/v1`` TFJob. The TFJob operator creates one pod per
  replica, gives each its own address and sets ``TF_CONFIG``; the file's host:port entries are
  therefore not used, only the number of tasks per job (a list's length, or a count). Every
  pod runs ``python -m tfcluster.k8s.pod`` (:func:`pod_entry`), which gives the program the task
  contract from the operator's TF_CONFIG, as the JobSet and TrainJob renders' pods do from
  their layout; :func:`finish_pod` adds the file's ``kubernetes:`` pod settings.
* :func:`render_slurm` -- an sbatch script. Slurm chooses the nodes; every Slurm task runs the
  node agent (:mod:`tfcluster.backends.agent.node`), which works out its job and index from
  ``SLURM_PROCID`` the way TensorFlow's ``SlurmClusterResolver`` does, sets ``TF_CONFIG`` and
  runs the program (see :mod:`tfcluster.backends.slurm.batch`).
"""
from __future__ import annotations

import os
import re
import shlex
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from tfcluster.clusterfile import kubernetes, secrets
from tfcluster.clusterfile.config import Cluster, Task
from tfcluster.clusterfile.models import JobSpec
from tfcluster.clusterfile.vocabulary import DATA_SERVICE_JOBS
from tfcluster.errors import UserError
from tfcluster.plan import contract
from tfcluster.terminal import printable

if TYPE_CHECKING:
    from tfcluster.clusterfile.slurm import SlurmSpec

# TFJob replica types (training-operator: pkg/apis/kubeflow.org/v1/tensorflow_types.go).
TFJOB_REPLICA_TYPES = {"chief": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"}
TFJOB_DEFAULT_PORT = 2222               # the operator's default for the port named tfjob-port
TFJOB_PORT_NAME = "tfjob-port"
TFJOB_CONTAINER = "tensorflow"          # the operator looks for the container with this name
TFJOB_RESTART_POLICIES = {"never": "Never", "on-failure": "OnFailure", "exit-code": "ExitCode"}
CLEAN_POD_POLICIES = ("None", "Running", "All")

_PYTHONS = ("python", "python3")
# Every rendered pod runs its program through the contract's entry point (tfcluster.k8s.pod).
POD_ENTRY = ("python", "-m", "tfcluster.k8s.pod")


# --------------------------------------------------------------------------------------
# Kubernetes (Kubeflow TFJob)

def render_k8s(cluster: Cluster, image: Optional[str], name: Optional[str] = None,
               namespace: Optional[str] = None, clean_pod_policy: Optional[str] = None) -> str:
    """The cluster as a Kubeflow TFJob manifest (YAML text). Raises UserError on what a TFJob
    cannot express (an unknown job name, different GPU counts within one job)."""
    import yaml

    manifest = tfjob(cluster, image=image, name=name, namespace=namespace,
                     clean_pod_policy=clean_pod_policy)
    header = _header(cluster, "kubectl apply -f -")
    names = secret_env_names(cluster)
    if names:
        secret = secret_name(manifest["metadata"]["name"])
        ns = f" -n {manifest['metadata']['namespace']}" if "namespace" in manifest["metadata"] else ""
        header += (f"# Secret variables ({', '.join(names)}) are read from the Secret '{secret}'; "
                   f"create it first, for example:\n#   kubectl create secret generic {secret}{ns} "
                   + " ".join(f'--from-literal={n}="${n}"' for n in names) + "\n")
    return header + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=100)


def secret_name(job_name: str) -> str:
    """The Kubernetes Secret that holds a TFJob's secret variables: ``<job-name>-env``."""
    return f"{job_name[:59].rstrip('-')}-env"


def secret_env_names(cluster: Cluster) -> List[str]:
    """Variables of the tasks' env that are secret (declared in ``secrets:`` or by their name)."""
    names: List[str] = []
    for t in cluster.tasks:
        for k, v in t.env:
            if v and k not in names and secrets.is_secret(k, cluster.secret_names):
                names.append(k)
    return names


def check_image(cluster: Cluster, image: Optional[str], kind: str) -> None:
    """``--image`` is required unless the file gives every job its image (``kubernetes.image``,
    ``jobs.<job>.kubernetes.image``, as ``tfcluster import`` writes)."""
    if image is not None and str(image).strip():
        return
    missing = [job for job in cluster.jobs if not kubernetes.settings_for(cluster.spec, job).image]
    if missing:
        raise UserError(f"render {kind}: --image IMAGE is required (the container image that runs the "
                        f"program), or kubernetes.image in the file (no image for: {', '.join(missing)})")


def job_image(cluster: Cluster, job: str, image: Optional[str]) -> str:
    """The image of ``job``'s pods: ``--image`` when given, else the file's."""
    if image is not None and str(image).strip():
        return image
    return kubernetes.settings_for(cluster.spec, job).image or ""


def tfjob(cluster: Cluster, image: Optional[str], name: Optional[str] = None,
          namespace: Optional[str] = None, clean_pod_policy: Optional[str] = None) -> Dict[str, Any]:
    """The TFJob as a dict (what :func:`render_k8s` prints). ``image``: every pod's image
    (None: each job's from the file)."""
    check_image(cluster, image, "k8s")
    file_policy = cluster.spec.kubernetes.run_policy
    if clean_pod_policy is None:
        clean_pod_policy = (file_policy.clean_pod_policy if file_policy is not None
                            and file_policy.clean_pod_policy else "Running")
    if clean_pod_policy not in CLEAN_POD_POLICIES:
        raise UserError(f"clean pod policy '{clean_pod_policy}' is not one of {', '.join(CLEAN_POD_POLICIES)}")
    metadata = k8s_metadata(cluster, name, namespace)
    job_name = metadata["name"]

    replica_specs: Dict[str, Any] = {}
    problems: List[str] = []
    secret_keys = secret_env_names(cluster)
    for key in secret_keys:
        if not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
            problems.append(f"env.{printable(key)}: a secret variable becomes a key of the Secret "
                            f"'{secret_name(job_name)}', which allows only letters, digits, '-', '_' and '.'")
        if len({v for t in cluster.tasks for k, v in t.env if k == key}) > 1:
            problems.append(f"env.{printable(key)}: a secret variable with different values in different "
                            f"jobs; the Secret '{secret_name(job_name)}' holds one value per name")
    if cluster.spec.data_service is not None:
        problems.append("data_service: a TFJob has no replica type for the tf.data service; render "
                        "the file as a JobSet or a Trainer v2 TrainJob (render jobset|trainjob), "
                        "which start it with the cluster")
    for job, tasks in cluster.jobs.items():
        if job in DATA_SERVICE_JOBS:
            continue
        rtype = TFJOB_REPLICA_TYPES.get(job)
        if rtype is None:
            problems.append(f"cluster.{job}: a TFJob has only the jobs {', '.join(TFJOB_REPLICA_TYPES)}; "
                            f"rename '{job}' or use another backend")
            continue
        try:
            replica_specs[rtype] = _replica_spec(cluster, job, tasks, job_image(cluster, job, image),
                                                 secret_name(job_name), secret_keys)
        except UserError as e:
            problems.append(e.message)
    if problems:
        raise UserError("\n".join(problems))

    run_policy: Dict[str, Any] = {"cleanPodPolicy": clean_pod_policy,
                                  "backoffLimit": backoff_limit(cluster)}
    if file_policy is not None:
        run_policy.update(file_policy.tfjob())
    spec: Dict[str, Any] = {"runPolicy": run_policy}
    if cluster.success == "all-workers":
        spec["successPolicy"] = "AllWorkers"
    if cluster.spec.kubernetes.enable_dynamic_worker is not None:
        spec["enableDynamicWorker"] = cluster.spec.kubernetes.enable_dynamic_worker
    spec["tfReplicaSpecs"] = replica_specs
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": metadata, "spec": spec}


def restart_budget(cluster: Cluster) -> int:
    """Restarts a Kubernetes workload allows (TFJob ``backoffLimit``, JobSet ``maxRestarts``):
    ``restart.max_total_restarts``, else the largest per-task budget of a job that restarts; 0
    when no job restarts."""
    restarting = [t.restart for t in cluster.tasks if t.restart.policy != "never"]
    if not restarting:
        return 0
    if cluster.restart.max_total_restarts is not None:
        return int(cluster.restart.max_total_restarts)
    return max(r.max_restarts for r in restarting)


def backoff_limit(cluster: Cluster) -> int:
    """A workload's restart budget: ``kubernetes.run_policy.backoff_limit``, else
    :func:`restart_budget`."""
    policy = cluster.spec.kubernetes.run_policy
    if policy is not None and policy.backoff_limit is not None:
        return policy.backoff_limit
    return restart_budget(cluster)


def pod_entry(cluster: Cluster, job: str, tasks: List[Task], what: str = "pods") -> List[str]:
    """A job's pod command: ``python -m tfcluster.k8s.pod [OPTIONS] -- PROGRAM ARGS``, where the
    options carry what the contract gives the task besides its place (:mod:`tfcluster.k8s.pod`)."""
    words = _program_words(cluster, job)
    if not words:
        raise UserError(f"program.command: no program to run in the {what} of job '{job}'; set "
                        f"program.command (the command inside the image)")
    first = tasks[0]
    options = ["--task-flags"] if first.task_flags else []
    asked = kubernetes.settings_for(cluster.spec, job).limits.get(kubernetes.GPU_RESOURCE, "0")
    if all(contract.pod_gpus(t.gpus) == "" for t in tasks) and asked in ("0", ""):
        options.append("--no-gpus")    # unless the job's resources ask for GPUs themselves
    budget = 0 if first.restart.policy == "never" else restart_budget(cluster)
    if budget:
        options.append(f"--max-restarts={budget}")
    return list(POD_ENTRY) + options + ["--"] + words


def k8s_metadata(cluster: Cluster, name: Optional[str], namespace: Optional[str],
                 workload: bool = True) -> Dict[str, Any]:
    """``metadata`` of a manifest: ``name`` (default: from the file's name), ``namespace``, and
    tfcluster's label; a workload (what Kueue admits) also gets the file's ``kubernetes.queue``.
    Raises UserError for names Kubernetes refuses."""
    job_name = k8s_name(name or _stem(cluster))
    if name and job_name != name:
        raise UserError(f"--name '{printable(name)}' is not a Kubernetes name (lowercase letters, digits and '-', "
                        f"starting with a letter, at most 63 characters); for example '{job_name}'")
    metadata: Dict[str, Any] = {"name": job_name}
    if namespace:
        if k8s_name(namespace) != namespace:
            raise UserError(f"--namespace '{printable(namespace)}' is not a Kubernetes name")
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/managed-by": "tfcluster"}
    if workload:
        metadata["labels"].update(kubernetes.workload_labels(cluster.spec.kubernetes))
    return metadata


def _replica_spec(cluster: Cluster, job: str, tasks: List[Task], image: str,
                  secret: str, secret_keys: Sequence[str]) -> Dict[str, Any]:
    first = tasks[0]
    settings = kubernetes.settings_for(cluster.spec, job)
    container: Dict[str, Any] = {"name": TFJOB_CONTAINER, "image": image}
    if settings.entry == "program":     # the operator's TF_CONFIG reaches the program directly
        command, args = _program_parts(cluster, job)
        if command:
            container["command"] = command
        if args:
            container["args"] = args
    else:
        command = pod_entry(cluster, job, tasks)
        container.update(command=command[:1], args=command[1:])
    env = [{"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": k}}}
           if k in secret_keys else {"name": k, "value": v}
           for k, v in first.env if k != contract.TF_CONFIG]
    if env:
        container["env"] = env
    template: Dict[str, Any] = {"spec": {"containers": [container]}}
    finish_pod(template, container, cluster, job, tasks, TFJOB_PORT_NAME,
               settings.port or TFJOB_DEFAULT_PORT)
    container["image"] = image          # --image over the file's
    return {
        "replicas": len(tasks),
        "restartPolicy": settings.restart_policy or TFJOB_RESTART_POLICIES[first.restart.policy],
        "template": template,
    }


def _program_parts(cluster: Cluster, job: str) -> "tuple[List[str], List[str]]":
    """(command, args) of ``job`` as written in the file (``entry: program``)."""
    raw = _raw(cluster, job, "command")
    command = shlex.split(raw) if isinstance(raw, str) else list(raw or [])
    override = cluster.spec.jobs.get(job, JobSpec())
    args = override.args if override.args is not None else cluster.spec.program.args
    return command, list(args or [])


def finish_pod(template: Dict[str, Any], container: Dict[str, Any], cluster: Cluster, job: str,
               tasks: List[Task], port_name: str, port: int) -> None:
    """Add a job's working folder (an absolute ``cwd`` only: it is the image's), its port, its
    ``nvidia.com/gpu`` limit and its pod settings (``kubernetes:``, :mod:`tfcluster.clusterfile.kubernetes`) to a pod
    template and its container."""
    cwd = _raw(cluster, job, "cwd")
    if cwd and os.path.isabs(cwd):
        container["workingDir"] = cwd
    container["ports"] = [{"name": port_name, "containerPort": port}]
    settings = kubernetes.settings_for(cluster.spec, job)
    try:
        kubernetes.apply(template, container, settings, _gpu_count(job, tasks), f"jobs.{job}.kubernetes")
    except ValueError as e:
        raise UserError(str(e))


def _gpu_count(job: str, tasks: List[Task]) -> int:
    """GPUs per pod: the number of ids in each task's CUDA_VISIBLE_DEVICES (same for all tasks)."""
    counts = {}
    for t in tasks:
        ids = [g for g in (t.gpus or "").split(",") if g.strip()] if t.gpus is not None else []
        counts[t.index] = len(ids)
    distinct = sorted(set(counts.values()))
    if len(distinct) > 1:
        detail = ", ".join(f"{job}:{i} has {n}" for i, n in counts.items())
        raise UserError(f"jobs.{job}.gpus: on Kubernetes every pod of a job gets the same number of "
                        f"GPUs, but {detail}; give each task the same number of GPU ids")
    return distinct[0] if distinct else 0


def _program_words(cluster: Cluster, job: str) -> List[str]:
    """The job's command and args as written in the file (paths are the image's, not this
    machine's); python/python3 become the image's ``python``."""
    raw = _raw(cluster, job, "command")
    words = shlex.split(raw) if isinstance(raw, str) else list(raw or [])
    override = cluster.spec.jobs.get(job, JobSpec())
    args = override.args if override.args is not None else cluster.spec.program.args
    words = words + list(args or [])
    if words and os.path.basename(words[0]) in _PYTHONS:
        words[0] = "python"
    return words


def _raw(cluster: Cluster, job: str, key: str):
    override = cluster.spec.jobs.get(job)
    value = getattr(override, key, None) if override is not None else None
    return value if value is not None else getattr(cluster.spec.program, key)


def k8s_name(text: str) -> str:
    """A DNS-1123 label from ``text``: lowercase, [a-z0-9-], starts with a letter, <= 63 chars."""
    s = re.sub(r"[^a-z0-9-]+", "-", str(text).lower()).strip("-")
    s = re.sub(r"-{2,}", "-", s)
    if not s or not s[0].isalpha():
        s = "tf-" + s if s else "tfcluster"
    return s[:63].rstrip("-")


def _stem(cluster: Cluster) -> str:
    if cluster.source and cluster.source not in ("<string>",):
        stem = os.path.splitext(os.path.basename(cluster.source))[0]
        if stem and stem != "cluster":
            return stem
    return "tfcluster"


def _header(cluster: Cluster, how: str, wrapped: bool = False) -> str:
    """The first comment lines; ``wrapped``: the pods start through tfcluster.k8s.pod even where the
    file says ``entry: program`` (JobSet, TrainJob), which the image must then provide."""
    src = printable(cluster.source) if cluster.source else "a cluster dict"
    out = f"# Generated by tfcluster from {src}; submit with: {how}\n"
    if wrapped and any(kubernetes.settings_for(cluster.spec, j).entry == "program" for j in cluster.jobs):
        out += ("# The pods start through 'python -m tfcluster.k8s.pod', which builds TF_CONFIG: their image "
                "needs tfcluster installed (pip install tfcluster).\n")
    return out


# --------------------------------------------------------------------------------------
# Slurm

def render_slurm(cluster: Cluster, partition: Optional[str] = None, time: Optional[str] = None,
                 name: Optional[str] = None, command: Optional[Sequence[str]] = None,
                 task_flags: Optional[bool] = None, run_dir: Optional[str] = None,
                 overcommit: bool = True, slurm: Optional["SlurmSpec"] = None,
                 args: Sequence[str] = ()) -> str:
    """The cluster as an sbatch script: one Slurm task per TensorFlow task (counts or list
    lengths; hosts and ports come from the allocation). ``command`` replaces the file's program;
    ``args`` (``--arg`` words) change its flags.
    The script carries the same run plan that ``launch --backend slurm`` submits; scheduler
    options: ``slurm`` (default: the file's ``slurm:``), with ``partition``/``time`` over it, all
    validated (:mod:`tfcluster.clusterfile.slurm`)."""
    from tfcluster.backends.slurm.batch import batch_script, plan_data
    from tfcluster.backends.slurm.held_secrets import hold_back_secrets
    from tfcluster.clusterfile.slurm import from_flags
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    options = from_flags(slurm if slurm is not None else cluster.spec.slurm, partition=partition, time=time)
    plan = build_plan(cluster, LaunchOptions(backend="slurm", command=tuple(command or ()),
                                             args=tuple(args), task_flags=task_flags,
                                             run_id="slurm", slurm=options))
    plan = plan.with_run_dir(run_dir or os.path.join(plan.logdir, "slurm-{job_id}"))
    data = plan_data(plan)
    hold_back_secrets(data)       # secret values stay out of the script
    return batch_script(data, name=name or k8s_name(_stem(cluster)), overcommit=overcommit)
