"""tfcluster render jobset: JobSet manifests checked against the JobSet CRD's schema (v0.9.1), and
every pod's TF_CONFIG computed by ``python -m tfcluster.k8s.pod`` from the environment JobSet gives it."""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

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
    run_container,
    validate,
)
from helpers.k8s_pods import pod_env as container_env
from tfcluster.cli.main import main
from tfcluster.errors import UserError
from tfcluster.k8s import jobset, pod

FULL = """\
cluster:
  chief: [localhost:2221]
  ps: [localhost:2222, localhost:2223]
  worker: 3
  evaluator: 1
program:
  command: [python3, -c, "{printer}"]
  env: {{API_TOKEN: s3cr3t-value, LEARNING_RATE: 0.1}}
jobs:
  ps: {{env: {{DB_PASSWORD: other-s3cr3t}}, restart: {{policy: on-failure, max_restarts: 5}}}}
  worker: {{gpus: ["0,1", "2,3", "4,5"], restart: {{policy: exit-code, max_restarts: 2}}}}
  chief: {{gpus: ["0,1"]}}
restart: {{policy: never, max_restarts: 3, max_total_restarts: 7}}
success: all-workers
""".format(printer=PRINTER.replace('"', '\\"'))

NO_CHIEF = """\
cluster: {{ps: 1, worker: 4}}
program: {{command: [python, -c, "{printer}"], task_flags: true, env: {{API_TOKEN: tok-1234}}}}
jobs: {{ps: {{env: {{API_TOKEN: tok-5678}}}}}}
restart: {{policy: on-failure, max_restarts: 2}}
""".format(printer=PRINTER.replace('"', '\\"'))


@pytest.fixture(scope="module")
def jobset_schema():
    """The JobSet CRD's openAPIV3Schema, strict (unknown fields are errors)."""
    return crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2")


def rjob(manifest, name):
    return next(r for r in manifest["spec"]["replicatedJobs"] if r["name"] == name)


def container(manifest, name):
    return rjob(manifest, name)["template"]["spec"]["template"]["spec"]["containers"][0]


# --------------------------------------------------------------------------------------
# The manifest

