"""``--arg NAME=VALUE``: one argument of the program changed in the resolved plan,
so that launch, its dry run, ``commands`` and the Slurm script all run the same argv."""
import json

import pytest

from helpers import ROOT, run_cli
from tfcluster.clusterfile import config
from tfcluster.core import messages
from tfcluster.errors import UserError
from tfcluster.plan.program_args import apply_args, parse_args
from tfcluster.plan.runplan import LaunchOptions, build_plan

PROGRAM = ["python", "trainer.py", "--train_steps=2000", "--checkpoint_dir", "runs/ckpt"]


@pytest.mark.parametrize("words,want", [
    (["--train_steps=4000"], ["python", "trainer.py", "--train_steps=4000", "--checkpoint_dir", "runs/ckpt"]),
    (["train_steps=4000"], ["python", "trainer.py", "--train_steps=4000", "--checkpoint_dir", "runs/ckpt"]),
    (["checkpoint_dir=/tmp/x"], ["python", "trainer.py", "--train_steps=2000", "--checkpoint_dir", "/tmp/x"]),
    (["--lr=0.1"], PROGRAM + ["--lr=0.1"]),
    (["--lr=0.1", "--lr=0.2"], PROGRAM + ["--lr=0.2"]),
    (["--verbose"], PROGRAM + ["--verbose"]),
    (["--train_steps="], ["python", "trainer.py", "--train_steps=", "--checkpoint_dir", "runs/ckpt"]),
])
def test_apply_args_replaces_a_flag_else_appends(words, want):
    assert apply_args(PROGRAM, parse_args(words)) == want


def test_apply_args_leaves_the_program_and_its_own_double_dash_alone():
    argv = ["python", "-m", "mod", "--x=1", "--", "--x=9"]
    assert apply_args(argv, parse_args(["x=2"])) == ["python", "-m", "mod", "--x=2", "--", "--x=9"]
    assert apply_args(argv, parse_args(["y=3"])) == ["python", "-m", "mod", "--x=1", "--y=3", "--", "--x=9"]
    # a flag given with a value that starts with '-' (the next word is a flag): the '=' form
    assert apply_args(["prog", "--x", "--y"], parse_args(["x=5"])) == ["prog", "--x=5", "--y"]
    assert apply_args(["trainer.py"], parse_args(["trainer.py=1"])) == ["trainer.py", "--trainer.py=1"]


@pytest.mark.parametrize("word", ["=4", "--=4", "", "a b=1", "-=x"])
def test_parse_args_refuses_what_is_not_name_value(word):
    with pytest.raises(UserError, match="--arg"):
        parse_args([word])


def test_the_plan_carries_the_edit_for_every_task():
    cluster = config.load(f"{ROOT}/cluster.yaml")
    plan = build_plan(cluster, LaunchOptions(args=("--train_steps=4000",)))
    for t in plan.tasks:
        assert "--train_steps=4000" in t.argv and "--checkpoint_dir=runs/checkpoints" in t.argv
        assert "--train_steps=2000" not in t.argv
    # on a program given after '--' too
    plan = build_plan(cluster, LaunchOptions(command=("python", "x.py", "--a=1"), args=("a=2",)))
    assert plan.tasks[0].argv[1:] == ("x.py", "--a=2")
    # the Slurm backend reads the same plan (its JSON)
    plan = build_plan(cluster, LaunchOptions(backend="slurm", args=("--train_steps=7",)))
    assert "--train_steps=7" in plan.to_dict()["jobs"]["worker"]["argv"]


def test_launch_dry_run_keeps_checkpoint_dir_and_replaces_train_steps():
    r = run_cli("launch", "cluster.yaml", "--arg", "--train_steps=4000", "--dry-run", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    argvs = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("argv:")]
    assert len(argvs) == 3
    for line in argvs:
        assert "--train_steps=4000" in line and "--checkpoint_dir=runs/checkpoints" in line
        assert "--train_steps=2000" not in line


def test_commands_and_bad_arg():
    r = run_cli("commands", "cluster.yaml", "--arg", "train_steps=5", cwd=ROOT)
    assert r.returncode == 0 and r.stdout.count("--train_steps=5 ") == 3, r.stdout
    r = run_cli("launch", "cluster.yaml", "--arg", "=5", "--dry-run", cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--arg" in r.stderr, r.stderr


def test_nothing_trained_hint_uses_arg():
    s = messages.nothing_trained(2001, 2000, "runs/checkpoints")
    assert "--arg --train_steps=4002" in s and "clear runs/checkpoints" in s


def test_render_slurm_carries_the_edit_and_k8s_refuses_it():
    r = run_cli("render", "slurm", "cluster.yaml", "--arg", "train_steps=9", cwd=ROOT)
    assert r.returncode == 0 and "--train_steps=9" in r.stdout and "--train_steps=2000" not in r.stdout
    r = run_cli("render", "k8s", "cluster.yaml", "--image", "x", "--arg", "a=1", cwd=ROOT)
    assert r.returncode == 2 and "--arg" in r.stderr


def test_a_port_holders_command_is_cut_at_a_word():
    from tfcluster.net.ports import short_command
    cmd = ("/opt/py/bin/python3 /work/trainer.py --train_steps=2000 --checkpoint_dir=runs/checkpoints "
           "--job_name=ps --task_index=0 --ps_hosts=localhost:2222,localhost:2223")
    got = short_command(cmd)
    assert got == ("python3 /work/trainer.py --train_steps=2000 --checkpoint_dir=runs/checkpoints "
                   "--job_name=ps ... (2 more arguments)")
    assert short_command("nc -l 2222") == "nc -l 2222"


def test_validate_exits_2_for_a_file_launch_refuses_here(tmp_path):
    (tmp_path / "c.yaml").write_text("cluster: {ps: [localhost:2222], worker: [localhost:2223]}\n"
                                     "program: {command: [python, nothere.py]}\n")
    r = run_cli("validate", "c.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "ok —" not in r.stdout and "launch would refuse it here" in r.stdout
    assert "error: launch would refuse this file here: ps:0: program script not found" in r.stderr
    r = run_cli("validate", "--file-only", "c.yaml", cwd=tmp_path)      # the file alone: valid
    assert r.returncode == 0 and ": ok —" in r.stdout and "refuse" not in r.stderr
    r = run_cli("validate", "--json", "c.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "program script not found" in json.loads(r.stdout)["launch_refused"]
    # (launch's preflight says the same words: launch/preflight.program_problems, one check)
    r = run_cli("validate", "cluster.yaml", cwd=ROOT)
    assert r.returncode == 0 and ": ok —" in r.stdout and "refuse" not in r.stderr
