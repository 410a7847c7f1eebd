"""tfcluster launch before anything starts, in this process (tfcluster.cli.main.main): the restart
rules, careless input (exit 2 naming the field, the port or the task), the dry run and the usage.
The unit guard fails any of these that starts a process. (Launches with real processes:
tests/integration/test_launch.py.)
"""
import os
import socket
import sys

import pytest

from helpers import PROGRAMS, run_cli, write_cluster
from tfcluster.core import rules

LISTENER = os.path.join(PROGRAMS, "listener.py")  # named in the files; never started here


def tfcluster(*args, cwd=None):
    """tfcluster ARGS in this process, like ``python -m tfcluster ARGS``."""
    return run_cli(*args, cwd=cwd or os.getcwd())


# ---------------------------------------------------------------- policy


@pytest.mark.parametrize("pol,rc,restarts,expect", [
    ("never", 1, 0, False), ("never", -9, 0, False),
    ("on-failure", 1, 0, True), ("on-failure", -9, 0, True), ("on-failure", 1, 3, False),
    ("exit-code", 1, 0, False), ("exit-code", 127, 0, False), ("exit-code", 128, 0, True),
    ("exit-code", 137, 0, True), ("exit-code", 255, 0, True), ("exit-code", -15, 0, True),
    ("exit-code", 137, 3, False), ("on-failure", 0, 0, False),
])
def test_restart_decision_table(pol, rc, restarts, expect):
    assert rules.decide_restart(rules.RestartRule(pol, max_restarts=3), rc, restarts).restart is expect


