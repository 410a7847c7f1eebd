"""Masking of secrets: multi-line secret values, secret program arguments on every path (Slurm
included, while the job still gets the real value), the word-based name heuristic, and masking
that never breaks a progress line. Pure: no TensorFlow, no process
(tests/integration/test_masking_processes.py has the launches, local and Slurm)."""
import contextlib
import io
import json
import shlex

import pytest

from tfcluster.backends.slurm.batch import PLAN_ENV, plan_data
from tfcluster.backends.slurm.held_secrets import fill_secrets, hold_back_secrets
from tfcluster.backends.slurm.launcher import launch
from tfcluster.cli import main as cli
from tfcluster.clusterfile import config, secrets
from tfcluster.k8s import render
from tfcluster.plan.progress import parse_progress
from tfcluster.plan.runplan import LaunchOptions, build_plan

PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
       "q8XfLkP2zQ3m9vYtB1aR7sN0cE4uH6jW5dK8lG2oI3pS9xV1yZ\n"
       "-----END PRIVATE KEY-----\n")
PEM_LINES = [ln for ln in PEM.splitlines() if "PRIVATE" not in ln]


# --------------------------------------------------------------------- the name heuristic
@pytest.mark.parametrize("name", ["PGPASSWORD", "MYSQL_PWD", "DBPASSWORD", "HF_TOKEN",
                                  "DB_PASSWORD_PROD", "AWS_ACCESS_KEY_ID", "SSH_KEY", "apiKey",
                                  "api-key", "GITHUB_TOKEN_2", "MYSQL_ROOTPASSWORD"])
def test_secret_names(name):
    assert secrets.is_secret_name(name)


@pytest.mark.parametrize("name", ["TOKEN_LIMIT", "SORT_KEY", "SSH_AUTH_SOCK",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "PARTITION_KEY", "PWD",
                                  "OLDPWD", "BYPASS", "AUTH_URL", "MAX_TOKENS", "sort-key"])
def test_not_secret_names(name):
    assert not secrets.is_secret_name(name)


# --------------------------------------------------------------------- what is masked in text
@pytest.mark.parametrize("value", ["1000", "0.001", "1e-5", "12345678", "true", "adam", "abc"])
def test_numbers_and_plain_short_words_are_never_mask_targets(value):
    assert not secrets.maskable_in_text(value)
    assert secrets.Masker([value])(f"step {value}") == f"step {value}"


@pytest.mark.parametrize("value", ["hf_x", "abc123", "hunter22", "correcthorsebattery"])
def test_secret_looking_values_are_mask_targets(value):
    assert secrets.maskable_in_text(value)
    assert secrets.Masker([value])(f"x {value} y") == "x **** y"


def test_token_limit_1000_does_not_break_a_progress_line():
    env = {"TOKEN_LIMIT": "1000", "API_TOKEN": "1000"}   # even a secret that is a number
    values = secrets.values_to_mask([env])
    assert values == []
    line = '@tfcluster progress {"step": 1000, "total": 4000, "loss": 0.1000}'
    masked = secrets.Masker(values)(line)
    assert masked == line and parse_progress(masked).step == 1000


def test_a_multi_line_secret_is_masked_line_by_line():
    values = secrets.values_to_mask([{"TLS_PRIVATE_KEY": PEM}])
    masker = secrets.Masker(values)
    for line in PEM_LINES:
        assert masker(f"[worker:0] {line}") == "[worker:0] ****"
    assert "MIIE" not in masker(PEM)


ARGV_FILE = """\
cluster: {ps: 1, worker: 2}
program:
  command: [python, t.py, --api-key=abcdef123456, --password, hunter2hunter2, DB_TOKEN=tok_zzzz9999, --lr=0.1]
  env: {LEVEL: '3'}
"""
HIDDEN = ("abcdef123456", "hunter2hunter2", "tok_zzzz9999")


def _cluster(tmp_path, text=ARGV_FILE):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return config.load(str(p))


def _plan_from_script(script):
    line = next(ln for ln in script.splitlines() if ln.startswith(f"export {PLAN_ENV}="))
    return json.loads(shlex.split(line.split("=", 1)[1])[0])


def test_render_slurm_masks_secret_arguments_and_the_job_gets_them_back(tmp_path):
    script = render.render_slurm(_cluster(tmp_path))
    for v in HIDDEN:
        assert v not in script
    data = _plan_from_script(script)
    assert data["jobs"]["worker"]["argv"] == ["{python}", "t.py", "--api-key=****", "--password",
                                              "****", "DB_TOKEN=****", "--lr=0.1"]
    assert "TFCLUSTER_SECRET__worker__ARGV2" in script
    # the submitting environment carries the real words; the node agent puts them back
    carried = hold_back_secrets(plan_data(build_plan(
        _cluster(tmp_path), LaunchOptions(backend="slurm", run_id="s1", logdir=str(tmp_path)))))
    assert fill_secrets(data, carried) == []
    assert data["jobs"]["worker"]["argv"][2:6] == ["--api-key=abcdef123456", "--password",
                                                   "hunter2hunter2", "DB_TOKEN=tok_zzzz9999"]
    assert "held_argv" not in data["jobs"]["worker"]
    # without them, the wrapper names what is missing
    data = _plan_from_script(script)
    missing = fill_secrets(data, {})
    assert "TFCLUSTER_SECRET__ps__ARGV4" in missing


def test_launch_slurm_dry_run_masks_secret_arguments(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    plan = build_plan(_cluster(tmp_path), LaunchOptions(backend="slurm", run_id="s1",
                                                        logdir=str(tmp_path / "logs")))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert launch(plan, dry_run=True) == 0
    for v in HIDDEN:
        assert v not in buf.getvalue()
    assert "umask 077" in buf.getvalue() and "export SLURM_UMASK=0077" in buf.getvalue()
    assert 'chmod 600 ' in buf.getvalue() and '/slurm-"${SLURM_JOB_ID}".out' in buf.getvalue()


@pytest.mark.parametrize("flag,value,field", [
    ("--name", "a --partition=evil", "--name"),
    ("--name", "a\nb", "--name"),
    ("--time", "1:00 --qos=high", "--time"),
])
def test_render_slurm_refuses_values_that_would_inject_sbatch_options(tmp_path, capsys, flag, value, field):
    p = tmp_path / "c.yaml"
    p.write_text(ARGV_FILE)
    assert cli.main(["render", "slurm", str(p), flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tfcluster: error: {field}: ") and err.count("\n") == 1
    assert "--partition=evil\n" not in err


def test_a_slurm_job_name_of_safe_characters_is_kept(tmp_path):
    assert "#SBATCH --job-name=my-run_1.2\n" in render.render_slurm(_cluster(tmp_path), name="my-run_1.2")


# --------------------------------------------------------------------- Slurm, for real
