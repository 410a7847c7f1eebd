"""``tfcluster status`` (one run: its result, its launcher, its tasks) and ``tfcluster runs``
(the runs of a logdir, newest first), from run.json (:mod:`tfcluster.runs.run_file`).

run.json's ``result`` is what the launcher wrote: ``running`` while it goes, then ``succeeded``,
``failed`` or ``interrupted``. A ``running`` record whose launcher is gone is reported as
``lost`` (:mod:`tfcluster.runs.liveness`, :mod:`tfcluster.runs.result`): the launcher was killed
(SIGKILL, OOM killer, a lost session) before it could close the record.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, Optional

from tfcluster.core.rules import format_duration
from tfcluster.errors import UserError
from tfcluster.plan.backend_kind import recorded_kind
from tfcluster.runs.find import default_place, find_run, runs_here, scan_runs, shown_here, warn_skipped
from tfcluster.runs.result import STATUS_EXIT, assess, derive_result, last_update, run_duration
from tfcluster.runs.run_file import read_run
from tfcluster.runs.table import HEADER, LIVE_HEADER, format_table, stop_hint, task_rows, when
from tfcluster.terminal import printable


def status_record(run_dir: str, record: Dict[str, Any], probe=None) -> Dict[str, Any]:
    """The record as ``status --json`` prints it: ``result`` derived (``lost`` included),
    ``launcher_alive`` and ``run_dir`` added (and ``slurm_state``:
    :func:`tfcluster.runs.result.assess`)."""
    out = dict(record)
    out.update(assess(record, probe, run_dir))
    out["run_dir"] = os.path.abspath(run_dir)
    return out


def workers_line(record: Dict[str, Any]) -> str:
    """An elastic run's workers: "workers: 3 of 4, min 2 (worker:3 left: its host h was lost)"."""
    w = record.get("workers")
    if not isinstance(w, dict) or not all(isinstance(w.get(k), int) for k in ("in", "of", "min")):
        return ""
    left = w.get("left") if isinstance(w.get("left"), dict) else {}
    why = "; ".join(f"{printable(str(n))} left: {printable(str(r))}" for n, r in sorted(left.items()))
    top = f", max {w['max']}" if isinstance(w.get("max"), int) else ""
    return f"workers: {w['in']} of {w['of']}, min {w['min']}{top}" + (f" ({why})" if why else "") \
        + sizing_words(w.get("sizing"))


def sizing_words(sizing: Any) -> str:
    """A sized run's last measurement and decision, as run.json's ``workers.sizing`` holds them:
    "; sizing: 66.72 steps/s with 4 workers (scale_held: at max_workers (4))"."""
    if not isinstance(sizing, dict):
        return ""
    rates = [r for r in sizing.get("rates") or [] if isinstance(r, list) and len(r) == 3]
    decisions = [d for d in sizing.get("decisions") or [] if isinstance(d, list) and len(d) == 6]
    if not rates:
        return "; sizing: measuring"
    _, n, rate = rates[-1]
    last = f" ({printable(str(decisions[-1][1]))}: {printable(str(decisions[-1][5]))})" if decisions else ""
    return f"; sizing: {rate} steps/s with {n} worker{'' if n == 1 else 's'}{last}"


def network_line(record: Dict[str, Any]) -> str:
    """Where the run's tasks listened, as its record says (``network`` in run.json): "network:
    private (only the run's processes reach its ports; outbound: slirp4netns)", or "network:
    host (every user of this machine can connect ...)"; "" for a record without one."""
    net = record.get("network")
    if not isinstance(net, dict) or not isinstance(net.get("mode"), str):
        return ""
    mode = net["mode"]
    if mode == "private":
        out = net.get("outbound")
        return (f"network: private (only the run's processes reach its ports; outbound: "
                f"{printable(str(out)) if out else 'none, loopback only'})")
    why = f"; {printable(str(net['why']))}" if net.get("why") else ""
    who = "every user of the run's hosts" if recorded_kind(record.get("backend")).reaches_other_hosts \
        else "every user of this machine"
    return f"network: {printable(mode)} ({who} can connect to its tasks{why})"


