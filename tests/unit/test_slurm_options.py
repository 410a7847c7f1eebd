"""Slurm scheduler options (the file's slurm: section, render slurm's flags): time limits, values
that could break the batch script, the #SBATCH lines and the GPU binding, in this process. (On a
real one-node Slurm: tests/integration/test_slurm_real_options.py.)"""
from __future__ import annotations

import json
import re
import shlex

import pytest

from helpers import doc_blocks, load, run_cli
from helpers.slurm import BAD_TIMES, GOOD_TIMES
from tfcluster.clusterfile.slurm import SlurmSpec, check_time, from_flags, sbatch_lines, sbatch_options, task_gpus
from tfcluster.errors import UserError
from tfcluster.k8s import render

cli = run_cli  # tfcluster's command line, in this process


def one_error_line(r):
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def plan_of(script: str):
    line = next(x for x in script.splitlines() if x.startswith("export TFCLUSTER_SLURM_PLAN="))
    return json.loads(shlex.split(line.split("=", 1)[1])[0])


# --------------------------------------------------------------------------------------
# Time limits


@pytest.mark.parametrize("text", GOOD_TIMES)
def test_time_formats_sbatch_accepts(text):
    assert check_time(text) == (text.upper() if text.isalpha() else text)
    assert SlurmSpec(time=text).time == check_time(text)


@pytest.mark.parametrize("text", BAD_TIMES)
def test_bad_time_limits(text):
    with pytest.raises(ValueError, match="is not a Slurm time limit"):
        check_time(text)
    with pytest.raises(UserError, match="^--time: .* is not a Slurm time limit \\(minutes, "):
        from_flags(time=text)


def test_bad_time_is_exit_2_naming_the_flag_or_the_field(tmp_path):
    (tmp_path / "c.yaml").write_text("cluster: {worker: 2}\nprogram: {command: [python, t.py]}\n")
    line = one_error_line(cli("render", "slurm", "c.yaml", "--time", "abc", cwd=tmp_path))
    assert line.startswith("tfcluster: error: --time: 'abc' is not a Slurm time limit (minutes, ")
    (tmp_path / "d.yaml").write_text("cluster: {worker: 2}\nslurm: {time: 1h}\n")
    line = one_error_line(cli("validate", "d.yaml", cwd=tmp_path))
    assert re.match(r"tfcluster: error: .*d\.yaml: slurm\.time: '1h' is not a Slurm time limit", line)
    # YAML reads an unquoted 1:00:00 as the number 3600 (base 60)
    (tmp_path / "e.yaml").write_text("cluster: {worker: 2}\nslurm: {time: 1:00:00}\n")
    line = one_error_line(cli("render", "slurm", "e.yaml", cwd=tmp_path))
    assert "slurm.time: 3600 is a number: write the time limit as a quoted string" in line
    (tmp_path / "f.yaml").write_text("cluster: {worker: 2}\nslurm: {partiton: gpu}\n")
    line = one_error_line(cli("validate", "f.yaml", cwd=tmp_path))
    assert "slurm.partiton: unknown key in slurm (did you mean 'partition'?) (line 2)" in line


# --------------------------------------------------------------------------------------
# Values that could break the script

@pytest.mark.parametrize("field,value", [
    ("partition", "gpu\n#SBATCH --uid=0"), ("partition", "gpu\nrm -rf ~"), ("partition", "gpu --uid=0"),
    ("partition", "$(reboot)"), ("partition", "a;b"), ("partition", "gpu\x00"), ("partition", "g'pu"),
    ("account", "lab`id`"), ("account", "lab\\x"), ("qos", "high\r"), ("qos", "a|b"),
    ("constraint", "intel gpu"), ("constraint", 'a"b'), ("gres", "gpu:2\t"), ("gres", "gpu:$N"),
    ("partition", ""),
])
def test_hostile_values_are_rejected(field, value):
    with pytest.raises(UserError) as e:
        from_flags(**{field: value})
    assert e.value.message.startswith(f"--{field}: ") and "\n" not in e.value.message


