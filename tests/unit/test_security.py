"""Secrets stay secret and hostile names stay inert: the masking policy (tfcluster.clusterfile.secrets) and
what validate, commands and render print. No TensorFlow, no task processes."""
from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from tfcluster.cli import main as cli
from tfcluster.clusterfile import checks, config, secrets
from tfcluster.errors import UserError
from tfcluster.k8s import render

SECRET = "s3cr3t-VALUE-42"


@pytest.mark.parametrize("name", [
    "API_TOKEN", "HF_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID",
    "DB_PASSWORD", "MYSQL_PWD_PASSWORD", "SSH_KEY", "PRIVATE_KEY", "OPENAI_API_KEY", "WANDB_API_KEY",
    "KEY", "APIKEY", "apiKey", "api-key", "password", "DB_PASSWD", "GPG_PASSPHRASE", "CLIENT_SECRET",
    "BASIC_AUTH", "GOOGLE_CREDENTIALS", "SESSION_COOKIE",
])
def test_secret_names_are_recognised(name):
    assert secrets.is_secret_name(name)


@pytest.mark.parametrize("name", [
    "TOKENIZERS_PARALLELISM", "MAX_TOKENS", "KEYBOARD", "AUTHOR", "AUTHORS", "MONKEY", "PWD",
    "NUM_PASSES", "LEARNING_RATE", "DEBUG", "KEYS", "PASSWORD_FILE", "TOKEN_PATH", "SSL_CERT_DIR",
    "HF_HUB_ENABLE_HF_TRANSFER", "OAUTHLIB_INSECURE_TRANSPORT", "PATH", "HOME", "TF_CONFIG",
    "CUDA_VISIBLE_DEVICES", "",
])
def test_ordinary_names_are_not_secret(name):
    assert not secrets.is_secret_name(name)


def test_declared_names_are_secret_whatever_they_are_called():
    assert secrets.is_secret("MODEL_BUCKET", declared={"MODEL_BUCKET"})
    assert not secrets.is_secret("MODEL_BUCKET")
    assert secrets.mask_env({"MODEL_BUCKET": "gs://x", "A": "1", "HF_TOKEN": ""}, {"MODEL_BUCKET"}) == \
        {"MODEL_BUCKET": secrets.MASK, "A": "1", "HF_TOKEN": ""}


def test_values_to_mask_scans_only_task_env_and_declared_launcher_variables():
    environ = {"TOKENIZERS_PARALLELISM": "false", "MAX_TOKENS": "1000", "GITHUB_TOKEN": "ghp_launcher",
               "MY_PASS_IN": "declared-value", "HOME": "/root"}
    task_envs = [{"HF_TOKEN": "hf_task_value", "LR": "0.1", "X": "1"}, {"HF_TOKEN": "hf_task_value"}]
    values = secrets.values_to_mask(task_envs, declared={"MY_PASS_IN"}, environ=environ)
    # the launcher's own GITHUB_TOKEN is not in any task's env additions and not declared
    assert sorted(values) == ["declared-value", "hf_task_value"]
    masker = secrets.Masker(values)
    assert masker("step 1000 false hf_task_value declared-value") == "step 1000 false **** ****"


def test_short_values_are_not_masked_inside_text():
    assert secrets.values_to_mask([{"API_TOKEN": "abc"}]) == []


def test_mask_argv():
    argv = ["python", "t.py", "--api-key=abc123", "--password", "hunter22", "--lr=0.1",
            "HF_TOKEN=hf_x", "--token-file=/run/t", "--bucket", "b", "--steps", "3",
            "--data=/x/" + SECRET, "-password=p", "--api-key="]
    masked = secrets.mask_argv(argv, declared={"BUCKET"}, values=[SECRET])
    assert masked == ["python", "t.py", "--api-key=****", "--password", "****", "--lr=0.1",
                      "HF_TOKEN=****", "--token-file=/run/t", "--bucket", "****", "--steps", "3",
                      "--data=/x/****", "-password=****", "--api-key="]
    assert secrets.mask_argv(["--password", "--next"]) == ["--password", "--next"]
    assert secrets.argv_secret_values(argv, declared={"BUCKET"}) == ["abc123", "hunter22", "hf_x"]


# ---- the commands that print a cluster file

