"""``tfcluster render jobset``: the cluster file as a Kubernetes JobSet (``jobset.x-k8s.io/v1alpha2``).

For clusters without Kubeflow: JobSet (kubernetes-sigs/jobset) runs a group of Jobs with one
headless service. Nothing here imports TensorFlow or talks to a cluster.

The mapping
  * One replicated job per TensorFlow job (``chief``, ``ps``, ``worker``, ``evaluator``, or any
    other job name made a Kubernetes name), ``replicas: 1``: its one Job is an Indexed Job with
    ``completions = parallelism =`` the number of tasks (a list's length or a count), so task
    ``worker:i`` is the pod with completion index ``i``.
  * ``spec.network.enableDNSHostnames`` with ``subdomain`` = the JobSet's name: JobSet creates the
    headless service and every pod is reachable as
    ``<jobset>-<rjob>-<job index>-<pod index>.<subdomain>`` (so ``worker:1`` is
    ``NAME-worker-0-1.NAME``). ``publishNotReadyAddresses`` lets tasks find each other before
    they are ready. The file's host:port entries are not used; every task listens on 2222.
  * Every container runs ``python -m tfcluster.k8s.pod [OPTIONS] -- PROGRAM ARGS``
    (:mod:`tfcluster.k8s.pod`): from the layout in ``TFCLUSTER_JOBSET`` and the pod's own
    annotations (downward API) plus ``JOB_COMPLETION_INDEX`` it computes ``TF_CONFIG`` and the
    rest of the task contract (``TFCLUSTER_RESTART_COUNT`` from JobSet's
    ``jobset.sigs.k8s.io/restart-attempt`` annotation) and execs the program. The image needs
    tfcluster installed (``pip install tfcluster``).
  * Pod settings: the file's ``kubernetes:`` section (:mod:`tfcluster.clusterfile.kubernetes`) in every
    Job's pod template; ``kubernetes.queue`` as the JobSet's Kueue label.
  * :func:`jobset_spec` is also the template of ``render trainjob``'s runtime
    (:mod:`tfcluster.k8s.trainjob`).
  * Success (``success:``): ``chief`` with a chief job -> ``successPolicy: {operator: All,
    targetReplicatedJobs: [chief]}``. ``chief`` without a chief job means worker:0 (TensorFlow's
    rule); JobSet's success policy only sees whole Jobs, so the worker Job gets Kubernetes' Job
    ``successPolicy: {rules: [{succeededIndexes: "0"}]}`` (the Job succeeds when pod 0 does; the
    other worker pods are then terminated, with no grace period) and the JobSet targets
    ``[worker]``. Job success policies need Kubernetes 1.31 or later (beta, on by default).
    ``all-workers`` -> ``All`` over ``[chief, worker]``. When the JobSet has succeeded the JobSet
    controller deletes the Jobs still running (ps, evaluator).
  * Failure (``restart:``): pods use ``restartPolicy: Never`` and Jobs ``backoffLimit: 0``, so a
    failed task fails its Job, and the JobSet's ``failurePolicy`` restarts the whole JobSet (all
    pods are recreated, with the same names) up to ``maxRestarts`` times: the file's
    ``restart.max_total_restarts`` when given, else the largest ``max_restarts`` of a job that
    restarts, 0 when no job does. A job whose policy is ``never`` gets a ``FailJobSet`` rule; a job
    with ``exit-code`` gets a Job ``podFailurePolicy`` (exit codes 1-127 fail the Job at once with
    reason ``PodFailurePolicy``) and a ``FailJobSet`` rule for that reason, so only signals and
    exit codes 128-255 restart. Unlike ``tfcluster launch`` and the TFJob operator, JobSet
    restarts every task, not just the one that failed.
  * GPUs: ``jobs.<job>.gpus`` -> an ``nvidia.com/gpu`` limit per pod (the number of ids; the
    device plugin picks the devices), none for ps unless given.
  * Environment: ``program.env`` / ``jobs.<job>.env``; a variable whose name looks secret
    (:func:`is_secret`) is read from the Kubernetes Secret ``<name>-env``
    (``valueFrom.secretKeyRef``) and its value is never printed. When jobs give one secret
    variable different values, each job gets its own key ``<rjob>.<VAR>``.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from tfcluster.clusterfile import kubernetes, secrets
from tfcluster.clusterfile.config import Cluster, Task
from tfcluster.errors import UserError
from tfcluster.k8s import pod
from tfcluster.k8s.render import (
    _header,
    backoff_limit,
    check_image,
    finish_pod,
    job_image,
    k8s_metadata,
    k8s_name,
    pod_entry,
)
from tfcluster.plan import contract

API_VERSION = "jobset.x-k8s.io/v1alpha2"
PORT = 2222
PORT_NAME = "tensorflow"
CONTAINER = "tensorflow"
MAX_NAME = 63                         # a pod's name is a DNS label
PERMANENT_EXIT_CODES = list(range(1, 128))  # TFJob's ExitCode policy: 1-127 permanent


def is_secret(cluster: Cluster, name: str) -> bool:
    """Whether the variable ``name`` is taken from the Secret instead of written inline:
    tfcluster's one masking policy (the file's ``secrets:`` list, or a secret-looking name)."""
    return secrets.is_secret(name, cluster.secret_names)


def render_jobset(cluster: Cluster, image: str, name: Optional[str] = None,
                  namespace: Optional[str] = None) -> str:
    """The cluster as a JobSet manifest (YAML text)."""
    import yaml

    manifest = jobset(cluster, image=image, name=name, namespace=namespace)
    secret = secret_keys(cluster, manifest["metadata"]["name"])
    how = "kubectl apply -f -"
    if secret:
        keys = " ".join(f"--from-literal={k}=..." for k in secret[1])
        how = f"kubectl create secret generic {secret[0]} {keys}; then {how}"
    return _header(cluster, how, wrapped=True) + yaml.safe_dump(manifest, sort_keys=False,
                                                  default_flow_style=False, width=100)


def jobset(cluster: Cluster, image: str, name: Optional[str] = None,
           namespace: Optional[str] = None) -> Dict[str, Any]:
    """The JobSet as a dict (what :func:`render_jobset` prints). Raises UserError for what a
    JobSet cannot express (different GPU counts within a job, names too long)."""
    check_image(cluster, image, "jobset")
    metadata = k8s_metadata(cluster, name, namespace)
    spec = jobset_spec(cluster, image, metadata["name"], "--name" if name else "the file's name")
    return {"apiVersion": API_VERSION, "kind": "JobSet", "metadata": metadata, "spec": spec}


def jobset_spec(cluster: Cluster, image: str, js_name: str, source: str, *, subdomain: bool = True,
                container_name: str = CONTAINER, job_labels: Optional[Dict[str, Dict[str, str]]] = None
                ) -> Dict[str, Any]:
    """A JobSet's ``spec`` for the cluster; the JobSet will be named ``js_name`` (``source``
    says where that name came from, for errors). ``subdomain`` False leaves the headless
    service's name to JobSet (its default: the JobSet's name), as a runtime template must;
    ``job_labels``: labels of a replicated job's Job template, by TensorFlow job."""
    rjobs = _rjob_names(cluster)
    layout: Dict[str, Any] = {"port": PORT,
                              "jobs": {job: {"rjob": rjobs[job], "replicas": 1, "pods": len(tasks)}
                                       for job, tasks in cluster.jobs.items()}}
    for job in cluster.jobs:      # a job's own port (kubernetes.port), as a TFJob's tfjob-port
        port = kubernetes.settings_for(cluster.spec, job).port
        if port and port != PORT:
            layout["jobs"][job]["port"] = port
    if subdomain:
        layout = {"subdomain": js_name, **layout}
    _check_lengths(js_name, layout, source)
    secret = secret_keys(cluster, js_name)
    problems: List[str] = []
    replicated = []
    for job, tasks in cluster.jobs.items():
        try:
            rj = _replicated_job(cluster, job, tasks, rjobs[job], job_image(cluster, job, image), layout,
                                 secret, container_name)
        except UserError as e:
            problems.append(e.message)
            continue
        if job_labels and job in job_labels:
            rj["template"] = {"metadata": {"labels": dict(job_labels[job])}, **rj["template"]}
        replicated.append(rj)
    if problems:
        raise UserError("\n".join(problems))

    network: Dict[str, Any] = {"enableDNSHostnames": True}
    if subdomain:
        network["subdomain"] = js_name
    network["publishNotReadyAddresses"] = True
    spec: Dict[str, Any] = {
        "network": network,
        "successPolicy": {"operator": "All", "targetReplicatedJobs": _success_targets(cluster, rjobs)},
        "failurePolicy": _failure_policy(cluster, rjobs),
        "replicatedJobs": replicated,
    }
    run_policy = cluster.spec.kubernetes.run_policy
    if run_policy is not None and run_policy.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = run_policy.ttl_seconds_after_finished
    return spec


