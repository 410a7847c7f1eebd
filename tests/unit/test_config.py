"""Unit tests of the cluster model: no TensorFlow, no processes."""
import json
import os

import pytest

from helpers import ROOT
from tfcluster.clusterfile import config, models, wording
from tfcluster.clusterfile.cluster import Endpoint, parse_endpoint
from tfcluster.clusterfile.config import TaskId, loads
from tfcluster.errors import ConfigError, UserError

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
    assert [t.name for t in c.tasks] == ["ps:0", "ps:1", "worker:0", "worker:1"]
    assert c.chief == TaskId("worker", 0)


def test_chief_and_evaluator():
    c = loads("cluster: {chief: [h:1], worker: [h:2], ps: [h:3], evaluator: [h:4]}")
    assert c.chief == TaskId("chief", 0)
    assert "evaluator" not in c.cluster_spec_dict()
    assert c.tf_config("evaluator:0")["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in c.tf_config("evaluator:0")["cluster"]
    assert [t.name for t in c.tasks] == ["chief:0", "ps:0", "worker:0", "evaluator:0"]


def test_counts_are_assigned_later():
    c = loads("cluster: {ps: 1, worker: 2}")
    assert not c.resolved and c.count_jobs == ("ps", "worker")
    with pytest.raises(UserError, match="count"):
        c.cluster_spec_dict()
    ports = iter(range(5000, 5003))
    r = c.with_endpoints(lambda t: Endpoint("localhost", next(ports)))
    assert r.cluster_spec_dict() == {"ps": ["localhost:5000"], "worker": ["localhost:5001", "localhost:5002"]}


def test_ipv6_endpoints():
    c = loads('cluster: {worker: ["[fd00::1]:2222", "[fe80::1%eth0]:2223"]}')
    assert c.cluster_spec_dict()["worker"] == ["[fd00::1]:2222", "[fe80::1%eth0]:2223"]
    assert loads('cluster: {worker: ["[::1]:2222"]}').cluster_spec_dict()["worker"] == ["[::1]:2222"]
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
    with pytest.raises(UserError) as e:
        c.task("worker\x1b[2J:0\n")
    assert "'worker\\x1b[2J:0\\n' is not a task" in e.value.message


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
    assert committed == models.json_schema(), "run: tfcluster schema > cluster.schema.json"
    with open(os.path.join(ROOT, "cluster.yaml")) as f:
        jsonschema.validate(yaml.safe_load(f), committed)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"cluster": {"worker": ["a:1"]}, "sucess": "chief"}, committed)


# ---- hostile and careless files: each is exit 2 with one line naming the field

