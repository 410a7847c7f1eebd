"""Handling a run from anywhere: ``stop`` (through its live launcher), ``launch --detach``,
``tensorboard`` on its summaries. No TensorFlow.

``stop`` sends SIGTERM to the launcher recorded in run.json, after checking through a pidfd
that the pid is still that launcher (its start time matches ``launcher_started``), so a
reused pid is never signalled. The launcher then stops its tasks as it does on Ctrl-C: chief
and workers first (a chief saves its last checkpoint while its ps still serve), ps last.
"""
from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

from .errors import UserError
from .runindex import CONSOLE

DETACH_MARK = "detached.json"       # written by ``launch --detach`` in the run folder it prepares
SUMMARY_FLAGS = ("--checkpoint_dir", "--model_dir", "--logdir", "--summary_dir", "--log_dir")


def _say(line: str) -> None:
    print(f"tfcluster: {line}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ stop
def open_launcher(record: Dict) -> int:
    """A pidfd of the run's live launcher. Raises UserError when the run is not running here
    or its launcher is gone (the pid reused by another process counts as gone)."""
    from .runrecord import launcher_alive
    pid = record.get("launcher_pid")
    host = record.get("launcher_host")
    if host and host != socket.gethostname():
        raise UserError(f"run {record.get('run_id')}: its launcher runs on {host}; "
                        f"run tfcluster stop there")
    if not isinstance(pid, int) or pid <= 0:
        raise UserError(f"run {record.get('run_id')}: run.json names no launcher pid")
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise UserError(f"run {record.get('run_id')}: its launcher (pid {pid}) is gone "
                        f"(the run is lost); nothing to stop")
    # The pid is pinned by the pidfd now: check it is still the launcher that wrote the record.
    if launcher_alive(record) is not True:
        os.close(fd)
        raise UserError(f"run {record.get('run_id')}: pid {pid} is no longer its launcher "
                        f"(the run is lost); nothing signalled")
    return fd


def wait_pidfd(fd: int, timeout: float) -> bool:
    """True when the process behind ``fd`` ended within ``timeout`` seconds."""
    ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
    return bool(ready)


def stop_run(run_dir: str, timeout: float = 60.0) -> int:
    """SIGTERM to the run's launcher, wait for it, report the result. Exit code: 0 stopped
    (or already over), 1 still running after ``timeout``."""
    from .runrecord import derive_result, read_run
    record = read_run(run_dir)
    run_id = record.get("run_id") or os.path.basename(run_dir)
    result = derive_result(record)
    if result == "lost":
        _say(f"run {run_id} is lost: its launcher (pid {record.get('launcher_pid')}) is gone or the "
             f"pid now belongs to another process; nothing signalled")
        return 1
    if result != "running":
        _say(f"run {run_id} is not running (result: {result}); nothing to stop")
        return 0
    fd = open_launcher(record)
    try:
        pid = record["launcher_pid"]
        signal.pidfd_send_signal(fd, signal.SIGTERM)
        _say(f"stopping run {run_id}: SIGTERM to its launcher (pid {pid}), which stops the "
             f"chief and workers first, then the ps")
        if not wait_pidfd(fd, timeout):
            _say(f"run {run_id}: the launcher (pid {pid}) is still running after {timeout:g}s; "
                 f"run tfcluster stop {run_id} again to repeat, or look at tfcluster logs {run_id} launcher")
            return 1
    finally:
        os.close(fd)
    record = read_run(run_dir)
    _say(f"run {run_id} ended: {derive_result(record)}"
         + (f" (exit code {record.get('exit_code')})" if record.get("exit_code") is not None else ""))
    return 0


# ------------------------------------------------------------------ detach
def strip_detach(argv: Sequence[str], drop: Optional[Dict[str, int]] = None) -> List[str]:
    """The launch command line without ``--detach``/``-d`` (before any ``--``), and without
    the flags in ``drop`` (flag -> how many values follow it; ``--flag=value`` too)."""
    drop = dict(drop or {})
    drop.setdefault("--detach", 0)
    drop.setdefault("-d", 0)
    out: List[str] = []
    skip = 0
    for i, a in enumerate(argv):
        if a == "--":
            out.extend(argv[i:])
            break
        if skip:
            skip -= 1
            continue
        name = a.split("=", 1)[0]
        if name in drop:
            skip = drop[name] if "=" not in a else 0
            continue
        out.append(a)
    return out


def prepared_run_dir(run_dir: str) -> bool:
    """Whether ``run_dir`` is a folder ``launch --detach`` prepared for its launcher (it holds
    only the detach mark and the console log, no run.json yet)."""
    try:
        names = set(os.listdir(run_dir))
    except OSError:
        return False
    return DETACH_MARK in names and names <= {DETACH_MARK, CONSOLE}


QUICK_FLAGS = {"--ps": 1, "--workers": 1, "--chief": 0, "--evaluator": 0, "--save": 1}


def detach(argv: Sequence[str], program: Sequence[str], run_dir: str, run_id: str,
           wait: float = 30.0, saved_file: Optional[str] = None) -> int:
    """Start ``tfcluster launch`` (``argv``, without --detach) in its own session with its
    output in ``<run_dir>/console.log``; return once its run.json exists (0) or it has ended
    (its exit code, with its output)."""
    try:
        os.makedirs(os.path.dirname(run_dir), exist_ok=True)
        os.makedirs(run_dir, mode=0o700)
    except FileExistsError:
        raise UserError(f"--run-id: {run_dir} exists already; choose another run id")
    except OSError as e:
        raise UserError(f"logdir: cannot create {run_dir} ({e.strerror or e})")
    with open(os.path.join(run_dir, DETACH_MARK), "w") as f:
        json.dump({"by_pid": os.getpid(), "at": time.time()}, f)
    console_path = os.path.join(run_dir, CONSOLE)
    if saved_file:   # launch --ps/--workers --save FILE: the launcher runs the file written
        args = strip_detach(argv, QUICK_FLAGS) + [saved_file]
    else:
        args = strip_detach(argv)
    cmd = [sys.executable, "-m", "tfcluster"] + args + [
        "--run-id", run_id, "--logdir", os.path.dirname(run_dir), "--no-live"]
    if program:
        cmd += ["--"] + list(program)
    with open(console_path, "ab") as console:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=console,
                                start_new_session=True, close_fds=True)
    deadline = time.time() + wait
    run_json = os.path.join(run_dir, "run.json")
    while time.time() < deadline:
        if os.path.isfile(run_json):
            break
        if proc.poll() is not None:
            with open(console_path, encoding="utf-8", errors="replace") as f:
                sys.stderr.write(f.read())
            return proc.returncode
        time.sleep(0.1)
    else:
        _say(f"the detached launcher (pid {proc.pid}) has not written {run_json} after "
             f"{wait:g}s; it goes on: see {console_path}")
    here = os.path.abspath(".")
    where = run_id
    print(f"run {run_id} started in the background (launcher pid {proc.pid}); "
          f"its folder: {os.path.relpath(run_dir, here) if run_dir.startswith(here) else run_dir}")
    print(f"  follow:  tfcluster logs {where} -f        (one task: tfcluster logs {where} worker:0 -f)")
    print(f"  status:  tfcluster status {where}")
    print(f"  stop:    tfcluster stop {where}")
    print(f"  report:  tfcluster report {where}")
    return 0


