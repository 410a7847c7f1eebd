"""What `tfcluster render` writes, run for real: the TFJob task-flags shim appends the seed's flags
inside a pod, and the Slurm batch scripts are valid bash. (The manifests and scripts as text:
tests/unit/test_render.py, tests/unit/test_slurm_options.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tfcluster import render

from helpers import ROOT, cli, load


def test_tfjob_task_flags_shim_appends_the_seed_flags(tmp_path):
    """With task_flags, the pod's command reads TF_CONFIG (set by the operator) and appends
    --job_name/--task_index/--<job>_hosts before exec'ing the program."""
    c = load("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py], task_flags: true}\n", tmp_path)
    job = render.tfjob(c, image="tf")
    args = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    tf_config = {"cluster": {"ps": ["j-ps-0.ns.svc:2222"], "worker": ["j-worker-0.ns.svc:2222",
                                                                     "j-worker-1.ns.svc:2222"]},
                 "task": {"type": "worker", "index": 1}}
    shown = "import sys; print(' '.join(sys.argv[1:]))"
    r = subprocess.run([sys.executable, "-c", args[1], sys.executable, "-c", shown],
                       env={**os.environ, "TF_CONFIG": json.dumps(tf_config)},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["--job_name=worker", "--task_index=1", "--ps_hosts=j-ps-0.ns.svc:2222",
                                "--worker_hosts=j-worker-0.ns.svc:2222,j-worker-1.ns.svc:2222"]


def _bash_n(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, timeout=30)


def test_the_slurm_script_is_valid_bash(tmp_path):
    c = load("""\
        cluster: {ps: [a:2222], worker: 3, chief: 1}
        program: {command: [python, t.py], args: [--lr=0.1, "it's"], env: {A: "x y"}}
        base_port: 3000
        logdir: out
    """, tmp_path)
    script = render.render_slurm(c, partition="gpu", time="01:00:00", name="demo")
    r = _bash_n(script)
    assert r.returncode == 0, r.stderr
    assert _bash_n(script + "\nif then\n").returncode != 0  # the check can fail


def test_render_slurm_on_the_command_line_is_valid_bash(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc, out, err = cli(capsys, "render", "slurm", "cluster.yaml", "--partition", "cpu", "--time", "10:00")
    assert rc == 0, err
    r = _bash_n(out)
    assert r.returncode == 0, r.stderr


def test_a_script_with_scheduler_options_is_valid_bash(tmp_path, capsys, monkeypatch):
    (tmp_path / "c.yaml").write_text("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n"
                                     "slurm: {partition: cpu, account: lab}\n")
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "render", "slurm", "c.yaml", "--partition", "gpu", "--time", "1-12",
                       "--qos", "high", "--constraint", "intel&gpu", "--sbatch=--mem=8G",
                       "--sbatch=--exclusive")
    assert rc == 0, err
    assert "#SBATCH --constraint=intel&gpu" in out.splitlines()
    r = _bash_n(out)
    assert r.returncode == 0, r.stderr
