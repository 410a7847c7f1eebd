"""Finding runs: the runs of a logdir (of one cluster file), the run ``status``, ``report``,
``logs`` and the others look at when none is named, and a run that must be running."""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from tfcluster.errors import UserError
from tfcluster.runs.result import derive_result, last_update
from tfcluster.runs.run_file import is_run_folder, read_run
from tfcluster.safe_files import RUN_FILE
from tfcluster.terminal import printable


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


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def scan_runs(logdir: str, file: Optional[str] = None, fileless: bool = False
              ) -> Tuple[List[Tuple[str, Dict[str, Any]]], List[str]]:
    """The runs under ``logdir`` (of cluster file ``file`` when given; ``fileless``: and those
    launched without a file), newest first, and one message per run folder whose run.json
    cannot be read (those are left out)."""
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
        if want is not None and not (fileless and not record.get("file")) and (
                not record.get("file") or _real(record["file"]) != want):
            continue
        runs.append((d, record))
    runs.sort(key=lambda r: (r[1].get("started") or last_update(r[0]) or 0.0, r[0]), reverse=True)
    return runs, problems


def default_place(file: Optional[str]) -> Tuple[str, Optional[str]]:
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


def runs_here(logdir: str, want: Optional[str], given: bool
               ) -> Tuple[List[Tuple[str, Dict[str, Any]]], List[str]]:
    """The runs a bare ``status``/``report``/``runs`` looks at, newest first: those of ``want``
    (./cluster.yaml or ``--file``) in ``logdir``; unless the file was ``given``, also those
    launched from this folder without a file (``launch --ps N --workers N -- CMD`` writes
    them to ./runs), so that the latest run is the one just made here, with or without a
    file."""
    runs, problems = scan_runs(logdir, want, fileless=not given)
    if not given and want and os.path.isdir("runs") and _real("runs") != _real(logdir):
        more, also = scan_runs(os.path.abspath("runs"), None)
        runs += [r for r in more if not r[1].get("file")]
        problems += also
        runs.sort(key=lambda r: (r[1].get("started") or last_update(r[0]) or 0.0, r[0]),
                  reverse=True)
    return runs, problems


def shown_here(path: str) -> str:
    """``./runs`` for a path under this folder, else the absolute path."""
    rel = os.path.relpath(os.path.abspath(path))
    return os.path.abspath(path) if rel.startswith("..") else os.path.join(".", rel)


def warn_skipped(messages: List[str]) -> None:
    for m in messages:
        print(f"tfcluster: warning: {printable(m)} (skipped)", file=sys.stderr)


def find_run(run_dir: Optional[str], file: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    """The run folder and record ``status``/``report`` look at: RUN_DIR itself; else the latest
    run of the cluster file (``--file``, default ./cluster.yaml) in its logdir (or in RUN_DIR
    when that is a logdir); without ``--file``, a run launched here without a file counts too
    (:func:`runs_here`)."""
    if run_dir:
        if is_run_folder(run_dir):
            return run_dir, read_run(run_dir)
        if not os.path.isdir(run_dir):
            raise UserError(f"{printable(run_dir)}: no such run folder")
        logdir, want = run_dir, (os.path.abspath(file) if file else None)
    else:
        logdir, want = default_place(file)
    runs, problems = (scan_runs(logdir, want) if run_dir
                      else runs_here(logdir, want, given=bool(file)))
    warn_skipped(problems)
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
