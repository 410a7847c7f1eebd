"""tfcluster status and tfcluster runs: the result of a run, lost launchers, picking the run of
the right cluster file, exit codes, and broken records."""
from __future__ import annotations
import json
import os
import time
import psutil
import pytest
from tfcluster.cli.main import main

from helpers.status import cli, fake_tools, write_cluster, write_run  # noqa: F401
from tfcluster.runs.status import STATUS_EXIT, decide_result, slurm_job_state, write_json_private


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
    assert slurm_job_state("42") == state


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