@pytest.mark.parametrize("text,expected", [
    ("cluster:\n  worker: [a:1]\n  ps: [a:2]\n  worker: [a:3]\n",
     "line 4, column 3: duplicate key 'worker' (first on line 2)"),
    ("cluster: {worker: [a:1]}\ncluster: {worker: [b:1]}\n", "duplicate key 'cluster' (first on line 1)"),
    ("cluster: {worker: [a:1]}\nprogram: {env: {A: 1, A: 2}}\n", "line 2, column 23: duplicate key 'A'"),
    ("cluster: &c {worker: [a:1], x: *c}\n", "a recursive structure"),
    ('cluster: {worker: [a:1]}\nprogram: {env: {"X=1 $(touch f) Y": 1}}',
     "program.env.X=1 $(touch f) Y: a variable name cannot contain '='"),
    ('cluster: {worker: [a:1]}\njobs: {worker: {env: {"": 1}}}', "jobs.worker.env.: empty variable name"),
    ('cluster: {worker: [a:1]}\nprogram: {env: {"-u": 1}}', "starts with '-'"),
    ('cluster: {worker: [a:1]}\nprogram: {env: {"A\\eB": 1}}', "program.env.A\\x1bB: 'A\\x1bB' is not a variable name"),
    ('cluster: {worker: [a:1]}\nprogram: {args: ["a\\0b"]}', "program.args[0]: contains a NUL byte"),
    ('cluster: {worker: [a:1]}\nprogram: {cwd: "a\\0b"}', "program.cwd: contains a NUL byte"),
    ('cluster: {worker: [a:1]}\nlogdir: "r\\0"', "logdir: contains a NUL byte"),
    ('cluster: {worker: [a:1]}\nprogram: {env: {X: "\\0"}}', "program.env.X: contains a NUL byte"),
    ('cluster: {worker: [a:1]}\nprogram: {command: "python \\0"}', "program.command: contains a NUL byte"),
    ('cluster: {worker: [a:1]}\nprogram: {env: {X: "\\udc80"}}', "program.env.X: contains U+DC80, a lone surrogate"),
    ('cluster: {worker: [a:1]}\njobs: {"\\ud800": {}}', "jobs.\\ud800: the key contains U+D800"),
    ('cluster: {worker: ["a\\udfff:1"]}', "contains U+DFFF"),
    ('cluster: {worker: [a:1]}\nremote: {python: "py \'x"}', "remote.python: cannot be split into words"),
    ('cluster: {worker: [a:1]}\nhosts: {a: {python: ""}}', "hosts.a.python: empty"),
    ('cluster: {worker: [a:1]}\nremote: {ssh_host: "-oProxyCommand=touch f"}', "remote.ssh_host: '-oProxyCommand"),
    ('cluster: {worker: [a:1]}\nhosts: {a: {user: "-l"}}', "hosts.a.user: '-l' is not a host or user name"),
    ('cluster: {worker: [a:1]}\nremote: {ssh_options: ["A=b\\nProxyCommand=x"]}', "remote.ssh_options[0]:"),
    ('cluster: {worker: [a:1]}\nhosts: {a: {workdir: "/srv\\n/x"}}', "hosts.a.workdir: '/srv\\n/x' contains a control"),
    ('cluster: {worker: [a:1]}\nremote: {identity_file: "~/.ssh/id\\e"}', "remote.identity_file:"),
    ('cluster: {worker: [a:1]}\nremote: {user: "a b"}', "remote.user: 'a b' is not a host or user name"),
    ("cluster: {worker: [-oProxy:1]}", "'-oProxy' is not a valid host name (it starts with '-'"),
    ('cluster: {"worker\\n": [a:1]}', "job name 'worker\\n' is not valid"),
    ("cluster: {worker: [a:1]}\nrestart: {backoff: .inf}", "restart.backoff: input should be a finite number"),
    ("cluster: {worker: [a:1]}\njobs: {worker: {restart: {backoff: .nan}}}", "jobs.worker.restart.backoff: input should be a finite"),
    ("cluster: {worker: [a:1]}\ngrace: .inf", "grace: input should be a finite number"),
    ("cluster: {worker: [a:1]}\nwatchdog: {stall_timeout: .inf}", "watchdog.stall_timeout: input should be a finite"),
    ('cluster: {worker: [a:1]}\nlogdir: "runs\\nrm -rf ~"', "logdir: 'runs\\nrm -rf ~' contains a control character"),
    ('cluster: {worker: [a:1]}\njobs: {worker: {cwd: "a\\rb"}}', "jobs.worker.cwd: 'a\\rb' contains a control"),
    ("cluster: {worker: [a:1]}\nhosts: {b: {user: x}}", "hosts.b: no host 'b' in cluster (hosts in cluster: a)"),
    ("cluster: {worker: 2}\nhosts: {b: {user: x}}", "hosts.b: no host 'b' in cluster (cluster: has no host:port"),
    ("cluster: {ps: [localhost:1], worker: [node1:2]}",
     "cluster.ps[0]: localhost:1 is this machine's loopback address, but cluster.worker[0] (node1:2) is "
     "another machine: its tasks would dial their own loopback and hang"),
    ("cluster: {worker: [node1:2, 127.0.0.1:2]}", "cluster.worker[1]: 127.0.0.1:2 is this machine's loopback"),
    ("cluster: {Worker: [a:1], PS: [a:2]}", "cluster.Worker: did you mean 'worker'?"),
    ("cluster: {Worker: [a:1], PS: [a:2]}", "cluster.PS: did you mean 'ps'?"),
    ("cluster: {workers: [a:1]}", "cluster.workers: did you mean 'worker'?"),
    ("cluster: {ps_hosts: [a:1], worker_hosts: [a:2]}", "cluster.worker_hosts: did you mean 'worker'?"),
    ("cluster: {Master: [a:1]}", "cluster.Master: did you mean 'chief'?"),
    ("cluster: {Chief: [a:1], Evaluator: [a:2]}", "cluster.Evaluator: did you mean 'evaluator'?"),
    ("worker: [a:1]\ncluster: {worker: [a:2]}", "worker: unknown key; jobs go under cluster:"),
    ("apiVersion: kubeflow.org/v1\nkind: TFJob\nspec: {tfReplicaSpecs: {}}", "looks like a Kubernetes TFJob"),
    ("cluster: {worker: [a:1]}\nsecrets: [A=B]", "secrets[0]: a variable name cannot contain '='"),
    ("cluster: {worker: [a:1]}\nsecrets: A_TOKEN", "secrets: input should be a valid list"),
])
def test_hostile_and_careless_files(text, expected):
    found = problems(text)
    assert any(expected in p for p in found), found
    for p in found:
        assert "\n" not in p and "\x1b" not in p and "\0" not in p and len(p) < 300


