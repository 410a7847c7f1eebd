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

from tfcluster.errors import UserError
from tfcluster.runs.index import CONSOLE
from tfcluster.terminal import printable

DETACH_MARK = "detached.json"       # written by ``launch --detach`` in the run folder it prepares
SUMMARY_FLAGS = ("--checkpoint_dir", "--model_dir", "--logdir", "--summary_dir", "--log_dir")


def _say(line: str) -> None:
    print(f"tfcluster: {printable(line)}", file=sys.stderr, flush=True)   # record strings in it


# ------------------------------------------------------------------ stop
def _holds_folder(pid: int, folder: os.stat_result) -> bool:
    """Whether process ``pid`` has the run folder ``folder`` open: the launcher that made a run
    folder holds it open for the whole run (tfcluster.safe_files), no other process does."""
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(os.path.join(base, name))
        except OSError:
            continue
        if st.st_ino == folder.st_ino and st.st_dev == folder.st_dev:
            return True
    return False


def check_launcher(record: Dict, folder: os.stat_result, nothing: str = "nothing signalled") -> None:
    """Raise UserError unless the process run.json names is this run's launcher, and the
    caller's: started at ``launcher_started``, run by the caller's user, and holding this run
    folder open. (``pid`` must be pinned by a pidfd already: then it cannot change under us.)
    ``nothing``: what the message says was not done (``stop``: nothing signalled)."""
    import psutil

    from tfcluster.runs.liveness import launcher_alive
    run_id = printable(record.get("run_id"))
    pid = record["launcher_pid"]
    if record.get("launcher_started") is None:
        raise UserError(f"run {run_id}: run.json has no launcher_started, so pid {pid} cannot be "
                        f"told to be its launcher; {nothing}")
    if launcher_alive(record) is not True:
        raise UserError(f"run {run_id}: pid {pid} is no longer its launcher "
                        f"(the run is lost); {nothing}")
    try:
        uids = psutil.Process(pid).uids()
    except psutil.Error:
        raise UserError(f"run {run_id}: pid {pid} cannot be checked; {nothing}")
    if uids.real != os.getuid() or uids.effective != os.geteuid():
        raise UserError(f"run {run_id}: pid {pid} belongs to another user (uid {uids.real}); "
                        f"{nothing}")
    if not _holds_folder(pid, folder):
        raise UserError(f"run {run_id}: pid {pid} is not the launcher of this run folder (it does "
                        f"not hold it open); {nothing}")


def open_launcher(record: Dict, folder: Optional[os.stat_result] = None, command: str = "stop",
                  nothing: str = "nothing signalled") -> int:
    """A pidfd of the run's live launcher. Raises UserError when the run is not running here,
    its launcher is gone (the pid reused by another process counts as gone), or the process is
    not this run's launcher and the caller's (:func:`check_launcher`). ``command`` is the
    tfcluster command to run on the launcher's host instead; ``nothing``, what was not done."""
    pid = record.get("launcher_pid")
    host = record.get("launcher_host")
    run_id = printable(record.get("run_id"))
    if host and host != socket.gethostname():
        raise UserError(f"run {run_id}: its launcher runs on {printable(host)}; "
                        f"run tfcluster {command} there")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise UserError(f"run {run_id}: run.json names no launcher pid")
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise UserError(f"run {run_id}: its launcher (pid {pid}) is gone "
                        f"(the run is lost); nothing to {command}")
    # The pid is pinned by the pidfd now: check it is still the launcher that wrote the record.
    try:
        if folder is None:
            folder = os.stat(record.get("run_dir") or ".")
        check_launcher(record, folder, nothing)
    except BaseException:
        os.close(fd)
        raise
    return fd


def wait_pidfd(fd: int, timeout: float) -> bool:
    """True when the process behind ``fd`` ended within ``timeout`` seconds."""
    ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
    return bool(ready)


