"""tfcluster render trainjob (Kubeflow Trainer v2) and the kubernetes: pod settings of all three
renders: manifests checked against the CRDs' schemas in tests/data/k8s (Trainer at 8c0f505,
JobSet v0.9.1, TFJob v1.9.0), Trainer's admission rules, and every pod's entry command run here
with the environment that pod would get."""
from __future__ import annotations

import copy
import json
import re

import pytest
import yaml

from helpers import doc_blocks
from helpers.k8s_pods import (
    PRINTER,
    ROOT,
    crd_validator,
    expected_contract,
    jobset_annotations,
    load,
    pod_env,
    run_container,
    validate,
)
from tfcluster.cli.main import main
from tfcluster.clusterfile import kubernetes
from tfcluster.clusterfile.config import loads
from tfcluster.errors import ConfigError, UserError
from tfcluster.k8s import jobset, render, trainjob

SETTINGS = """\
kubernetes:
  queue: team-a
  resources: {requests: {cpu: 2, memory: 8Gi}, limits: {memory: 8Gi}}
  node_selector: {cloud.example.com/pool: training}
  tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]
  volumes: [{name: ckpt, persistentVolumeClaim: {claimName: tf-checkpoints}}]
  volume_mounts: [{name: ckpt, mountPath: /ckpt}]
  service_account: trainer
  image_pull_secrets: [regcred]
  priority_class: high
  labels: {team: vision}
  annotations: {example.com/owner: ml-platform}
"""

FULL = """\
cluster:
  chief: 1
  ps: 2
  worker: 3
  evaluator: 1
program:
  command: [python3, -c, "{printer}"]
  env: {{API_TOKEN: s3cr3t-value, LEARNING_RATE: 0.1}}
jobs:
  ps:
    restart: {{policy: on-failure, max_restarts: 5}}
    kubernetes: {{resources: {{requests: {{cpu: 4}}}}, node_selector: {{cloud.example.com/pool: cpu}}}}
  worker:
    gpus: ["0,1", "2,3", "4,5"]
    restart: {{policy: exit-code, max_restarts: 2}}
    kubernetes:
      volumes: [{{name: data, emptyDir: {{sizeLimit: 10Gi}}}}]
      volume_mounts: [{{name: data, mountPath: /data}}]
  chief: {{gpus: ["0"]}}
restart: {{policy: never, max_restarts: 3, max_total_restarts: 7}}
success: all-workers
""".format(printer=PRINTER.replace('"', '\\"')) + SETTINGS

NO_CHIEF = """\
cluster: {{ps: 1, worker: 4}}
program: {{command: [python, -c, "{printer}"], task_flags: true, env: {{API_TOKEN: tok-1234}}}}
jobs: {{ps: {{env: {{API_TOKEN: tok-5678}}}}}}
restart: {{policy: on-failure, max_restarts: 2}}
""".format(printer=PRINTER.replace('"', '\\"'))


@pytest.fixture(scope="module")
def schemas():
    return {"ClusterTrainingRuntime": crd_validator("trainer.kubeflow.org_clustertrainingruntimes.yaml", "v1alpha1"),
            "TrainingRuntime": crd_validator("trainer.kubeflow.org_trainingruntimes.yaml", "v1alpha1"),
            "TrainJob": crd_validator("trainer.kubeflow.org_trainjobs.yaml", "v1alpha1"),
            "JobSet": crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2"),
            "TFJob": crd_validator("kubeflow.org_tfjobs.yaml", "v1")}


def trainer_admission(runtime):
    """Trainer's runtime webhook (pkg/webhooks/trainingruntime_webhook.go): a replicated job
    labelled as the trainer ancestor has replicas 1 and a container named 'node'."""
    problems = []
    for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        labels = r["template"].get("metadata", {}).get("labels", {})
        if labels.get(trainjob.ANCESTOR_LABEL) == "trainer":
            if r.get("replicas", 1) != 1:
                problems.append(f"{r['name']}: replicas")
            if "node" not in [c["name"] for c in r["template"]["spec"]["template"]["spec"]["containers"]]:
                problems.append(f"{r['name']}: no container 'node'")
    return problems


