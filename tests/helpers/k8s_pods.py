"""Helpers of the Kubernetes render tests (TFJob, JobSet, Trainer v2): the CRDs' schemas made
strict, and running a rendered pod's entry command here with the environment Kubernetes would
give that pod. No TensorFlow; the CRDs are vendored in tests/data/k8s."""
from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
import sys
import textwrap
from typing import Any, Dict, Mapping, Optional

import pytest
import yaml

from helpers import TESTS
from tfcluster.clusterfile import config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the CRDs, vendored with their source, version and license (tests/data/k8s/README.md)
K8S = os.path.join(TESTS, "data", "k8s")

# A program that prints what it was given: TF_CONFIG, argv, and the contract's variables.
PRINTER = ("import json,os,sys;e=os.environ.get;print(json.dumps({'tf_config':json.loads(e('TF_CONFIG')),"
           "'argv':sys.argv[1:],'task':e('TFCLUSTER_TASK'),'restart':e('TFCLUSTER_RESTART_COUNT'),"
           "'max_restarts':e('TFCLUSTER_MAX_RESTARTS'),'local':e('TFCLUSTER_LOCAL_TASKS'),"
           "'cuda':e('CUDA_VISIBLE_DEVICES'),'token':e('API_TOKEN')}))")


def load(text: str, tmp_path, name="cluster.yaml") -> config.Cluster:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return config.load(str(p))


def _strict(node):
    """A CRD schema with unknown fields made errors (as ``kubectl apply --validate=strict``)
    instead of being pruned silently."""
    if isinstance(node, dict):
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for v in node.values():
            _strict(v)
    elif isinstance(node, list):
        for v in node:
            _strict(v)
    return node


@functools.lru_cache(maxsize=None)
def _crd(filename: str) -> dict:
    """A CRD of tests/data/k8s, parsed once per process (they are large: libyaml when there)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(os.path.join(K8S, filename)) as f:
        return yaml.load(f, Loader=loader)


def crd_validator(filename: str, version: str):
    """A strict Draft 7 validator for one version of a CRD in tests/data/k8s."""
    jsonschema = pytest.importorskip("jsonschema")
    v = next(v for v in _crd(filename)["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(_strict(copy.deepcopy(v["schema"]["openAPIV3Schema"])))


def validate(validator, manifest):
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:10])


def pod_env(pod_template: Mapping[str, Any], container: Mapping[str, Any], annotations: Mapping[str, str],
            secrets: Mapping[str, Mapping[str, str]], extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment a container gets: its env with downward-API annotations and Secret keys
    filled in as Kubernetes would, plus ``extra`` (what a controller sets, e.g.
    JOB_COMPLETION_INDEX or the TFJob operator's TF_CONFIG)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.path.join(ROOT, "src")}
    env.update(extra or {})
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e["valueFrom"]:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            m = re.fullmatch(r"metadata\.annotations\['(.+)'\]", path)
            assert m, path
            if m.group(1) in annotations:   # a missing annotation reads as ""
                env[e["name"]] = annotations[m.group(1)]
            else:
                env[e["name"]] = ""
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def run_container(container: Mapping[str, Any], env: Mapping[str, str], cwd) -> Dict[str, Any]:
    """Run the container's command and args here (``python`` is this interpreter) and return
    what PRINTER printed."""
    argv = [sys.executable if w == "python" else w for w in container["command"] + container.get("args", [])]
    r = subprocess.run(argv, env=dict(env), cwd=str(cwd), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def jobset_annotations(jobset_name: str, rjob: str, restarts: Optional[int] = 0) -> Dict[str, str]:
    """The annotations the JobSet controller puts on a pod of replicated job ``rjob`` (job 0)."""
    out = {"jobset.sigs.k8s.io/jobset-name": jobset_name,
           "jobset.sigs.k8s.io/replicatedjob-name": rjob,
           "jobset.sigs.k8s.io/job-index": "0"}
    if restarts is not None:
        out["jobset.sigs.k8s.io/restart-attempt"] = str(restarts)
    return out


def expected_contract(task, cluster: Dict[str, Any], restart: Optional[str], max_restarts: str,
                      cuda: Optional[str]) -> Dict[str, Any]:
    """What PRINTER shows for ``task`` (a config.Task) under the task contract."""
    flags = ([f"--job_name={task.job}", f"--task_index={task.index}"]
             + [f"--{j}_hosts={','.join(h)}" for j, h in cluster.items()]) if task.task_flags else []
    return {"tf_config": {"cluster": cluster, "task": {"type": task.job, "index": task.index}},
            "argv": flags, "task": task.name, "restart": restart, "max_restarts": max_restarts,
            "local": "1", "cuda": cuda}
