"""Run records for the status/runs tests (unit and integration)."""
from __future__ import annotations

from tfcluster.cli.main import main
from tfcluster.safe_files import write_json


def write_cluster(folder, name="cluster.yaml"):
    path = folder / name
    path.write_text("cluster: {worker: [localhost:2223, localhost:2224]}\nlogdir: runs\n")
    return path


def write_run(logdir, run_id, file, result="succeeded", started=1000.0, duration=60.0,
              restarts=0, **extra):
    d = logdir / run_id
    d.mkdir(parents=True, exist_ok=True)
    record = {
        "run_id": run_id, "file": str(file) if file else None, "run_dir": str(d),
        "launcher_pid": 999999, "launcher_started": started - 0.5, "backend": "local",
        "success_rule": "chief", "started": started,
        "ended": None if result == "running" else started + duration,
        "result": result, "exit_code": {"succeeded": 0, "failed": 1, "interrupted": 130}.get(result),
        "root_cause": "worker:1 SIGKILL" if result == "failed" else None,
        "total_restarts": restarts,
        "tasks": [{"task": "worker:0", "endpoint": "localhost:2223", "pid": 11, "state": "succeeded",
                   "exit": "exit 0", "restarts": 0, "started": started, "ended": started + duration},
                  {"task": "worker:1", "endpoint": "localhost:2224", "pid": 12, "state": "running",
                   "exit": "", "restarts": restarts, "started": started, "ended": None}],
    }
    record.update(extra)
    write_json(str(d / "run.json"), record)
    return d


def cli(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def fake_tools(folder, squeue=None, sacct=None, scontrol=None):
    """A bin folder with fake squeue/sacct/scontrol: (stdout, exit code) each, or absent."""
    folder.mkdir(exist_ok=True)
    for name, answer in (("squeue", squeue), ("sacct", sacct), ("scontrol", scontrol)):
        if answer is not None:
            out, code = answer
            p = folder / name
            p.write_text(f"#!/bin/sh\necho '{out}' >&{1 if code == 0 else 2}\nexit {code}\n")
            p.chmod(0o755)
    return str(folder)
