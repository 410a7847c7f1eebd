"""A run folder written in the documented formats (run.json, events.jsonl), for the tests of
``tfcluster report`` in tests/unit and tests/integration (the browser)."""
from __future__ import annotations

from tfcluster.runs.eventlog import EventLog
from tfcluster.safe_files import write_json

T0 = 1_764_500_000.0


def make_run(folder, events=True, result="failed", file=None, run_id="20261130-120000", t0=T0):
    """A run folder built from the documented formats: ps:0, worker:0 (chief), worker:1; worker:1
    is killed (SIGKILL) at +20 s, restarted at +22 s, stalls from +40 s; worker:0 fails at +60 s."""
    T0 = t0
    d = folder / run_id
    d.mkdir(parents=True)
    tasks = ["ps:0", "worker:0", "worker:1"]
    record = {
        "run_id": d.name, "file": str(file or folder / "cluster.yaml"), "run_dir": str(d),
        "launcher_pid": 999999, "launcher_started": T0 - 0.2, "backend": "local",
        "success_rule": "chief", "started": T0, "ended": None if result == "running" else T0 + 62,
        "result": result, "exit_code": None if result == "running" else 1, "root_cause": "worker:0 exit 3 <boom>", "total_restarts": 1,
        "tasks": [
            {"task": "ps:0", "endpoint": "localhost:2222", "pid": 100, "state": "stopped",
             "exit": "SIGTERM", "restarts": 0, "started": T0 + 0.1, "ended": T0 + 61.5},
            {"task": "worker:0", "endpoint": "localhost:2223", "pid": 101, "state": "failed",
             "exit": "exit 3", "restarts": 0, "started": T0 + 0.1, "ended": T0 + 60,
             "progress": {"step": 580, "total": 1000, "loss": 0.2, "at": T0 + 59}},
            {"task": "worker:1", "endpoint": "localhost:2224", "pid": 202, "state": "stopped",
             "exit": "SIGTERM", "restarts": 1, "started": T0 + 22, "ended": T0 + 61,
             "progress": {"step": 300, "total": 1000, "at": T0 + 40}},
        ]}
    write_json(str(d / "run.json"), record)
    if not events:
        return d
    log = EventLog(str(d))
    e = log.emit
    e("run_started", time=T0, run_id=d.name, file=record["file"], backend="local", tasks=tasks,
      chief="worker:0")
    for i, t in enumerate(tasks):
        e("task_started", t, time=T0 + 0.1, pid=100 + i, attempt=0, host="localhost")
    # local_step: the steps each task ran itself (its own rate; the global step is everyone's)
    for s in range(2, 60):                          # worker:0: 10 steps/s
        e("progress", "worker:0", time=T0 + s, step=10 * s, total=1000, metrics={"loss": 1.0 / s},
          local_step=10 * s)
    for s in range(2, 20):                          # worker:1 before the kill: 5 steps/s
        e("progress", "worker:1", time=T0 + s, step=5 * s, total=1000, metrics={"loss": 1.0 / s},
          local_step=5 * s)
    e("task_exited", "worker:1", time=T0 + 20, exit_code=None, signal="SIGKILL", exit="SIGKILL",
      state="failed")
    e("task_restarting", "worker:1", time=T0 + 20.01, reason="exit-code policy: SIGKILL is retried <&>",
      attempt=1, delay=2.0)
    e("task_started", "worker:1", time=T0 + 22, pid=202, attempt=1, host="localhost")
    for s in range(24, 41):
        e("progress", "worker:1", time=T0 + s, step=5 * s + 100, total=1000, local_step=5 * (s - 22))
    e("watchdog", "worker:1", time=T0 + 58, reason="no progress for 18s", action="kill")
    e("task_exited", "worker:0", time=T0 + 60, exit_code=3, signal=None, exit="exit 3", state="failed")
    e("decision", time=T0 + 60.01, result="failed", rule="chief", exit_code=1,
      reason="worker:0 exit 3 <boom>")
    for t in ("worker:1", "ps:0"):
        e("stop_sent", t, time=T0 + 60.1, signal="SIGTERM")
    e("task_exited", "worker:1", time=T0 + 61, exit_code=None, signal="SIGTERM", exit="SIGTERM",
      state="stopped")
    e("task_exited", "ps:0", time=T0 + 61.5, exit_code=None, signal="SIGTERM", exit="SIGTERM",
      state="stopped")
    e("run_ended", time=T0 + 62, result="failed", exit_code=1)
    log.close()
    return d