def print_status(run_dir: Optional[str], file: Optional[str], as_json: bool = False,
                 probe=None) -> int:
    """``tfcluster status``: exit code per STATUS_EXIT (0 only for a run that succeeded)."""
    run, record = find_run(run_dir, file)
    shown = status_record(run, record, probe)
    result = shown["result"]
    if as_json:
        print(json.dumps(shown, indent=2))
        return STATUS_EXIT[result]
    p = printable
    job = shown.get("slurm_job")
    word = f"unknown (Slurm job {job})" if result == "unknown" else result
    if result == "stopping":
        word = f"stopping ({p(str(record.get('result')))}; its launcher is stopping the tasks)"
    head = f"run {p(record.get('run_id') or os.path.basename(os.path.normpath(run)))} ({p(run)}): {word}"
    if record.get("exit_code") is not None:
        head += f", exit code {record['exit_code']}"
    print(head)
    if record.get("file"):
        print(f"file: {p(record['file'])}")
    line = network_line(record)
    if line:
        print(line)
    segments = record.get("segments")
    if isinstance(segments, int) and not isinstance(segments, bool) and segments > 1:
        print(f"Slurm job {p(str(record.get('slurm_job') or '?'))}: {segments} segments (requeued "
              f"{segments - 1} time{'s' if segments > 2 else ''}; one run, resumed from its checkpoint)")
    duration = run_duration(run, record, result)
    started = f"started {when(record.get('started'))}" if record.get("started") else ""
    if started:
        took = {"running": "running for", "stopping": "running for", "lost": "last seen after",
                "unknown": "last seen after"}.get(result, "took")
        print(started + (f", {took} {format_duration(duration)}" if duration is not None else ""))
    said = _launcher_line(run, record, shown, result, job)
    if said:
        print(said)
    if record.get("root_cause"):
        print(f"root cause: {p(record['root_cause'])}")
    line = workers_line(record)
    if line:
        print(line)
    now = record.get("ended")
    if now is None and result in ("lost", "unknown"):
        now = last_update(run)
    live = result in ("running", "stopping")
    print(format_table(LIVE_HEADER if live else HEADER, task_rows(record, now, live=live)))
    stalled = record.get("stalled")
    for line in stalled if isinstance(stalled, list) else ():
        if isinstance(line, str):
            print(p(line))
    return STATUS_EXIT[result]


def _launcher_line(run: str, record: Dict[str, Any], shown: Dict[str, Any], result: str,
                   job: Any) -> Optional[str]:
    """What status says of the run's launcher: gone while Slurm runs the tasks, gone and Slurm
    not reachable, lost, on another host, or its pid and how to stop it; None when finished."""
    p = printable
    pid = record.get("launcher_pid")
    if job and result == "running":
        return (f"the launcher (pid {pid}) is gone, but Slurm job {job} is {p(shown['slurm_state'])}: "
                f"the tasks go on. Stop it: scancel {job}")
    elif job and result == "unknown":
        return (f"the launcher (pid {pid}) is gone and Slurm cannot be asked from here (no squeue or "
                f"sacct): whether job {job} still runs is unknown. Ask: squeue -j {job}")
    elif result == "lost":
        return (f"the launcher (pid {pid}) is gone and never closed the record; run.json was last "
                f"written at {when(last_update(run))}."
                + (f" Slurm job {job} is {p(shown['slurm_state']) or 'no longer known to Slurm'}."
                   if job else "") + " Task states below are as last recorded.")
    elif result == "running" and shown["launcher_alive"] is None and pid:
        where = p(record.get("launcher_host") or "another host")
        return f"launcher pid {pid} on {where}: not checked from here"
    elif result == "running":
        return f"launcher pid {pid}; " + stop_hint(run, pid) if pid else stop_hint(run, None)
    elif result == "stopping":
        return (f"launcher pid {pid}: the record is closed with the run's end and exit code once "
                f"every task has stopped")
    return None


RUNS_HEADER = ["run", "result", "exit", "started", "duration", "tasks", "restarts", "file", "cause"]
CAUSE_WIDTH = 60