@pytest.mark.parametrize("alias", [
    "localhost.", "0.0.0.0", "[::]", "[::1]", "127.0.0.2", "[::ffff:127.0.0.1]", "LOCALHOST",
    "@hostname", "@address"])
def test_one_local_port_under_two_names_is_a_duplicate(alias):
    import socket

    from tfcluster.net.addresses import local_names
    if alias == "@hostname":
        alias = socket.gethostname()
    elif alias == "@address":
        addrs = sorted(a for a in local_names() if a[:1].isdigit() and not a.startswith("127."))
        if not addrs:
            pytest.skip("no non-loopback IPv4 address")
        alias = addrs[0]
    found = problems(f'cluster: {{ps: ["localhost:2222"], worker: ["{alias}:2222"]}}')
    assert any("is already used by cluster.ps[0] (the same port on this machine)" in p for p in found), found


def test_endpoint_key():
    from tfcluster.net.addresses import endpoint_key
    assert endpoint_key("localhost", 1) == endpoint_key("::ffff:127.0.0.1", 1) == ("<local>", 1)
    assert endpoint_key("Node1.Example.", 5) == endpoint_key("node1.example", 5) == ("node1.example", 5)
    assert endpoint_key("10.255.0.9", 5) != endpoint_key("10.255.0.9", 6)


def test_a_job_that_looks_like_a_typo_is_legal_but_warned_about():
    c = loads("cluster: {worker: [a:1], PS: [a:2]}")
    assert [t.name for t in c.tasks] == ["worker:0", "PS:0"]
    assert len(c.warnings) == 1 and "cluster.PS: a job named 'PS' is an ordinary job" in c.warnings[0]
    assert loads("cluster: {worker: [a:1], local: [a:2]}").warnings == ()


def test_line_numbers_in_errors():
    text = "cluster:\n  ps: [a:1]\n  worker:\n    - a:2\n    - a:70000\nprogram:\n  comand: x\n"
    found = problems(text)
    assert "cluster.worker[1]: port 70000 is out of range 1-65535 (line 5)" in found
    assert any(p.startswith("program.comand: unknown key") and p.endswith("(line 7)") for p in found)


def test_billion_laughs_fails_fast(tmp_path):
    import time
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefghi", "bcdefghij"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines.append("cluster: {worker: *j}")
    f = tmp_path / "laughs.yaml"
    f.write_text("\n".join(lines) + "\n")
    assert len(f.read_bytes()) < 450
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        config.load(str(f))
    assert time.monotonic() - t0 < 3
    assert "aliases expand to more than 100000 values" in e.value.message
    # aliases as such are fine
    c = loads("program: {args: &a [--x, --y]}\njobs: {worker: {args: *a}}\ncluster: {worker: [a:1]}\n")
    assert c.task("worker:0").args == ("--x", "--y")


