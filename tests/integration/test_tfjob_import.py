"""tfcluster import: Kubeflow TFJobs (shaped like Kubeflow's own examples, plus one with every
replica type and pod setting) become cluster files that validate, give TF_CONFIGs of the
operator's shape, and render back to an equivalent TFJob (checked against the TFJob CRD), a
JobSet and a TrainJob with the same pod settings. No TensorFlow, no Kubernetes API server."""
from __future__ import annotations

import json
import os

import pytest
import yaml

from helpers.k8s_pods import ROOT, crd_validator, validate
from tfcluster.cli.main import main
from tfcluster.clusterfile import config
from tfcluster.clusterfile.cluster import Endpoint
from tfcluster.k8s import render
from tfcluster.k8s.jobset import jobset
from tfcluster.k8s.tfjob_import import import_tfjob, render_file
from tfcluster.k8s.trainjob import runtime_and_trainjob

DATA = os.path.join(ROOT, "tests", "data", "tfjob")
EXAMPLES = ["dist_mnist.yaml", "mnist_with_summaries.yaml", "estimator_api.yaml", "simple.yaml",
            "rich.yaml", "kubectl_get.yaml", "v1beta2.yaml"]
TYPES = {"Chief": "chief", "Master": "chief", "PS": "ps", "Worker": "worker", "Evaluator": "evaluator"}


@pytest.fixture(scope="module")
def tfjob_schema():
    return crd_validator("kubeflow.org_tfjobs.yaml", "v1")


def original(name):
    """The TFJob in a fixture (the List's item, the first document)."""
    with open(os.path.join(DATA, name)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    doc = docs[0]
    return doc["items"][0] if doc.get("kind") == "List" else doc


def imported(name, tmp_path):
    """(the imported cluster, its file's text, what was left out)."""
    with open(os.path.join(DATA, name)) as f:
        data, left_out, meta = import_tfjob(f.read(), name)
    text = render_file(data, left_out, meta, name)
    path = tmp_path / (os.path.splitext(name)[0] + ".yaml")
    path.write_text(text)
    return config.load(str(path)), text, left_out


def _env(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])
            if e["name"] != "TF_CONFIG"}


def _ports(container, port_name="tfjob-port"):
    """(name, port) pairs; the task's port (``port_name``) as tfjob-port."""
    ports = {("tfjob-port" if p.get("name") == port_name else p.get("name"), p["containerPort"])
             for p in container.get("ports", [])}
    if not any(name == "tfjob-port" for name, _ in ports):
        ports.add(("tfjob-port", 2222))        # the operator's default
    return ports


def _res(container):
    return {k: {r: str(q) for r, q in v.items()} for k, v in (container.get("resources") or {}).items() if v}


def pod_view(template, container_name="tensorflow", port_name="tfjob-port"):
    """What must survive a round trip, from one pod template."""
    spec = template["spec"]
    c = next((c for c in spec["containers"] if c["name"] == container_name), spec["containers"][0])
    meta = template.get("metadata") or {}
    return {
        "image": c["image"], "command": c.get("command"), "args": c.get("args"), "env": _env(c),
        "ports": _ports(c, port_name), "resources": _res(c),
        "mounts": sorted(json.dumps(m, sort_keys=True) for m in c.get("volumeMounts", [])),
        "volumes": sorted(json.dumps(v, sort_keys=True) for v in spec.get("volumes", [])),
        "tolerations": sorted(json.dumps(t, sort_keys=True) for t in spec.get("tolerations", [])),
        "node_selector": spec.get("nodeSelector", {}), "affinity": spec.get("affinity", {}),
        "service_account": spec.get("serviceAccountName"), "priority": spec.get("priorityClassName"),
        "pull": spec.get("imagePullSecrets", []),
        "labels": meta.get("labels", {}), "annotations": meta.get("annotations", {}),
    }


def tfjob_view(tfjob):
    """Replica types (Master as Chief) -> replicas, restart policy and pod; the run policy."""
    spec = tfjob["spec"]
    if tfjob["apiVersion"] == "kubeflow.org/v1":
        run = dict(spec.get("runPolicy", {}))
    else:
        run = {k: spec[k] for k in ("cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds",
                                    "ttlSecondsAfterFinished") if k in spec}
    run.setdefault("cleanPodPolicy", "None")
    run.pop("suspend", None)
    if "backoffLimit" not in run:
        run.pop("backoffLimit", None)
    replicas = {}
    for rtype, r in spec["tfReplicaSpecs"].items():
        replicas["Chief" if rtype == "Master" else rtype] = {
            "replicas": r.get("replicas", 1), "restartPolicy": r.get("restartPolicy", "Never"),
            "pod": pod_view(r["template"])}
    return {"replicas": replicas, "run": run, "success": spec.get("successPolicy", ""),
            "dynamic": spec.get("enableDynamicWorker", False)}


