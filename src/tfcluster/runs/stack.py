"""``tfcluster stack RUN [TASK...]``: where a live run's tasks are, as Python stacks.

The stall warnings name a task that stopped making progress while the others went on
(:mod:`tfcluster.core.machine`); this shows the function it hangs in, for any Python program, with
py-spy (``pip install 'tfcluster[debug]'``; ``--native`` adds the C/C++ frames, where py-spy can
unwind them on this platform). Like ``tfcluster stop`` it acts only on the caller's own run and
processes: the run folder is the caller's (:mod:`tfcluster.safe_files`), its launcher is alive and
is the one that wrote the record (pid and start time), and a task's pid is a child of that
launcher, owned by the caller, still the process the record names. A task on another host (ssh,
Slurm) is named with where to run the command instead.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from tfcluster.errors import UserError
from tfcluster.net.addresses import is_local
from tfcluster.plan.backend_kind import recorded_kind
from tfcluster.plan.contract import proc_stat

DUMP_TIMEOUT = 30.0      # seconds for one py-spy dump (a process with many threads)


def py_spy() -> Optional[str]:
    """The py-spy program: next to this Python (a virtualenv's bin), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy")


def _owned_child(pid: int, parent: int) -> Optional[str]:
    """Why ``pid`` is not a process of the caller's that ``parent`` started, or None."""
    try:
        st = os.stat(f"/proc/{pid}")
        fields = proc_stat(pid)
    except (OSError, IndexError):
        return "it is no longer running"
    if st.st_uid != os.geteuid():
        return f"pid {pid} is owned by another user (uid {st.st_uid})"
    if fields[0] == b"Z":
        return "it has exited"
    try:
        ppid = int(fields[1])
    except (ValueError, IndexError):
        return "its /proc entry cannot be read"
    if ppid != parent:
        return f"pid {pid} is no longer a task of the run's launcher (its parent is {ppid})"
    return None


def targets(record: Dict, names: Sequence[str]) -> List[Tuple[str, Optional[int], str]]:
    """(task, pid, why not) for each task asked (default: every task with a pid); ``why not``
    is empty for a task whose stack can be read. UserError for a name the run does not have."""
    tasks = [t for t in record.get("tasks") or () if isinstance(t, dict) and isinstance(t.get("task"), str)]
    by_name = {t["task"]: t for t in tasks}
    if names:
        jobs = {n.split(":", 1)[0] for n in by_name}
        unknown = [n for n in names if n not in by_name and n not in jobs]
        if unknown:
            raise UserError(f"stack: {', '.join(unknown)}: no such task in run "
                            f"{record.get('run_id')} (tasks: {', '.join(by_name)})")
        chosen = [t for t in tasks if t["task"] in names or t["task"].split(":", 1)[0] in names]
    else:
        chosen = [t for t in tasks if t.get("state") in ("running", "stopping")]
    launcher = record.get("launcher_pid")
    out = []
    for t in chosen:
        pid = t.get("pid")
        host = t.get("host")
        if recorded_kind(record.get("backend")).takes_slurm_options or (host and not is_local(host)):
            where = host or "its node"
            out.append((t["task"], pid, f"it runs on {where}: run tfcluster stack there, or "
                                        f"py-spy dump --pid {pid} on that machine"))
            continue
        if t.get("state") not in ("running", "stopping") or not isinstance(pid, int) \
                or isinstance(pid, bool) or pid <= 0:
            out.append((t["task"], None, f"it is not running ({t.get('state')})"))
            continue
        why = _owned_child(pid, launcher)
        out.append((t["task"], pid, why or ""))
    return out


def dump_argv(tool: str, pid: int, native: bool = False) -> List[str]:
    """py-spy's command for one task's stacks: its process and the Python programs it started
    (a shell wrapper, a ``python -m`` runner)."""
    argv = [tool, "dump", "--pid", str(pid), "--subprocesses"]
    if native:
        argv.append("--native")
    return argv


def show_stacks(run_dir: str, names: Sequence[str] = (), native: bool = False) -> int:
    """Print the stacks of the run's tasks. Exit code: 0 every stack shown, 1 some could not be
    read; UserError (2) for a run that is not live or not the caller's, or no py-spy."""
    from tfcluster.runs.control import open_launcher, read_own_run
    from tfcluster.runs.find import running_record
    from tfcluster.terminal import printable
    _, folder = read_own_run(run_dir, nothing="no stack read")
    record, run_id = running_record(run_dir, "stack", "stacks are read from live tasks only")
    # the launcher is checked as stop checks it (the caller's, started when the record says,
    # holding this run folder open): a record naming any other process (pid 1) reads no stack
    os.close(open_launcher(record, folder, command="stack", nothing="no stack read"))
    tool = py_spy()
    if tool is None:
        raise UserError("stack: py-spy is not installed: pip install py-spy (or "
                        "pip install 'tfcluster[debug]')")
    failed = 0
    for task, pid, why in targets(record, names):
        head = f"=== {task}" + (f" (pid {pid})" if pid else "")
        if why:
            print(printable(f"{head}: {why}"), flush=True)
            failed += 1
            continue
        print(printable(head), flush=True)
        try:
            got = subprocess.run(dump_argv(tool, pid, native), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=DUMP_TIMEOUT,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"  py-spy did not answer within {DUMP_TIMEOUT:g}s", flush=True)
            failed += 1
            continue
        text = got.stdout.decode("utf-8", "replace")
        for line in text.rstrip("\n").splitlines():
            print(printable(line), flush=True)
        if got.returncode != 0:
            failed += 1
            if "Permission" in text or "ptrace" in text.lower():
                print("  hint: py-spy needs to trace the process: with kernel.yama.ptrace_scope "
                      "1 only its parent may; run as root (sudo -E tfcluster stack ...) or "
                      "sysctl kernel.yama.ptrace_scope=0", flush=True)
            elif native and "native" in text.lower():
                print("  hint: --native is not supported here; try without it", flush=True)
    return 1 if failed else 0
