"""Unit tests of the cluster model: no TensorFlow, no processes."""
import json
import os
import sys

import pytest

from tfcluster import config
from tfcluster.config import TaskId, loads, parse_endpoint
from tfcluster.errors import ConfigError, UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SEED = """
cluster:
  ps: [ps0.example.com:2222, ps1.example.com:2222]
  worker: [worker0.example.com:2222, worker1.example.com:2222]
program: {command: [python, trainer.py], task_flags: true}
"""


def problems(text):
    with pytest.raises(ConfigError) as e:
        loads(text, source="f.yaml")
    return e.value.problems


def test_seed_cluster_spec_and_tf_config():
    c = loads(SEED)
    assert c.cluster_spec_dict() == {
        "ps": ["ps0.example.com:2222", "ps1.example.com:2222"],
        "worker": ["worker0.example.com:2222", "worker1.example.com:2222"]}
    assert c.tf_config("worker:1") == {"cluster": c.cluster_spec_dict(),
                                       "task": {"type": "worker", "index": 1}}
    assert json.loads(c.tf_config_json("ps:0"))["task"] == {"type": "ps", "index": 0}
    assert [t.name for t in c.tasks] == ["ps:0", "ps:1", "worker:0", "worker:1"]
    assert c.chief == TaskId("worker", 0)


def test_task_flags_are_the_seeds_flags():
    c = loads(SEED)
    assert c.argv("ps:1")[-4:] == [
        "--job_name=ps", "--task_index=1",
        "--ps_hosts=ps0.example.com:2222,ps1.example.com:2222",
        "--worker_hosts=worker0.example.com:2222,worker1.example.com:2222"]
    assert "--job_name=ps" not in c.argv("ps:1", task_flags=False)