def _file(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


SECRET_FILE = f"""\
cluster: {{worker: [localhost:2223], chief: [localhost:2224]}}
program:
  command: [python, t.py, --api-key={SECRET}]
  env: {{HF_TOKEN: {SECRET}, BUCKET_URL: gs://private/{SECRET}, LR: 0.1, TOKENIZERS_PARALLELISM: "false"}}
secrets: [BUCKET_URL]
"""


def test_validate_masks_secret_values(tmp_path, capsys):
    path = _file(tmp_path, SECRET_FILE)
    assert cli.main(["validate", "--file-only", "--json", path]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out
    data = json.loads(out)
    env = data["tasks"][0]["env"]
    assert env == {"HF_TOKEN": "****", "BUCKET_URL": "****", "LR": "0.1", "TOKENIZERS_PARALLELISM": "false"}
    assert data["tasks"][0]["argv"][-1] == "--api-key=****" and data["secrets"] == ["BUCKET_URL"]
    assert cli.main(["validate", "--file-only", path]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out and "HF_TOKEN (secret)" in out and "BUCKET_URL (secret)" in out
    assert "TOKENIZERS_PARALLELISM," in out or "TOKENIZERS_PARALLELISM)" in out


def test_validate_escapes_terminal_control_characters(tmp_path, capsys):
    path = _file(tmp_path, 'cluster: {worker: [localhost:2223]}\n'
                           'program: {command: [python, "t.py\\e[2J\\e]0;pwned\\a"], '
                           'args: ["line\\nbreak"]}\n')
    assert cli.main(["validate", "--file-only", path]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\a" not in out and "\\x1b[2J" in out
    assert len(out.splitlines()) == 2  # the header and one task: the newline did not add a line
    # and in errors
    path = _file(tmp_path, 'cluster: {worker: [localhost:2223], "w\\e[31m": [localhost:2224]}\n', "e.yaml")
    assert cli.main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[31m" in err and len(err.splitlines()) == 1


def test_env_keys_that_cannot_be_variables_are_rejected(tmp_path, capsys):
    path = _file(tmp_path, """\
        cluster: {worker: [localhost:2223]}
        program: {env: {"X=1 $(touch f) Y": 1}}
        """)
    assert cli.main(["commands", path]) == 2
    err = capsys.readouterr().err
    assert "program.env.X=1 $(touch f) Y: a variable name cannot contain '='" in err
    assert not (tmp_path / "f").exists()


# ---- render k8s

K8S_FILE = f"""\
cluster: {{worker: 2, ps: 1}}
program:
  command: [python, t.py]
  env: {{HF_TOKEN: {SECRET}, LR: 0.1, DATA: gs://d}}
secrets: [DATA]
"""


def test_render_k8s_references_a_secret(tmp_path):
    c = config.load(_file(tmp_path, K8S_FILE, "train.yaml"))
    text = render.render_k8s(c, image="img")
    assert SECRET not in text and "gs://d" not in text
    manifest = yaml.safe_load(text)
    env = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "train-env", "key": "HF_TOKEN"}}} in env
    assert {"name": "DATA", "valueFrom": {"secretKeyRef": {"name": "train-env", "key": "DATA"}}} in env
    assert {"name": "LR", "value": "0.1"} in env
    assert "kubectl create secret generic train-env --from-literal=HF_TOKEN=" in text


def test_render_k8s_secret_values_must_agree_across_jobs(tmp_path):
    c = config.load(_file(tmp_path, "cluster: {worker: 1, ps: 1}\nprogram: {command: [x], env: {A_TOKEN: aaaa}}\n"
                                    "jobs: {ps: {env: {A_TOKEN: bbbb}}}\n"))
    with pytest.raises(UserError, match="env.A_TOKEN: a secret variable with different values"):
        render.tfjob(c, image="img")


def test_render_k8s_header_cannot_add_objects(tmp_path):
    d = tmp_path / "x\nkind: Pod\n---\napiVersion: v1"
    d.mkdir()
    c = config.load(_file(d, "cluster: {worker: 1}\nprogram: {command: [python, t.py]}\n"))
    docs = [doc for doc in yaml.safe_load_all(render.render_k8s(c, image="img")) if doc]
    assert len(docs) == 1 and docs[0]["kind"] == "TFJob"


def test_errors_about_a_file_with_a_newline_in_its_path_stay_one_line(tmp_path, capsys):
    d = tmp_path / "a\nb\x1b[2J"
    d.mkdir()
    path = _file(d, "cluster: {worker: [localhost:70000]}\n")
    assert cli.main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "\x1b" not in err and "a\\nb\\x1b[2J" in err


def test_check_text_for_script_lines():
    assert checks.check_text("--partition", "gpu") == "gpu"
    assert checks.check_text("--time", None) is None
    for bad in ("gpu\nrm -rf ~", "a\rb", "x\x00", "\x1b[2J"):
        with pytest.raises(UserError, match="--partition: .* contains a control character"):
            checks.check_text("--partition", bad)
