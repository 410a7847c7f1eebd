"""The Slurm backend's pure parts: host lists, the rank layout, the plan in the batch script, the
dry run, and secrets kept out of the script. (TensorFlow's SlurmClusterResolver against the
layout: tests/system/test_slurm_resolver.py; a real one-node Slurm: tests/integration/test_slurm.py.)
"""
from __future__ import annotations

import json
import shlex
import textwrap

import pytest

from tfcluster.backends.slurm.batch import PLAN_ENV, dry_run_text, plan_data
from tfcluster.backends.slurm.held_secrets import fill_secrets
from tfcluster.backends.slurm.launcher import launch
from tfcluster.backends.slurm.layout import layout
from tfcluster.backends.slurm.nodes import _expand_hostlist_py, expand_tasks_per_node
from tfcluster.clusterfile import config
from tfcluster.plan.runplan import LaunchOptions, build_plan


def test_expand_hostlist_and_tasks_per_node():
    assert _expand_hostlist_py("n[1-2],m5,o[3-4,6,7-9]") == \
        ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]
    assert _expand_hostlist_py("gpu[08-10]") == ["gpu08", "gpu09", "gpu10"]
    assert _expand_hostlist_py("localhost") == ["localhost"]
    assert expand_tasks_per_node("3(x2),2,1") == [3, 3, 2, 1]
    with pytest.raises(ValueError):
        expand_tasks_per_node("two")


def _cluster(text: str, tmp_path) -> config.Cluster:
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(text))
    return config.load(str(p))


def test_layout_rejects_wrong_task_count(tmp_path):
    c = _cluster("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n", tmp_path)
    with pytest.raises(ValueError, match="3 TensorFlow tasks"):
        layout(_plan(c), ["n1"], [2])


def test_plan_needs_a_program(tmp_path):
    from tfcluster.errors import UserError
    c = _cluster("cluster: {worker: 2}\n", tmp_path)
    with pytest.raises(UserError, match="no program"):
        _plan(c)
    assert _plan(c, command=("python", "x.py"))["jobs"]["worker"]["argv"] == ["{python}", "x.py"]


def _plan(c, **opts):
    return plan_data(build_plan(c, LaunchOptions(backend="slurm", **opts)))


def test_slurm_dry_run_prints_the_batch_script(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    c = _cluster("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n", tmp_path)
    plan = build_plan(c, LaunchOptions(backend="slurm", command=("python", "other.py", "--x=1"),
                                       task_flags=True, logdir=str(tmp_path / "logs"), run_id="d1"))
    assert launch(plan, dry_run=True) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --ntasks=3" in out and f"#SBATCH --output={tmp_path}/logs/d1/slurm-%j.out" in out
    assert '"argv":["{python}","other.py","--x=1"]' in out and '"task_flags":true' in out
    assert not (tmp_path / "logs").exists()   # nothing made, nothing submitted


def test_secret_values_never_reach_the_batch_script(tmp_path, monkeypatch):
    """render slurm and launch --backend slurm (dry run): a secret value (by name or declared in
    secrets:) is null in the script's plan, the header names the variable that carries it, and
    the node agent puts it back from the environment sbatch passes on."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    c = _cluster("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py], "
                 "env: {API_TOKEN: hunter2hunter2, BUCKET: gs://private, LEVEL: '3'}}\n"
                 "secrets: [BUCKET]\n", tmp_path)
    from tfcluster.k8s import render
    script = render.render_slurm(c)
    assert "hunter2hunter2" not in script and "gs://private" not in script
    assert "TFCLUSTER_SECRET__worker__API_TOKEN" in script and "TFCLUSTER_SECRET__ps__BUCKET" in script
    data = _plan_from_script(script)
    assert data["jobs"]["worker"]["env"] == {"API_TOKEN": None, "BUCKET": None, "LEVEL": "3"}
    env = {"TFCLUSTER_SECRET__worker__API_TOKEN": "hunter2hunter2", "TFCLUSTER_SECRET__worker__BUCKET": "gs://private",
           "TFCLUSTER_SECRET__ps__API_TOKEN": "hunter2hunter2", "TFCLUSTER_SECRET__ps__BUCKET": "gs://private"}
    assert fill_secrets(data, env) == []
    assert data["jobs"]["worker"]["env"]["API_TOKEN"] == "hunter2hunter2"
    plan = build_plan(c, LaunchOptions(backend="slurm", run_id="s1", logdir=str(tmp_path / "logs")))
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert launch(plan, dry_run=True) == 0
    assert "hunter2hunter2" not in buf.getvalue() and "gs://private" not in buf.getvalue()


def _plan_from_script(script: str):
    line = next(ln for ln in script.splitlines() if ln.startswith(f"export {PLAN_ENV}="))
    return json.loads(shlex.split(line.split("=", 1)[1])[0])


def test_a_preempted_job_that_asked_for_requeue_requeues_itself_after_its_ordered_stop(tmp_path, monkeypatch):
    """slurm.requeue: a job preempted under a GraceTime that stopped in order within it (srun
    failed, no stop asked, Slurm's PreemptTime set) is requeued by its batch script, within
    max_segments; without slurm.requeue the script never requeues."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    text = "cluster: {ps: 1, worker: 1}\nprogram: {command: [python, t.py]}\n"

    def script(slurm_section):
        c = _cluster(text + slurm_section, tmp_path)
        plan = build_plan(c, LaunchOptions(backend="slurm", logdir=str(tmp_path / "logs"), run_id="p1"))
        return dry_run_text(plan)

    s = script("slurm: {requeue: true, max_segments: 3}\n")
    line = next(ln for ln in s.splitlines() if "PreemptTime=[0-9]" in ln)
    assert '[ "$STOPPED" = 0 ] && [ "$rc" != 0 ] && [ $((SEG + 1)) -lt 3 ]' in line
    after = s.split(line + "\n", 1)[1].splitlines()
    assert "was preempted and stopped in order" in after[0] and after[1].strip().startswith("scontrol requeue")
    assert "scontrol" not in script("slurm: {partition: low}\n")


def test_an_elastic_job_is_submitted_no_kill_and_ends_srun_once_the_rest_have_ended(tmp_path, monkeypatch):
    """``elastic: {min_workers: N}`` on Slurm: ``#SBATCH --no-kill`` and ``srun --no-kill`` (a lost
    node ends neither the job nor the step's tasks elsewhere), and a watcher that ends srun --
    which waits on for a lost node's tasks -- once the launcher has written the step's exit code
    (run for real: tests/integration/test_render_scripts.py); a run that is not elastic keeps
    Slurm's default (the job ends with the node)."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    c = _cluster("cluster: {ps: 1, worker: 3}\nprogram: {command: [python, t.py]}\n"
                 "elastic: {min_workers: 2}\n", tmp_path)
    plan = build_plan(c, LaunchOptions(backend="slurm", logdir=str(tmp_path / "logs"), run_id="e1"))
    script = dry_run_text(plan)
    srun = [ln for ln in script.splitlines() if ln.startswith("srun ")][0]
    assert "#SBATCH --no-kill\n" in script and " --no-kill " in srun
    assert "step_over-$SEG" in script
    plain = dry_run_text(build_plan(_cluster("cluster: {ps: 1, worker: 3}\nprogram: {command: "
                                             "[python, t.py]}\n", tmp_path),
                                    LaunchOptions(backend="slurm", logdir=str(tmp_path / "logs"), run_id="p1")))
    assert "--no-kill" not in plain and "step_over" not in plain