# ------------------------------------------------------------------ summaries, tensorboard
def summaries_dir(record: Dict) -> Optional[str]:
    """Where the run's summaries are: the chief's ``--checkpoint_dir`` (or ``--model_dir``,
    ``--logdir``, ``--summary_dir``, ``--log_dir``) resolved against its working folder, when
    the folder exists; else None."""
    tasks = record.get("tasks") or []
    tasks = sorted(tasks, key=lambda t: not t.get("chief"))
    base = os.path.dirname(record["file"]) if record.get("file") else None
    for t in tasks:
        argv = t.get("argv") or []
        cwd = t.get("cwd") or base or os.path.dirname(record.get("run_dir") or ".")
        for i, word in enumerate(argv):
            if not isinstance(word, str):
                continue
            value = None
            for flag in SUMMARY_FLAGS:
                if word.startswith(flag + "="):
                    value = word[len(flag) + 1:]
                elif word == flag and i + 1 < len(argv):
                    value = argv[i + 1]
            if value:
                path = os.path.normpath(os.path.join(cwd, os.path.expanduser(value)))
                if os.path.isdir(path):
                    return path
    return None


def summaries_line(record: Dict) -> Optional[str]:
    """The end-of-run line naming the summaries folder, or None when the run has none."""
    d = summaries_dir(record)
    if d is None:
        return None
    return f"summaries and checkpoints: {d} (tfcluster tensorboard {record.get('run_id', '')})".rstrip()


def tensorboard_argv(logdir: str, port: Optional[int] = None, host: Optional[str] = None) -> List[str]:
    """The TensorBoard command line: the ``tensorboard`` program when on PATH, else
    ``python -m tensorboard.main`` when the package is importable, else the plain command."""
    exe = shutil.which("tensorboard")
    if exe:
        cmd = [exe]
    else:
        import importlib.util
        cmd = [sys.executable, "-m", "tensorboard.main"] if importlib.util.find_spec("tensorboard") \
            else ["tensorboard"]
    cmd += ["--logdir", logdir]
    if port is not None:
        cmd += ["--port", str(port)]
    if host:
        cmd += ["--host", host]
    return cmd


def tensorboard_installed() -> bool:
    import importlib.util
    return bool(shutil.which("tensorboard") or importlib.util.find_spec("tensorboard"))


def tensorboard(run_dir: str, record: Dict, port: Optional[int] = None, host: Optional[str] = None,
                print_only: bool = False, profile: bool = False) -> int:
    """Run TensorBoard on the run's summaries (the process replaces this one), or print the
    command when TensorBoard is not installed or ``print_only``. ``profile``: on the run's
    profiles instead (``<run_dir>/profile``, written by ``tfcluster profile``)."""
    if profile:
        logdir: Optional[str] = os.path.join(run_dir, "profile")
        if not os.path.isdir(logdir):
            raise UserError(f"run {record.get('run_id')}: no profile yet; take one with "
                            f"tfcluster profile {record.get('run_id')}")
    else:
        logdir = summaries_dir(record)
    if logdir is None:
        logdir = run_dir
        _say(f"no summaries folder found in the chief's flags ({', '.join(SUMMARY_FLAGS)}); "
             f"using the run folder {run_dir}")
    cmd = tensorboard_argv(logdir, port, host)
    line = " ".join(shlex.quote(w) for w in cmd)
    if print_only or not tensorboard_installed():
        if not print_only:
            _say("TensorBoard is not installed (pip install tensorboard); the command is:")
        print(line)
        return 0 if print_only else 1
    _say(f"TensorBoard on {logdir}: {line}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)
    return 0  # not reached