def trainer_jobset(runtime, tj):
    """The JobSet Trainer makes from the runtime and the TrainJob (pkg/runtime/framework/plugins:
    jobset Builder.Trainer, plainml, syncParallelCount): named after the TrainJob; the trainer
    ancestor's 'node' container takes the TrainJob's image/command/args/env, and numNodes sets
    its parallelism and completions."""
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    t = tj["spec"].get("trainer", {})
    for r in spec["replicatedJobs"]:
        if r["template"].get("metadata", {}).get("labels", {}).get(trainjob.ANCESTOR_LABEL) != "trainer":
            continue
        r["replicas"] = 1
        for c in r["template"]["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "node":
                for key in ("image", "command", "args"):
                    if key in t:
                        c[key] = t[key]
                for e in t.get("env", []):
                    c["env"] = [x for x in c.get("env", []) if x["name"] != e["name"]] + [e]
        if "numNodes" in t:
            r["template"]["spec"]["parallelism"] = r["template"]["spec"]["completions"] = t["numNodes"]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": tj["metadata"]["name"]}, "spec": spec}


def rjobs(spec):
    return {r["name"]: r for r in spec["replicatedJobs"]}


def pod_of(r):
    return r["template"]["spec"]["template"]


# --------------------------------------------------------------------------------------
# The manifests

def test_runtime_and_trainjob_with_a_chief_validate(tmp_path, schemas):
    c = load(FULL, tmp_path, "mnist.yaml")
    runtime, tj = trainjob.runtime_and_trainjob(c, image="registry.example/tf:2.21", namespace="ml")
    validate(schemas["ClusterTrainingRuntime"], runtime)
    validate(schemas["TrainJob"], tj)
    bad = copy.deepcopy(tj)   # the strict schema catches an unknown field
    bad["spec"]["trainer"]["nodes"] = 3
    assert len(list(schemas["TrainJob"].iter_errors(bad))) == 1
    assert trainer_admission(runtime) == []
    assert runtime["kind"] == "ClusterTrainingRuntime" and "namespace" not in runtime["metadata"]
    assert runtime["metadata"]["name"] == "tensorflow-mnist"
    assert runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "tensorflow"
    assert tj["metadata"] == {"name": "mnist", "namespace": "ml", "labels": {
        "app.kubernetes.io/managed-by": "tfcluster", "kueue.x-k8s.io/queue-name": "team-a"}}
    assert tj["spec"] == {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                         "name": "tensorflow-mnist"},
                          "trainer": {"image": "registry.example/tf:2.21", "numNodes": 1}}
    spec = runtime["spec"]["template"]["spec"]
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 1}     # the trainer is the chief
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    r = rjobs(spec)
    assert {n: (x["replicas"], x["template"]["spec"]["completions"]) for n, x in r.items()} == {
        "chief": (1, 1), "ps": (1, 2), "worker": (1, 3), "evaluator": (1, 1)}
    assert [n for n, x in r.items() if x["template"].get("metadata")] == ["chief"]
    assert r["chief"]["template"]["metadata"] == {"labels": {trainjob.ANCESTOR_LABEL: "trainer"}}
    # success and failure policies from the file
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief", "worker"]}
    assert spec["failurePolicy"]["maxRestarts"] == 7
    assert r["worker"]["template"]["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["containerName"] == "node"
    # GPUs, secrets, restart wiring
    for name, x in r.items():
        (container,) = pod_of(x)["spec"]["containers"]
        assert container["name"] == "node" and container["image"] == "registry.example/tf:2.21"
        gpus = container["resources"]["limits"].get("nvidia.com/gpu")
        assert gpus == {"chief": 1, "worker": 2}.get(name)
        env = {e["name"]: e for e in container["env"]}
        assert env["API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "mnist-env", "key": "API_TOKEN"}
        assert env["TFCLUSTER_JOBSET_RESTART"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"
    text = trainjob.render_trainjob(c, image="registry.example/tf:2.21", namespace="ml")
    assert "s3cr3t" not in text


def test_pod_settings_in_the_runtime_with_per_job_overrides(tmp_path, schemas):
    c = load(FULL, tmp_path, "mnist.yaml")
    runtime, _ = trainjob.runtime_and_trainjob(c, image="img:1")
    r = rjobs(runtime["spec"]["template"]["spec"])
    for name, x in r.items():
        pod = pod_of(x)
        (container,) = pod["spec"]["containers"]
        assert pod["metadata"] == {"labels": {"team": "vision"},
                                   "annotations": {"example.com/owner": "ml-platform"}}
        assert pod["spec"]["serviceAccountName"] == "trainer"
        assert pod["spec"]["priorityClassName"] == "high"
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "ml",
                                               "effect": "NoSchedule"}]
        assert pod["spec"]["nodeSelector"] == {"cloud.example.com/pool": "cpu" if name == "ps" else "training"}
        assert container["resources"]["requests"] == {"cpu": "4" if name == "ps" else "2", "memory": "8Gi"}
        assert container["resources"]["limits"]["memory"] == "8Gi"
        volumes = [v["name"] for v in pod["spec"]["volumes"]]
        mounts = [m["mountPath"] for m in container["volumeMounts"]]
        assert (volumes, mounts) == ((["ckpt", "data"], ["/ckpt", "/data"]) if name == "worker"
                                     else (["ckpt"], ["/ckpt"]))
    assert pod_of(r["worker"])["spec"]["volumes"][1] == {"name": "data", "emptyDir": {"sizeLimit": "10Gi"}}
    assert pod_of(r["chief"])["spec"]["volumes"][0] == {
        "name": "ckpt", "persistentVolumeClaim": {"claimName": "tf-checkpoints"}}


def test_runtime_and_trainjob_without_a_chief_namespaced(tmp_path, schemas):
    c = load(NO_CHIEF, tmp_path)
    runtime, tj = trainjob.runtime_and_trainjob(c, image="img:1", name="tf", namespace="ml",
                                                runtime_name="tf-ps", namespaced=True)
    validate(schemas["TrainingRuntime"], runtime)
    validate(schemas["TrainJob"], tj)
    assert trainer_admission(runtime) == []
    assert runtime["kind"] == "TrainingRuntime" and runtime["metadata"]["namespace"] == "ml"
    assert tj["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                        "name": "tf-ps"}
    assert tj["spec"]["trainer"]["numNodes"] == 4
    assert "kueue.x-k8s.io/queue-name" not in tj["metadata"]["labels"]
    spec = runtime["spec"]["template"]["spec"]
    # success: chief without a chief job is worker:0
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["worker"]}
    assert rjobs(spec)["worker"]["template"]["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert spec["failurePolicy"] == {"maxRestarts": 2}
    keys = {n: next(e for e in pod_of(x)["spec"]["containers"][0]["env"] if e["name"] == "API_TOKEN")
            ["valueFrom"]["secretKeyRef"] for n, x in rjobs(spec).items()}
    assert keys == {"ps": {"name": "tf-env", "key": "ps.API_TOKEN"},
                    "worker": {"name": "tf-env", "key": "worker.API_TOKEN"}}


def test_the_trainer_is_the_job_of_tfclusters_chief():
    """Trainer's trainer (scaled by numNodes, given the progress endpoint) is the chief job, else
    the workers."""
    assert trainjob.trainer_job(loads("cluster: {ps: 1, chief: 1, worker: 2}")) == "chief"
    assert trainjob.trainer_job(loads("cluster: {ps: 1, local: 2, worker: 3}")) == "worker"
    c = loads("cluster: {ps: 1, local: 2, worker: 3}\nprogram: {command: [python, t.py]}")
    runtime, tj = trainjob.runtime_and_trainjob(c, image="i", name="t")
    labelled = [r["name"] for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
                if r["template"].get("metadata", {}).get("labels", {}).get(trainjob.ANCESTOR_LABEL) == "trainer"]
    assert labelled == ["worker"] and tj["spec"]["trainer"]["numNodes"] == 3
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 3}
    assert trainer_admission(runtime) == []


def test_what_a_trainjob_cannot_express(tmp_path):
    c = load("cluster: {worker: 2}\nprogram: {command: [python, t.py]}\n", tmp_path)
    with pytest.raises(UserError, match="--image"):
        trainjob.runtime_and_trainjob(c, image="")
    with pytest.raises(UserError, match="--runtime-name 'TF_rt' is not a Kubernetes name"):
        trainjob.runtime_and_trainjob(c, image="i", runtime_name="TF_rt")
    with pytest.raises(UserError, match=r"JobSet name 'x{47}' \(--name\): the pod names"):
        trainjob.runtime_and_trainjob(c, image="i", name="x" * 47)
    c = load("cluster: {worker: 2}\nprogram: {command: [python, t.py]}\n"
             "jobs: {worker: {gpus: [1, 2], kubernetes: {resources: {limits: {nvidia.com/gpu: 2}}}}}\n",
             tmp_path, "g.yaml")
    with pytest.raises(UserError, match=r"jobs\.worker\.kubernetes\.resources\.limits: nvidia\.com/gpu is 2, "
                                        r"but the job's gpus give each task 1 GPU ids"):
        trainjob.runtime_and_trainjob(c, image="i")


# --------------------------------------------------------------------------------------
# Every pod, as Trainer and JobSet would run it

@pytest.mark.parametrize("text,secrets", [
    (FULL, {"API_TOKEN": "s3cr3t-value"}),
    (NO_CHIEF, {"ps.API_TOKEN": "tok-5678", "worker.API_TOKEN": "tok-1234"}),
], ids=["chief-ps-worker-evaluator", "no-chief-task-flags"])
def test_every_pod_of_the_trainjob_gets_the_files_cluster(tmp_path, schemas, text, secrets):
    """Trainer turns runtime + TrainJob into a JobSet named after the TrainJob (validated here
    against the JobSet CRD); each pod's entry command, run here with the environment that pod
    would get (downward API, Secret, JOB_COMPLETION_INDEX), yields the file's cluster with the
    pods' names and the task contract, the JobSet's restart attempt as TFCLUSTER_RESTART_COUNT."""
    c = load(text, tmp_path)
    runtime, tj = trainjob.runtime_and_trainjob(c, image="img:1", name="tj")
    js = trainer_jobset(runtime, tj)
    validate(schemas["JobSet"], js)
    expected_cluster = {job: [f"tj-{job}-0-{i}.tj:2222" for i in range(len(tasks))]
                        for job, tasks in c.jobs.items() if job != "evaluator"}
    budget = str(runtime["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"])
    r = rjobs(js["spec"])
    for t in c.tasks:
        assert r[t.job]["template"]["spec"]["completions"] == len(c.jobs[t.job])
        pod = pod_of(r[t.job])
        (container,) = pod["spec"]["containers"]
        restarts = (t.index + 1) % 2
        env = pod_env(pod, container, jobset_annotations("tj", t.job, restarts), {"tj-env": secrets},
                      {"JOB_COMPLETION_INDEX": str(t.index)})
        out = run_container(container, env, tmp_path)
        assert out.pop("token") == secrets.get("API_TOKEN", secrets.get(f"{t.job}.API_TOKEN"))
        assert out == expected_contract(t, expected_cluster, restart=str(restarts),
                                        max_restarts="0" if t.restart.policy == "never" else budget,
                                        cuda="" if t.gpus == "" else None)


# --------------------------------------------------------------------------------------
# The pod settings in all three renders

def test_pod_settings_appear_in_all_three_renders_and_validate(tmp_path, schemas):
    c = load("cluster: {chief: 1, ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n"
             "jobs: {worker: {gpus: ['0', '1']}}\n" + SETTINGS, tmp_path, "r.yaml")
    tfjob = render.tfjob(c, image="img:1")
    validate(schemas["TFJob"], tfjob)
    js = jobset.jobset(c, image="img:1")
    validate(schemas["JobSet"], js)
    runtime, tj = trainjob.runtime_and_trainjob(c, image="img:1")
    validate(schemas["ClusterTrainingRuntime"], runtime)
    validate(schemas["TrainJob"], tj)
    pods = {("tfjob", k): v["template"] for k, v in tfjob["spec"]["tfReplicaSpecs"].items()}
    pods.update({("jobset", r["name"]): pod_of(r) for r in js["spec"]["replicatedJobs"]})
    pods.update({("runtime", r["name"]): pod_of(r) for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]})
    assert len(pods) == 9
    for where, pod in pods.items():
        spec, (container,) = pod["spec"], pod["spec"]["containers"]
        assert pod["metadata"]["labels"] == {"team": "vision"}, where
        assert pod["metadata"]["annotations"] == {"example.com/owner": "ml-platform"}, where
        assert (spec["serviceAccountName"], spec["priorityClassName"]) == ("trainer", "high"), where
        assert spec["nodeSelector"] == {"cloud.example.com/pool": "training"}, where
        assert spec["imagePullSecrets"] == [{"name": "regcred"}] and len(spec["tolerations"]) == 1, where
        assert spec["volumes"] == [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "tf-checkpoints"}}]
        assert container["volumeMounts"] == [{"name": "ckpt", "mountPath": "/ckpt"}], where
        assert container["resources"]["requests"] == {"cpu": "2", "memory": "8Gi"}, where
        gpu = container["resources"]["limits"].get("nvidia.com/gpu")
        assert gpu == (1 if where[1].lower() == "worker" else None), where
    # the queue labels the workload Kueue admits, not the runtime
    for manifest in (tfjob, js, tj):
        assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "kueue.x-k8s.io/queue-name" not in runtime["metadata"]["labels"]