def test_restart_backoff_doubles_is_capped_and_total_budget():
    rule = rules.RestartRule("on-failure", max_restarts=10, backoff=1.0)
    assert [rules.decide_restart(rule, 1, n).delay for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    total = rules.RestartRule("on-failure", max_restarts=3, max_total_restarts=5)
    assert not rules.decide_restart(total, 1, 0, total_restarts=5).restart


# ---------------------------------------------------------------- careless input at launch

def test_taken_port_exit_2_names_port_and_starts_nothing(tmp_path, ports):
    ps = ports(3)
    holder = socket.socket()
    holder.bind(("0.0.0.0", ps[2]))
    holder.listen()
    try:
        f = write_cluster(tmp_path, ps, ["python", LISTENER])
        r = tfcluster("launch", f, "--network", "host")   # in a private network the host's ports do not matter
    finally:
        holder.close()
    assert r.returncode == 2
    assert f"cluster.worker[1]: port {ps[2]} (worker:1) is already in use by pid {os.getpid()}" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_dry_run_prints_argv_cwd_env_and_masks_secrets(tmp_path, ports):
    f = write_cluster(tmp_path, ports(2), ["python", LISTENER],
                      extra="jobs: {worker: {env: {API_TOKEN: hunter22, LEVEL: '3'}}}\n")
    r = tfcluster("launch", f, "--dry-run", "--task-flags")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"argv: {sys.executable} {LISTENER} --job_name=worker --task_index=0" in out
    assert f"cwd:  {tmp_path}" in out
    assert 'env:  TF_CONFIG={"cluster":' in out and "env:  LEVEL=3" in out
    assert "API_TOKEN=****" in out and "hunter22" not in out
    assert "CUDA_VISIBLE_DEVICES=" in out  # ps gets no GPU
    assert not (tmp_path / "runs").exists()


def test_override_command_after_double_dash(tmp_path, ports):
    f = write_cluster(tmp_path, ports(2), ["python", "does-not-matter.py"])
    r = tfcluster("launch", f, "--dry-run", "--", "python", "my_trainer.py", "--lr=0.1", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert f"argv: {sys.executable} my_trainer.py --lr=0.1" in r.stdout


def test_a_missing_script_is_exit_2_before_anything_starts(tmp_path, ports):
    f = write_cluster(tmp_path, ports(2), ["python", "missing.py"],
                      extra="restart: {policy: on-failure}\n")
    r = tfcluster("launch", f)
    assert r.returncode == 2, r.stderr
    assert f"program script not found: {tmp_path}/missing.py" in r.stderr
    assert "nothing was started" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()
    r = tfcluster("launch", f, "--", "python", "nope.py", cwd=str(tmp_path))
    assert r.returncode == 2 and "program script not found" in r.stderr


def test_a_missing_folder_is_named_as_a_folder(tmp_path, ports):
    f = write_cluster(tmp_path, ports(2), ["python", LISTENER])
    with open(f, "a") as fh:
        fh.write("jobs: {worker: {cwd: no/such/dir}}\n")
    r = tfcluster("launch", f)
    assert r.returncode == 2
    assert f"worker:0: working folder does not exist: {tmp_path}/no/such/dir" in r.stderr
    assert "program not found" not in r.stderr


@pytest.mark.parametrize("flag,value,words", [
    ("--run-id", "../x", "--run-id: '../x' is not a run folder name"),
    ("--stop-timeout", "inf", "must be a finite number"),
    ("--grace", "nan", "must be a finite number"),
])
def test_bad_launch_flags_are_exit_2(tmp_path, ports, flag, value, words):
    f = write_cluster(tmp_path, ports(2), ["python", LISTENER])
    r = tfcluster("launch", f, flag, value)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert not (tmp_path / "x").exists() and "Traceback" not in r.stderr


def test_launch_usage_shows_the_program_and_hints_at_the_double_dash(tmp_path, ports):
    r = tfcluster("launch", "--help")
    assert "tfcluster launch [options] [FILE] [-- CMD ARGS...]" in r.stdout
    f = write_cluster(tmp_path, ports(2), ["python", LISTENER])
    r = tfcluster("launch", f, "python", "my_trainer.py")
    assert r.returncode == 2
    assert f"hint: put the program after '--': tfcluster launch {f} -- python my_trainer.py" in r.stderr


@pytest.mark.parametrize("words", [
    ["launch", "--arg", "--train_steps", "10"],                  # 10 taken for the file
    ["launch", "cluster.yaml", "--arg", "--train_steps", "10"],  # 10 an unknown word
    ["launch", "--arg=--train_steps", "10", "cluster.yaml"],
    ["commands", "cluster.yaml", "--arg", "--train_steps", "10"],
])
def test_an_arg_value_after_a_space_says_to_join_it(tmp_path, ports, words):
    write_cluster(tmp_path, ports(2), ["python", LISTENER])
    r = tfcluster(*words, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [
        f"tfcluster {words[0]}: error: --arg --train_steps 10: --arg takes one word, NAME=VALUE; "
        "write --arg --train_steps=10"], r.stderr


def test_an_arg_flag_without_a_value_before_the_file_is_still_a_flag(tmp_path, ports):
    write_cluster(tmp_path, ports(2), ["python", LISTENER])
    r = tfcluster("commands", "--arg", "--verbose", "cluster.yaml", cwd=tmp_path)
    assert r.returncode == 0 and "--verbose" in r.stdout, r.stderr


SLURM_FILE = ("cluster:\n  ps: 1\n  worker: 2\nprogram:\n  command: [python, t.py]\n"
              "slurm:\n  time: '10'\n  requeue: true\n  gpus_per_task: 1\n")


def test_slurm_flags_that_say_no_or_zero_override_the_file_as_render_does(tmp_path, monkeypatch):
    """--no-requeue and --gpus-per-task 0 are flags given: launch lays them over the file's
    slurm: section as render slurm does, and refuses them for another backend."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    (tmp_path / "c.yaml").write_text(SLURM_FILE)
    (tmp_path / "t.py").write_text("")
    flags = ("--no-requeue", "--gpus-per-task", "0")
    launch = tfcluster("launch", "c.yaml", "--backend", "slurm", "--dry-run", *flags, cwd=tmp_path)
    render = tfcluster("render", "slurm", "c.yaml", *flags, cwd=tmp_path)
    for r in (launch, render):
        assert r.returncode == 0, r.stderr
        assert "#SBATCH --requeue" not in r.stdout and "--gpus-per-task=1" not in r.stdout
    local = tfcluster("launch", "c.yaml", "--dry-run", "--no-requeue", cwd=tmp_path)
    assert local.returncode == 2
    assert local.stderr.strip() == ("tfcluster: error: --requeue: Slurm options apply to "
                                    "--backend slurm only, not --backend local")
