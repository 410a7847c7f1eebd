"""``tfcluster profile RUN``: a TensorFlow profile of every live task of a run, in one folder.

Every task of a launched cluster is given a profiler port (``TFCLUSTER_PROFILER_PORT``,
:func:`tfcluster.plan.contract.profiler_port`), recorded in run.json; the runtime starts
TensorFlow's profiler server there (:func:`tfcluster.runtime.start_profiler`). This asks every
live task for a trace of the same ``seconds`` at once (TensorFlow's
``tf.profiler.experimental.client.trace`` with all their addresses) and writes what comes back
into the run folder, in the layout TensorBoard's profile plugin reads::

    <run_dir>/profile/<time>/plugins/profile/<time>/<task>.xplane.pb     (worker-1.xplane.pb)

``tfcluster tensorboard RUN --profile`` opens ``<run_dir>/profile`` (one TensorBoard run per
capture). The trace is taken by an isolated child Python (TensorFlow's import and its log lines
stay out of this process) into a private temporary folder; the files are then copied into the
run folder relative to its open descriptor, without following links (tfcluster.safe_files's rules).
Only the caller's own, running run can be profiled.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from tfcluster.errors import UserError

PROFILE_DIR = "profile"

_TRACE = r"""
import sys
import tensorflow as tf
addrs, logdir, ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
opts = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                device_tracer_level=1)
tf.profiler.experimental.client.trace(addrs, logdir, ms, num_tracing_attempts=2, options=opts)
"""


def _say(line: str) -> None:
    print(f"tfcluster: {line}", file=sys.stderr, flush=True)


def traceable_tasks(record: Dict, only: Sequence[str] = ()) -> List[Dict]:
    """The tasks of ``record`` to trace: running, with a profiler port; ``only`` (task names)
    picks some of them (a name that is not a task of the run is an error)."""
    rows = [t for t in record.get("tasks") or [] if isinstance(t, dict)]
    names = {t.get("task") for t in rows}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise UserError(f"--tasks: {', '.join(unknown)}: not a task of run {record.get('run_id')} "
                        f"(tasks: {', '.join(sorted(str(n) for n in names))})")
    picked = [t for t in rows if not only or t.get("task") in only]
    return [t for t in picked if t.get("state") == "running" and t.get("profiler_port")]


def task_address(row: Dict) -> str:
    host = row.get("host") or "localhost"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{int(row['profiler_port'])}"


def _open_own_dir(path: str, parent_fd: Optional[int] = None, make: bool = False) -> int:
    """Open (making it when ``make``) a folder of this user without following links."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    if make:
        try:
            os.mkdir(path, 0o700, dir_fd=parent_fd)
        except FileExistsError:   # made before: opened below without following a link, and checked
            pass
    fd = os.open(path, flags, dir_fd=parent_fd)
    if os.fstat(fd).st_uid != os.geteuid():
        os.close(fd)
        raise UserError(f"{path}: not your folder; tfcluster profile writes only into your own runs")
    return fd


def _copy_into(src: str, dir_fd: int, name: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    out = os.open(name, flags, 0o600, dir_fd=dir_fd)
    with open(src, "rb") as f, os.fdopen(out, "wb") as g:
        shutil.copyfileobj(f, g)


def profile_run(run_dir: str, record: Dict, seconds: float = 3.0, tasks: Sequence[str] = (),
                run_arg: Optional[str] = None, timeout: float = 120.0) -> int:
    """Trace the run's live tasks for ``seconds`` into ``<run_dir>/profile/<time>/``; print
    where it went and how to open it. Exit code 0 when every asked task gave a trace, 1 when
    some did not, 2 (UserError) when there is nothing to trace."""
    from tfcluster.runs.result import derive_result

    run_id = record.get("run_id") or os.path.basename(run_dir)
    result = derive_result(record, run_dir=run_dir)
    if result != "running":
        raise UserError(f"run {run_id} is not running (result: {result}); only live tasks can "
                        f"be profiled")
    if not seconds or seconds <= 0:
        raise UserError("--seconds: give a positive number of seconds")
    rows = traceable_tasks(record, tasks)
    if not rows:
        raise UserError(f"run {run_id}: no running task has a profiler port in run.json "
                        f"(a run launched by an older tfcluster, or its tasks are not running)")
    run_fd = _open_own_dir(run_dir)
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S")
    by_port: Dict[str, Dict] = {str(int(r["profiler_port"])): r for r in rows}
    tmp = tempfile.mkdtemp(prefix="tfcluster-profile-")
    try:
        addrs = ",".join(f"grpc://{task_address(r)}" for r in rows)
        _say(f"tracing {', '.join(r['task'] for r in rows)} of run {run_id} for {seconds:g} s")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run([sys.executable, "-I", "-c", _TRACE, addrs, tmp,
                               str(int(seconds * 1000))], env=env, capture_output=True, text=True,
                              timeout=seconds + timeout)
        found: Dict[str, str] = {}          # task -> file
        for dirpath, _, files in os.walk(tmp):
            for f in files:
                if f.endswith(".xplane.pb"):
                    port = f[:-len(".xplane.pb")].rpartition("_")[2]
                    row = by_port.get(port)
                    if row is not None and os.path.getsize(os.path.join(dirpath, f)) > 0:
                        found[row["task"]] = os.path.join(dirpath, f)
        if not found:
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
            _say(f"no task gave a trace ({tail[0][:300]})")
            return 1
        try:
            pfd = _open_own_dir(PROFILE_DIR, run_fd, make=True)
            try:
                cfd = _open_own_dir(stamp, pfd, make=True)
            finally:
                os.close(pfd)
            fd = cfd
            for part in ("plugins", "profile", stamp):
                nfd = _open_own_dir(part, fd, make=True)
                os.close(fd)
                fd = nfd
            try:
                for task, path in sorted(found.items()):
                    _copy_into(path, fd, f"{task.replace(':', '-')}.xplane.pb")
            finally:
                os.close(fd)
        except OSError as e:
            raise UserError(f"{run_dir}/{PROFILE_DIR}: cannot write the profile ({e.strerror or e})")
    finally:
        os.close(run_fd)
        shutil.rmtree(tmp, ignore_errors=True)
    out = os.path.join(run_dir, PROFILE_DIR, stamp)
    missing = [r["task"] for r in rows if r["task"] not in found]
    print(f"profile of {', '.join(sorted(found))} ({seconds:g} s): {out}")
    if missing:
        _say(f"no trace from {', '.join(missing)} (its profiler server did not answer; a program "
             f"not built on tfcluster.runtime starts it with one line: see docs/RUNTIME.md)")
    print(f"open it: tfcluster tensorboard {run_arg or run_id} --profile"
          f"   (TensorBoard's profile tab: pip install tensorboard-plugin-profile)")
    return 1 if missing else 0
