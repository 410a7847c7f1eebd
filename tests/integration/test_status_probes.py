"""tfcluster status and tfcluster runs: the result of a run, lost launchers, picking the run of
the right cluster file, exit codes, and broken records."""
from __future__ import annotations

import json

import pytest

from helpers.status import cli, fake_tools, write_cluster, write_run  # noqa: F401
from tfcluster.runs.result import STATUS_EXIT
from tfcluster.runs.slurm_job import FOLLOW_TOOLS, JobState, job_state


@pytest.mark.parametrize("squeue, sacct, state", [
    (("RUNNING", 0), None, "RUNNING"),
    (("slurm_load_jobs error: Invalid job id specified", 1), ("CANCELLED by 0", 0), "CANCELLED"),
    (("slurm_load_jobs error: Invalid job id specified", 1), None, ""),
    (("", 0), ("", 0), ""),
    (("fetch_config: DNS SRV lookup failed", 1), ("sacct: error: no database", 1), None),
    (None, None, None),
])
def test_slurm_probe(tmp_path, monkeypatch, squeue, sacct, state):
    monkeypatch.setenv("PATH", fake_tools(tmp_path / "bin", squeue, sacct))
    assert job_state("42").word == state


@pytest.mark.parametrize("scontrol, state, over", [
    (("JobId=42 JobName=t JobState=RUNNING Reason=None ExitCode=0:0", 0), JobState("RUNNING", 0), False),
    (("JobId=42 JobState=COMPLETED ExitCode=3:0", 0), JobState("COMPLETED", 3), True),
    (("JobId=42 JobState=CANCELLED ExitCode=0:15", 0), JobState("CANCELLED", 143), True),
    (("JobId=42 JobState=SPECIAL_EXIT ExitCode=0:0", 0), JobState("SPECIAL_EXIT", 0), True),
    (("slurm_load_jobs error: Invalid job id specified", 1), JobState(""), True),
    (("slurm_load_jobs error: Unable to contact slurm controller", 1), JobState(None), False),
    (("JobId=42", 0), JobState(None), False),
    (None, JobState(None), False),
])
def test_the_launcher_asks_scontrol_in_the_same_words(tmp_path, monkeypatch, scontrol, state, over):
    """The launcher follows its job with the same query, asked of scontrol (which gives the exit
    code too): the same words, "" for a job Slurm forgot, None when Slurm cannot be asked."""
    monkeypatch.setenv("PATH", fake_tools(tmp_path / "bin", ("RUNNING", 0), ("RUNNING", 0), scontrol))
    got = job_state("42", ask=FOLLOW_TOOLS, timeout=30.0)
    assert got == state and got.over == over


@pytest.mark.parametrize("squeue, sacct, rc, words", [
    (("RUNNING", 0), None, 3, ["running", "Slurm job 42 is RUNNING: the tasks go on",
                               "scancel 42"]),
    (("slurm_load_jobs error: Invalid job id specified", 1), ("COMPLETED", 0), 5,
     ["lost", "Slurm job 42 is COMPLETED"]),
    (None, None, 6, ["unknown (Slurm job 42)", "squeue -j 42"]),
])
def test_status_of_a_slurm_run_whose_launcher_was_killed(tmp_path, capsys, monkeypatch,
                                                         squeue, sacct, rc, words):
    """The submitting launcher is gone (pid 999999); the job may still run: status asks Slurm
    rather than calling it lost, and says "unknown" where Slurm cannot be asked."""
    d = write_run(tmp_path / "runs", "r", None, result="running", backend="slurm", slurm_job="42")
    monkeypatch.setenv("PATH", fake_tools(tmp_path / "bin", squeue, sacct))
    got, out, _ = cli(capsys, "status", str(d))
    assert got == rc and STATUS_EXIT[out.splitlines()[0].split("): ")[1].split()[0].rstrip(",")] == rc
    for w in words:
        assert w in out
    got, out, _ = cli(capsys, "status", "--json", str(d))
    shown = json.loads(out)
    assert got == rc and shown["slurm_job"] == "42" and shown["launcher_alive"] is False


def test_a_slurm_record_without_its_job_id_finds_it_in_the_run_folder(tmp_path, capsys, monkeypatch):
    """A launcher killed while following its job never wrote slurm_job: the job's output file
    (slurm-ID.out, made by Slurm when the job starts) names it."""
    d = write_run(tmp_path / "runs", "r", None, result="running", backend="slurm", slurm_job=None)
    (d / "slurm-77.out").write_text("")
    (d / "slurm-x.out").write_text("")
    monkeypatch.setenv("PATH", fake_tools(tmp_path / "bin", ("RUNNING", 0), None))
    rc, out, _ = cli(capsys, "status", str(d))
    assert rc == 3 and "Slurm job 77 is RUNNING" in out
    rc, out, _ = cli(capsys, "runs", "--json", str(tmp_path / "runs"))
    assert json.loads(out)[0]["result"] == "running"
    (d / "slurm-77.out").unlink()                    # no job id anywhere: lost
    rc, out, _ = cli(capsys, "status", str(d))
    assert rc == 5 and "lost" in out.splitlines()[0]