# ------------------------------------------------------------------ the quick start's shape
def quick_start_run(folder, chief_rate=7.0, other_rate=10.0, tail=0.2,
                    end_states=("succeeded", "succeeded"), total=1000, last_step=None, run_id="qs",
                    workers=2):
    """The quick start's shape: ps:0, worker:0 (the chief, slower: it saves checkpoints and
    summaries) and worker:1 (and more ``workers``, as fast) training one global step; every
    worker reports the global step and its own steps (local_step) every second, and they all
    end together, ``tail`` seconds after their last report."""
    d = folder / run_id
    d.mkdir(parents=True)
    names = ["ps:0"] + [f"worker:{k}" for k in range(workers)]
    rates = [("worker:0", chief_rate)] + [(f"worker:{k}", other_rate) for k in range(1, workers)]
    end_states = tuple(end_states) + ("succeeded",) * (workers - len(end_states))
    steps = int(total / (chief_rate + other_rate))
    end = T0 + 1 + steps + tail
    write_json(str(d / "run.json"), {
        "run_id": run_id, "file": str(folder / "cluster.yaml"), "run_dir": str(d),
        "launcher_pid": 999999, "backend": "local", "chief": "worker:0", "started": T0,
        "ended": end + 0.5, "result": "succeeded", "exit_code": 0, "total_restarts": 0,
        "tasks": [{"task": n, "state": "stopped" if n == "ps:0" else "succeeded"} for n in names]})
    log = EventLog(str(d))
    log.emit("run_started", time=T0, run_id=run_id, file="cluster.yaml", backend="local",
             tasks=names, chief="worker:0")
    for i, n in enumerate(names):
        log.emit("task_started", n, time=T0 + 0.1, pid=100 + i, attempt=0, host="localhost")
    for s in range(1, steps + 1):
        g = last_step if (last_step is not None and s == steps) else int(s * (chief_rate + other_rate))
        for n, rate in rates:
            log.emit("progress", n, time=T0 + 1 + s, step=g, total=total, local_step=int(s * rate))
    for (n, _), state in zip(rates, end_states):
        log.emit("task_exited", n, time=end, exit_code=0 if state == "succeeded" else None,
                 signal=None if state == "succeeded" else "SIGTERM",
                 exit="exit 0" if state == "succeeded" else "SIGTERM", state=state)
    log.emit("task_exited", "ps:0", time=end + 0.4, exit_code=None, signal="SIGTERM",
             exit="SIGTERM", state="stopped")
    log.emit("run_ended", time=end + 0.5, result="succeeded", exit_code=0)
    log.close()
    return d


# ------------------------------------------------------------------ an elastic run
def elastic_run(folder, left_state="left", run_id="elastic"):
    """An elastic run (``elastic: {min_workers: 2}``) as the launcher records it: ps:0, worker:0
    (the chief), worker:1 and worker:2, each reporting the global step and its own steps every
    second. worker:2 is killed (SIGKILL) at +20 s with no restart left: its exit is logged
    (``failed``, the process's own end), then ``run_shrunk`` without a node (it left here); it
    ran at 54 % of worker:1's speed. worker:1 is stopped (SIGSTOP) from its report at +30 s to
    +52 s: no report, and the global step it reports next has jumped. The chief ends the run at
    +60 s: it succeeded. ``left_state``: worker:2's state in run.json (``failed`` as launchers
    wrote it before the state ``left``)."""
    d = folder / run_id
    d.mkdir(parents=True)
    names = ["ps:0", "worker:0", "worker:1", "worker:2"]
    write_json(str(d / "run.json"), {
        "run_id": run_id, "file": str(folder / "cluster.yaml"), "run_dir": str(d),
        "launcher_pid": 999999, "backend": "local", "chief": "worker:0", "started": T0,
        "ended": T0 + 61, "result": "succeeded", "exit_code": 0, "total_restarts": 0,
        "workers": {"in": 2, "of": 3, "min": 2,
                    "left": {"worker:2": "not restarted: restart policy is never"}},
        "tasks": [{"task": "ps:0", "state": "stopped", "exit": "SIGTERM", "started": T0 + 0.1,
                   "ended": T0 + 60.5},
                  {"task": "worker:0", "state": "succeeded", "exit": "exit 0", "started": T0 + 0.1,
                   "ended": T0 + 60},
                  {"task": "worker:1", "state": "succeeded", "exit": "exit 0", "started": T0 + 0.1,
                   "ended": T0 + 60.2},
                  {"task": "worker:2", "state": left_state, "exit": "SIGKILL", "started": T0 + 0.1,
                   "ended": T0 + 20.5, "note": "left the run: not restarted: restart policy is never"}]})
    log = EventLog(str(d))
    e = log.emit
    e("run_started", time=T0, run_id=run_id, file="cluster.yaml", backend="local", tasks=names,
      chief="worker:0")
    for i, n in enumerate(names):
        e("task_started", n, time=T0 + 0.1, pid=100 + i, attempt=0, host="localhost")
    own = {"worker:0": 8.0, "worker:1": 10.0, "worker:2": 5.4}
    for s in range(1, 60):
        t = T0 + s
        for n in ("worker:0", "worker:1", "worker:2"):
            if n == "worker:2" and s >= 20 or n == "worker:1" and 30 < s < 52:
                continue
            e("progress", n, time=t + 0.01, step=20 * s, total=1200, local_step=int(own[n] * s))
        if s == 20:
            e("task_exited", "worker:2", time=t + 0.5, exit_code=None, signal="SIGKILL",
              exit="SIGKILL", state="failed")
            e("run_shrunk", "worker:2", time=t + 0.51, reason="not restarted: restart policy is never",
              workers=2, min_workers=2)
    e("task_exited", "worker:0", time=T0 + 60, exit_code=0, signal=None, exit="exit 0", state="succeeded")
    e("decision", time=T0 + 60, result="succeeded", rule="chief", exit_code=0, reason="worker:0 exited 0")
    e("task_exited", "worker:1", time=T0 + 60.2, exit_code=0, signal=None, exit="exit 0", state="succeeded")
    e("stop_sent", "ps:0", time=T0 + 60.3, signal="SIGTERM")
    e("task_exited", "ps:0", time=T0 + 60.5, exit_code=None, signal="SIGTERM", exit="SIGTERM",
      state="stopped")
    e("run_ended", time=T0 + 61, result="succeeded", exit_code=0)
    log.close()
    return d
