"""tfcluster render: Kubeflow TFJob manifests (checked against the TFJob CRD's schema) and Slurm
batch scripts."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
import yaml

from helpers.k8s_pods import PRINTER, ROOT, crd_validator, load, pod_env, run_container, validate
from tfcluster.clusterfile import config
from tfcluster.errors import UserError
from tfcluster.k8s import render


@pytest.fixture(scope="module")
def tfjob_schema():
    """The TFJob CRD's openAPIV3Schema, made strict: unknown fields are errors (as with
    ``kubectl apply --validate=strict``) instead of being pruned silently."""
    return crd_validator("kubeflow.org_tfjobs.yaml", "v1")


FULL = """\
cluster:
  chief: [localhost:2221]
  ps: [localhost:2222, localhost:2223]
  worker: 3
  evaluator: [localhost:2230]
program:
  command: [python3, trainer.py]
  args: [--train_steps=100]
  env: {LEARNING_RATE: 0.1, DEBUG: true}
jobs:
  ps: {env: {ROLE: ps}, restart: {policy: on-failure, max_restarts: 5}}
  worker: {gpus: ["0,1", "2,3", "4,5"], restart: {policy: exit-code, max_restarts: 2}}
  chief: {gpus: ["0,1"]}
  evaluator: {command: "python eval.py --every=60", args: []}
