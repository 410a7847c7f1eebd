"""The task contract (tfcluster.plan.contract) over resolved cluster files: TF_CONFIG, task flags,
CUDA_VISIBLE_DEVICES and the file's env -- the one place every launcher and render takes them
from. Pure: no TensorFlow, no processes."""
from __future__ import annotations

import json

import pytest

from tfcluster.clusterfile.config import loads
from tfcluster.plan import contract

SEED = """
cluster:
  ps: [ps0.example.com:2222, ps1.example.com:2222]
  worker: [worker0.example.com:2222, worker1.example.com:2222]
program: {command: [python, trainer.py], task_flags: true}
"""


def argv(c, name, command=None, task_flags=None):
    t = c.task(name)
    words = list(command) if command else list(t.command) + list(t.args)
    return contract.task_argv(words, c.cluster_spec_dict(), t.job, t.index,
                              t.task_flags if task_flags is None else task_flags)


def env(c, name):
    t = c.task(name)
    return contract.task_env(t.job, t.index, c.cluster_spec_dict(), file_env=dict(t.env), gpus=t.gpus)


def test_tf_config_is_tensorflows_format():
    c = loads(SEED)
    assert json.loads(env(c, "ps:0")["TF_CONFIG"]) == {
        "cluster": {"ps": ["ps0.example.com:2222", "ps1.example.com:2222"],
                    "worker": ["worker0.example.com:2222", "worker1.example.com:2222"]},
        "task": {"type": "ps", "index": 0}}
    assert c.tf_config("worker:1") == contract.tf_config(c.cluster_spec_dict(), "worker", 1)


def test_task_flags_are_the_seeds_flags():
    c = loads(SEED)
    assert argv(c, "ps:1")[-4:] == [
        "--job_name=ps", "--task_index=1",
        "--ps_hosts=ps0.example.com:2222,ps1.example.com:2222",
        "--worker_hosts=worker0.example.com:2222,worker1.example.com:2222"]
    assert "--job_name=ps" not in argv(c, "ps:1", task_flags=False)


def test_evaluator_is_left_out_of_the_cluster_and_the_flags():
    c = loads("cluster: {chief: [h:1], worker: [h:2], ps: [h:3], evaluator: [h:4]}")
    assert contract.cluster_dict({"worker": ["h:2"], "evaluator": ["h:4"]}) == {"worker": ["h:2"]}
    config = json.loads(env(c, "evaluator:0")["TF_CONFIG"])
    assert config["task"] == {"type": "evaluator", "index": 0} and "evaluator" not in config["cluster"]
    flags = contract.task_flags(c.cluster_spec_dict(), "worker", 0)
    assert not any("--evaluator_hosts" in a for a in flags)


def test_env_gpus_and_job_overrides(tmp_path):
    (tmp_path / "train.py").write_text("")
    text = """
cluster: {ps: [localhost:1], worker: [localhost:2, localhost:3, localhost:4]}
program: {command: python train.py --x, args: [--a], env: {A: 1, B: "b", C: true}}
jobs:
  ps: {command: [python, -m, tfcluster, serve], env: {B: ps}}
  worker: {gpus: [0, "1,2"]}
"""
    c = loads(text, base_dir=str(tmp_path))
    ps = env(c, "ps:0")
    assert ps["CUDA_VISIBLE_DEVICES"] == "" and ps["A"] == "1" and ps["B"] == "ps" and ps["C"] == "true"
    assert env(c, "worker:0")["CUDA_VISIBLE_DEVICES"] == "0"
    assert env(c, "worker:1")["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert env(c, "worker:2")["CUDA_VISIBLE_DEVICES"] == ""  # past the list: no GPU
    assert argv(c, "worker:0") == ["python", str(tmp_path / "train.py"), "--x", "--a"]
    assert argv(c, "ps:0") == ["python", "-m", "tfcluster", "serve", "--a"]
    assert c.task("worker:0").cwd == str(tmp_path)
    assert argv(c, "worker:0", command=["python", "other.py"]) == ["python", "other.py"]


def test_workers_without_gpus_inherit():
    c = loads("cluster: {worker: [h:2], chief: [h:3]}")
    assert "CUDA_VISIBLE_DEVICES" not in env(c, "worker:0")
    assert "CUDA_VISIBLE_DEVICES" not in env(c, "chief:0")


@pytest.mark.parametrize("gpus,expected", [
    (None, None),       # inherit: whatever the pod has
    ("", ""),           # no GPUs (a ps): hidden, even on a node that exposes all GPUs
    (" , ", ""),
    ("0", None),        # ids: the device plugin numbers the pod's GPUs itself
    ("2,3", None),
])
def test_pod_gpus(gpus, expected):
    assert contract.pod_gpus(gpus) == expected