def test_settings_merge_job_over_file():
    c = loads("cluster: {worker: 1, ps: 1}\n" + SETTINGS + """\
jobs:
  worker:
    kubernetes:
      resources: {requests: {cpu: 8}, limits: {nvidia.com/gpu: 1}}
      node_selector: {gpu: a100}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      volumes: [{name: ckpt, nfs: {server: nfs.example.com, path: /exports/ckpt}}]
      volume_mounts: [{name: ckpt, mountPath: /ckpt, readOnly: true}]
      service_account: gpu-trainer
      labels: {team: nlp, gpu: "true"}
""")
    w = kubernetes.settings_for(c.spec, "worker")
    assert w.requests == {"cpu": "8", "memory": "8Gi"} and w.limits == {"memory": "8Gi", "nvidia.com/gpu": "1"}
    assert w.node_selector == {"cloud.example.com/pool": "training", "gpu": "a100"}
    assert [t["key"] for t in w.tolerations] == ["dedicated", "nvidia.com/gpu"]
    assert w.volumes == [{"name": "ckpt", "nfs": {"server": "nfs.example.com", "path": "/exports/ckpt"}}]
    assert w.volume_mounts == [{"name": "ckpt", "mountPath": "/ckpt", "readOnly": True}]
    assert (w.service_account, w.priority_class) == ("gpu-trainer", "high")
    assert w.labels == {"team": "nlp", "gpu": "true"}
    p = kubernetes.settings_for(c.spec, "ps")
    assert p.service_account == "trainer" and p.volumes[0]["persistentVolumeClaim"] == {"claimName": "tf-checkpoints"}
    assert kubernetes.gpu_limit(w, 1, "x") == {"memory": "8Gi", "nvidia.com/gpu": "1"}


