"""Slurm scheduler options on a real one-node Slurm (tests/helpers/slurm.py; skipped with the
reason where Slurm, munge or root are missing): sbatch takes the #SBATCH lines render slurm writes,
and binds stand-in GPUs per task. (The options and lines as text: tests/unit/test_slurm_options.py.)
"""
from __future__ import annotations

import re
import subprocess
import textwrap

from helpers import run_cli
from helpers.slurm import BAD_TIMES, GOOD_TIMES, UNDOCUMENTED

cli = run_cli  # tfcluster's command line, in this process; sbatch and scontrol are real
CPU = "cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n"


def test_real_slurm_takes_the_options(slurm_cluster, tmp_path):
    """A rendered script with options is accepted by sbatch and the options show in the job;
    a partition Slurm does not have is refused before anything runs."""
    (tmp_path / "c.yaml").write_text(CPU)
    r = cli("render", "slurm", "c.yaml", "--partition", "debug", "--time", "0:10:00",
            "--account", "lab", "--sbatch=--comment=tfcluster-test", "--sbatch=--hold", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (tmp_path / "job.sbatch").write_text(r.stdout)
    sub = subprocess.run(["sbatch", "--parsable", "job.sbatch"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        show = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True,
                              timeout=30).stdout
        fields = dict(re.findall(r"(\w+)=(\S*)", show))
        assert (fields["Partition"], fields["TimeLimit"], fields["Account"], fields["Comment"],
                fields["NumTasks"], fields["JobName"]) == \
            ("debug", "00:10:00", "lab", "tfcluster-test", "3", "c")
        assert fields["JobState"] == "PENDING" and fields["Reason"] == "JobHeldUser"
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
    r = cli("render", "slurm", "c.yaml", "--partition", "nosuch", cwd=tmp_path)
    (tmp_path / "bad.sbatch").write_text(r.stdout)
    bad = subprocess.run(["sbatch", "--test-only", "bad.sbatch"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "partition" in bad.stderr.lower(), bad.stderr
    for text in GOOD_TIMES + BAD_TIMES:  # sbatch agrees with check_time on every example
        if "\n" in text:
            continue
        t = subprocess.run(["sbatch", "--test-only", f"--time={text}", "--wrap=true"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
        assert (t.returncode == 0) == (text in GOOD_TIMES + UNDOCUMENTED), (text, t.stderr)
    assert slurm_cluster.wait_empty_queue(30) == ""


def test_real_slurm_binds_gpus_per_task_and_keeps_ps_on_cpu(gpu_slurm, tmp_path):
    """jobs.<job>.gpus under Slurm: --gpus-per-task from the ids, Slurm's own binding kept for the
    workers (distinct devices), ps tasks without GPUs."""
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""\
        cluster: {ps: 1, worker: 2}
        program:
          # every task prints, then stays a moment: the run ends when the workers do, and a ps
          # that started last must have printed before it is stopped
          command: [python, -c, "import os, time; print('CVD=%r' % os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True); time.sleep(4)"]
        jobs: {worker: {gpus: [3, 3]}}   # one GPU each; the ids are Slurm's choice, not these
        logdir: runs
    """))
    r = cli("render", "slurm", "c.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "#SBATCH --gpus-per-task=1" in r.stdout.splitlines()
    (tmp_path / "job.sbatch").write_text(r.stdout)
    sub = subprocess.run(["sbatch", "--parsable", "--wait", "job.sbatch"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    job = sub.stdout.strip().split(";")[0]
    out = (tmp_path / f"slurm-{job}.out").read_text() if job else ""
    assert sub.returncode == 0, (sub.stderr, out)
    seen = dict(re.findall(r"\[(\w+:\d)\] CVD=(\S+)", out))
    assert seen.keys() == {"ps:0", "worker:0", "worker:1"}, out
    assert seen["ps:0"] == "''"
    workers = {seen["worker:0"], seen["worker:1"]}   # the file's ids would give '3' twice
    assert len(workers) == 2 and workers <= {"'0'", "'1'", "'2'", "'3'"}, out