def _rjob_names(cluster: Cluster) -> Dict[str, str]:
    names: Dict[str, str] = {}
    for job in cluster.jobs:
        rjob = k8s_name(job)
        if rjob in names.values():
            other = next(j for j, r in names.items() if r == rjob)
            raise UserError(f"cluster.{job}: jobs '{other}' and '{job}' both become the replicated "
                            f"job '{rjob}' (Kubernetes names have no '_' or capitals); rename one")
        names[job] = rjob
    return names


def _check_lengths(js_name: str, layout: Dict[str, Any], source: str) -> None:
    """JobSet's own admission check: the longest pod name of every replicated job, with the Job
    controller's 5-character suffix, must be a DNS label (at most 63 characters)."""
    for job, spec in layout["jobs"].items():
        longest = f"{js_name}-{spec['rjob']}-{spec['replicas'] - 1}-{spec['pods'] - 1}-xxxxx"
        if len(longest) > MAX_NAME:
            raise UserError(f"JobSet name '{js_name}' ({source}): the pod names of job '{job}' "
                            f"('{longest}') would be longer than {MAX_NAME} characters; give a "
                            f"shorter --name")


def _success_targets(cluster: Cluster, rjobs: Dict[str, str]) -> List[str]:
    if cluster.success == "all-workers":
        return [rjobs[j] for j in ("chief", "worker") if j in cluster.jobs]
    return [rjobs[cluster.chief.job]]