@pytest.mark.parametrize("section,message", [
    ("kubernetes: {node_selectr: {a: b}}",
     "kubernetes.node_selectr: unknown key in kubernetes (did you mean 'node_selector'?)"),
    ("kubernetes: {tolerations: [{key: a, operater: Exists}]}",
     "kubernetes.tolerations[0].operater: unknown key in kubernetes.tolerations[0] (did you mean 'operator'?)"),
    ("kubernetes: {volumes: [{name: c, persistentVolumeClaim: {claimNme: x}}]}",
     "kubernetes.volumes[0].persistentVolumeClaim.claimNme: unknown key in "
     "kubernetes.volumes[0].persistentVolumeClaim (did you mean 'claimName'?)"),
    ("jobs: {worker: {kubernetes: {resorces: {}}}}",
     "jobs.worker.kubernetes.resorces: unknown key in jobs.worker.kubernetes (did you mean 'resources'?)"),
    ("kubernetes: {resources: {requests: {cpu: 2x}}}",
     "kubernetes.resources.requests: '2x' is not a Kubernetes quantity"),
    ("kubernetes: {volumes: [{name: c, emptyDir: {}, nfs: {server: a, path: /b}}]}",
     "kubernetes.volumes[0]: volume 'c' needs exactly one source of persistentVolumeClaim"),
    ("kubernetes: {volumes: [{name: c}]}", "kubernetes.volumes[0]: volume 'c' needs exactly one source"),
    ("kubernetes: {volume_mounts: [{name: c, mountPath: ckpt}]}",
     "kubernetes.volume_mounts[0].mountPath: 'ckpt' is not an absolute path"),
    ("kubernetes: {volume_mounts: [{name: ckpt, mountPath: /ckpt}]}",
     "kubernetes.volume_mounts: mount 'ckpt' at /ckpt names no volume of job 'worker' (volumes: none)"),
    ("kubernetes: {labels: {'a/b/c': x}}", "kubernetes.labels: 'a/b/c' is not a Kubernetes label key"),
    ("kubernetes: {service_account: Trainer_1}",
     "kubernetes.service_account: 'Trainer_1' is not a Kubernetes service account name"),
    ("kubernetes: {tolerations: [{key: a, operator: Exists, value: b}]}",
     "kubernetes.tolerations[0]: a toleration with operator Exists has no value"),
    ("kubernetes: {tolerations: [{key: a, effect: NoEvict}]}", "kubernetes.tolerations[0].effect: 'NoEvict' is not one of"),
    ("jobs: {worker: {kubernetes: {queue: q}}}",
     "jobs.worker.kubernetes: queue is file-wide (kubernetes.queue): Kueue admits the whole"),
])
def test_kubernetes_section_errors_name_the_field(section, message):
    with pytest.raises(ConfigError) as e:
        loads("cluster: {worker: 1}\n" + section, source="f.yaml")
    assert any(p.startswith(message) for p in e.value.problems), e.value.problems