@pytest.mark.parametrize("option,why", [
    ("--mem=8G\necho pwned", "could break the batch script"), ("--mem 8G", "could break"),
    ("-N2", "not a long sbatch option"), ("mem=8G", "not a long sbatch option"),
    ("--comment=$(id)", "could break"), ("--ntasks=3", "tfcluster sets --ntasks itself"),
    ("--partition=gpu", "use slurm.partition (--partition) instead"),
    ("--time=5", "use slurm.time (--time) instead"), ("--gres=gpu:1", "use slurm.gres"),
])
def test_bad_pass_through_options(option, why):
    with pytest.raises(UserError, match=f"^--sbatch: .*{re.escape(why)}"):
        from_flags(sbatch=[option])


def test_safe_values_pass():
    spec = from_flags(partition="gpu,cpu", account="lab-1", qos="high", constraint="intel&[rack1|rack2]",
                      gres="gpu:a100:2", sbatch=["--mem=8G", "--exclusive", "--mail-user=a@b.org",
                                                 "--output=/scratch/%x-%j.out"])
    assert spec.constraint == "intel&[rack1|rack2]" and spec.sbatch[-1] == "--output=/scratch/%x-%j.out"


# --------------------------------------------------------------------------------------
# The lines

CPU = "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n"


def test_lines_flags_over_the_file(tmp_path):
    c = load(CPU + "slurm: {partition: cpu, time: '2:00:00', account: lab, "
                   "sbatch: [--mem=8G, --exclusive]}\n", tmp_path)
    assert sbatch_lines(c, c.spec.slurm) == [
        "#SBATCH --partition=cpu", "#SBATCH --time=2:00:00", "#SBATCH --account=lab",
        "#SBATCH --signal=B:USR1@120", "#SBATCH --mem=8G", "#SBATCH --exclusive"]
    spec = from_flags(c.spec.slurm, time="30", qos="debug", constraint="skylake",
                      sbatch=["--mem=16G", "--requeue"])
    assert sbatch_options(c, spec) == [
        "--partition=cpu", "--time=30", "--account=lab", "--qos=debug", "--constraint=skylake",
        "--signal=B:USR1@120", "--exclusive", "--mem=16G", "--requeue"]
    assert c.spec.slurm.time == "2:00:00"  # the file's model is not changed