def test_full_cluster_validates_and_maps_counts_gpus_success_and_restarts(tmp_path, jobset_schema):
    c = load(FULL, tmp_path, "train.yaml")
    m = jobset.jobset(c, image="registry.example/train:1")
    validate(jobset_schema, m)
    bad = copy.deepcopy(m)  # the strict schema does catch a wrong value and an unknown field
    bad["spec"]["successPolicy"]["operator"] = "Chief"
    bad["spec"]["network"]["dnsHostnames"] = True
    assert len(list(jobset_schema.iter_errors(bad))) == 2
    assert m["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and m["kind"] == "JobSet"
    assert m["metadata"]["name"] == "train"
    assert m["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": "train",
                                    "publishNotReadyAddresses": True}
    counts = {r["name"]: (r["replicas"], r["template"]["spec"]["completions"],
                          r["template"]["spec"]["parallelism"], r["template"]["spec"]["completionMode"])
              for r in m["spec"]["replicatedJobs"]}
    assert counts == {"chief": (1, 1, 1, "Indexed"), "ps": (1, 2, 2, "Indexed"),
                      "worker": (1, 3, 3, "Indexed"), "evaluator": (1, 1, 1, "Indexed")}
    # GPUs: the number of ids per task; ps and evaluator none.
    assert container(m, "worker")["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert container(m, "chief")["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert "resources" not in container(m, "ps") and "resources" not in container(m, "evaluator")
    # success: all-workers -> every chief and worker Job
    assert m["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief", "worker"]}
    # restart: the run's budget; never-jobs fail the set; exit-code 1-127 fails it at once
    fp = m["spec"]["failurePolicy"]
    assert fp["maxRestarts"] == 7
    assert fp["rules"] == [
        {"name": "exit_code_permanent", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"],
         "targetReplicatedJobs": ["worker"]},
        {"name": "never_restart", "action": "FailJobSet", "targetReplicatedJobs": ["chief", "evaluator"]}]
    worker = rjob(m, "worker")["template"]["spec"]
    assert worker["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == list(range(1, 128))
    assert "podFailurePolicy" not in rjob(m, "ps")["template"]["spec"]
    for r in m["spec"]["replicatedJobs"]:
        assert r["template"]["spec"]["backoffLimit"] == 0
        assert r["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        assert "successPolicy" not in r["template"]["spec"]


def test_secrets_come_from_a_secret_never_inline(tmp_path, jobset_schema):
    c = load(FULL, tmp_path, "train.yaml")
    text = jobset.render_jobset(c, image="img:1", namespace="ml")
    assert "s3cr3t" not in text
    m = yaml.safe_load(text)
    validate(jobset_schema, m)
    assert m["metadata"]["namespace"] == "ml"
    env = {e["name"]: e for e in container(m, "ps")["env"]}
    assert env["API_TOKEN"] == {"name": "API_TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "train-env", "key": "API_TOKEN"}}}
    assert env["DB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "train-env", "key": "DB_PASSWORD"}
    assert env["LEARNING_RATE"] == {"name": "LEARNING_RATE", "value": "0.1"}
    assert "DB_PASSWORD" not in {e["name"] for e in container(m, "worker")["env"]}
    # the header says which Secret to create, with key names only
    assert text.splitlines()[0].startswith(
        "# Generated by tfcluster from ") and \
        "kubectl create secret generic train-env --from-literal=API_TOKEN=... " \
        "--from-literal=DB_PASSWORD=...; then kubectl apply -f -" in text.splitlines()[0]


def test_one_secret_variable_with_values_per_job_gets_a_key_per_job(tmp_path, jobset_schema):
    c = load(NO_CHIEF, tmp_path)
    m = jobset.jobset(c, image="img:1")
    validate(jobset_schema, m)
    keys = {job: next(e for e in container(m, job)["env"] if e["name"] == "API_TOKEN")
            ["valueFrom"]["secretKeyRef"]["key"] for job in ("ps", "worker")}
    assert keys == {"ps": "ps.API_TOKEN", "worker": "worker.API_TOKEN"}
    assert jobset.secret_keys(c, "train") == ("train-env", ["ps.API_TOKEN", "worker.API_TOKEN"])


def test_no_chief_success_is_worker_0(tmp_path, jobset_schema):
    """success: chief without a chief job is worker:0: the worker Job succeeds with index 0."""
    c = load(NO_CHIEF, tmp_path)
    m = jobset.jobset(c, image="img:1", name="mnist")
    validate(jobset_schema, m)
    assert m["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["worker"]}
    assert rjob(m, "worker")["template"]["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert m["spec"]["failurePolicy"] == {"maxRestarts": 2}
    assert container(m, "worker")["args"][:3] == ["-m", "tfcluster.k8s.pod", "--task-flags"]
    # all-workers: every worker must succeed, no Job success policy
    c2 = load(NO_CHIEF + "success: all-workers\n", tmp_path, "b.yaml")
    m2 = jobset.jobset(c2, image="img:1")
    validate(jobset_schema, m2)
    assert "successPolicy" not in rjob(m2, "worker")["template"]["spec"]


def test_never_restarts_is_zero_and_other_job_names(tmp_path, jobset_schema):
    c = load("""\
        cluster: {local: [localhost:2222, localhost:2223], worker_x: 1, worker: 1}
        program: {command: "python train.py --steps=5", cwd: /app}
    """, tmp_path, "My_Cluster.yaml")
    m = jobset.jobset(c, image="img:1")
    validate(jobset_schema, m)
    assert m["metadata"]["name"] == "my-cluster"
    assert [r["name"] for r in m["spec"]["replicatedJobs"]] == ["local", "worker-x", "worker"]
    assert m["spec"]["failurePolicy"] == {"maxRestarts": 0}
    assert container(m, "local")["workingDir"] == "/app"
    assert container(m, "local")["args"] == ["-m", "tfcluster.k8s.pod", "--", "python", "train.py", "--steps=5"]


def test_what_a_jobset_cannot_express(tmp_path):
    c = load("cluster: {worker: 2}\nprogram: {command: [python, t.py]}\n"
             "jobs: {worker: {gpus: [0, '1,2']}}\n", tmp_path)
    with pytest.raises(UserError, match=r"jobs\.worker\.gpus"):
        jobset.jobset(c, image="img:1")
    c = load("cluster: {worker: 2}\nprogram: {command: [python, t.py]}\n", tmp_path, "c.yaml")
    jobset.jobset(c, image="img:1", name="x" * 46)  # x*46-worker-0-1-abcde: 63, JobSet's limit
    with pytest.raises(UserError, match=r"JobSet name 'x{47}' \(--name\): the pod names of job "
                                        r"'worker' \('x{47}-worker-0-1-xxxxx'\) would be longer than 63"):
        jobset.jobset(c, image="img:1", name="x" * 47)
    with pytest.raises(UserError, match="--name 'Bad_Name' is not a Kubernetes name"):
        jobset.jobset(c, image="img:1", name="Bad_Name")
    with pytest.raises(UserError, match="--image"):
        jobset.jobset(c, image=" ")
    c = load("cluster: {my_job: 1, My_Job: 1, worker: 1}\nprogram: {command: [python, t.py]}\n",
             tmp_path, "d.yaml")
    with pytest.raises(UserError, match=r"cluster\.My_Job: jobs 'my_job' and 'My_Job'"):
        jobset.jobset(c, image="img:1")


def test_cli_render_jobset(tmp_path, capsys, jobset_schema):
    p = tmp_path / "train.yaml"
    p.write_text(FULL)
    assert main(["render", "jobset", str(p), "--image", "img:1", "--name", "run-7"]) == 0
    m = yaml.safe_load(capsys.readouterr().out)
    validate(jobset_schema, m)
    assert m["metadata"]["name"] == "run-7"
    assert main(["render", "jobset", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tfcluster: error: render jobset: --image IMAGE is required (the container image "
                   "that runs the program), or kubernetes.image in the file (no image for: chief, ps, "
                   "worker, evaluator)"]


# --------------------------------------------------------------------------------------
# Every pod's TF_CONFIG, computed in the pod

def pod_env(manifest, rjob_name, pod_index, secrets, restarts=0):
    """The environment a pod gets: the container's env with the downward-API annotations and
    the Secret filled in as Kubernetes would, plus JOB_COMPLETION_INDEX (the Job controller)."""
    return container_env(rjob(manifest, rjob_name)["template"]["spec"]["template"],
                         container(manifest, rjob_name),
                         jobset_annotations(manifest["metadata"]["name"], rjob_name, restarts),
                         secrets, {"JOB_COMPLETION_INDEX": str(pod_index)})


def run_pod(manifest, rjob_name, pod_index, secrets, cwd, restarts=0):
    return run_container(container(manifest, rjob_name),
                         pod_env(manifest, rjob_name, pod_index, secrets, restarts), cwd)


@pytest.mark.parametrize("text,secrets", [
    (FULL, {"API_TOKEN": "s3cr3t-value", "DB_PASSWORD": "other-s3cr3t"}),
    (NO_CHIEF, {"ps.API_TOKEN": "tok-5678", "worker.API_TOKEN": "tok-1234"}),
], ids=["chief-ps-worker-evaluator", "no-chief-task-flags"])
def test_every_pod_computes_the_files_cluster_with_pod_names(tmp_path, text, secrets):
    """Each pod's entry command, run here with that pod's environment, gives the program the
    task contract: the file's cluster with the pods' names, its task, the JobSet's restart
    attempt as TFCLUSTER_RESTART_COUNT, the restart budget, no GPUs where the job has none."""
    c = load(text, tmp_path)
    m = jobset.jobset(c, image="img:1", name="tf")
    secret = {"tf-env": secrets}
    expected_cluster = {job: [f"tf-{job}-0-{i}.tf:2222" for i in range(len(tasks))]
                        for job, tasks in c.jobs.items() if job != "evaluator"}
    budget = str(m["spec"]["failurePolicy"]["maxRestarts"])
    seen = []
    for t in c.tasks:
        restarts = t.index % 3   # the JobSet's restart attempt, as its controller annotates the pod
        out = run_pod(m, t.job, t.index, secret, str(tmp_path), restarts)
        token = out.pop("token")
        assert token == secrets.get("API_TOKEN", secrets.get(f"{t.job}.API_TOKEN"))
        assert out == expected_contract(
            t, expected_cluster, restart=str(restarts),
            max_restarts="0" if t.restart.policy == "never" else budget,
            cuda="" if t.gpus == "" else None)
        seen.append(t.name)
    assert len(seen) == len(c.tasks) == sum(len(v) for v in c.jobs.values())


def test_jobset_pods_carry_the_restart_attempt_annotation(tmp_path):
    """JobSet annotates every pod with jobset.sigs.k8s.io/restart-attempt; each container reads
    it through the downward API; a pod without it (an older JobSet) counts 0."""
    c = load(NO_CHIEF, tmp_path)
    m = jobset.jobset(c, image="img:1", name="tf")
    for r in m["spec"]["replicatedJobs"]:
        env = r["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "TFCLUSTER_JOBSET_RESTART", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"}}} in env
    out = run_pod(m, "worker", 1, {"tf-env": {"ps.API_TOKEN": "a", "worker.API_TOKEN": "b"}},
                  str(tmp_path), restarts=None)
    assert out["restart"] == "0" and out["max_restarts"] == "2"


def test_pod_entry_point_errors_are_one_line(tmp_path):
    c = load(NO_CHIEF, tmp_path)
    m = jobset.jobset(c, image="img:1", name="tf")
    env = pod_env(m, "worker", 1, {"tf-env": {"ps.API_TOKEN": "a", "worker.API_TOKEN": "b"}})
    argv = [sys.executable, "-m", "tfcluster.k8s.pod", "--", sys.executable, "-c", "print('ran')"]
    for change, message in [
        ({"JOB_COMPLETION_INDEX": "4"}, "JOB_COMPLETION_INDEX='4' is not an index below 4"),
        ({"TFCLUSTER_REPLICATED_JOB": "chief"}, "replicated job 'chief' is not in TFCLUSTER_JOBSET"),
        ({"TFCLUSTER_JOBSET_NAME": ""}, "TFCLUSTER_JOBSET_NAME is not set (the pod annotation "
                                        "jobset.sigs.k8s.io/jobset-name, through the downward API)"),
        ({"TFCLUSTER_JOBSET": "{}"}, "TFCLUSTER_JOBSET: not a tfcluster JobSet layout"),
        ({"TFCLUSTER_JOBSET_RESTART": "x"}, "TFCLUSTER_JOBSET_RESTART='x' is not a number (the pod "
                                            "annotation jobset.sigs.k8s.io/restart-attempt"),
        ({"TFCLUSTER_JOBSET": ""}, "neither TFCLUSTER_JOBSET (a JobSet or TrainJob pod) nor TF_CONFIG"),
    ]:
        r = subprocess.run(argv, env={**env, **change}, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], r.stderr
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "ran\n"), r.stderr


def test_pod_names_follow_jobset():
    """JobSet's pod host name: <jobset>-<replicated job>-<job index>-<pod index>.<subdomain>."""
    assert pod.host_name("tf", "worker", 0, 3, "tf") == "tf-worker-0-3.tf"
    layout = {"subdomain": "s", "port": 2222,
              "jobs": {"worker": {"rjob": "worker", "replicas": 2, "pods": 2},
                       "evaluator": {"rjob": "evaluator", "replicas": 1, "pods": 1}}}
    assert pod.cluster_dict(layout, "js") == {"worker": [
        "js-worker-0-0.s:2222", "js-worker-0-1.s:2222", "js-worker-1-0.s:2222", "js-worker-1-1.s:2222"]}
    env = {"TFCLUSTER_REPLICATED_JOB": "worker", "TFCLUSTER_JOB_INDEX": "1", "JOB_COMPLETION_INDEX": "0"}
    assert pod.task_of(layout, env) == ("worker", 2)


def test_the_docs_example(tmp_path, jobset_schema):
    """docs/BACKENDS.md, 'kubernetes: JobSet': the file, the command, the Secret and the cluster."""
    yaml_text, commands = doc_blocks("## kubernetes: JobSet")[:2]
    (tmp_path / "mnist.yaml").write_text(yaml_text)
    render_line = next(x for x in commands.splitlines() if x.startswith("tfcluster render jobset"))
    words = render_line.split("|")[0].split()
    assert main(words[1:3] + [str(tmp_path / words[3])] + words[4:]) == 0
    with open(os.path.join(ROOT, "docs", "BACKENDS.md")) as f:
        doc = f.read()
    claimed = json.loads(" ".join(re.search(r"In the example the cluster is\s+`(.*?)`", doc, re.S)
                                  .group(1).split()))
    c = load(yaml_text, tmp_path, "mnist.yaml")
    text = jobset.render_jobset(c, image="registry.example/trainer:1.0", namespace="ml")
    m = yaml.safe_load(text)
    validate(jobset_schema, m)
    layout = json.loads(next(e["value"] for e in container(m, "ps")["env"] if e["name"] == pod.LAYOUT_ENV))
    assert pod.cluster_dict(layout, m["metadata"]["name"]) == claimed
    secret_line = next(x for x in commands.splitlines() if x.startswith("kubectl create secret"))
    assert secret_line.replace(" -n ml", "").split("--from-literal=")[0] in text.splitlines()[0]
    assert "--from-literal=WANDB_API_KEY=...;" in text.splitlines()[0]