# --------------------------------------------------------------------------------------
# Command line and docs

def test_cli_render_trainjob(tmp_path, capsys, schemas):
    p = tmp_path / "train.yaml"
    p.write_text(FULL)
    assert main(["render", "trainjob", str(p), "--image", "img:1", "--name", "run-7", "--namespace", "ml"]) == 0
    out = capsys.readouterr().out
    runtime, tj = yaml.safe_load_all(out)
    validate(schemas["ClusterTrainingRuntime"], runtime)
    validate(schemas["TrainJob"], tj)
    assert tj["metadata"]["name"] == "run-7" and tj["spec"]["runtimeRef"]["name"] == "tensorflow-run-7"
    assert out.startswith("# Generated by tfcluster from ") and \
        "kubectl create secret generic run-7-env -n ml --from-literal=API_TOKEN=...; then kubectl apply -f -" \
        in out.splitlines()[0]
    assert main(["render", "trainjob", str(p)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "tfcluster: error: render trainjob: --image IMAGE is required (the container image that runs the "
        "program), or kubernetes.image in the file (no image for: chief, ps, worker, evaluator)"]
    assert main(["render", "jobset", str(p), "--image", "i", "--namespaced"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "tfcluster: error: render jobset: --namespaced is for render trainjob only"]


def test_the_docs_example(tmp_path, schemas):
    """docs/BACKENDS.md, 'kubernetes: Kubeflow Trainer v2': the file, the command and the cluster."""
    yaml_text, commands = doc_blocks("## kubernetes: Kubeflow Trainer v2")[:2]
    (tmp_path / "mnist.yaml").write_text(yaml_text)
    line = next(x for x in commands.splitlines() if x.startswith("tfcluster render trainjob"))
    words = line.split("|")[0].split()
    assert main(words[1:3] + [str(tmp_path / words[3])] + words[4:]) == 0
    with open(f"{ROOT}/docs/BACKENDS.md") as f:
        doc = f.read()
    section = doc[doc.index("## kubernetes: Kubeflow Trainer v2"):]
    claimed = json.loads(" ".join(re.search(r"the pods compute the cluster\s+`(.*?)`", section, re.S)
                                  .group(1).split()))
    c = load(yaml_text, tmp_path, "mnist.yaml")
    opts = dict(zip(words[4::2], words[5::2]))
    runtime, tj = trainjob.runtime_and_trainjob(c, image=opts["--image"], namespace=opts.get("--namespace"))
    validate(schemas["ClusterTrainingRuntime"], runtime)
    validate(schemas["TrainJob"], tj)
    js = trainer_jobset(runtime, tj)
    validate(schemas["JobSet"], js)
    ps = rjobs(js["spec"])["ps"]
    layout = json.loads(next(e["value"] for e in pod_of(ps)["spec"]["containers"][0]["env"]
                             if e["name"] == "TFCLUSTER_JOBSET"))
    from tfcluster.k8s import pod
    assert pod.cluster_dict(layout, tj["metadata"]["name"]) == claimed
    assert tj["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == c.spec.kubernetes.queue == "team-a"
    text = trainjob.render_trainjob(c, image=opts["--image"], namespace=opts.get("--namespace"))
    secret_line = next(x for x in commands.splitlines() if x.startswith("kubectl create secret"))
    assert secret_line + "; then kubectl apply -f -" in text.splitlines()[0]


def test_cluster_yaml_doc_of_the_pod_settings(tmp_path):
    """docs/CLUSTER_YAML.md, 'Kubernetes pod settings': the PVC example renders its mount into
    every pod; each error line shown is what the loader prints for such a file."""
    with open(f"{ROOT}/docs/CLUSTER_YAML.md") as f:
        doc = f.read()
    section = doc[doc.index("## Kubernetes pod settings"):doc.index("## Counts")]
    example, errors = re.findall(r"```\w*\n(.*?)```", section, re.S)[:2]
    c = load("cluster: {ps: 1, worker: 2}\n" + example, tmp_path)
    for r in jobset.jobset(c, image="i")["spec"]["replicatedJobs"]:
        assert pod_of(r)["spec"]["containers"][0]["volumeMounts"] == [{"name": "ckpt", "mountPath": "/ckpt"}]
    files = ["kubernetes: {node_selectr: {a: b}}",
             "kubernetes: {volumes: [{name: c, persistentVolumeClaim: {claimNme: x}}]}",
             "kubernetes: {resources: {requests: {cpu: 2x}}}",
             "kubernetes: {volume_mounts: [{name: ckpt, mountPath: /ckpt}]}",
             "jobs: {worker: {kubernetes: {queue: q}}}"]
    shown = errors.strip().splitlines()
    assert len(shown) == len(files)
    for text, line in zip(files, shown):
        with pytest.raises(ConfigError) as e:
            loads("cluster: {worker: 1}\n" + text)
        assert line in [re.sub(r" \(line \d+\)$", "", p) for p in e.value.problems], e.value.problems


def test_a_ps_that_asks_for_gpus_in_resources_keeps_them(tmp_path):
    """ps pods hide GPUs (--no-gpus) unless the job's resources ask for some."""
    c = load("cluster: {ps: 2, worker: 1}\nprogram: {command: [python, t.py]}\n"
             "jobs: {ps: {kubernetes: {resources: {limits: {nvidia.com/gpu: 1}}}}}\n", tmp_path)
    m = jobset.jobset(c, image="i")
    args = {r["name"]: pod_of(r)["spec"]["containers"][0]["args"] for r in m["spec"]["replicatedJobs"]}
    assert "--no-gpus" not in args["ps"] and "--no-gpus" not in args["worker"]
    assert pod_of(m["spec"]["replicatedJobs"][0])["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": 1}}
    c = load("cluster: {ps: 2, worker: 1}\nprogram: {command: [python, t.py]}\n", tmp_path, "b.yaml")
    assert "--no-gpus" in rjobs(jobset.jobset(c, image="i")["spec"])["ps"]["template"]["spec"][
        "template"]["spec"]["containers"][0]["args"]


def test_a_broken_cluster_does_not_break_the_kubernetes_checks():
    with pytest.raises(ConfigError) as e:
        loads("cluster: [{a: 1}, b]\nkubernetes: {volume_mounts: [{name: x, mountPath: /x}]}")
    assert e.value.problems[0].startswith("cluster: must be a mapping of job -> list of host:port")


# --------------------------------------------------------------------------------------
# @tfcluster progress -> TrainJob status.trainerStatus (only where Trainer gives the endpoint)

PROGRESS_PROGRAM = (
    "import os,sys;print('pid', os.getpid(), flush=True);"
    "sys.stdout.write('Epoch 1/2 [=====>   ]\\r');"
    "print('@tfcluster progress {\"step\": 10, \"total\": 100, \"loss\": 0.5}');"
    "print('@tfcluster progress {\"step\": 100, \"total\": 100, \"loss\": 0.125, \"accuracy\": 0.9}');"
    "print('done');sys.exit(int(os.environ.get('EXIT', '0')))")


class FakeClock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def test_bridge_throttles_estimates_and_never_raises(schemas):
    from tfcluster.k8s import trainer_progress
    sent, errors = [], []

    class Err:
        def write(self, text):
            errors.append(text)

        def flush(self):
            pass

    clock = FakeClock()
    b = trainer_progress.Bridge(("u", "c", "t"), send=lambda where, body: sent.append(body), clock=clock,
                              err=Err(), background=False)
    b.line("ordinary output")
    b.line('@tfcluster progress {"step": 100, "total": 1000, "loss": 0.5}')   # first: at once
    clock.now += 2
    b.line('@tfcluster progress {"step": 120, "total": 1000}')                 # throttled
    assert len(sent) == 1 and b.pending is not None
    clock.now += 3
    b.line('@tfcluster progress {"step": 150, "total": 1000, "loss": 0.25}')   # 5 s: posted
    assert [s["trainerStatus"]["progressPercentage"] for s in sent] == [10, 15]
    # 50 steps in 5 s: 850 steps to go take 85 s
    assert sent[1]["trainerStatus"]["estimatedRemainingSeconds"] == 85
    assert sent[1]["trainerStatus"]["metrics"] == [{"name": "loss", "value": "0.25"}]
    assert "estimatedRemainingSeconds" not in sent[0]["trainerStatus"]
    clock.now += 1
    b.line('@tfcluster progress {"step": 160}')
    b.close()                                                                   # the rest at the end
    assert len(sent) == 3 and sent[2]["trainerStatus"].keys() == {"lastUpdatedTime"}
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
          "spec": {"runtimeRef": {"name": "r"}}}
    for body in sent:
        validate(schemas["TrainJob"], {**tj, "status": body})
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", sent[0]["trainerStatus"]["lastUpdatedTime"])

    def fail(where, body):
        raise OSError("connection refused")

    b = trainer_progress.Bridge(("u", "c", "t"), send=fail, clock=clock, err=Err(), background=False)
    for step in range(3):
        clock.now += 10
        b.line(f'@tfcluster progress {{"step": {step}}}')
    shown = "".join(errors).splitlines()
    assert b.sent == 0 and len(shown) == 1 and "connection refused" in shown[0]


def test_the_endpoint_needs_all_three_variables():
    from tfcluster.k8s import trainer_progress
    env = {"KUBEFLOW_TRAINER_SERVER_URL": "https://x/y", "KUBEFLOW_TRAINER_SERVER_CA_CERT": "/ca",
           "KUBEFLOW_TRAINER_SERVER_TOKEN": "/token"}
    assert trainer_progress.endpoint(env) == ("https://x/y", "/ca", "/token")
    for key in env:
        assert trainer_progress.endpoint({**env, key: ""}) is None
    assert trainer_progress.endpoint({}) is None


@pytest.fixture
def status_server(tmp_path, ports):
    """A local HTTPS server standing in for Trainer's status server: a self-signed certificate
    for 127.0.0.1, a token file; it records every POST."""
    import http.server
    import shutil
    import ssl
    import subprocess
    import threading
    if not shutil.which("openssl"):
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "ca.crt", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    (tmp_path / "token").write_text("tok-abc\n")
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, self.headers["Authorization"], json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    (port,) = ports(1)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = {"KUBEFLOW_TRAINER_SERVER_URL": f"https://127.0.0.1:{port}/apis/trainer.kubeflow.org/v1alpha1/"
                                          f"namespaces/ml/trainjobs/tj/status",
           "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(cert),
           "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token")}
    yield env, seen
    server.shutdown()
    server.server_close()
    thread.join(10)


