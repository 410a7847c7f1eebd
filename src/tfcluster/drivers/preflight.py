"""Checks before anything starts, on the plan: problems end the launch with exit 2 and start
nothing; warnings are printed and the run goes on."""
from __future__ import annotations

import os
from typing import List, Optional

from tfcluster.backends.base import Backend
from tfcluster.core.keras_hints import legacy_keras_problem, python_interpreter
from tfcluster.errors import UserError
from tfcluster.net.addresses import is_local
from tfcluster.plan import contract
from tfcluster.plan.gpus import gpu_warnings
from tfcluster.plan.runplan import RunPlan
from tfcluster.terminal import printable


def preflight(plan: RunPlan, backend: Backend) -> List[str]:
    """Raise UserError naming the task for what would fail every task at once (a missing
    program, script or folder; a script given to any Python interpreter, by path or versioned
    name; legacy Keras asked for without tf_keras) or the launch itself (a live run of the same
    file on this machine: :func:`live_run_problem`); return warnings (GPU indexes this machine
    does not have; records of other users that name this file as live, ignored)."""
    foreign: List[str] = []
    live = live_run_problem(plan, foreign)
    if live:
        raise UserError(live)
    problems = program_problems(plan, backend)
    if problems:
        raise UserError("\n".join(problems) + "\nnothing was started")
    return foreign + gpu_warnings([(t.name, t.gpus if t.gpus is not None else os.environ.get("CUDA_VISIBLE_DEVICES"))
                         for t in plan.selected_tasks if is_local(t.host) or backend.name == "local"])


def port_problems(plan: RunPlan) -> List[str]:
    """The ports of this machine's tasks (and their profiler servers) that are taken: one line
    each, naming the field, the task and who holds the port. None in a private network, where
    every port is the run's own; a socket in TIME-WAIT does not count (TensorFlow binds with
    SO_REUSEADDR)."""
    from tfcluster.net.ports import describe_port_holder, port_in_use
    if plan.network == "private" or plan.kind.places_tasks:
        return []
    out = []
    for t in plan.selected_tasks:
        if not t.host or not is_local(t.host):
            continue
        if t.port and port_in_use(t.port):
            out.append(f"{t.where}: port {t.port} ({t.name}) is already in use"
                       f"{describe_port_holder(t.port)}")
        if t.profiler_port and port_in_use(t.profiler_port):
            out.append(f"{t.name}'s profiler port {t.profiler_port} is already in use"
                       f"{describe_port_holder(t.profiler_port)} (launch again: it is chosen anew)")
    return out


def program_problems(plan: RunPlan, backend: Backend) -> List[str]:
    """What would fail every task at once, one line per problem naming the task (a missing
    program, script or folder; legacy Keras without tf_keras): launch's check, and validate's."""
    problems: List[str] = []
    seen = set()
    for t in plan.selected_tasks:
        if not is_local(t.host) and backend.name != "local":
            continue     # remote files are the remote host's business
        key = (t.argv, t.cwd)
        if key in seen:
            continue
        seen.add(key)
        problems.extend(_program_problems(t, backend))
        python = python_interpreter(contract.resolve_argv(t.argv, backend.python(t.host)))
        if python is not None:
            keras = legacy_keras_problem({**os.environ, **dict(t.env)}, python)
            if keras:
                problems.append(f"{t.name}: {keras}")
    return problems


def _program_problems(t, backend: Backend) -> List[str]:
    where = f"{t.name}"
    if not os.path.isdir(t.cwd):
        return [f"{where}: working folder does not exist: {t.cwd} (program.cwd or jobs.{t.job}.cwd)"]
    argv = list(t.argv)
    if not argv:
        return []
    if argv[0] == contract.PYTHON:
        return _script_problems(where, argv, t.cwd)
    exe = argv[0]
    if os.sep in exe:
        path = os.path.join(t.cwd, exe)
        if not os.path.exists(path):
            return [f"{where}: program not found: {path} (program.command)"]
        if not os.access(path, os.X_OK):
            return [f"{where}: program cannot be run (permission denied): {path}"]
    else:
        import shutil
        env_path = dict(t.env).get("PATH") or os.environ.get("PATH", "")
        if shutil.which(exe, path=env_path) is None:
            return [f"{where}: program not found: {exe} (not on PATH; program.command)"]
    if python_interpreter(argv):          # /venv/bin/python, python3.11, ...
        return _script_problems(where, argv, t.cwd)
    return []


def _script_problems(where: str, argv: List[str], cwd: str) -> List[str]:
    """A Python interpreter's argv: its script (the first word that is not an option) must
    exist; ``-m`` and ``-c`` run no file."""
    script = next((w for w in argv[1:] if not w.startswith("-")), None)
    if argv[1:2] in (["-m"], ["-c"]) or script is None:
        return []
    if script.endswith(".py") and not os.path.exists(os.path.join(cwd, script)):
        return [f"{where}: program script not found: {os.path.join(cwd, script)} "
                f"(program.command, or the command after '--')"]
    return []


def live_run_problem(plan: RunPlan, foreign: Optional[List[str]] = None) -> Optional[str]:
    """A run of the same cluster file whose launcher is alive on this machine and which runs
    any of the tasks this launch would start: one line naming its launcher's pid and run
    folder (found through the run records: :func:`tfcluster.runs.liveness.launcher_alive`).
    Only the caller's own records decide: a record another user wrote (a shared sticky logdir)
    can name any file and any live pid, and never blocks a launch; such a record that says it
    is live is named in ``foreign`` (one line each) and ignored."""
    if not plan.source or not plan.logdir or not os.path.isdir(plan.logdir):
        return None
    from tfcluster.runs.find import owned_by_caller, scan_runs
    from tfcluster.runs.liveness import launcher_alive
    try:
        runs, _ = scan_runs(plan.logdir, plan.source)
    except UserError:
        return None
    mine = {t.name for t in plan.selected_tasks}
    for run_dir, record in runs:
        if record.get("result") != "running" or record.get("launcher_pid") == os.getpid():
            continue
        if not owned_by_caller(run_dir):
            if foreign is not None:
                foreign.append(printable(f"{run_dir}: a run record of another user names this file "
                                         f"as running; it is not yours and is ignored"))
            continue
        tasks = record.get("tasks") if isinstance(record.get("tasks"), list) else []
        theirs = {t.get("task") for t in tasks if isinstance(t, dict) and t.get("state") != "skipped"}
        if tasks and not (theirs & mine):
            continue              # per-host launchers of one file, each with its own tasks
        if launcher_alive(record) is not True:
            continue
        return (f"{plan.source}: a run of this file is live: launcher pid {record['launcher_pid']}, "
                f"run folder {run_dir}; nothing was started (stop it, or wait for it: "
                f"tfcluster status {run_dir})")
    return None
