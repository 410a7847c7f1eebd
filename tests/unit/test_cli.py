"""The CLI as a user runs it, in this process: exit codes, one-line errors, fuzzed input.
(As a separate process: tests/integration/test_cli_process.py.)"""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import ROOT, fuzz_examples, run_cli
from tfcluster.cli import main as cli
from tfcluster.clusterfile import config
from tfcluster.errors import UserError


def run(*args, cwd=None):
    """tfcluster ARGS in this process (tfcluster.cli.main.main), from the repository's folder."""
    return run_cli(*args, cwd=cwd or ROOT)


def test_help_lists_commands():
    r = run("--help")
    assert r.returncode == 0
    for word in ("launch", "validate", "tf-config", "commands", "hello", "schema", "status"):
        assert word in r.stdout


def test_validate_ok_prints_resolved_cluster():
    r = run("validate", "cluster.yaml")
    assert r.returncode == 0, r.stderr
    assert "ps:0" in r.stdout and "localhost:2224" in r.stdout and "chief: worker:0" in r.stdout
    r = run("validate", "--json", "cluster.yaml")
    assert json.loads(r.stdout)["cluster_spec"]["worker"] == ["localhost:2223", "localhost:2224"]


def test_tf_config_prints_json():
    r = run("tf-config", "cluster.yaml", "worker:1")
    assert r.returncode == 0
    assert json.loads(r.stdout) == {"cluster": {"ps": ["localhost:2222"],
                                                "worker": ["localhost:2223", "localhost:2224"]},
                                    "task": {"type": "worker", "index": 1}}


def test_commands_are_runnable_lines():
    r = run("commands", "cluster.yaml", "--task-flags")
    assert r.returncode == 0
    lines = [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]
    assert len(lines) == 3
    assert "TF_CONFIG=" in lines[0] and "--job_name=ps --task_index=0" in lines[0]
    assert "--worker_hosts=localhost:2223,localhost:2224" in lines[2]


@pytest.mark.parametrize("args,needle", [
    (["tf-config", "cluster.yaml", "worker:9"], "no task worker:9"),
    (["tf-config", "cluster.yaml", "bogus"], "JOB:INDEX"),
    (["validate", "missing.yaml"], "missing.yaml: no such file"),
    (["launch", "cluster.yaml", "--grace", "soon"], "not a number of seconds"),
    (["launch", "cluster.yaml", "--success", "first"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_exit_2_one_line_no_traceback(args, needle):
    r = run(*args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_file_exit_2(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("cluster:\n  ps: [localhost:2222]\n  worker:\n    - localhost:2223\n    - localhost:70000\n")
    r = run("validate", str(f))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"tfcluster: error: {f}: cluster.worker[1]: port 70000 is out of range "
                                f"1-65535 (line 5)")


def test_schema_is_json():
    r = run("schema")
    assert json.loads(r.stdout)["properties"]["cluster"]


# ---- fuzz: no input may produce a traceback

HOSTILE = ["\0", "a\udc80", "a\nb", "\x1b[2J", "X=1 $(touch f) Y", "-oProxyCommand=x", "=", "",
           "localhost.:2222", "[::ffff:127.0.0.1]:2222", "0.0.0.0:2222", "node1:2222", "python 'x"]
yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=True),
                         st.text(max_size=12), st.sampled_from(["localhost:2222", "[::1]:1", "a:b", "x"]),
                         st.sampled_from(HOSTILE))
keys = st.one_of(st.sampled_from(["cluster", "program", "jobs", "ps", "worker", "chief", "evaluator",
                                  "command", "args", "env", "gpus", "restart", "policy", "success",
                                  "logdir", "task_flags", "max_restarts", "grace", "version", "secrets",
                                  "hosts", "remote", "python", "ssh_host", "cwd", "backoff"] + HOSTILE),
                 st.text(max_size=6))
values = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=20)


@settings(max_examples=fuzz_examples(400), deadline=None, suppress_health_check=list(HealthCheck))
@given(values)
def test_fuzz_from_dict_never_crashes(data):
    try:
        c = config.from_dict(data)
    except UserError as e:
        assert e.message and "Traceback" not in e.message
        return
    for t in c.tasks:  # a valid file gives a usable model, and nothing no program can take
        if c.resolved:
            json.dumps(c.tf_config(t.id))
        for k, v in t.env:
            assert k and "=" not in k and "\0" not in k + v
        assert "\0" not in "".join(t.command + t.args) + t.cwd
        json.dumps([t.command, t.args, t.env, t.cwd], ensure_ascii=False).encode("utf-8")  # no surrogates


@settings(max_examples=fuzz_examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=200))
def test_fuzz_loads_text_never_crashes(text):
    try:
        config.loads(text)
    except UserError:
        pass


def test_main_returns_2_for_user_errors(capsys):
    assert cli.main(["validate", "/nonexistent/x.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err