def _trainjob_pods(tmp_path, text):
    c = load(text, tmp_path)
    runtime, tj = trainjob.runtime_and_trainjob(c, image="img:1", name="tj")
    js = trainer_jobset(runtime, tj)
    return c, tj, rjobs(js["spec"])


def _pod_run(r, job, index, extra, cwd, **kw):
    import subprocess
    import sys
    pod = pod_of(r[job])
    (container,) = pod["spec"]["containers"]
    env = pod_env(pod, container, jobset_annotations("tj", job, 0), {},
                  {"JOB_COMPLETION_INDEX": str(index), **extra})
    argv = [sys.executable if w == "python" else w for w in container["command"] + container["args"]]
    return subprocess.Popen(argv, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, **kw)


BRIDGE_FILE = ("cluster: {{ps: 1, worker: 2}}\nprogram: {{command: [python, -c, {prog}]}}\n"
               .format(prog=json.dumps(PROGRESS_PROGRAM)))


def test_the_chief_pod_posts_its_progress_to_the_trainjob_status(tmp_path, schemas, status_server):
    """With Trainer's endpoint (as its TrainJobStatus plugin gives the trainer's pods), the chief
    pod (worker:0) runs the program as a child: the output passes through byte for byte, the
    exit code is the program's, and the progress lines reach the endpoint over TLS with the
    bearer token, in the CRD's shape."""
    env, seen = status_server
    c, tj, r = _trainjob_pods(tmp_path, BRIDGE_FILE)
    p = _pod_run(r, "worker", 0, {**env, "EXIT": "3"}, tmp_path)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    lines = out.decode().split("\n")
    assert int(lines[0].split()[1]) != p.pid            # a child, not exec'd
    assert out.decode().endswith("Epoch 1/2 [=====>   ]\r@tfcluster progress {\"step\": 10, \"total\": 100, "
                                 "\"loss\": 0.5}\n@tfcluster progress {\"step\": 100, \"total\": 100, "
                                 "\"loss\": 0.125, \"accuracy\": 0.9}\ndone\n")
    assert err == b""
    assert [s[0] for s in seen] == ["/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/tj/status"] * 2
    assert {s[1] for s in seen} == {"Bearer tok-abc"}
    statuses = [s[2]["trainerStatus"] for s in seen]
    assert [s["progressPercentage"] for s in statuses] == [10, 100]
    assert statuses[1]["metrics"] == [{"name": "loss", "value": "0.125"}, {"name": "accuracy", "value": "0.9"}]
    for s in seen:
        validate(schemas["TrainJob"], {**tj, "status": s[2]})


