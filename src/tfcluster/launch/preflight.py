"""Checks before anything starts, on the plan: problems end the launch with exit 2 and start
nothing; warnings are printed and the run goes on."""
from __future__ import annotations

import os
from typing import List

from .. import contract
from ..backends.base import Backend
from ..errors import UserError
from ..gpus import gpu_warnings
from ..hosts import is_local
from ..keras_support import legacy_keras_problem, python_interpreter
from ..plan import RunPlan


def preflight(plan: RunPlan, backend: Backend) -> List[str]:
    """Raise UserError naming the task for what would fail every task at once (a missing
    program, script or folder; legacy Keras asked for without tf_keras); return warnings (GPU indexes this machine does not have)."""
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
    if problems:
        raise UserError("\n".join(problems) + "\nnothing was started")
    return gpu_warnings([(t.name, t.gpus if t.gpus is not None else os.environ.get("CUDA_VISIBLE_DEVICES"))
                         for t in plan.selected_tasks if is_local(t.host) or backend.name == "local"])


def _program_problems(t, backend: Backend) -> List[str]:
    where = f"{t.name}"
    if not os.path.isdir(t.cwd):
        return [f"{where}: working folder does not exist: {t.cwd} (program.cwd or jobs.{t.job}.cwd)"]
    argv = list(t.argv)
    if not argv:
        return []
    if argv[0] == contract.PYTHON:
        script = next((w for w in argv[1:] if not w.startswith("-")), None)
        if argv[1:2] in (["-m"], ["-c"]) or script is None:
            return []
        if script.endswith(".py") and not os.path.exists(os.path.join(t.cwd, script)):
            return [f"{where}: program script not found: {os.path.join(t.cwd, script)} "
                    f"(program.command, or the command after '--')"]
        return []
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
    return []