def test_error_values_are_short_however_big():
    big = "cluster: {worker: [a:1]}\nsuccess: [" + ", ".join(["[x, y, z]"] * 5000) + "]\n"
    found = problems(big)
    assert len(found) == 1 and len(found[0]) < 200, found
    assert wording.short(list(range(10 ** 6))) .startswith("[0, 1, 2, 3")


def test_secrets_key():
    c = loads("cluster: {worker: [a:1]}\nprogram: {env: {BUCKET: gs://x}}\nsecrets: [BUCKET, NOT_IN_ENV]")
    assert c.secret_names == frozenset({"BUCKET", "NOT_IN_ENV"})
    assert loads("cluster: {worker: [a:1]}").secret_names == frozenset()


@pytest.mark.parametrize("text,expected", [
    # the file: a '[' left open on line 11; PyYAML noticed on line 13
    ("version: 1\n" + "# a note\n" * 8 + "cluster:\n  worker: [localhost:2222, localhost:2223\n"
     "  ps: [localhost:2224]\n? odd\n",
     "not valid YAML: line 11, column 11: this '[' is never closed: a ']' (or a ',' between "
     "items) is missing (YAML noticed at line 12, column 5: expected ',' or ']', but got ':')"),
    ("program: {command: [python]\ncluster:\n  worker: [a:1]\n",
     "not valid YAML: line 1, column 10: this '{' is never closed"),
    ('version: 1\nname: "abc\ncluster: {}\n',
     "not valid YAML: line 2, column 7: this quoted text is never closed"),
    ("cluster:\n  worker: [a:1]\n ps: [b:2]\n",
     "not valid YAML: line 3, column 2: this line is indented differently from the lines above "
     "it (the block that starts at line 1, column 1)"),
    ("cluster:\n  worker: a: b\n", "not valid YAML: line 2, column 12: a second ': ' on one line"),
])
def test_a_yaml_syntax_error_names_where_the_mistake_is_in_plain_words(text, expected):
    found = problems(text)
    assert len(found) == 1 and expected in found[0], found
    assert all("\n" not in p and len(p) < 250 for p in found), found


@pytest.mark.parametrize("endpoint,expected", [
    ("a..b:2222", "cluster.worker[0]: 'a..b' is not a valid host name: an empty label"),
    (".a:2222", "cluster.worker[0]: '.a' is not a valid host name: an empty label"),
    ("a-.b:2222", "cluster.worker[0]: 'a-.b' is not a valid host name: 'a-' is not letters"),
    ("-a:2222", "cluster.worker[0]: '-a' is not a valid host name (it starts with '-'"),
    ("my_host:2222", "cluster.worker[0]: 'my_host' is not a valid host name: 'my_host'"),
    ("x" * 64 + ".b:2222", "at most 63 characters, not 64"),
    (".".join(["a" * 63] * 4) + ":2222", "at most 253 characters, not 255"),
    ("999.1.2.3:2222", "cluster.worker[0]: '999.1.2.3' is not a valid IPv4 address"),
    ("ab:\u0662\u0662\u0662\u0662", "cluster.worker[0]: port '\u0662\u0662\u0662\u0662' is not a number (digits 0-9)"),
    ("ab:２２２２", "is not a number (digits 0-9)"),
])
def test_a_host_follows_rfc_1123_or_is_an_ip_and_a_port_is_ascii_digits(endpoint, expected):
    found = problems("cluster:\n  worker: [" + json.dumps(endpoint) + "]\n")
    assert len(found) == 1 and expected in found[0] and "\n" not in found[0], found


@pytest.mark.parametrize("endpoint", ["localhost:2222", "node-1.example.com:2222", "10.0.0.1:2222",
                                      "[::1]:2222", "[fe80::1%eth0]:2222", "a:1", "host.:2222",
                                      "1a.example:2222", "xn--bcher-kva.example:2222"])
def test_good_hosts_are_accepted(endpoint):
    assert loads("cluster:\n  worker: [" + json.dumps(endpoint) + "]\n").tasks