def test_progress_bridge_does_nothing_elsewhere(tmp_path, status_server):
    """Without the endpoint (a JobSet pod, a TrainJob without the feature gate), and in a pod
    that is not the chief, the entry point execs the program: same pid, nothing posted."""
    env, seen = status_server
    c, tj, r = _trainjob_pods(tmp_path, BRIDGE_FILE)
    for job, index, extra in [("worker", 0, {}), ("worker", 1, env), ("ps", 0, env)]:
        p = _pod_run(r, job, index, extra, tmp_path)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.decode().split("\n")[0] == f"pid {p.pid}"   # exec'd: the program is the pod's process
    assert seen == []
    for manifest in (jobset.jobset(c, image="i"), render.tfjob(c, image="i"), tj):
        assert "KUBEFLOW_TRAINER" not in json.dumps(manifest)


def test_a_bridged_pod_forwards_sigterm_and_survives_a_dead_endpoint(tmp_path):
    """SIGTERM to the pod's process reaches the program (exit 128+15); an endpoint that does not
    answer is reported once on stderr and the program runs on."""
    import signal
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("")
    prog = ("import time,sys;print('@tfcluster progress {\"step\": 1}', flush=True);"
            "print('ready', flush=True);time.sleep(60)")
    c, tj, r = _trainjob_pods(tmp_path, "cluster: {{chief: 1, worker: 1}}\nprogram: {{command: [python, -c, {p}]}}\n"
                              .format(p=json.dumps(prog)))
    dead = {"KUBEFLOW_TRAINER_SERVER_URL": "https://127.0.0.1:9/status",
            "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(tmp_path / "ca.crt"),
            "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token")}
    p = _pod_run(r, "chief", 0, dead, tmp_path)
    try:
        lines = []
        while b"ready" not in b"".join(lines):
            lines.append(p.stdout.readline())
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            import os
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 128 + signal.SIGTERM
    messages = err.decode().strip().splitlines()
    assert len(messages) == 1 and messages[0].startswith(
        "tfcluster.k8s.pod: progress not posted to the TrainJob status ("), messages