restart: {policy: never, max_restarts: 3, max_total_restarts: 7}
success: all-workers
"""


def test_tfjob_full_example_is_valid_and_complete(tmp_path, tfjob_schema):
    (tmp_path / "trainer.py").write_text("")  # so that the loader makes the path absolute
    c = load(FULL, tmp_path, "my_Run.yaml")
    text = render.render_k8s(c, image="registry.example/tf:2.21", namespace="ml")
    job = yaml.safe_load(text)
    validate(tfjob_schema, job)
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "TFJob"
    assert job["metadata"]["name"] == "my-run" and job["metadata"]["namespace"] == "ml"
    specs = job["spec"]["tfReplicaSpecs"]
    assert sorted(specs) == ["Chief", "Evaluator", "PS", "Worker"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "PS": 2, "Worker": 3, "Evaluator": 1}
    assert {k: v["restartPolicy"] for k, v in specs.items()} == {
        "Chief": "Never", "PS": "OnFailure", "Worker": "ExitCode", "Evaluator": "Never"}
    for _rtype, spec in specs.items():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow"
        assert container["image"] == "registry.example/tf:2.21"
        assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        assert "TF_CONFIG" not in env and "CUDA_VISIBLE_DEVICES" not in env
        assert env["LEARNING_RATE"] == "0.1" and env["DEBUG"] == "true"
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    # the contract's entry point, then the image's paths, not this machine's: trainer.py stays relative
    assert worker["command"] == ["python"] and worker["args"] == [
        "-m", "tfcluster.k8s.pod", "--max-restarts=7", "--", "python", "trainer.py", "--train_steps=100"]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert specs["Chief"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "resources" not in specs["PS"]["template"]["spec"]["containers"][0]  # ps: no GPU
    assert specs["PS"]["template"]["spec"]["containers"][0]["env"][-1] == {"name": "ROLE", "value": "ps"}
    ev = specs["Evaluator"]["template"]["spec"]["containers"][0]
    assert ev["command"] == ["python"] and ev["args"] == ["-m", "tfcluster.k8s.pod", "--", "python",
                                                          "eval.py", "--every=60"]
    assert specs["PS"]["template"]["spec"]["containers"][0]["args"][:5] == [
        "-m", "tfcluster.k8s.pod", "--no-gpus", "--max-restarts=7", "--"]
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 7}
    assert job["spec"]["successPolicy"] == "AllWorkers"


def test_tfjob_of_the_repository_example(tfjob_schema):
    c = config.load(os.path.join(ROOT, "cluster.yaml"))
    job = yaml.safe_load(render.render_k8s(c, image="tf"))
    validate(tfjob_schema, job)
    assert job["metadata"]["name"] == "tfcluster"
    assert job["spec"]["runPolicy"]["backoffLimit"] == 0    # restart: never
    assert "successPolicy" not in job["spec"]                # chief (the default)


def test_tfjob_backoff_limit_from_max_restarts(tmp_path, tfjob_schema):
    c = load("cluster: {worker: 2}\nprogram: {command: [python, t.py]}\n"
             "restart: {policy: on-failure, max_restarts: 4}\n", tmp_path)
    job = render.tfjob(c, image="tf", clean_pod_policy="All")
    validate(tfjob_schema, job)
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 4}
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"


def test_tfjob_gpu_counts_must_agree_within_a_job(tmp_path):
    c = load("cluster: {worker: 2}\nprogram: {command: [python, t.py]}\n"
             "jobs: {worker: {gpus: ['0,1', '2']}}\n", tmp_path)
    with pytest.raises(UserError, match=r"jobs\.worker\.gpus: .*worker:0 has 2, worker:1 has 1"):
        render.tfjob(c, image="tf")


def test_tfjob_rejects_jobs_a_tfjob_cannot_hold(tmp_path):
    c = load("cluster: {local: [localhost:2222], worker: 1}\nprogram: {command: [python, t.py]}\n", tmp_path)
    with pytest.raises(UserError, match="cluster.local: a TFJob has only the jobs"):
        render.tfjob(c, image="tf")


def test_tfjob_needs_image_program_and_valid_names(tmp_path):
    c = load("cluster: {worker: 1}\n", tmp_path)
    with pytest.raises(UserError, match="no program"):
        render.tfjob(c, image="tf")
    c = load("cluster: {worker: 1}\nprogram: {command: [python, t.py]}\n", tmp_path)
    with pytest.raises(UserError, match="--image"):
        render.tfjob(c, image="")
    with pytest.raises(UserError, match="not a Kubernetes name"):
        render.tfjob(c, image="tf", name="My_Job")
    with pytest.raises(UserError, match="not a Kubernetes name"):
        render.tfjob(c, image="tf", namespace="Bad NS")
    assert render.k8s_name("1 Big_run!") == "tf-1-big-run"


def test_tfjob_pods_get_the_task_contract_from_the_operators_tf_config(tmp_path, tfjob_schema):
    """A TFJob pod runs ``python -m tfcluster.k8s.pod``: from the TF_CONFIG the operator sets it gives
    the program the task contract (TFCLUSTER_TASK, the restart budget, no GPUs for ps) and, with
    task_flags, the seed's flags. The operator does not say how often a pod restarted, so
    TFCLUSTER_RESTART_COUNT stays unset there."""
    c = load("cluster: {ps: 1, worker: 2}\n"
             f"program: {{command: [python, -c, {json.dumps(PRINTER)}], task_flags: true}}\n"
             "restart: {policy: on-failure, max_restarts: 3}\n", tmp_path)
    job = render.tfjob(c, image="tf")
    validate(tfjob_schema, job)
    cluster = {"ps": ["j-ps-0.ns.svc:2222"], "worker": ["j-worker-0.ns.svc:2222", "j-worker-1.ns.svc:2222"]}
    for t in c.tasks:
        spec = job["spec"]["tfReplicaSpecs"][render.TFJOB_REPLICA_TYPES[t.job]]["template"]
        (container,) = spec["spec"]["containers"]
        tf_config = json.dumps({"cluster": cluster, "task": {"type": t.job, "index": t.index}})
        out = run_container(container, pod_env(spec, container, {}, {}, {
            "TF_CONFIG": tf_config, "TFCLUSTER_RESTART_COUNT": "5"}), tmp_path)
        assert out["tf_config"] == json.loads(tf_config) and out["task"] == t.name
        assert out["argv"] == [f"--job_name={t.job}", f"--task_index={t.index}",
                               "--ps_hosts=j-ps-0.ns.svc:2222",
                               "--worker_hosts=j-worker-0.ns.svc:2222,j-worker-1.ns.svc:2222"]
        assert (out["restart"], out["max_restarts"], out["local"]) == (None, "3", "1")
        assert out["cuda"] == ("" if t.job == "ps" else None)


def test_render_k8s_on_the_command_line():
    r = subprocess.run([sys.executable, "-m", "tfcluster", "render", "k8s", "cluster.yaml",
                        "--image", "tf:latest", "--name", "demo"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert doc["metadata"]["name"] == "demo" and doc["kind"] == "TFJob", doc
    images = {c["image"] for spec in doc["spec"]["tfReplicaSpecs"].values()
              for c in spec["template"]["spec"]["containers"]}
    assert images == {"tf:latest"}


def test_tfjob_secret_variables_come_from_a_secret(tmp_path, tfjob_schema):
    c = load("""\
        cluster: {chief: 1, worker: 2}
        program:
          command: [python, t.py]
          env: {HF_TOKEN: hf_abcdef, BUCKET: gs://private, LR: 0.1}
        secrets: [BUCKET]
        """, tmp_path, name="secret-job.yaml")
    text = render.render_k8s(c, image="img", namespace="ml")
    assert "hf_abcdef" not in text and "gs://private" not in text
    assert "# Secret variables (HF_TOKEN, BUCKET) are read from the Secret 'secret-job-env'" in text
    assert "kubectl create secret generic secret-job-env -n ml --from-literal=HF_TOKEN=" in text
    manifest = yaml.safe_load(text)
    validate(tfjob_schema, manifest)
    for rtype in ("Chief", "Worker"):
        env = manifest["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]["env"]
        assert env == [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "secret-job-env", "key": "HF_TOKEN"}}},
            {"name": "BUCKET", "valueFrom": {"secretKeyRef": {"name": "secret-job-env", "key": "BUCKET"}}},
            {"name": "LR", "value": "0.1"}]


# --------------------------------------------------------------------------------------
# Slurm

def _plan_from_script(script: str):
    from tfcluster.backends.slurm.batch import PLAN_ENV
    for line in script.splitlines():
        if line.startswith(f"export {PLAN_ENV}="):
            return json.loads(shlex.split(line[len("export "):])[0].split("=", 1)[1])
    raise AssertionError("no plan in the script")


def test_slurm_script(tmp_path):
    c = load("""\
        cluster: {ps: [a:2222], worker: 3, chief: 1}
        program: {command: [python, t.py], args: [--lr=0.1, "it's"], env: {A: "x y"}}
        base_port: 3000
        logdir: out
    """, tmp_path)
    script = render.render_slurm(c, partition="gpu", time="01:00:00", name="demo")
    assert script.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --job-name=demo", "#SBATCH --ntasks=5", "#SBATCH --overcommit",
                 "#SBATCH --partition=gpu", "#SBATCH --time=01:00:00"):
        assert line in script.splitlines()
    assert "#   0        chief:0" in script and "#   2-4      worker:0..worker:2" in script
    assert "del sys.path[0]" in script and "tfcluster.backends.agent.node" in script
    assert "--distribution=block" in script
    r = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr
    plan = _plan_from_script(script)
    assert sorted(plan["jobs"]) == ["chief", "ps", "worker"]
    assert plan["jobs"]["worker"]["argv"] == ["{python}", "t.py", "--lr=0.1", "it's"]
    assert plan["jobs"]["worker"]["env"] == {"A": "x y"}
    assert plan["base_port"] == 3000 and plan["chief"] == "chief:0"
    assert plan["run_dir"] == os.path.join(str(tmp_path), "out", "slurm-{job_id}")
    assert 'RUN_DIR=' + shlex.quote(os.path.join(str(tmp_path), "out", "slurm-")) + '"${SLURM_JOB_ID}"' in script


def test_slurm_script_defaults(tmp_path):
    c = load("cluster: {worker: 2}\nprogram: {command: [python, t.py]}\n", tmp_path, "job.yaml")
    script = render.render_slurm(c)
    assert "#SBATCH --job-name=job" in script
    assert "--partition" not in script and "--time" not in script


def test_render_slurm_on_the_command_line():
    r = subprocess.run([sys.executable, "-m", "tfcluster", "render", "slurm", "cluster.yaml",
                        "--partition", "cpu", "--time", "10:00"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "#SBATCH --partition=cpu" in r.stdout and "#SBATCH --time=10:00" in r.stdout
    assert subprocess.run(["bash", "-n"], input=r.stdout, text=True).returncode == 0