def read_own_run(run_dir: str, nothing: str = "nothing signalled"):
    """(run.json of ``run_dir``, the folder's stat), when the folder and the record are the
    caller's (opened without following a link); else UserError: a record another user wrote
    can name any process, and is not acted on."""
    from tfcluster import safe_files
    from tfcluster.runs.run_file import read_run
    from tfcluster.safe_files import RUN_FILE
    dfd = safe_files.open_run_dir(run_dir, own=True)
    try:
        folder = os.fstat(dfd)
        try:
            st = os.stat(RUN_FILE, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            safe_files.check_own(os.path.join(run_dir, RUN_FILE), st,
                            f"a record another user wrote is not acted on; {nothing}")
    finally:
        os.close(dfd)
    return read_run(run_dir), folder


def stop_run(run_dir: str, timeout: float = 60.0) -> int:
    """SIGTERM to the run's launcher, wait for it, report the result. Exit code: 0 stopped
    (or already over), 1 still running after ``timeout``. Only the caller's own run, and only
    its launcher (:func:`check_launcher`), is ever signalled."""
    from tfcluster.runs.result import derive_result
    from tfcluster.runs.run_file import read_run
    record, folder = read_own_run(run_dir)
    run_id = printable(record.get("run_id") or os.path.basename(run_dir))
    result = derive_result(record)
    if result == "lost":
        _say(f"run {run_id} is lost: its launcher (pid {record.get('launcher_pid')}) is gone or the "
             f"pid now belongs to another process; nothing signalled")
        return 1
    if result != "running":
        _say(f"run {run_id} is not running (result: {printable(result)}); nothing to stop")
        return 0
    fd = open_launcher(record, folder)
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
    _say(f"run {run_id} ended: {printable(derive_result(record))}"
         + (f" (exit code {record.get('exit_code')})" if record.get("exit_code") is not None else ""))
    return 0


# ------------------------------------------------------------------ detach
#: launch's short flags that take no value: a bundle of them (``-qd``) is read flag by flag
BUNDLED = frozenset("qdh")


def strip_detach(argv: Sequence[str], drop: Optional[Dict[str, int]] = None) -> List[str]:
    """The launch command line without ``--detach``/``-d`` (before any ``--``; in a bundle of
    short flags too: ``-qd`` becomes ``-q``), and without the flags in ``drop`` (flag -> how
    many values follow it; ``--flag=value`` too)."""
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
        if len(a) > 2 and a[0] == "-" and a[1] != "-" and set(a[1:]) <= BUNDLED:
            a = a.replace("d", "")
            if a == "-":
                continue
        name = a.split("=", 1)[0]
        if name in drop:
            skip = drop[name] if "=" not in a else 0
            continue
        out.append(a)
    return out


SAVED = "cluster.yaml"    # launch --detach --save: the file written, copied into the run folder


def prepared_run_dir(run_dir: str) -> bool:
    """Whether ``run_dir`` is a folder ``launch --detach`` prepared for its launcher (it holds
    only the detach mark, the console log and a saved cluster file, no run.json yet; it is the
    caller's)."""
    try:
        if os.lstat(run_dir).st_uid != os.geteuid():
            return False
        names = set(os.listdir(run_dir))
    except OSError:
        return False
    return DETACH_MARK in names and names <= {DETACH_MARK, CONSOLE, SAVED}


QUICK_FLAGS = {"--ps": 1, "--workers": 1, "--chief": 0, "--evaluator": 0, "--save": 1}


def detach(argv: Sequence[str], program: Sequence[str], run_dir: str, run_id: str,
           wait: float = 30.0, saved_text: Optional[str] = None, explicit: bool = True) -> int:
    """Start ``tfcluster launch`` (``argv``, without --detach) in its own session with its
    output in ``<run_dir>/console.log``; return once its run.json exists (0) or it has ended
    (its exit code, with its output).

    The run folder is made as a launcher makes it (:func:`tfcluster.safe_files.make_run_folder`:
    the logdir checked first, nothing made when it is refused, no link followed), and its files
    with ``O_EXCL``, 0600. The launcher is started isolated (``python -I``: a ``tfcluster.py``
    planted in the current folder is not imported). ``saved_text``: the cluster file that
    ``--ps/--workers --save`` wrote, copied into the run folder, which the launcher runs: the
    saved file, in a folder others may write to, is not read again."""
    from tfcluster import safe_files
    logdir = os.path.dirname(run_dir) or "."
    folder = safe_files.make_run_folder(logdir, os.path.basename(run_dir), explicit=explicit)
    try:
        run_dir = folder.path
        run_id = os.path.basename(run_dir)
        with folder.create(DETACH_MARK) as f:
            json.dump({"by_pid": os.getpid(), "at": time.time()}, f)
        if saved_text is not None:
            with folder.create(SAVED) as f:
                f.write(saved_text)
            args = strip_detach(argv, QUICK_FLAGS) + [os.path.join(run_dir, SAVED)]
        else:
            args = strip_detach(argv)
        cmd = [sys.executable, "-I", "-m", "tfcluster"] + args + [
            "--run-id", run_id, "--logdir", logdir, "--no-live"]
        if program:
            cmd += ["--"] + list(program)
        console = folder.create_binary(CONSOLE)
    finally:
        folder.close()
    console_path = os.path.join(run_dir, CONSOLE)
    with console:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=console,
                                start_new_session=True, close_fds=True)
    deadline = time.time() + wait
    run_json = os.path.join(run_dir, "run.json")
    while time.time() < deadline:
        if os.path.isfile(run_json):
            break
        if proc.poll() is not None:
            from tfcluster.runs.logs import log_lines
            for line in log_lines(console_path):    # printable text only, a window at a time
                sys.stderr.write(line)
            return proc.returncode
        time.sleep(0.1)
    else:
        _say(f"the detached launcher (pid {proc.pid}) has not written {printable(run_json)} after "
             f"{wait:g}s; it goes on: see {printable(console_path)}")
    here = os.path.abspath(".")
    where = printable(run_id)
    shown = os.path.relpath(run_dir, here) if os.path.abspath(run_dir).startswith(here) else run_dir
    print(f"run {where} started in the background (launcher pid {proc.pid}); "
          f"its folder: {printable(shown)}")
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
    return printable(f"summaries and checkpoints: {d} (tfcluster tensorboard "
                     f"{record.get('run_id', '')})".rstrip())


