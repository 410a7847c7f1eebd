"""run.json: the record of a run, kept up to date while it goes; ``tfcluster status`` and
``tfcluster runs``.

run.json's ``result`` is what the launcher wrote: ``running`` while it goes, then ``succeeded``,
``failed`` or ``interrupted``. A ``running`` record whose launcher is gone (its pid no longer
exists, or belongs to a process started at another time than ``launcher_started``) is reported as
``lost``: the launcher was killed (SIGKILL, OOM killer, a lost session) before it could close the
record.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from tfcluster.terminal import printable
from tfcluster.errors import UserError
from tfcluster.core.rules import format_duration  # noqa: F401 (re-exported: one wording of a duration)
from tfcluster.safe_files import RUN_FILE
from tfcluster.runs.slurm_job import is_live, job_state, slurm_job_id

RESULTS = ("running", "succeeded", "failed", "interrupted")
#: Exit code of ``tfcluster status`` per result (2 is bad input, as everywhere in tfcluster).
STATUS_EXIT = {"succeeded": 0, "failed": 1, "running": 3, "interrupted": 4, "lost": 5,
               "unknown": 6}
STARTED_SLACK = 1.0  # seconds: psutil create_time() is exact to the clock tick; allow for rounding


def write_json_private(path: str, data: Any) -> None:
    """Write JSON atomically, readable by its owner only, following no link (relative to the
    open run folder; tfcluster.safe_files). A failed write (disk full) leaves no temporary file."""
    from tfcluster import safe_files
    safe_files.write_json(path, data)


RUN_FILE_LIMIT = 64 << 20   # bytes: a run.json larger than this is not read (10,000 tasks take ~5 MiB)
MAX_COUNT = 1 << 31         # pids, restarts, exit codes, steps: larger is not a record's number
MAX_STEP = 1 << 62


def read_run(run_dir: str) -> Dict[str, Any]:
    """run.json of ``run_dir``, checked: a broken record is a UserError naming the file and field.

    Read defensively (see :mod:`tfcluster.runs.eventlog`): a regular file only, at most RUN_FILE_LIMIT
    bytes, NaN/Infinity/overflowing numbers as null, nesting bounded, and every field that
    status, runs and report use checked for its type and range."""
    from tfcluster.runs.eventlog import _shown, parse_json, read_limited
    path = os.path.join(run_dir, RUN_FILE)
    data = read_limited(path, RUN_FILE_LIMIT)
    if data is None:
        record = missing_record(run_dir)
        if record is None:
            raise UserError(f"{_shown(run_dir)}: no {RUN_FILE} here (not a run folder?)")
        return record
    try:
        record = parse_json(data)
    except ValueError as e:
        raise UserError(f"{_shown(path)}: not valid JSON ({e})")
    problem = _check_record(record)
    if problem:
        raise UserError(f"{_shown(path)}: {problem}")
    return record


#: files a launcher makes in its run folder before its first run.json
RUN_TRACES = ("events.jsonl", "launcher.log", "console.log", "detached.json")


def is_run_folder(run_dir: str) -> bool:
    """Whether ``run_dir`` is a run folder: it holds run.json, or what a launcher writes before
    its first run.json (a launcher killed in its start wave, a disk full before the record)."""
    return any(os.path.lexists(os.path.join(run_dir, n)) for n in (RUN_FILE,) + RUN_TRACES)


def missing_record(run_dir: str) -> Optional[Dict[str, Any]]:
    """The record of a run folder that has no run.json (see :func:`is_run_folder`), from what
    its launcher left: its tasks and start from events.jsonl's ``run_started`` when readable.
    Its result is ``lost`` (:func:`launcher_alive` says False): a launcher writes run.json as
    soon as its folder is made, so one that never did was killed or could not write. None when
    the folder is no run folder."""
    if not any(os.path.lexists(os.path.join(run_dir, n)) for n in RUN_TRACES):
        return None
    record: Dict[str, Any] = {"run_id": os.path.basename(os.path.normpath(run_dir)),
                              "result": "running", "record_missing": True, "tasks": [],
                              "root_cause": f"no {RUN_FILE}: the launcher was killed before it "
                                            f"wrote its record, or could not write it (disk full?)"}
    try:
        from tfcluster.runs.eventlog import iter_events
        for ev in iter_events(run_dir):
            if ev.get("event") == "run_started":
                record["started"] = ev["time"]
                tasks = ev.get("tasks")
                if isinstance(tasks, list):
                    record["tasks"] = [{"task": t, "state": "unknown"} for t in tasks[:100000]
                                       if isinstance(t, str)]
                break
    except UserError:   # events.jsonl a link, a FIFO or a bad line: still lost, without its tasks
        pass
    return record


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any, low: int = 0, high: int = MAX_COUNT) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and low <= x < high


def _check_record(record: Any) -> Optional[str]:
    """The first thing wrong with a run record, or None."""
    from tfcluster.runs.eventlog import is_time
    if not isinstance(record, dict):
        return "not a JSON object"
    result = record.get("result")
    if result not in RESULTS:
        return f"result: {_short(result)} is not one of {', '.join(RESULTS)}"
    for key in ("started", "ended", "launcher_started"):
        if record.get(key) is not None and not is_time(record[key]):
            return (f"{key}: not a number" if not _is_num(record[key])
                    else f"{key}: {record[key]!r} is not a time (seconds since 1970, before 3000)")
    pid = record.get("launcher_pid")
    if pid is not None and not _is_int(pid, 1):
        return "launcher_pid: not a process id"
    for key in ("run_id", "file", "launcher_host", "backend", "root_cause", "run_dir",
                "success_rule"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"{key}: not a string"
    job = record.get("slurm_job")
    if job is not None and not isinstance(job, str) and not _is_int(job):
        return "slurm_job: not a job id"
    if record.get("exit_code") is not None and not _is_int(record["exit_code"], -MAX_COUNT):
        return "exit_code: not a whole number"
    if record.get("total_restarts") is not None and not _is_int(record["total_restarts"]):
        return "total_restarts: not a whole number, 0 or more"
    tasks = record.get("tasks", [])
    if not isinstance(tasks, list):
        return "tasks: not a list"
    for i, t in enumerate(tasks):
        if not isinstance(t, dict):
            return f"tasks[{i}]: not an object"
        for key in ("task", "state"):
            if not isinstance(t.get(key), str):
                return f"tasks[{i}].{key}: missing or not a string"
        for key in ("started", "ended"):
            if t.get(key) is not None and not is_time(t[key]):
                return (f"tasks[{i}].{key}: not a number" if not _is_num(t[key])
                        else f"tasks[{i}].{key}: {t[key]!r} is not a time")
        for key in ("endpoint", "exit", "host"):
            if t.get(key) is not None and not isinstance(t[key], str):
                return f"tasks[{i}].{key}: not a string"
        if t.get("pid") is not None and not _is_int(t["pid"], 1):
            return f"tasks[{i}].pid: not a process id"
        if t.get("restarts") is not None and not _is_int(t["restarts"]):
            return f"tasks[{i}].restarts: not a whole number, 0 or more"
        if t.get("exit_code") is not None and not _is_int(t["exit_code"], -MAX_COUNT):
            return f"tasks[{i}].exit_code: not a whole number"
        p = t.get("progress")
        if p is not None:
            if not isinstance(p, dict):
                return f"tasks[{i}].progress: not an object"
            for key in ("step", "total"):
                v = p.get(key)
                if v is not None and not (_is_num(v) and abs(v) < MAX_STEP):
                    return f"tasks[{i}].progress.{key}: not a number in range"
            if p.get("at") is not None and not is_time(p["at"]):
                return f"tasks[{i}].progress.at: not a time"
    return None


def _short(x: Any, limit: int = 60) -> str:
    text = printable(repr(x))
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ------------------------------------------------------------------ is the launcher alive?
def launcher_alive(record: Dict[str, Any]) -> Optional[bool]:
    """Whether the launcher that writes this record still runs; None when that cannot be told
    from here (no pid recorded, or the launcher ran on another host)."""
    if record.get("record_missing"):
        return False            # no run.json: its launcher never wrote one (missing_record)
    pid = record.get("launcher_pid")
    if not pid:
        return None
    host = record.get("launcher_host")
    if host and host != socket.gethostname():
        return None
    import psutil
    try:
        proc = psutil.Process(pid)
        created = proc.create_time()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return None
    expected = record.get("launcher_started")
    if expected is not None:
        return abs(created - expected) <= STARTED_SLACK
    # Older records have no launcher_started: the launcher started before the run did, and is a
    # tfcluster process (pid 1, or any process older than the run, is not the launcher).
    started = record.get("started")
    if started is None or created > started + STARTED_SLACK:
        return False
    try:
        return looks_like_tfcluster(proc.cmdline())
    except psutil.Error:
        return None


def looks_like_tfcluster(argv: List[str]) -> bool:
    """Whether a command line runs tfcluster (``tfcluster launch``, ``python -m tfcluster``)."""
    return any(os.path.basename(a) in ("tfcluster", "tfcluster.exe") or a == "tfcluster"
               for a in argv[:4])


def owned_by_caller(run_dir: str) -> bool:
    """Whether the run folder and its run.json belong to this user: a record another user wrote
    (a shared logdir) can name any process or file, and is not acted on (``stop``, a bare
    ``status``/``logs`` choosing the latest run)."""
    try:
        me = os.geteuid()
        return (os.lstat(run_dir).st_uid == me
                and os.lstat(os.path.join(run_dir, RUN_FILE)).st_uid == me)
    except OSError:
        return False


def decide_result(recorded: Any, alive: Optional[bool], job_id: Optional[str] = None,
                  slurm_state: Optional[str] = None) -> str:
    """The result status shows, from what it knows (pure: no process, no Slurm call).

    ``recorded``: run.json's ``result``; ``alive``: whether its launcher runs (None: cannot be
    told); ``job_id``: the Slurm job the launcher submitted, if any; ``slurm_state``: what Slurm
    says of that job (:func:`tfcluster.runs.slurm_job.job_state`) -- a state word (``RUNNING``),
    ``""`` when Slurm no longer knows the job, None when Slurm could not be asked (no
    squeue/sacct here, or they failed).

    A ``running`` record whose launcher is gone is ``lost``, except a Slurm run: its tasks live
    in the job, not in the launcher. Its result is ``running`` while Slurm says the job is live,
    ``lost`` once the job ended (or Slurm forgot it), ``unknown`` when Slurm cannot be asked."""
    if recorded != "running" or alive is not False:
        return str(recorded)
    if not job_id:
        return "lost"
    if slurm_state is None:
        return "unknown"
    return "running" if is_live(slurm_state) else "lost"


def slurm_says(job_id: str) -> Optional[str]:
    """What Slurm says of a run's job, for ``status``: the state word of the one job-state query
    (squeue, then sacct; ``""``: Slurm does not know the job; None: it cannot be asked)."""
    return job_state(job_id).word


def derive_result(record: Dict[str, Any], alive: Optional[bool] = None,
                  probe=None, run_dir: Optional[str] = None) -> str:
    """The run's result as status reports it (:func:`decide_result`): the record's, ``lost``
    for a ``running`` record whose launcher is gone, and for a Slurm run whose launcher is gone,
    what Slurm says of its job. ``alive`` overrides the launcher check (for callers that already
    did it); ``probe(job_id)`` replaces the question to Slurm (:func:`slurm_says`)."""
    result = record.get("result")
    if result != "running":
        return result
    if alive is None:
        alive = launcher_alive(record)
    job = slurm_job_id(record, run_dir) if alive is False else None
    state = (probe or slurm_says)(job) if job else None
    return decide_result(result, alive, job, state)


def last_update(run_dir: str) -> Optional[float]:
    """When run.json was last written (the last moment a lost run is known to have lived)."""
    try:
        return os.path.getmtime(os.path.join(run_dir, RUN_FILE))
    except OSError:
        return None


def run_duration(run_dir: str, record: Dict[str, Any], result: str,
                 now: Optional[float] = None) -> Optional[float]:
    started = record.get("started")
    if started is None:
        return None
    if record.get("ended") is not None:
        return record["ended"] - started
    if result in ("lost", "unknown"):
        seen = last_update(run_dir)
        return None if seen is None else seen - started
    return (now or time.time()) - started


# ------------------------------------------------------------------ finding runs
def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def scan_runs(logdir: str, file: Optional[str] = None
              ) -> Tuple[List[Tuple[str, Dict[str, Any]]], List[str]]:
    """The runs under ``logdir`` (of cluster file ``file`` when given), newest first, and one
    message per run folder whose run.json cannot be read (those are left out)."""
    from tfcluster.runs.eventlog import _shown
    try:
        names = os.listdir(logdir)
    except FileNotFoundError:
        raise UserError(f"{_shown(logdir)}: no runs yet (folder does not exist)")
    except OSError as e:
        raise UserError(f"{_shown(logdir)}: cannot be read ({e.strerror or e})")
    want = _real(file) if file else None
    runs, problems = [], []
    for name in names:
        d = os.path.join(logdir, name)
        if not is_run_folder(d):
            continue
        try:
            record = read_run(d)
        except UserError as e:
            problems.append(e.message)
            continue
        if want is not None and (not record.get("file") or _real(record["file"]) != want):
            continue
        runs.append((d, record))
    runs.sort(key=lambda r: (r[1].get("started") or last_update(r[0]) or 0.0, r[0]), reverse=True)
    return runs, problems


def _default_place(file: Optional[str]) -> Tuple[str, Optional[str]]:
    """(logdir, cluster file) for ``--file FILE``, or ./cluster.yaml, or ./runs of any file."""
    if file:
        if not os.path.isfile(file):
            raise UserError(f"--file: {printable(file)}: no such file")
        from tfcluster.clusterfile.config import load
        return load(file).logdir, os.path.abspath(file)
    if os.path.isfile("cluster.yaml"):
        from tfcluster.clusterfile.config import load
        return load("cluster.yaml").logdir, os.path.abspath("cluster.yaml")
    if not os.path.isdir("runs"):
        raise UserError(f"no ./cluster.yaml and no ./runs folder in {printable(os.getcwd())}: give "
                        f"a run folder, a logdir, or --file FILE")
    return "runs", None


def _here(path: str) -> str:
    """``./runs`` for a path under this folder, else the absolute path."""
    rel = os.path.relpath(os.path.abspath(path))
    return os.path.abspath(path) if rel.startswith("..") else os.path.join(".", rel)


def _warn(messages: List[str]) -> None:
    for m in messages:
        print(f"tfcluster: warning: {printable(m)} (skipped)", file=sys.stderr)


def find_run(run_dir: Optional[str], file: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    """The run folder and record ``status``/``report`` look at: RUN_DIR itself; else the latest
    run of the cluster file (``--file``, default ./cluster.yaml) in its logdir (or in RUN_DIR
    when that is a logdir)."""
    if run_dir:
        if is_run_folder(run_dir):
            return run_dir, read_run(run_dir)
        if not os.path.isdir(run_dir):
            raise UserError(f"{printable(run_dir)}: no such run folder")
        logdir, want = run_dir, (os.path.abspath(file) if file else None)
    else:
        logdir, want = _default_place(file)
    runs, problems = scan_runs(logdir, want)
    _warn(problems)
    # the latest run is chosen among the caller's own: a record another user planted in a shared
    # logdir (a later "started", the caller's cluster file) is never picked
    mine = [r for r in runs if owned_by_caller(r[0])]
    if not mine:
        of = f" of {want}" if want else ""
        others = f" ({len(runs)} run(s) of other users left out)" if runs else ""
        raise UserError(printable(f"{logdir}: no runs{of} yet{others}"))
    return mine[0]


def running_record(run_dir: str, command: str, why: str) -> Tuple[Dict[str, Any], str]:
    """(record, run id) of a run that is running; else UserError: ``command``: run R is not
    running (result: ...); ``why``."""
    record = read_run(run_dir)
    run_id = record.get("run_id") or os.path.basename(run_dir)
    result = derive_result(record)
    if result != "running":
        raise UserError(printable(f"{command}: run {run_id} is not running (result: {result}); {why}"))
    return record, run_id


def task_rows(record: Dict[str, Any], now: Optional[float] = None,
              live: bool = False) -> List[List[str]]:
    """The task table (raw text: callers escape for their medium). ``live``: a running run,
    with each running task's last sign of progress and last output (LIVE_HEADER)."""
    now = now or time.time()
    rows = []
    for t in record.get("tasks", []):
        start, end = t.get("started"), t.get("ended")
        dur = (end or now) - start if start else None
        step = t.get("progress", {}).get("step") if t.get("progress") else None
        row = [t["task"], t.get("endpoint") or "", str(t.get("pid") or ""), t["state"],
               t.get("exit") or "", str(t.get("restarts") or 0), format_duration(dur),
               "" if step is None else str(step)]
        if live:
            row += [ago(t.get(k), now) if t.get("state") == "running" else ""
                    for k in ("life_at", "output_at")]
        rows.append(row)
    return rows


