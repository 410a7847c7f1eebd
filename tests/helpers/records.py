"""Run folders built from the documented record formats (hostile-record tests)."""
from __future__ import annotations

import json
import os

from tfcluster.safe_files import write_json

T0 = 1_764_500_000.0


def good_record(run_id="r1", **extra):
    record = {
        "run_id": run_id, "file": None, "launcher_pid": 999999, "launcher_started": T0,
        "backend": "local", "success_rule": "chief", "started": T0, "ended": T0 + 60,
        "result": "failed", "exit_code": 1, "root_cause": "worker:1 exit 3", "total_restarts": 1,
        "tasks": [{"task": "worker:0", "endpoint": "localhost:2223", "pid": 11, "state": "stopped",
                   "exit": "SIGTERM", "restarts": 0, "started": T0, "ended": T0 + 60,
                   "progress": {"step": 50, "total": 100, "at": T0 + 50, "loss": 0.5}},
                  {"task": "worker:1", "endpoint": "localhost:2224", "pid": 12, "state": "failed",
                   "exit": "exit 3", "restarts": 1, "started": T0 + 5, "ended": T0 + 59}]}
    record.update(extra)
    return record


def good_events():
    ev = [{"event": "run_started", "task": None, "run_id": "r1", "file": None, "backend": "local",
           "tasks": ["worker:0", "worker:1"], "chief": "worker:0"}]
    ev += [{"event": "task_started", "task": t, "pid": 11 + i, "attempt": 0, "host": "localhost"}
           for i, t in enumerate(["worker:0", "worker:1"])]
    ev += [{"event": "progress", "task": "worker:0", "step": 10 * s, "total": 100,
            "metrics": {"loss": 1.0 / s}} for s in range(1, 6)]
    ev += [{"event": "task_exited", "task": "worker:1", "exit_code": None, "signal": "SIGKILL",
            "exit": "SIGKILL", "state": "failed"},
           {"event": "task_restarting", "task": "worker:1", "reason": "retried", "attempt": 1,
            "delay": 1.0},
           {"event": "task_started", "task": "worker:1", "pid": 13, "attempt": 1, "host": "localhost"},
           {"event": "watchdog", "task": "worker:1", "reason": "stuck", "action": "kill"},
           {"event": "stop_sent", "task": "worker:0", "signal": "SIGTERM"},
           {"event": "task_exited", "task": "worker:1", "exit_code": 3, "signal": None,
            "exit": "exit 3", "state": "failed"},
           {"event": "decision", "task": None, "result": "failed", "rule": "chief", "exit_code": 1,
            "reason": "worker:1 exit 3"},
           {"event": "run_ended", "task": None, "result": "failed", "exit_code": 1}]
    return [dict(time=T0 + i, **e) for i, e in enumerate(ev)]


def write_events(d, events):
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        for e in events:
            f.write((e if isinstance(e, str) else json.dumps(e)) + "\n")


def make(tmp, name="r1", record=None, events=None, raw_record=None):
    d = os.path.join(str(tmp), name)
    os.makedirs(d, exist_ok=True)
    if raw_record is not None:
        with open(os.path.join(d, "run.json"), "w") as f:
            f.write(raw_record)
    else:
        write_json(os.path.join(d, "run.json"), good_record(name) if record is None else record)
    if events is not None:
        write_events(d, events)
    return d