def tensorboard_argv(logdir: str, port: Optional[int] = None, host: Optional[str] = None) -> List[str]:
    """The TensorBoard command line: the ``tensorboard`` program when on PATH, else
    ``python -m tensorboard.main`` when the package is importable, else the plain command."""
    exe = shutil.which("tensorboard")
    if exe:
        cmd = [exe]
    else:
        import importlib.util
        # -I: the current folder (a planted ./tensorboard/) is not on the module path
        cmd = [sys.executable, "-I", "-m", "tensorboard.main"] \
            if importlib.util.find_spec("tensorboard") else ["tensorboard"]
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
    profiles instead (``<run_dir>/profile``, written by ``tfcluster profile``). Only the
    caller's own runs are served (a record another user wrote could name any folder), and the
    start says who else can reach TensorBoard's port (every local user: it has no login)."""
    record, _ = read_own_run(run_dir, nothing="TensorBoard not started")
    run_id = printable(record.get("run_id") or os.path.basename(run_dir))
    if profile:
        logdir: Optional[str] = os.path.join(run_dir, "profile")
        if not os.path.isdir(logdir):
            raise UserError(f"run {run_id}: no profile yet; take one with tfcluster profile {run_id}")
    else:
        logdir = summaries_dir(record)
    if logdir is None:
        logdir = run_dir
        _say(f"no summaries folder found in the chief's flags ({', '.join(SUMMARY_FLAGS)}); "
             f"using the run folder {printable(run_dir)}")
    cmd = tensorboard_argv(logdir, port, host)
    line = printable(" ".join(shlex.quote(w) for w in cmd))   # a record's path: printable only
    if print_only or not tensorboard_installed():
        if not print_only:
            _say("TensorBoard is not installed (pip install tensorboard); the command is:")
        print(line)
        return 0 if print_only else 1
    _say(f"TensorBoard on {printable(logdir)}: {line}")
    where = host or "localhost"
    _say(f"note: TensorBoard has no login: every user of this machine can open "
         f"http://{where}:{port or 6006}/ while it runs" + ("" if host in (None, "localhost", "127.0.0.1", "::1")
                                                           else ", and so can other hosts"))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)
    return 0  # not reached