def test_chief_and_evaluator():
    c = loads("cluster: {chief: [h:1], worker: [h:2], ps: [h:3], evaluator: [h:4]}")
    assert c.chief == TaskId("chief", 0)
    assert "evaluator" not in c.cluster_spec_dict()
    assert c.tf_config("evaluator:0")["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in c.tf_config("evaluator:0")["cluster"]
    assert [t.name for t in c.tasks] == ["chief:0", "ps:0", "worker:0", "evaluator:0"]
    assert not any("--evaluator_hosts" in a for a in c.task_flag_args("worker:0"))


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
    ps = c.env("ps:0")
    assert ps["CUDA_VISIBLE_DEVICES"] == "" and ps["A"] == "1" and ps["B"] == "ps" and ps["C"] == "true"
    assert c.env("worker:0")["CUDA_VISIBLE_DEVICES"] == "0"
    assert c.env("worker:1")["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert c.env("worker:2")["CUDA_VISIBLE_DEVICES"] == ""  # past the list: no GPU
    assert c.argv("worker:0") == ["python", str(tmp_path / "train.py"), "--x", "--a"]
    assert c.argv("ps:0") == ["python", "-m", "tfcluster", "serve", "--a"]
    assert c.task("worker:0").cwd == str(tmp_path)
    assert c.argv("worker:0", command=["python", "other.py"]) == ["python", "other.py"]


def test_workers_without_gpus_inherit():
    c = loads("cluster: {worker: [h:2], chief: [h:3]}")
    assert "CUDA_VISIBLE_DEVICES" not in c.env("worker:0")
    assert "CUDA_VISIBLE_DEVICES" not in c.env("chief:0")


def test_counts_are_assigned_later():
    c = loads("cluster: {ps: 1, worker: 2}")
    assert not c.resolved and c.count_jobs == ("ps", "worker")
    with pytest.raises(UserError, match="count"):
        c.cluster_spec_dict()
    ports = iter(range(5000, 5003))
    r = c.with_endpoints(lambda t: config.Endpoint("localhost", next(ports)))
    assert r.cluster_spec_dict() == {"ps": ["localhost:5000"], "worker": ["localhost:5001", "localhost:5002"]}


def test_ipv6_endpoints():
    c = loads('cluster: {worker: ["[::1]:2222", "[fe80::1%eth0]:2223"]}')
    assert c.cluster_spec_dict()["worker"] == ["[::1]:2222", "[fe80::1%eth0]:2223"]
    assert parse_endpoint("[::1]:80") == ("::1", 80)


@pytest.mark.parametrize("entry,msg", [
    ("localhost", "has no port"),
    ("localhost:", "has no port"),
    (":2222", "has no host"),
    ("2222", "has no host"),
    (2222, "has no host"),
    ("localhost:70000", "port 70000 is out of range 1-65535"),
    ("localhost:0", "out of range"),
    ("localhost:http", "is not a number"),
    ("::1:2222", "brackets"),
    ("[zz]:1", "not an IPv6 address"),
    ("bad host:1", "not a valid host"),
    (None, "must be a 'host:port' string"),
])
def test_bad_endpoints(entry, msg):
    with pytest.raises(ValueError, match=msg):
        parse_endpoint(entry)


@pytest.mark.parametrize("text,expected", [
    ("cluster: {ps: [localhost:2222], worker: [localhost:2223, localhost:70000]}",
     "cluster.worker[1]: port 70000 is out of range 1-65535"),
    ("[1, 2]", "must be a mapping"),
    ("just a string", "must be a mapping"),
    ("program: {}", "cluster: required"),
    ("cluster: [a:1]", "cluster: must be a mapping"),
    ("cluster: {}", "cluster: no jobs"),
    ("cluster: {worker: []}", "cluster.worker: empty job"),
    ("cluster: {worker: }", "cluster.worker: empty job"),
    ("cluster: {worker: [localhost]}", "cluster.worker[0]: 'localhost' has no port"),
    ("cluster: {worker: [a:1, a:1]}", "cluster.worker[1]: a:1 is already used by cluster.worker[0]"),
    ("cluster: {ps: [localhost:5], worker: [127.0.0.1:5]}", "cluster.worker[0]: 127.0.0.1:5 is already used by cluster.ps[0]"),
    ("cluster: {worker: [a:1], chief: [a:2, a:3]}", "cluster.chief: at most one chief task (2 given)"),
    ("cluster: {worker: [a:1], evaluator: [a:2, a:3]}", "cluster.evaluator: at most one evaluator"),
    ("cluster: {ps: [a:1]}", "no worker and no chief"),
    ("cluster: {worker: [a:1]}\nprogramm: {}", "programm: unknown key (did you mean 'program'?)"),
    ("cluster: {worker: [a:1]}\nprogram: {comand: x}", "program.comand: unknown key in program (did you mean 'command'?)"),
    ("cluster: {worker: [a:1]}\nrestart: {polcy: never}", "restart.polcy: unknown key in restart (did you mean 'policy'?)"),
    ("cluster: {worker: [a:1]}\njobs: {worker: {gpu: [0]}}", "jobs.worker.gpu: unknown key in jobs.worker (did you mean 'gpus'?)"),
    ("cluster: {worker: [a:1], 'ps-1': [a:2]}", "job name 'ps-1' is not valid"),
    ("cluster: {worker: [a:1], 1ps: [a:2]}", "job name '1ps' is not valid"),
    ("cluster: {worker: [a:1]}\njobs: {worker: {gpus: [0, 1]}}", "jobs.worker.gpus: 2 entries for 1 task"),
    ("cluster: {worker: [a:1]}\njobs: {wrker: {}}", "jobs.wrker: no job 'wrker' in cluster (did you mean 'worker'?)"),
    ("cluster: {worker: [a:1]}\nsuccess: first", "success: 'first' is not one of 'chief' or 'all-workers'"),
    ("cluster: {worker: [a:1]}\nrestart: {policy: always}", "restart.policy: 'always' is not one of"),
    ("cluster: {worker: [a:1]}\nrestart: {max_restarts: -1}", "restart.max_restarts:"),
    ("cluster: {worker: [a:1]}\nprogram: {command: 3}", "program.command: must be a list of words or a string"),
    ("cluster: {worker: [a:1]}\nprogram: {command: []}", "program.command: empty command"),
    ("cluster: {worker: [a:1]}\nprogram: {args: oops}", "program.args:"),
    ("cluster: {worker: [a:1]}\nversion: 2", "version: 2 is not one of 1"),
    ("cluster: {worker: 0}", "cluster.worker: a task count must be at least 1"),
    ("cluster: {worker: 'a:1,b:2'}", "cluster.worker: must be a list"),
    ("cluster: {worker: [a:1]\n", "not valid YAML: line"),
    ("", "the file is empty"),
])
def test_errors_name_the_field(text, expected):
    found = problems(text)
    assert any(expected in p for p in found), found
    for p in found:
        assert "\n" not in p and len(p) < 200


def test_all_errors_at_once():
    found = problems("cluster: {worker: [a:1, 'a:99999'], chief: [b:1, b:2]}\n"
                     "program: {comand: x}\nsuccess: no\n")
    assert len(found) == 4, found


def test_task_lookup_errors():
    c = loads("cluster: {worker: [a:1, a:2]}")
    with pytest.raises(UserError, match=r"no task worker:9: job 'worker' has 2 tasks"):
        c.task("worker:9")
    with pytest.raises(UserError, match="did you mean 'worker'"):
        c.task("wroker:0")
    with pytest.raises(UserError, match="JOB:INDEX"):
        c.task("worker")


def test_load_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        config.load(str(tmp_path / "missing.yaml"))
    with pytest.raises(UserError, match="is a folder"):
        config.load(str(tmp_path))
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe\x00cluster")
    with pytest.raises(UserError, match="not a text file"):
        config.load(str(bad))
    if os.geteuid() != 0:
        locked = tmp_path / "locked.yaml"
        locked.write_text("cluster: {worker: [a:1]}")
        locked.chmod(0)
        with pytest.raises(UserError, match="permission denied"):
            config.load(str(locked))


def test_shipped_cluster_yaml_is_the_seed_example():
    c = config.load(os.path.join(ROOT, "cluster.yaml"))
    assert c.cluster_spec_dict() == {"ps": ["localhost:2222"],
                                     "worker": ["localhost:2223", "localhost:2224"]}
    assert c.task("worker:0").command[-1].endswith("trainer.py")
    with open(os.path.join(ROOT, "cluster.yaml")) as f:
        assert "yaml-language-server: $schema=./cluster.schema.json" in f.readline()


def test_committed_schema_is_current_and_accepts_the_shipped_file():
    jsonschema = pytest.importorskip("jsonschema")
    import yaml
    with open(os.path.join(ROOT, "cluster.schema.json")) as f:
        committed = json.load(f)
    assert committed == config.json_schema(), "run: tfcluster schema > cluster.schema.json"
    with open(os.path.join(ROOT, "cluster.yaml")) as f:
        jsonschema.validate(yaml.safe_load(f), committed)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"cluster": {"worker": ["a:1"]}, "sucess": "chief"}, committed)