def run_cause(record: Dict[str, Any], result: str) -> str:
    """Why a run ended as it did, in a few words, from run.json alone: its root cause; else its
    decision (the launcher's words, when it wrote them); else the first failed task; else what
    the result itself says (a Slurm run that never got a job was refused before any task ran)."""
    if record.get("root_cause"):
        return record["root_cause"]
    if result in ("succeeded", "running"):
        return ""
    if isinstance(record.get("decision"), str) and record["decision"]:
        return record["decision"]
    if result == "lost":
        return "launcher gone"
    if result == "unknown":
        return "launcher gone; Slurm not reachable"
    if result == "interrupted":
        return "interrupted"
    if recorded_kind(record.get("backend")).takes_slurm_options and not record.get("slurm_job"):
        return "not submitted: no Slurm job (sbatch refused or failed)"
    for t in record.get("tasks") or []:
        if t.get("state") == "failed":
            return f"{t['task']} {t.get('exit') or 'failed'}"
    return ""


def run_summary(run_dir: str, record: Dict[str, Any], now: Optional[float] = None,
                probe=None) -> Dict[str, Any]:
    """One row of ``tfcluster runs --json``."""
    result = derive_result(record, probe=probe, run_dir=run_dir)
    tasks = record.get("tasks") or []
    restarts = record.get("total_restarts")
    if not isinstance(restarts, int):
        restarts = sum(int(t.get("restarts") or 0) for t in tasks)
    return {"run_id": record.get("run_id") or os.path.basename(run_dir),
            "run_dir": os.path.abspath(run_dir),
            "file": record.get("file"), "result": result, "exit_code": record.get("exit_code"),
            "cause": run_cause(record, result),
            "started": record.get("started"), "ended": record.get("ended"),
            "duration": run_duration(run_dir, record, result, now),
            "tasks": [t["task"] for t in tasks], "restarts": restarts}


def _show_path(path: Optional[str]) -> str:
    if not path:
        return ""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def print_runs(logdir: Optional[str], file: Optional[str], as_json: bool = False,
               probe=None, indexed=None) -> int:
    """``tfcluster runs``: past runs, newest first. A run whose run.json cannot be read is named
    in a warning on stderr and left out; the others are listed. ``indexed``: a callable giving
    the run folders of the user's run index (tfcluster.runs.index), or (those, words saying which
    runs they are), listed when there is neither a ./cluster.yaml nor a ./runs folder here.
    Without ``logdir`` a line on stderr says which runs are listed."""
    said = None      # without LOGDIR: which runs these are, on stderr
    if logdir:
        if not os.path.isdir(logdir):
            raise UserError(f"{printable(logdir)}: no such folder")
        want = os.path.abspath(file) if file else None
    else:
        try:
            logdir, want = default_place(file)
            said = (f"runs of {shown_here(want)} in {shown_here(logdir)}" if want
                    else f"runs in {shown_here(logdir)}")
            if want and not file:
                said += " and runs launched here without a file"
        except UserError as e:
            folders = [] if file or indexed is None else indexed()
            said = "runs in your run index"
            if isinstance(folders, tuple):       # (run folders, which runs these are)
                folders, said = folders
            if not folders:
                raise UserError(e.message + ("" if file or indexed is None else
                                             "; your run index lists no runs either"))
            logdir, want = None, None
    if said and not as_json:
        print(printable(f"tfcluster: {said}"), file=sys.stderr)
    if logdir is None:
        runs, problems = [], []
        for d in folders:
            try:
                runs.append((d, read_run(d)))
            except UserError as e:
                problems.append(e.message)
        logdir = "your run index"
    elif said and want and not file:
        runs, problems = runs_here(logdir, want, given=False)
    else:
        runs, problems = scan_runs(logdir, want)
    warn_skipped(problems)
    now = time.time()
    rows = [run_summary(d, r, now, probe) for d, r in runs]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        of = f" of {want}" if want else ""
        print(printable(f"no runs{of} in {logdir}"))
        return 0
    table = [[r["run_id"], r["result"], "" if r["exit_code"] is None else str(r["exit_code"]),
              when(r["started"]), format_duration(r["duration"]), str(len(r["tasks"])),
              str(r["restarts"]), _show_path(r["file"]), _clip(printable(r["cause"]), CAUSE_WIDTH)]
             for r in rows]
    print(format_table(RUNS_HEADER, table))
    return 0
