"""A seeded, time-bounded mutation fuzz of cluster files through every TensorFlow-free command.

Start from the shipped files, mutate keys, values, types and structure, put hostile strings in
(NUL, lone surrogates, newlines, terminal escapes, shell code, leading '-', other names of this
machine's ports, non-finite floats), and run each file through ``validate``, ``validate --json``,
``commands``, ``tf-config``, ``render slurm``, ``render k8s`` and ``launch --dry-run`` in this
process. Every command must end with exit 0 or 2 (a UserError), never a traceback; and a file
that ``validate`` accepts must be right: no duplicate local endpoint, no env key with '=', no NUL
or surrogate anywhere, command lines that split back into exactly their words, one manifest.
(tests/unit/test_cli.py has the hypothesis fuzz of ``from_dict`` on random structures; this one
starts from real files, so the mutations reach deep checks.)
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import random
import shlex
import socket
import time

import yaml

from helpers import FUZZ_SECONDS, ROOT
from tfcluster.cli import main as cli
from tfcluster.clusterfile import config
from tfcluster.net.addresses import endpoint_key

SEED = int(os.environ.get("TFCLUSTER_FUZZ_SEED", "14"))
BUDGET_S = FUZZ_SECONDS   # TFCLUSTER_FUZZ_SECONDS: 2 by default, 20 in .ci/run
MAX_CASES = 2000
MIN_CASES = 15   # whatever the budget: the seeded first cases always run, so the checks below hold

EXTRA_SEEDS = [
    """\
cluster: {chief: [localhost:2221], ps: [localhost:2222], worker: [localhost:2223, localhost:2224],
          evaluator: [localhost:2225]}
program: {command: "python trainer.py --steps=10", args: [--lr=0.1], task_flags: true,
          env: {HF_TOKEN: hf_secret_value, LR: 0.1, DEBUG: true}, cwd: .}
jobs:
  ps: {command: [python, -m, tfcluster, serve], env: {ROLE: ps}, restart: {policy: on-failure}}
  worker: {gpus: [0, "1,2"], restart: {policy: exit-code, max_restarts: 2, backoff: 0.5}}
restart: {policy: never, max_restarts: 3, max_total_restarts: 7}
success: all-workers
logdir: runs
grace: 2
secrets: [LR]
watchdog: {startup_timeout: 30, waiting_timeout: 30, stall_timeout: 60}
""",
    """\