def ago(at: Any, now: float) -> str:
    """'12s ago' for a recorded time, '' when there is none (or it is not a time)."""
    if not _is_num(at) or at != at:
        return ""
    return f"{format_duration(now - at)} ago"


HEADER = ["task", "endpoint", "pid", "state", "exit", "restarts", "time", "step"]
#: the table of a running run: each task's last progress and last output too
LIVE_HEADER = HEADER + ["progress", "output"]


def format_table(header: List[str], rows: List[List[str]]) -> str:
    """A plain text table; every cell is escaped for a terminal (no control character)."""
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths)).rstrip()]
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _when(t: Optional[float]) -> str:
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def assess(record: Dict[str, Any], probe=None, run_dir: Optional[str] = None) -> Dict[str, Any]:
    """What status knows of a run beyond its record: ``result`` (derived), ``launcher_alive``
    (true, false, or null when it cannot be checked) and, for a Slurm run whose launcher is
    gone, ``slurm_job`` and ``slurm_state`` (null when Slurm cannot be asked)."""
    alive = launcher_alive(record) if record.get("result") == "running" else None
    job = slurm_job_id(record, run_dir) if alive is False else None
    state = (probe or slurm_says)(job) if job else None
    out = {"result": decide_result(record.get("result"), alive, job, state),
           "launcher_alive": alive}
    if job:
        out.update(slurm_job=job, slurm_state=state)
    return out