def _failure_policy(cluster: Cluster, rjobs: Dict[str, str]) -> Dict[str, Any]:
    policy: Dict[str, Any] = {"maxRestarts": backoff_limit(cluster)}
    by_policy: Dict[str, List[str]] = {}
    for job, tasks in cluster.jobs.items():
        by_policy.setdefault(tasks[0].restart.policy, []).append(rjobs[job])
    rules = []
    if by_policy.get("exit-code"):
        rules.append({"name": "exit_code_permanent", "action": "FailJobSet",
                      "onJobFailureReasons": ["PodFailurePolicy"],
                      "targetReplicatedJobs": by_policy["exit-code"]})
    if by_policy.get("never") and policy["maxRestarts"] > 0:
        rules.append({"name": "never_restart", "action": "FailJobSet",
                      "targetReplicatedJobs": by_policy["never"]})
    if rules:
        policy["rules"] = rules
    return policy


def _replicated_job(cluster: Cluster, job: str, tasks: List[Task], rjob: str, image: str,
                    layout: Dict[str, Any], secret: Optional[Tuple[str, List[str]]],
                    container_name: str = CONTAINER) -> Dict[str, Any]:
    first = tasks[0]
    entry = pod_entry(cluster, job, tasks)
    container: Dict[str, Any] = {"name": container_name, "image": image,
                                 "command": entry[:1], "args": entry[1:]}
    container["env"] = pod_env(cluster, job, rjob, layout, secret)
    pod_template: Dict[str, Any] = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    finish_pod(pod_template, container, cluster, job, tasks, PORT_NAME, layout["jobs"][job].get("port", PORT))
    container["image"] = image          # --image over the file's
    n = len(tasks)
    job_spec: Dict[str, Any] = {"completionMode": "Indexed", "completions": n, "parallelism": n,
                                "backoffLimit": 0}
    if job == "worker" and cluster.success == "chief" and cluster.chief.job == "worker" and n > 1:
        job_spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    if first.restart.policy == "exit-code":
        job_spec["podFailurePolicy"] = {"rules": [{
            "action": "FailJob",
            "onExitCodes": {"containerName": container_name, "operator": "In",
                            "values": PERMANENT_EXIT_CODES}}]}
    job_spec["template"] = pod_template
    return {"name": rjob, "replicas": 1, "template": {"spec": job_spec}}


def pod_env(cluster: Cluster, job: str, rjob: str, layout: Dict[str, Any],
            secret: Optional[Tuple[str, List[str]]]) -> List[Dict[str, Any]]:
    """The container's env: the file's variables (secret-looking ones from the Secret), the
    layout and the downward-API values :mod:`tfcluster.k8s.pod` reads."""
    env: List[Dict[str, Any]] = []
    for key, _value in cluster.jobs[job][0].env:
        if key == contract.TF_CONFIG:     # the pod's own, from the contract
            continue
        if is_secret(cluster, key) and secret:
            env.append({"name": key, "valueFrom": {"secretKeyRef": {
                "name": secret[0], "key": _secret_key(cluster, rjob, job, key)}}})
        else:
            env.append({"name": key, "value": _value})
    env.append({"name": pod.LAYOUT_ENV, "value": json.dumps(layout, separators=(",", ":"))})
    # the pod's place in the JobSet and JobSet's restart attempt (-> TFCLUSTER_RESTART_COUNT)
    for var, annotation in pod.DOWNWARD_ANNOTATIONS.items():
        env.append({"name": var, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{annotation}']"}}})
    return env


def secret_keys(cluster: Cluster, js_name: str) -> Optional[Tuple[str, List[str]]]:
    """(Secret name, its keys) the JobSet reads, or None when no variable looks secret."""
    keys = []
    for job, tasks in cluster.jobs.items():
        for key, _ in tasks[0].env:
            if key != contract.TF_CONFIG and is_secret(cluster, key):
                k = _secret_key(cluster, k8s_name(job), job, key)
                if k not in keys:
                    keys.append(k)
    return (f"{js_name}-env", keys) if keys else None


def _secret_key(cluster: Cluster, rjob: str, job: str, key: str) -> str:
    """``VAR``, or ``<rjob>.VAR`` when jobs give VAR different values."""
    values = {dict(tasks[0].env).get(key) for tasks in cluster.jobs.values()} - {None}
    return key if len(values) <= 1 else f"{rjob}.{key}"
