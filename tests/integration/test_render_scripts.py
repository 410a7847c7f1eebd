"""What `tfcluster render` writes, run for real: the Slurm batch scripts are valid bash. (Pods'
entry points run for real: tests/integration/test_render.py, test_jobset.py, test_trainjob.py;
the scripts as text: tests/unit/test_slurm_options.py.)"""
from __future__ import annotations

import subprocess

from helpers import ROOT, cli, load
from tfcluster.k8s import render


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


def test_an_elastic_batch_script_ends_a_waiting_srun_with_the_launchers_code(tmp_path):
    """An elastic run's batch script (``--no-kill``): srun waits on for a lost node's tasks; once
    the launcher writes the step's exit code (``step_over-0``), the script's watcher ends srun
    and that code is the job's (a fake srun that never ends, here)."""
    import os
    import signal

    from tfcluster.backends.agent.folder import FolderChannel
    from tfcluster.backends.slurm.batch import batch_script, plan_data
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    c = load("""\
        cluster: {ps: 1, worker: 3}
        program: {command: [python, t.py]}
        elastic: {min_workers: 2}
    """, tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data = plan_data(build_plan(c, LaunchOptions(backend="slurm")))
    data["run_dir"] = str(run_dir)
    text = batch_script(data)
    srun = [ln for ln in text.splitlines() if ln.startswith("srun ")][0]
    (tmp_path / "job.sh").write_text(text.replace(srun, "sleep 120 &"))
    proc = subprocess.Popen(["bash", str(tmp_path / "job.sh")], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert FolderChannel(str(run_dir)).step_over(3) is None
        proc.wait(20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 3 and (run_dir / "exit_code").read_text().strip() == "3"