def test_render_slurm_puts_the_lines_in_the_header(tmp_path):
    (tmp_path / "c.yaml").write_text(CPU + "slurm: {partition: cpu, account: lab}\n")
    r = cli("render", "slurm", "c.yaml", "--partition", "gpu", "--time", "1-12", "--qos", "high",
            "--constraint", "intel&gpu", "--sbatch=--mem=8G", "--sbatch=--exclusive", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = lines[:lines.index("#")]
    assert header[2:] == ["#SBATCH --job-name=c", "#SBATCH --ntasks=3", "#SBATCH --overcommit",
                          "#SBATCH --partition=gpu", "#SBATCH --time=1-12", "#SBATCH --account=lab",
                          "#SBATCH --qos=high", "#SBATCH --constraint=intel&gpu",
                          "#SBATCH --signal=B:USR1@120", "#SBATCH --mem=8G",
                          "#SBATCH --exclusive"]  # (bash -n: tests/integration/test_render_scripts.py)


# --------------------------------------------------------------------------------------
# GPUs

GPU = """\
cluster: {chief: 1, ps: 2, worker: 2}
program: {command: [python, t.py]}
jobs: {worker: {gpus: ["0,1", "2,3"]}, chief: {gpus: ["0,1"]}}
"""


def test_gpus_become_gpus_per_task_with_ps_on_cpu(tmp_path):
    c = load(GPU, tmp_path)
    assert sbatch_options(c, SlurmSpec()) == ["--gpus-per-task=2"]
    # Slurm's binding is kept for GPU tasks (None), ps hidden from the GPUs
    assert task_gpus(c, SlurmSpec()) == {"chief": [None], "ps": ["", ""], "worker": [None, None]}
    script = render.render_slurm(c)
    assert "#SBATCH --gpus-per-task=2" in script.splitlines()
    assert {j: s["gpus"] for j, s in plan_of(script)["jobs"].items()} == \
        {"chief": [None], "ps": ["", ""], "worker": [None, None]}
    # an explicit count wins
    assert sbatch_options(c, SlurmSpec(gpus_per_task=4)) == ["--gpus-per-task=4"]
    # a job without gpus: inherits Slurm's binding; ps stays on CPU even when it is bound
    c = load(GPU.replace(', chief: {gpus: ["0,1"]}', ''), tmp_path, "b.yaml")
    assert task_gpus(c, SlurmSpec()) == {"chief": [None], "ps": ["", ""], "worker": [None, None]}
    assert task_gpus(c, SlurmSpec(gpus_per_task=0)) == \
        {"chief": [None], "ps": ["", ""], "worker": ["0,1", "2,3"]}


def test_gres_keeps_the_files_gpu_ids(tmp_path):
    c = load(GPU, tmp_path)
    spec = from_flags(gres="gpu:4")
    assert sbatch_options(c, spec) == ["--gres=gpu:4"]
    assert task_gpus(c, spec) == {"chief": ["0,1"], "ps": ["", ""], "worker": ["0,1", "2,3"]}
    assert plan_of(render.render_slurm(c, slurm=spec))["jobs"]["worker"]["gpus"] == ["0,1", "2,3"]


def test_no_gpus_no_binding_and_different_counts_are_an_error(tmp_path):
    c = load(CPU, tmp_path)
    assert sbatch_options(c, SlurmSpec()) == []
    assert plan_of(render.render_slurm(c))["jobs"]["worker"]["gpus"] == [None, None]
    c = load(GPU.replace('chief: {gpus: ["0,1"]}', 'chief: {gpus: ["0"]}'), tmp_path, "b.yaml")
    with pytest.raises(UserError, match=r"^jobs\.chief\.gpus: under Slurm every task of the step gets "
                                        r"the same number of GPUs, but chief:0 has 1, worker:0 has 2"):
        sbatch_options(c, SlurmSpec())
    assert sbatch_options(c, SlurmSpec(gres="gpu:3")) == ["--gres=gpu:3"]


def test_the_docs_example(tmp_path):
    """docs/BACKENDS.md, 'Slurm options': the file, the command and the #SBATCH lines it shows."""
    yaml_text, command, shown = doc_blocks("### Slurm options")[:3]
    (tmp_path / "cluster.yaml").write_text(yaml_text)
    words = shlex.split(command.split(">")[0])
    assert words[:3] == ["tfcluster", "render", "slurm"]
    r = cli(*words[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith("#SBATCH")]
    assert lines[:3] == ["#SBATCH --job-name=tfcluster", "#SBATCH --ntasks=6", "#SBATCH --overcommit"]
    assert lines[3:] == shown.strip().splitlines()




def test_time_limit_stop_and_requeue_options(tmp_path):
    """With a time limit, Slurm warns the batch shell signal_lead seconds before it (B:USR1),
    which stops the run in order; requeue adds --requeue and appends to the output file."""
    c = load(CPU + "slurm: {time: '1:00:00', signal_lead: 300, requeue: true, max_segments: 4}\n",
             tmp_path)
    opts = sbatch_options(c, c.spec.slurm)
    assert "--signal=B:USR1@300" in opts and "--requeue" in opts and "--open-mode=append" in opts
    no_limit = load(CPU + "slurm: {partition: cpu}\n", tmp_path)
    assert not any(o.startswith("--signal") for o in sbatch_options(no_limit, no_limit.spec.slurm))
    assert from_flags(c.spec.slurm, signal_lead=60).signal_lead == 60
    with pytest.raises(UserError, match="--signal-lead"):
        from_flags(c.spec.slurm, signal_lead=3)
    with pytest.raises(UserError, match="slurm.max_segments"):
        load(CPU + "slurm: {max_segments: 0}\n", tmp_path)
