"""tfcluster.pod, the entry point of a rendered JobSet's containers, run as a real process with
the environment Kubernetes would give each pod: every pod computes the file's cluster with pod
host names; its errors are one line. (The manifest itself: tests/unit/test_jobset.py.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, load
from helpers.jobset import FULL, NO_CHIEF, container

from tfcluster import jobset


def pod_env(manifest, rjob_name, pod_index, secrets):
    """The environment a pod gets: the container's env with the downward-API annotations and
    the Secret filled in as Kubernetes would, plus JOB_COMPLETION_INDEX (the Job controller)."""
    annotations = {"jobset.sigs.k8s.io/jobset-name": manifest["metadata"]["name"],
                   "jobset.sigs.k8s.io/replicatedjob-name": rjob_name,
                   "jobset.sigs.k8s.io/job-index": "0"}
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.path.join(ROOT, "src"),
           "JOB_COMPLETION_INDEX": str(pod_index)}
    for e in container(manifest, rjob_name)["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e["valueFrom"]:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            key = path[len("metadata.annotations['"):-2]
            assert path == f"metadata.annotations['{key}']"
            env[e["name"]] = annotations[key]
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def run_pod(manifest, rjob_name, pod_index, secrets, cwd):
    c = container(manifest, rjob_name)
    argv = [sys.executable if w == "python" else w for w in c["command"] + c["args"]]
    r = subprocess.run(argv, env=pod_env(manifest, rjob_name, pod_index, secrets), cwd=cwd,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("text,secrets", [
    (FULL, {"API_TOKEN": "s3cr3t-value", "DB_PASSWORD": "other-s3cr3t"}),
    (NO_CHIEF, {"ps.API_TOKEN": "tok-5678", "worker.API_TOKEN": "tok-1234"}),
], ids=["chief-ps-worker-evaluator", "no-chief-task-flags"])
def test_every_pod_computes_the_files_cluster_with_pod_names(tmp_path, text, secrets):
    c = load(text, tmp_path)
    m = jobset.jobset(c, image="img:1", name="tf")
    secret = {"tf-env": secrets}
    expected_cluster = {job: [f"tf-{job}-0-{i}.tf:2222" for i in range(len(tasks))]
                        for job, tasks in c.jobs.items() if job != "evaluator"}
    seen = []
    for t in c.tasks:
        out = run_pod(m, t.job, t.index, secret, str(tmp_path))
        assert out["tf_config"] == {"cluster": expected_cluster, "task": {"type": t.job, "index": t.index}}
        assert out["task"] == t.name
        assert out["token"] == secrets.get("API_TOKEN", secrets.get(f"{t.job}.API_TOKEN"))
        if t.task_flags:
            assert out["argv"] == [f"--job_name={t.job}", f"--task_index={t.index}"] + [
                f"--{j}_hosts={','.join(h)}" for j, h in expected_cluster.items()]
        else:
            assert out["argv"] == []
        seen.append(t.name)
    assert len(seen) == len(c.tasks) == sum(len(v) for v in c.jobs.values())


def test_pod_entry_point_errors_are_one_line(tmp_path):
    c = load(NO_CHIEF, tmp_path)
    m = jobset.jobset(c, image="img:1", name="tf")
    env = pod_env(m, "worker", 1, {"tf-env": {"ps.API_TOKEN": "a", "worker.API_TOKEN": "b"}})
    argv = [sys.executable, "-m", "tfcluster.pod", "--", sys.executable, "-c", "print('ran')"]
    for change, message in [
        ({"JOB_COMPLETION_INDEX": "4"}, "JOB_COMPLETION_INDEX='4' is not an index below 4"),
        ({"TFCLUSTER_REPLICATED_JOB": "chief"}, "replicated job 'chief' is not in TFCLUSTER_JOBSET"),
        ({"TFCLUSTER_JOBSET_NAME": ""}, "TFCLUSTER_JOBSET_NAME is not set (the pod annotation "
                                        "jobset.sigs.k8s.io/jobset-name, through the downward API)"),
        ({"TFCLUSTER_JOBSET": "{}"}, "TFCLUSTER_JOBSET: not a tfcluster JobSet layout"),
    ]:
        r = subprocess.run(argv, env={**env, **change}, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], r.stderr
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "ran\n"), r.stderr