@pytest.mark.parametrize("name", EXAMPLES)
def test_import_validates_and_gives_the_operators_tf_config(name, tmp_path):
    cluster, _text, _ = imported(name, tmp_path)
    tfjob = original(name)
    counts = {TYPES[t]: r.get("replicas", 1) for t, r in tfjob["spec"]["tfReplicaSpecs"].items()}
    assert {job: len(tasks) for job, tasks in cluster.jobs.items()} == counts
    resolved = cluster.with_endpoints(lambda t: Endpoint("localhost", 20000 + 10 * list(counts).index(t.job) + t.index))
    for task in resolved.tasks:
        tf_config = resolved.tf_config(f"{task.job}:{task.index}")
        # the operator's shape: lower-cased replica types with their counts, Evaluator outside
        assert {j: len(h) for j, h in tf_config["cluster"].items()} == {
            j: n for j, n in counts.items() if j != "evaluator"}
        assert tf_config["task"] == {"type": task.job, "index": task.index}


@pytest.mark.parametrize("name", EXAMPLES)
def test_render_k8s_gives_back_an_equivalent_tfjob(name, tmp_path, tfjob_schema):
    cluster, _, _ = imported(name, tmp_path)
    back = render.tfjob(cluster, image=None)
    validate(tfjob_schema, back)
    want, got = tfjob_view(original(name)), tfjob_view(back)
    for rtype in want["replicas"]:
        assert got["replicas"][rtype] == want["replicas"][rtype], rtype
    assert set(got["replicas"]) == set(want["replicas"])
    assert got["run"] == {**want["run"], **({} if "backoffLimit" in want["run"] else
                                            {"backoffLimit": got["run"]["backoffLimit"]})}
    assert (got["success"], got["dynamic"]) == (want["success"], want["dynamic"])
    queue = original(name)["metadata"].get("labels", {}).get("kueue.x-k8s.io/queue-name")
    assert back["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == queue


@pytest.mark.parametrize("name", ["mnist_with_summaries.yaml", "simple.yaml", "rich.yaml", "v1beta2.yaml"])
def test_render_jobset_and_trainjob_carry_the_same_pod_settings(name, tmp_path):
    js_schema = crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2")
    cluster, _, _ = imported(name, tmp_path)
    want = tfjob_view(original(name))["replicas"]
    js = jobset(cluster, image=None)
    validate(js_schema, js)
    runtime, trainjob = runtime_and_trainjob(cluster, image=None)
    for manifest in (js["spec"], runtime["spec"]["template"]["spec"]):
        for rj in manifest["replicatedJobs"]:
            job = rj["name"]
            rtype = next(t for t, j in TYPES.items() if j == job and t in want)
            got = pod_view(rj["template"]["spec"]["template"], port_name="tensorflow")
            pod = dict(want[rtype]["pod"])
            # JobSet pods run the program through tfcluster.k8s.pod, which builds TF_CONFIG
            assert got["args"][-len(pod["command"] + (pod["args"] or [])):] == pod["command"] + (pod["args"] or [])
            assert {k: v for k, v in got["env"].items() if not k.startswith("TFCLUSTER_")} == pod["env"]
            for key in ("image", "ports", "resources", "mounts", "volumes", "tolerations", "node_selector",
                        "affinity", "service_account", "priority", "pull", "annotations"):
                assert got[key] == pod[key], (job, key)
            assert pod["labels"].items() <= got["labels"].items()
    trainer = trainjob["spec"]["trainer"]["image"]
    assert trainer == want.get("Chief", want.get("Worker"))["pod"]["image"]


def test_what_cannot_be_carried_is_listed_on_stderr_and_in_the_file(tmp_path, capsys):
    out = tmp_path / "rich-cluster.yaml"
    assert main(["import", os.path.join(DATA, "rich.yaml"), "-o", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    left = ["spec.tfReplicaSpecs.Chief: container 'log-shipper'", "init container 'fetch-data'",
            "readinessProbe", "spec.tfReplicaSpecs.PS.template.spec.securityContext"]
    text = out.read_text()
    for item in left:
        assert any(item in line and line.startswith("tfcluster import: left out: ") for line in err), item
        assert any(item in line and line.startswith("#   - ") for line in text.splitlines()), item
    assert config.load(str(out)).spec.kubernetes.image == "registry.example.com/train:2.21"
    # images travel per job: the evaluator keeps its own, render needs no --image
    assert main(["render", "k8s", str(out)]) == 0
    manifest = yaml.safe_load(capsys.readouterr().out)
    images = {t: r["template"]["spec"]["containers"][0]["image"] for t, r in manifest["spec"]["tfReplicaSpecs"].items()}
    assert images == {"Chief": "registry.example.com/train:2.21", "PS": "registry.example.com/train:2.21",
                      "Worker": "registry.example.com/train:2.21", "Evaluator": "registry.example.com/eval:2.21"}


def test_other_documents_are_listed_and_stdin_works(tmp_path, capsys, monkeypatch):
    import io
    with open(os.path.join(DATA, "v1beta2.yaml")) as f:
        monkeypatch.setattr("sys.stdin", io.StringIO(f.read()))
    assert main(["import", "-"]) == 0
    captured = capsys.readouterr()
    assert "left out: document 2: Service 'tensorboard' (not a TFJob)" in captured.err
    data = yaml.safe_load(captured.out)
    assert data["cluster"] == {"chief": 1, "worker": 2}
    assert data["kubernetes"]["run_policy"] == {"clean_pod_policy": "Running", "backoff_limit": 2,
                                                "ttl_seconds_after_finished": 100}


@pytest.mark.parametrize("text, message", [
    ("a: [", "not valid YAML"),
    ("kind: ConfigMap\nmetadata: {name: x}\n", "no TFJob in it"),
    ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {tfReplicaSpecs: {Driver: {}}}\n",
     "spec.tfReplicaSpecs.Driver: unknown replica type"),
    ("apiVersion: kubeflow.org/v2\nkind: TFJob\nspec: {}\n", "apiVersion: 'kubeflow.org/v2'"),
    ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {tfReplicaSpecs: {Worker: "
     "{restartPolicy: Sometimes, template: {spec: {containers: [{name: tensorflow, image: i}]}}}}}\n",
     "spec.tfReplicaSpecs.Worker.restartPolicy: 'Sometimes'"),
    ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {tfReplicaSpecs: {Worker: "
     "{template: {spec: {containers: [{name: a, image: i}, {name: b, image: i}]}}}}}\n",
     "no container named 'tensorflow'"),
    ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {tfReplicaSpecs: {Worker: "
     "{template: {spec: {containers: [{name: tensorflow, image: i}]}}}}}\n---\n"
     "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: b}\nspec: {}\n",
     "2 TFJobs (a, b); pick one with --name"),
])
def test_bad_input_is_one_line_and_exit_2(text, message, tmp_path, capsys):
    p = tmp_path / "in.yaml"
    p.write_text(text)
    assert main(["import", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_name_picks_one_of_several(tmp_path, capsys):
    one = ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: NAME}\nspec: {tfReplicaSpecs: "
           "{Worker: {replicas: N, template: {spec: {containers: [{name: tensorflow, image: i}]}}}}}\n")
    p = tmp_path / "two.yaml"
    p.write_text(one.replace("NAME", "a").replace("N", "1") + "---\n" + one.replace("NAME", "b").replace("N,", "3,"))
    assert main(["import", str(p), "--name", "b"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["cluster"] == {"worker": 3}


def test_jobset_and_trainjob_of_an_imported_file_say_the_image_needs_tfcluster(tmp_path, capsys):
    out = tmp_path / "mnist.yaml"
    assert main(["import", os.path.join(DATA, "mnist_with_summaries.yaml"), "-o", str(out)]) == 0
    for kind in ("jobset", "trainjob"):
        capsys.readouterr()
        assert main(["render", kind, str(out)]) == 0
        assert "their image needs tfcluster installed" in capsys.readouterr().out.splitlines()[1]
    assert main(["render", "k8s", str(out)]) == 0       # a TFJob runs the program itself
    assert "tfcluster installed" not in capsys.readouterr().out