cluster: {ps: [node1:2222], worker: [node1:2223, node2:2222]}
program: {command: [python, trainer.py], env: {A: 1, API_TOKEN: tok_1234}}
jobs: {worker: {env: {B: x}, cwd: sub}}
remote: {user: alice, python: /opt/venv/bin/python, ssh_options: [StrictHostKeyChecking=yes]}
hosts: {node2: {ssh_host: 10.0.0.2, port: 2200, workdir: /srv/x, identity_file: ~/.ssh/id}}
""",
    "cluster: {ps: 1, worker: 3}\nprogram: {command: [python, trainer.py]}\nbase_port: 31000\n",
]

HOSTILE = [
    "", " ", "\0", "a\0b", "\udc80", "x\ud800y", "a\nb", "runs\nrm -rf ~", "\x1b[31mred\x1b[0m", "\r",
    "\u202etxt", "-oProxyCommand=touch pwned", "-l", "X=1 $(touch pwned) Y", "$(touch pwned)",
    "`touch pwned`", "'; touch pwned; '", "a=b", "=", "localhost:2222", "0.0.0.0:2222", "[::]:2222",
    "[::1]:2222", "127.0.0.2:2222", "localhost.:2222", "[::ffff:127.0.0.1]:2222",
    f"{socket.gethostname()}:2222", "node1:2222", "node9:1", "-node:1", ".x:1", "localhost:0",
    "localhost:70000", "[fe80::1%eth0]:2222", "python 'unclosed", "Worker", "PS", "workers",
    "ps_hosts", "chief", "evaluator", "worker\n", "x" * 300, float("inf"), float("-inf"),
    float("nan"), -1, 0, 1, 3, 100001, 2 ** 70, True, False, None, [], {}, [None], {"": None},
    ["a:1", "a:1"], {"X": "y"}, 1.5,
]
KEYS = ["cluster", "program", "jobs", "ps", "worker", "chief", "evaluator", "Worker", "PS", "command",
        "args", "env", "gpus", "restart", "policy", "success", "logdir", "task_flags", "max_restarts",
        "backoff", "grace", "version", "hosts", "remote", "ssh_host", "user", "python", "workdir",
        "secrets", "watchdog", "stall_timeout", "cwd", "base_port", "A=B", "", "\0", "\udc80", "-x",
        "X Y", "HF_TOKEN", "A\nB", "tfReplicaSpecs", "localhost", "node1", "node2"]


def _seeds():
    texts = []
    for rel in ("cluster.yaml", "examples/mwms.yaml", "examples/ps_strategy.yaml"):
        with open(os.path.join(ROOT, rel)) as f:
            texts.append(f.read())
    return [yaml.safe_load(t) for t in texts + EXTRA_SEEDS]


def _paths(node, path=()):
    """Every (container, key) in a parsed file."""
    out = []
    if isinstance(node, dict):
        for k in list(node):
            out.append((node, k))
            out.extend(_paths(node[k], path + (k,)))
    elif isinstance(node, list):
        for i in range(len(node)):
            out.append((node, i))
            out.extend(_paths(node[i], path + (i,)))
    return out


STRINGS = [h for h in HOSTILE if isinstance(h, str)]
ENDPOINTS = [h for h in STRINGS if ":" in h] + ["node2:2222", "localhost:2223", "10.1.2.3:2222"]


def _sub(data, *keys):
    """data[k1][k2]... as a dict, made where missing; None where the file has something else there."""
    node = data
    for k in keys:
        if not isinstance(node, dict):
            return None
        node = node.setdefault(k, {})
    return node if isinstance(node, dict) else None


def _targeted(data, rng: random.Random) -> None:
    """Put a hostile value where the checks that matter are: env keys, endpoints, names, paths."""
    what = rng.randrange(8)
    if what == 0:
        env = _sub(data, *rng.choice([("program", "env"), ("jobs", "worker", "env")]))
        if env is not None:
            env[rng.choice(STRINGS)] = rng.choice(["v", "tok_12345"] + STRINGS)
    elif what == 1:
        cluster = data.get("cluster")
        if isinstance(cluster, dict) and cluster:
            job = rng.choice(list(cluster))
            if isinstance(cluster[job], list):
                cluster[job].append(rng.choice(ENDPOINTS))
    elif what == 2:
        cluster = data.get("cluster")
        if isinstance(cluster, dict) and cluster:
            job = rng.choice(list(cluster))
            cluster[rng.choice(STRINGS + KEYS)] = cluster.pop(job)
    elif what == 3:
        spec = _sub(data, "program")
        if spec is not None:
            key = rng.choice(["args", "cwd", "command"])
            spec[key] = rng.choice([[rng.choice(STRINGS)], rng.choice(STRINGS)])
    elif what == 4:
        data["logdir"] = rng.choice(STRINGS)
    elif what == 5:
        remote = _sub(data, *rng.choice([("remote",), ("hosts", "node1")]))
        if remote is not None:
            remote[rng.choice(["python", "ssh_host", "user", "workdir", "identity_file"])] = rng.choice(STRINGS)
    elif what == 6:
        hosts = _sub(data, "hosts")
        if hosts is not None:
            hosts[rng.choice(STRINGS + ["node1", "node2", "localhost"])] = {"user": "u"}
    else:
        data["secrets"] = [rng.choice(STRINGS + ["A", "HF_TOKEN"])]


def _mutate(data, rng: random.Random):
    data = copy.deepcopy(data)
    if rng.random() < 0.4 and isinstance(data, dict):
        _targeted(data, rng)
        return data
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        spots = _paths(data)
        if not spots:
            return data
        parent, key = rng.choice(spots)
        op = rng.random()
        if op < 0.35:
            parent[key] = copy.deepcopy(rng.choice(HOSTILE))
        elif op < 0.6 and isinstance(parent, dict):
            new = rng.choice(KEYS)
            if new not in parent:
                parent[new] = parent.pop(key)
        elif op < 0.7:
            del parent[key]
        elif op < 0.8 and isinstance(parent, dict):
            parent[rng.choice(KEYS)] = copy.deepcopy(rng.choice(HOSTILE + [{"a:1": 1}, ["x"]]))
        elif op < 0.9 and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        else:  # change the type: wrap, unwrap, stringify
            value = parent[key]
            parent[key] = rng.choice([[value], {"x": value}, str(value),
                                      value[0] if isinstance(value, list) and value else value])
    return data


def _text(data, rng: random.Random):
    try:
        text = yaml.safe_dump(data, allow_unicode=rng.random() < 0.5, sort_keys=False,
                              default_flow_style=rng.choice([None, True, False]))
    except (yaml.YAMLError, UnicodeError, ValueError):
        return None
    r = rng.random()
    lines = text.splitlines(keepends=True)
    if r < 0.05 and lines:  # a duplicated line: often a duplicate key
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif r < 0.08:
        lines.append("bomb: &a [x, x, x, x, x, x, x, x]\n" + "".join(
            f"b{i}: &a{i} [" + ", ".join(["*a" if i == 0 else f"*a{i - 1}"] * 8) + "]\n" for i in range(7)))
    return "".join(lines)


def _call(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def _check_accepted(path, text, out_validate):
    """A file that validate accepted is right."""
    c = config.load(path)
    assert "\x1b" not in out_validate and "\0" not in out_validate, text
    seen = {}
    for t in c.tasks:
        strings = [t.cwd, *t.command, *t.args, *(s for kv in t.env for s in kv)]
        for s in strings:
            assert "\0" not in s and not any("\ud800" <= ch <= "\udfff" for ch in s), (text, s)
        for k, _ in t.env:
            assert k and "=" not in k and not k.startswith("-"), (text, k)
        if t.endpoint is not None:
            assert not t.endpoint.host.startswith("-"), text
            key = endpoint_key(t.endpoint.host, t.endpoint.port)
            assert key not in seen, (text, t.name, seen.get(key))
            seen[key] = t.name
    assert "\n" not in c.logdir and "\0" not in c.logdir, text
    for _h, spec in c.spec.hosts.items():
        assert not (spec.ssh_host or "").startswith("-")
    python = c.spec.remote.python
    if python is not None:
        assert shlex.split(python), text


# what the task contract adds to every task's env (a run by hand has no TFCLUSTER_RUN_DIR)
CONTRACT_VARS = {"PYTHONUNBUFFERED", "TFCLUSTER_TASK", "TFCLUSTER_LOCAL_TASKS", "TFCLUSTER_RUN_TOKEN",
                 "TFCLUSTER_RESTART_COUNT", "TFCLUSTER_MAX_RESTARTS"}


def _check_commands(path, text, out):
    """One line per task that splits back into exactly: cd DIR && env K=V... ARGV..."""
    c = config.load(path)
    c_lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert len(c_lines) == len(c.tasks), (text, out)
    assert len(c_lines) * 2 == len(out.splitlines()), (text, out)  # one line per task
    assert "\x1b" not in out and "\r" not in out, (text, out)
    for task, line in zip(c.tasks, c_lines):
        if "$'" in line:  # bash's $'...' form: tests/integration/test_security_processes.py
            continue
        words = shlex.split(line)  # splittable
        assert words[:1] == ["cd"] and words[2:4] == ["&&", "env"], (text, line)
        n_env = len({k for k, _ in task.env} | {"TF_CONFIG"} | CONTRACT_VARS
                    | ({"CUDA_VISIBLE_DEVICES"} if task.gpus is not None else set())
                    | ({"TFCLUSTER_PROFILER_PORT"} if task.job != "evaluator" and c.spec.profiler
                       else set()))
        n_argv = len(task.command + task.args) or 2  # or: python my_trainer.py
        if task.task_flags:
            n_argv += 2 + len([j for j in c.jobs if j != "evaluator"])
        assert len(words) == 4 + n_env + n_argv, (text, line)
        assignments = [w for w in words[4:] if "=" in w and not w.startswith("-")]
        assert any(w.startswith("TF_CONFIG=") for w in assignments), (text, line)


def test_mutation_fuzz_of_cluster_files(tmp_path, monkeypatch):
    rng = random.Random(SEED)
    seeds = _seeds()
    deadline = time.monotonic() + BUDGET_S
    cases = accepted = 0
    monkeypatch.chdir(tmp_path)  # launch --dry-run resolves relative paths against it
    while cases < MIN_CASES or (cases < MAX_CASES and time.monotonic() < deadline):
        text = _text(_mutate(rng.choice(seeds), rng), rng)
        if text is None:
            continue
        cases += 1
        path = str(tmp_path / f"c{cases % 7}.yaml")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        rc, out, err = _call(["validate", "--file-only", path])
        assert rc in (0, 2), (text, rc, err)
        assert "Traceback" not in err
        if rc == 2:
            assert err.startswith("tfcluster: error: ") and "\x1b" not in err, (text, err)
            cmd = [["commands", path], ["render", "k8s", path, "--image", "x"], ["render", "slurm", path],
                   ["launch", path, "--dry-run", "--no-live"]][cases % 4]
            rc2, _, err2 = _call(cmd)  # the other commands load the file the same way
            assert rc2 == 2, (text, cmd, err2)
            continue
        accepted += 1
        _check_accepted(path, text, out)
        rc, out, err = _call(["validate", "--file-only", "--json", path])
        assert rc == 0, (text, err)
        json.loads(out)
        rc, out, err = _call(["commands", path])
        assert rc in (0, 2), (text, err)
        if rc == 0:
            _check_commands(path, text, out)
        task = config.load(path).tasks[0].name
        rc, out, err = _call(["tf-config", path, task])
        assert rc in (0, 2), (text, err)
        if rc == 0:
            assert json.loads(out)["task"]["type"] == task.split(":")[0]
        rc, out, err = _call(["render", "k8s", path, "--image", "x"])
        assert rc in (0, 2), (text, err)
        if rc == 0:
            docs = [d for d in yaml.safe_load_all(out) if d is not None]
            assert len(docs) == 1 and docs[0]["kind"] == "TFJob", (text, out)
        rc, out, err = _call(["render", "slurm", path])
        assert rc in (0, 2), (text, err)
        rc, out, err = _call(["launch", path, "--dry-run", "--no-live"])
        assert rc in (0, 2), (text, err)
    assert cases >= MIN_CASES
    assert accepted >= cases // 10, f"only {accepted} of {cases} mutated files were accepted"
    print(f"fuzz: {cases} files, {accepted} accepted")