def status_record(run_dir: str, record: Dict[str, Any], probe=None) -> Dict[str, Any]:
    """The record as ``status --json`` prints it: ``result`` derived (``lost`` included),
    ``launcher_alive`` and ``run_dir`` added (and ``slurm_state``, see :func:`assess`)."""
    out = dict(record)
    out.update(assess(record, probe, run_dir))
    out["run_dir"] = os.path.abspath(run_dir)
    return out


def stop_hint(run_dir: str, pid: Any) -> str:
    """How to stop a running run, for people."""
    return (f"stop it: tfcluster stop {shlex_quote(run_dir)}"
            + (f"  (or: kill -TERM {pid})" if pid else ""))


def shlex_quote(text: str) -> str:
    import shlex
    return printable(shlex.quote(text))


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
    head = f"run {p(record.get('run_id') or os.path.basename(os.path.normpath(run)))} ({p(run)}): {word}"
    if record.get("exit_code") is not None:
        head += f", exit code {record['exit_code']}"
    print(head)
    if record.get("file"):
        print(f"file: {p(record['file'])}")
    segments = record.get("segments")
    if isinstance(segments, int) and not isinstance(segments, bool) and segments > 1:
        print(f"Slurm job {p(str(record.get('slurm_job') or '?'))}: {segments} segments (requeued "
              f"{segments - 1} time{'s' if segments > 2 else ''}; one run, resumed from its checkpoint)")
    duration = run_duration(run, record, result)
    started = f"started {_when(record.get('started'))}" if record.get("started") else ""
    if started:
        took = {"running": "running for", "lost": "last seen after",
                "unknown": "last seen after"}.get(result, "took")
        print(started + (f", {took} {format_duration(duration)}" if duration is not None else ""))
    pid = record.get("launcher_pid")
    if job and result == "running":
        print(f"the launcher (pid {pid}) is gone, but Slurm job {job} is {p(shown['slurm_state'])}: "
              f"the tasks go on. Stop it: scancel {job}")
    elif job and result == "unknown":
        print(f"the launcher (pid {pid}) is gone and Slurm cannot be asked from here (no squeue or "
              f"sacct): whether job {job} still runs is unknown. Ask: squeue -j {job}")
    elif result == "lost":
        print(f"the launcher (pid {pid}) is gone and never closed the record; run.json was last "
              f"written at {_when(last_update(run))}."
              + (f" Slurm job {job} is {p(shown['slurm_state']) or 'no longer known to Slurm'}."
                 if job else "") + " Task states below are as last recorded.")
    elif result == "running" and shown["launcher_alive"] is None and pid:
        where = p(record.get("launcher_host") or "another host")
        print(f"launcher pid {pid} on {where}: not checked from here")
    elif result == "running":
        print(f"launcher pid {pid}; " + stop_hint(run, pid) if pid else stop_hint(run, None))
    if record.get("root_cause"):
        print(f"root cause: {p(record['root_cause'])}")
    now = record.get("ended")
    if now is None and result in ("lost", "unknown"):
        now = last_update(run)
    live = result == "running"
    print(format_table(LIVE_HEADER if live else HEADER, task_rows(record, now, live=live)))
    stalled = record.get("stalled")
    for line in stalled if isinstance(stalled, list) else ():
        if isinstance(line, str):
            print(p(line))
    return STATUS_EXIT[result]


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
    if record.get("backend") == "slurm" and not record.get("slurm_job"):
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
            logdir, want = _default_place(file)
            said = (f"runs of {_here(want)} in {_here(logdir)}" if want
                    else f"runs in {_here(logdir)}")
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
    else:
        runs, problems = scan_runs(logdir, want)
    _warn(problems)
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
              _when(r["started"]), format_duration(r["duration"]), str(len(r["tasks"])),
              str(r["restarts"]), _show_path(r["file"]), _clip(printable(r["cause"]), CAUSE_WIDTH)]
             for r in rows]
    print(format_table(RUNS_HEADER, table))
    return 0
