"""The tf.data service in every render: JobSet and TrainJob pods of the data jobs run the
built-in program with their own pod settings, every pod gets TFCLUSTER_DATA_SERVICE from the
layout (pod.task_setup, the contract's), the Slurm script carries the jobs; a TFJob, which has
no place for it, says so in one line. No TensorFlow, no processes."""
from __future__ import annotations

import json

import pytest

from helpers.k8s_pods import crd_validator, jobset_annotations, load, validate
from tfcluster.errors import UserError
from tfcluster.k8s import pod, render
from tfcluster.k8s.jobset import jobset
from tfcluster.k8s.trainjob import runtime_and_trainjob

FILE = """\
cluster: {worker: 2}
program: {command: [python, train.py]}
data_service: {dispatcher: 1, workers: 2, work_dir: /journal}
jobs:
  tfdata_worker:
    kubernetes:
      resources: {requests: {cpu: "8", memory: 4Gi}}
      node_selector: {pool: cpu}
kubernetes: {image: "tf:2.21"}
"""


def _containers(spec):
    return {rj["name"]: rj["template"]["spec"]["template"] for rj in spec["replicatedJobs"]}


def test_jobset_and_trainjob_start_the_data_service_with_its_pod_settings(tmp_path):
    cluster = load(FILE, tmp_path, "ds.yaml")
    js = jobset(cluster, image=None)
    validate(crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2"), js)
    runtime, _ = runtime_and_trainjob(cluster, image=None)
    for spec in (js["spec"], runtime["spec"]["template"]["spec"]):
        pods = _containers(spec)
        assert set(pods) == {"worker", "tfdata-dispatcher", "tfdata-worker"}
        data_worker = pods["tfdata-worker"]["spec"]
        c = data_worker["containers"][0]
        assert c["args"][-5:] == ["python", "-I", "-m", "tfcluster.runtime.data_service", "worker"]
        assert c["resources"] == {"requests": {"cpu": "8", "memory": "4Gi"}}
        assert data_worker["nodeSelector"] == {"pool": "cpu"}
        d = pods["tfdata-dispatcher"]["spec"]["containers"][0]
        assert d["args"][-3:] == ["dispatcher", "--work_dir", "/journal"]
        assert "resources" not in d
    # JobSet: the training workers' success ends the JobSet; the data jobs are not targets
    assert js["spec"]["successPolicy"]["targetReplicatedJobs"] == ["worker"]


def test_every_pod_gets_the_dispatchers_address_and_training_tf_config_leaves_the_data_jobs_out(tmp_path):
    cluster = load(FILE, tmp_path, "ds.yaml")
    js = jobset(cluster, image=None, name="ds")
    pods = _containers(js["spec"])
    for rjob, job in (("worker", "worker"), ("tfdata-worker", "tfdata_worker")):
        c = pods[rjob]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
        env.update({k: v for k, v in {
            pod.NAME_ENV: "ds", pod.RJOB_ENV: rjob, pod.JOB_INDEX_ENV: "0", pod.POD_INDEX_ENV: "1"}.items()})
        add, _, _ = pod.task_setup(env)
        assert add["TFCLUSTER_DATA_SERVICE"] == "grpc://ds-tfdata-dispatcher-0-0.ds:2222"
        tf_config = json.loads(add["TF_CONFIG"])
        assert tf_config["task"] == {"type": job, "index": 1}
        if job == "worker":
            assert set(tf_config["cluster"]) == {"worker"}
        else:     # a data worker finds its own address in the whole layout
            assert tf_config["cluster"]["tfdata_worker"][1] == "ds-tfdata-worker-0-1.ds:2222"
    assert jobset_annotations("ds", "worker")       # the helper's annotations name the same keys


def test_slurm_script_carries_the_data_service(tmp_path):
    script = render.render_slurm(load(FILE, tmp_path, "ds.yaml"))
    plan = json.loads(script.split("TFCLUSTER_SLURM_PLAN='", 1)[1].split("'\n", 1)[0])
    assert plan["jobs"]["tfdata_worker"]["count"] == 2
    assert plan["jobs"]["tfdata_dispatcher"]["argv"][-3:] == ["dispatcher", "--work_dir", "/journal"]
    assert plan["jobs"]["tfdata_worker"]["restart"]["policy"] == "on-failure"


def test_a_tfjob_has_no_place_for_it(tmp_path):
    with pytest.raises(UserError, match="^data_service: a TFJob has no replica type"):
        render.tfjob(load(FILE, tmp_path, "ds.yaml"), image=None)


@pytest.mark.parametrize("text, message", [
    ("cluster: {worker: 1, tfdata_worker: 1}\ndata_service: {}\n", "cluster.tfdata_worker: this job name belongs to data_service:"),
    ("cluster: {worker: 1}\ndata_service: {dispatcher: 2}\n", "data_service.dispatcher"),
    ("cluster: {worker: 1}\ndata_service: {workers: 0}\n", "tfdata_worker"),
    ("cluster: {worker: 1}\ndata_service: {workers: 2, colour: red}\n", "data_service.colour"),
])
def test_bad_data_service_names_the_field(text, message, tmp_path):
    with pytest.raises(UserError) as e:
        load(text, tmp_path, "bad.yaml")
    assert message in str(e.value)


def test_the_data_jobs_restart_on_failure_unless_the_file_says_otherwise(tmp_path):
    c = load("cluster: {worker: 1}\ndata_service: {workers: 2}\n"
             "jobs: {tfdata_worker: {restart: {max_restarts: 7}}}\n", tmp_path, "r.yaml")
    assert (c.jobs["tfdata_worker"][0].restart.policy, c.jobs["tfdata_worker"][0].restart.max_restarts) == \
        ("on-failure", 7)
    assert c.jobs["tfdata_dispatcher"][0].restart.policy == "on-failure"
    c = load("cluster: {worker: 1}\ndata_service: {}\njobs: {tfdata_dispatcher: {restart: {policy: never}}}\n",
             tmp_path, "n.yaml")
    assert c.jobs["tfdata_dispatcher"][0].restart.policy == "never"
