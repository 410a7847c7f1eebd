"""``tfcluster import TFJOB.yaml``: a Kubeflow TFJob as a cluster file.

Reads ``kubeflow.org/v1`` TFJobs (and ``v1beta2``/``v1beta1``, whose run policy sits directly
in ``spec``), one document or several (``---``), a ``kind: List`` (``kubectl get tfjob -o
yaml``); ``status`` and ``metadata.managedFields`` are ignored. Pure: nothing here imports
TensorFlow or talks to a cluster.

========================================= ==================================================
TFJob                                     cluster file
========================================= ==================================================
``tfReplicaSpecs.<Type>.replicas``        ``cluster: {<type>: N}`` (Chief/Master -> chief,
                                          PS -> ps, Worker -> worker, Evaluator -> evaluator)
``restartPolicy``                         ``jobs.<job>.restart.policy`` (Never, OnFailure,
                                          ExitCode; Always -> on-failure locally and
                                          ``kubernetes.restart_policy: Always``)
container ``tensorflow``: image, command, ``kubernetes.image``, ``command``, ``args``, ``env``
args, env (valueFrom: ``env_from``),      (``kubernetes.env_from``), ``kubernetes.resources``,
resources, volumeMounts, workingDir,      ``volume_mounts``, ``cwd``, ``port`` (the port
ports (``tfjob-port``; others)            named ``tfjob-port``, default 2222), ``ports``
pod: volumes, nodeSelector, tolerations,  ``kubernetes.volumes``, ``node_selector``,
affinity, serviceAccountName,             ``tolerations``, ``affinity``, ``service_account``,
imagePullSecrets, priorityClassName,      ``image_pull_secrets``, ``priority_class``,
metadata labels and annotations           ``labels``, ``annotations``
``runPolicy``                             ``kubernetes.run_policy`` (+ ``restart.
                                          max_total_restarts`` from backoffLimit);
                                          ``schedulingPolicy.queue`` -> ``kubernetes.queue``
``successPolicy: AllWorkers``             ``success: all-workers``
``enableDynamicWorker``                   ``kubernetes.enable_dynamic_worker``
========================================= ==================================================

Settings equal in every job go file-wide (``program:``, ``kubernetes:``), the others per job.
The pods keep running the program themselves (``kubernetes.entry: program``), so that ``render
k8s`` gives back a TFJob that runs on the same image. What a cluster file cannot hold (init
containers, sidecars, security contexts, probes, ...) is listed: :func:`import_tfjob` returns
it, the command prints it on stderr and the written file names it in a comment block.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from tfcluster.clusterfile.kubernetes import VOLUME_SOURCES
from tfcluster.errors import UserError

MAX_BYTES = 16 << 20                    # a manifest bigger than this is not a TFJob
API_VERSIONS = ("kubeflow.org/v1", "kubeflow.org/v1beta2", "kubeflow.org/v1beta1")
# Replica types (training-operator pkg/apis/kubeflow.org/v1/tensorflow_types.go), case-insensitive.
REPLICA_JOBS = {"chief": "chief", "master": "chief", "ps": "ps", "worker": "worker",
                "evaluator": "evaluator"}
JOB_ORDER = ("chief", "ps", "worker", "evaluator")
RESTART_POLICIES = {"Never": "never", "OnFailure": "on-failure", "ExitCode": "exit-code",
                    "Always": "on-failure"}
DEFAULT_PORT = 2222
PORT_NAME = "tfjob-port"
CONTAINER = "tensorflow"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The keys tfcluster carries; everything else is listed as left out.
CONTAINER_KEYS = ("name", "image", "command", "args", "env", "resources", "volumeMounts", "ports",
                  "workingDir")
POD_KEYS = ("containers", "volumes", "nodeSelector", "tolerations", "affinity", "serviceAccountName",
            "imagePullSecrets", "priorityClassName", "restartPolicy")
RUN_POLICY_KEYS = {"cleanPodPolicy": "clean_pod_policy", "backoffLimit": "backoff_limit",
                   "activeDeadlineSeconds": "active_deadline_seconds",
                   "ttlSecondsAfterFinished": "ttl_seconds_after_finished"}
SCHEDULING_KEYS = {"minAvailable": "min_available", "priorityClass": "priority_class",
                   "scheduleTimeoutSeconds": "schedule_timeout_seconds",
                   "minResources": "min_resources"}
# PodSettings keys (jobs.<job>.kubernetes) that may go file-wide when every job has the same.
POD_SETTINGS = ("image", "port", "ports", "env_from", "resources", "volume_mounts", "volumes",
                "node_selector", "tolerations", "affinity", "service_account", "image_pull_secrets",
                "priority_class", "labels", "annotations", "restart_policy")


def read_documents(text: str, source: str) -> List[Any]:
    """Every YAML document of ``text`` (aliases limited as in cluster files)."""
    import yaml

    from tfcluster.clusterfile.yaml_lines import safe_loader, syntax_error
    from tfcluster.terminal import printable

    if len(text) > MAX_BYTES:
        raise UserError(f"{printable(source)}: larger than {MAX_BYTES >> 20} MiB; not a TFJob manifest")
    loader = safe_loader(text)
    docs: List[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if loader.duplicates:
                raise UserError(f"{printable(source)}: not valid YAML: {loader.duplicates[0][2]}")
            docs.append(loader.construct_document(node))
    except yaml.YAMLError as e:
        raise UserError(printable(f"{source}: not valid YAML: {syntax_error(e, text)}"))
    except (ValueError, TypeError, RecursionError, OverflowError) as e:
        raise UserError(printable(f"{source}: not valid YAML: {type(e).__name__}: {str(e)[:120]}"))
    finally:
        loader.dispose()
    return docs


def find_tfjobs(docs: List[Any], left_out: List[str]) -> List[Dict[str, Any]]:
    """The TFJobs among ``docs`` (a ``kind: List``'s items included); other objects are named
    in ``left_out``."""
    found: List[Dict[str, Any]] = []
    for number, doc in enumerate(docs, 1):
        if doc is None:
            continue
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        if not isinstance(items, list):
            raise UserError(f"document {number}: a List whose items are not a list")
        for item in items:
            if isinstance(item, dict) and item.get("kind") == "TFJob":
                found.append(item)
            elif isinstance(item, dict) and isinstance(item.get("kind"), str):
                meta = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
                left_out.append(f"document {number}: {_text(item['kind'])} "
                                f"'{_text(meta.get('name', ''))}' (not a TFJob)")
            else:
                left_out.append(f"document {number}: not a Kubernetes object")
    return found


def import_tfjob(text: str, source: str = "<stdin>",
                 name: Optional[str] = None) -> Tuple[Dict[str, Any], List[str], Dict[str, Any]]:
    """(cluster file data, what was left out, the TFJob's metadata) for the TFJob in ``text``
    (``name`` picks one of several). Raises UserError with one line on bad input."""
    left_out: List[str] = []
    jobs = find_tfjobs(read_documents(text, source), left_out)
    if name is not None:
        jobs = [j for j in jobs if isinstance(j.get("metadata"), dict) and j["metadata"].get("name") == name]
        if not jobs:
            raise UserError(f"{_text(source)}: no TFJob named '{_text(name)}'")
    if not jobs:
        raise UserError(f"{_text(source)}: no TFJob in it (kind: TFJob, apiVersion: kubeflow.org/v1)")
    if len(jobs) > 1:
        names = ", ".join(_text(str((j.get("metadata") or {}).get("name", "?"))) for j in jobs)
        raise UserError(f"{_text(source)}: {len(jobs)} TFJobs ({names}); pick one with --name")
    data, meta = convert(jobs[0], left_out)
    return data, left_out, meta


def convert(tfjob: Dict[str, Any], left_out: List[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """One TFJob (a dict) -> (cluster file data, its metadata)."""
    version = tfjob.get("apiVersion")
    if version not in API_VERSIONS:
        raise UserError(f"apiVersion: '{_text(str(version))}' is not a TFJob version tfcluster reads "
                        f"({', '.join(API_VERSIONS)})")
    meta = _mapping(tfjob.get("metadata"), "metadata")
    spec = _mapping(tfjob.get("spec"), "spec")
    replicas = _mapping(spec.get("tfReplicaSpecs"), "spec.tfReplicaSpecs")
    if not replicas:
        raise UserError("spec.tfReplicaSpecs: empty; a TFJob needs at least one replica type")

    per_job: Dict[str, Dict[str, Any]] = {}
    counts: Dict[str, int] = {}
    for rtype, rspec in replicas.items():
        job = REPLICA_JOBS.get(str(rtype).lower())
        where = f"spec.tfReplicaSpecs.{_text(str(rtype))}"
        if job is None:
            raise UserError(f"{where}: unknown replica type (Chief, Master, PS, Worker, Evaluator)")
        if job in per_job:
            raise UserError(f"{where}: a second '{job}' replica type (Chief and Master are the same)")
        rspec = _mapping(rspec, where)
        count = rspec.get("replicas", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise UserError(f"{where}.replicas: {_text(repr(count))} is not a count")
        if count == 0:
            left_out.append(f"{where}: 0 replicas (no job)")
            continue
        counts[job] = count
        per_job[job] = _replica(rspec, where, left_out)

    order = [j for j in JOB_ORDER if j in counts]
    data: Dict[str, Any] = {"cluster": {j: counts[j] for j in order}}
    program, jobs, kubernetes = _hoist({j: per_job[j] for j in order})
    kubernetes["entry"] = "program"
    if program:
        data["program"] = program
    if jobs:
        data["jobs"] = jobs
    success = spec.get("successPolicy")
    if success == "AllWorkers":
        data["success"] = "all-workers"
    elif success not in (None, ""):
        raise UserError(f"spec.successPolicy: '{_text(str(success))}' is not '' or AllWorkers")
    policy = _run_policy(spec, version, left_out, kubernetes)
    if policy:
        kubernetes["run_policy"] = policy
        if "backoff_limit" in policy and any(
                (jobs.get(j, {}).get("restart") or {}).get("policy", "never") != "never" for j in order):
            data["restart"] = {"max_total_restarts": policy["backoff_limit"]}
    dynamic = spec.get("enableDynamicWorker")
    if dynamic is not None:
        if not isinstance(dynamic, bool):
            raise UserError("spec.enableDynamicWorker: not true or false")
        kubernetes["enable_dynamic_worker"] = dynamic
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    if labels.get(QUEUE_LABEL):
        kubernetes["queue"] = str(labels[QUEUE_LABEL])
    other = sorted(k for k in labels if k != QUEUE_LABEL)
    if other:
        left_out.append(f"metadata.labels of the TFJob itself: {', '.join(map(_text, other))}")
    if meta.get("annotations"):
        left_out.append(f"metadata.annotations of the TFJob itself: "
                        f"{', '.join(map(_text, sorted(meta['annotations'])))}")
    for key in sorted(set(spec) - {"tfReplicaSpecs", "runPolicy", "successPolicy", "enableDynamicWorker",
                                   "cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds",
                                   "ttlSecondsAfterFinished", "schedulingPolicy"}):
        left_out.append(f"spec.{_text(key)}")
    data["kubernetes"] = kubernetes
    return data, {k: meta[k] for k in ("name", "namespace") if isinstance(meta.get(k), str)}


def _run_policy(spec: Dict[str, Any], version: str, left_out: List[str],
                kubernetes: Dict[str, Any]) -> Dict[str, Any]:
    # v1: spec.runPolicy; v1beta1/v1beta2: the same fields directly in spec.
    source = _mapping(spec.get("runPolicy"), "spec.runPolicy") if version == "kubeflow.org/v1" else spec
    where = "spec.runPolicy" if version == "kubeflow.org/v1" else "spec"
    out: Dict[str, Any] = {}
    for key, field in RUN_POLICY_KEYS.items():
        if source.get(key) is not None:
            out[field] = source[key]
    scheduling = _mapping(source.get("schedulingPolicy"), f"{where}.schedulingPolicy")
    for key, field in SCHEDULING_KEYS.items():
        if scheduling.get(key) is not None:
            out[field] = scheduling[key]
    if scheduling.get("queue"):
        kubernetes["queue"] = str(scheduling["queue"])
    # the operator's default (SetDefaults_TFJob) is None; tfcluster's own render default is Running
    out.setdefault("clean_pod_policy", "None")
    for key in sorted(set(scheduling) - set(SCHEDULING_KEYS) - {"queue"}):
        left_out.append(f"{where}.schedulingPolicy.{_text(key)}")
    if version == "kubeflow.org/v1":
        for key in sorted(set(source) - set(RUN_POLICY_KEYS) - {"schedulingPolicy"}):
            if key == "suspend" and source[key] is False:
                continue
            left_out.append(f"{where}.{_text(key)}")
    return out


def _replica(rspec: Dict[str, Any], where: str, left_out: List[str]) -> Dict[str, Any]:
    """One replica type -> its job's settings: program keys (command, args, env, cwd), restart,
    and ``kubernetes`` (PodSettings keys)."""
    out: Dict[str, Any] = {}
    pod: Dict[str, Any] = {}
    policy = rspec.get("restartPolicy", "Never")
    if policy not in RESTART_POLICIES:
        raise UserError(f"{where}.restartPolicy: '{_text(str(policy))}' is not one of "
                        f"{', '.join(RESTART_POLICIES)}")
    out["restart"] = {"policy": RESTART_POLICIES[policy]}
    if policy == "Always":
        pod["restart_policy"] = "Always"
    for key in sorted(set(rspec) - {"replicas", "restartPolicy", "template"}):
        left_out.append(f"{where}.{_text(key)}")
    template = _mapping(rspec.get("template"), f"{where}.template")
    tmeta = _mapping(template.get("metadata"), f"{where}.template.metadata")
    for key in ("labels", "annotations"):
        if tmeta.get(key):
            pod[key] = {str(k): str(v) for k, v in _mapping(tmeta[key], f"{where}.template.metadata.{key}").items()}
    for key in sorted(set(tmeta) - {"labels", "annotations", "name", "creationTimestamp"}):
        left_out.append(f"{where}.template.metadata.{_text(key)}")
    pspec = _mapping(template.get("spec"), f"{where}.template.spec")
    containers = pspec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise UserError(f"{where}.template.spec.containers: a TFJob replica needs its containers")
    named = [c for c in containers if isinstance(c, dict) and c.get("name") == CONTAINER]
    main = named[0] if named else (containers[0] if len(containers) == 1 else None)
    if not isinstance(main, dict):
        raise UserError(f"{where}.template.spec.containers: no container named '{CONTAINER}' (the one "
                        f"the TFJob operator gives TF_CONFIG and the tfjob-port)")
    for c in containers:
        if c is not main:
            left_out.append(f"{where}: container '{_text(str(c.get('name', '?')))}' (a sidecar; only "
                            f"the '{CONTAINER}' container is carried)")
    for c in pspec.get("initContainers") or []:
        left_out.append(f"{where}: init container '{_text(str((c or {}).get('name', '?')))}'")
    cwhere = f"{where}.template.spec.containers[{_text(str(main.get('name', 0)))}]"
    _container(main, cwhere, out, pod, left_out)
    for key, field in (("nodeSelector", "node_selector"), ("affinity", "affinity")):
        if pspec.get(key):
            pod[field] = pspec[key]
    if pspec.get("tolerations"):
        pod["tolerations"] = pspec["tolerations"]
    for key, field in (("serviceAccountName", "service_account"), ("priorityClassName", "priority_class")):
        if pspec.get(key):
            pod[field] = pspec[key]
    if pspec.get("imagePullSecrets"):
        pod["image_pull_secrets"] = [s.get("name") if isinstance(s, dict) else s
                                     for s in pspec["imagePullSecrets"]]
    volumes = []
    dropped = set()
    for v in pspec.get("volumes") or []:
        if isinstance(v, dict) and any(s in v for s in VOLUME_SOURCES):
            volumes.append(v)
        else:
            vname = str(v.get("name", "?")) if isinstance(v, dict) else "?"
            dropped.add(vname)
            kinds = ", ".join(sorted(set(v) - {"name"})) if isinstance(v, dict) else "?"
            left_out.append(f"{where}.template.spec.volumes: '{_text(vname)}' ({_text(kinds)}: tfcluster "
                            f"carries {', '.join(VOLUME_SOURCES)})")
    if volumes:
        pod["volumes"] = volumes
    if dropped and pod.get("volume_mounts"):
        for m in [m for m in pod["volume_mounts"] if m.get("name") in dropped]:
            left_out.append(f"{cwhere}.volumeMounts: '{_text(str(m.get('mountPath')))}' (its volume is left out)")
        pod["volume_mounts"] = [m for m in pod["volume_mounts"] if m.get("name") not in dropped]
        if not pod["volume_mounts"]:
            del pod["volume_mounts"]
    if pspec.get("restartPolicy"):
        left_out.append(f"{where}.template.spec.restartPolicy (the operator uses the replica's)")
    for key in sorted(set(pspec) - set(POD_KEYS) - {"initContainers"}):
        left_out.append(f"{where}.template.spec.{_text(key)}")
    out["kubernetes"] = pod
    return out


def _container(c: Dict[str, Any], where: str, out: Dict[str, Any], pod: Dict[str, Any],
               left_out: List[str]) -> None:
    if c.get("image"):
        pod["image"] = c["image"]
    for key in ("command", "args"):
        if c.get(key) is not None:
            value = c[key]
            if not isinstance(value, list):
                raise UserError(f"{where}.{key}: a list of strings")
            out[key] = [str(w) for w in value]
    env: Dict[str, str] = {}
    env_from: Dict[str, Any] = {}
    for e in c.get("env") or []:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            raise UserError(f"{where}.env: every entry needs a name")
        if e["name"] == "TF_CONFIG":
            left_out.append(f"{where}.env.TF_CONFIG (the operator, and tfcluster, set it)")
        elif "valueFrom" in e:
            env_from[e["name"]] = e["valueFrom"]
        else:
            env[e["name"]] = str(e.get("value", ""))
    if env:
        out["env"] = env
    if env_from:
        pod["env_from"] = env_from
    if c.get("resources"):
        resources = {k: v for k, v in _mapping(c["resources"], f"{where}.resources").items()
                     if k in ("requests", "limits") and v}
        for key in sorted(set(c["resources"]) - {"requests", "limits"}):
            left_out.append(f"{where}.resources.{_text(key)}")
        if resources:
            pod["resources"] = resources
    if c.get("volumeMounts"):
        pod["volume_mounts"] = c["volumeMounts"]
    if c.get("workingDir"):
        out["cwd"] = c["workingDir"]
    others = []
    for p in c.get("ports") or []:
        if isinstance(p, dict) and p.get("name") == PORT_NAME:
            if p.get("containerPort") != DEFAULT_PORT:
                pod["port"] = p.get("containerPort")
        elif isinstance(p, dict):
            others.append({k: p[k] for k in ("name", "containerPort", "protocol") if k in p})
            for key in sorted(set(p) - {"name", "containerPort", "protocol"}):
                left_out.append(f"{where}.ports[{_text(str(p.get('name', '?')))}].{_text(key)}")
    if others:
        pod["ports"] = others
    if c.get("envFrom"):
        left_out.append(f"{where}.envFrom")
    for key in sorted(set(c) - set(CONTAINER_KEYS) - {"envFrom"}):
        left_out.append(f"{where}.{_text(key)}")


def _hoist(per_job: Dict[str, Dict[str, Any]]) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """(program, jobs, kubernetes): settings that every job has alike go file-wide."""
    program: Dict[str, Any] = {}
    kubernetes: Dict[str, Any] = {}
    names = list(per_job)

    def hoist(get: Any, into: Dict[str, Any], key: str) -> None:
        # Single values a job replaces: the commonest, when every job has one (a job without
        # one would inherit it). Mappings and lists merge, so only a value all jobs share.
        values = [get(j).get(key) for j in names]
        if any(v is None for v in values):
            return
        if isinstance(values[0], dict) and key not in ("resources", "affinity"):
            # mappings merge key by key: what every job has alike goes file-wide
            common = {k: v for k, v in values[0].items() if all(w.get(k, v) == v and k in w for w in values)}
            if common:
                into[key] = common
                for j in names:
                    rest = {k: v for k, v in get(j)[key].items() if k not in common}
                    get(j).pop(key) if not rest else get(j).__setitem__(key, rest)
            return
        if isinstance(values[0], list) and key not in ("command", "args"):
            # lists merge (volumes by name, mounts by path, tolerations and secrets appended)
            common_list = [x for x in values[0] if all(x in w for w in values)]
            if common_list:
                into[key] = common_list
                for j in names:
                    rest_list = [x for x in get(j)[key] if x not in common_list]
                    get(j).pop(key) if not rest_list else get(j).__setitem__(key, rest_list)
            return
        if isinstance(values[0], dict):
            best = values[0] if all(v == values[0] for v in values) else None
        else:
            counts = [(sum(v == w for w in values), i) for i, v in enumerate(values)]
            top, first = max(counts, key=lambda c: (c[0], -c[1]))
            best = values[first] if top > 1 or len(values) == 1 else None
        if best is None:
            return
        into[key] = best
        for j in names:
            if get(j)[key] == best:
                del get(j)[key]

    for key in ("command", "args", "env", "cwd"):
        hoist(lambda j: per_job[j], program, key)
    for key in POD_SETTINGS:
        hoist(lambda j: per_job[j]["kubernetes"], kubernetes, key)
    jobs: Dict[str, Any] = {}
    for j in names:
        spec = {k: v for k, v in per_job[j].items() if v not in ({}, None)}
        if spec.get("restart") == {"policy": "never"}:
            del spec["restart"]           # the file's default
        if spec:
            jobs[j] = spec
    return program, jobs, kubernetes


def render_file(data: Dict[str, Any], left_out: List[str], meta: Dict[str, Any], source: str) -> str:
    """The cluster file's text: a header, the comment block of what was left out, the YAML."""
    import yaml

    from tfcluster.terminal import printable

    name = meta.get("name", "")
    lines = [f"# Imported by tfcluster from {printable(source)} (TFJob '{printable(name)}'"
             + (f", namespace '{printable(meta['namespace'])}'" if meta.get("namespace") else "") + ").",
             "# Run it here: tfcluster launch THIS_FILE [-- PROGRAM]; back to Kubernetes: tfcluster "
             "render k8s|jobset|trainjob THIS_FILE"
             + (f" --name {printable(name)}" if name else "")
             + (f" --namespace {printable(meta['namespace'])}" if meta.get("namespace") else "") + "."]
    bare = [j for j in data["cluster"] if "command" not in data.get("program", {})
            and "command" not in data.get("jobs", {}).get(j, {})]
    if bare:
        lines.append(f"# No command for {', '.join(bare)}: its pods run the image's entrypoint. Give "
                     f"program.command to run it here, or to render a JobSet or TrainJob.")
    if left_out:
        lines.append("# Left out (a cluster file cannot carry these):")
        lines += [f"#   - {printable(item)}" for item in left_out]
    else:
        lines.append("# Nothing was left out.")
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
    return "\n".join(lines) + "\n" + body


def _mapping(value: Any, where: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: not a mapping")
    return value


def _text(value: Any) -> str:
    from tfcluster.terminal import printable
    return printable(str(value))[:200]
