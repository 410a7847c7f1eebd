"""A validated cluster file's values -> the :class:`~tfcluster.clusterfile.cluster.Cluster`:
each job's tasks with their endpoints (none yet for a job given as a count), command, arguments,
environment, working folder, GPUs and restart settings, ``program:`` and ``jobs.<job>:`` merged;
relative paths are taken from the file's folder. Also ``data_service:`` written out as the two
jobs that run it, before the file is validated."""
from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Optional, Tuple, Union

from tfcluster.clusterfile import quick, vocabulary
from tfcluster.clusterfile.cluster import Cluster, Endpoint, Task, duplicate_endpoints, parse_endpoint


def resolve(spec: Any, raw_cluster: Dict[str, Any], source: str,
            base_dir: str) -> Tuple[Cluster, List[str]]:
    """The Cluster of a validated file's values (``spec``: the models' or the quick reader's)
    and its ``cluster:`` as written, with the problems only the resolved tasks show (the same
    port twice on one host)."""
    problems: List[str] = []
    jobs: Dict[str, List[Task]] = {}
    count_jobs = []
    for job, entries in raw_cluster.items():
        if isinstance(entries, int):
            count_jobs.append(job)
            endpoints: List[Optional[Endpoint]] = [None] * entries
        else:
            endpoints = [Endpoint(*parse_endpoint(e)) for e in entries]
        override = spec.jobs.get(job) or _no_override()
        gpus = override.gpus
        command = override.command if override.command is not None else spec.program.command
        args = override.args if override.args is not None else spec.program.args
        env = {**spec.program.env, **override.env}
        cwd = override.cwd or spec.program.cwd
        cwd = os.path.normpath(os.path.join(base_dir, cwd)) if cwd else base_dir
        tasks = []
        for i, ep in enumerate(endpoints):
            if gpus is not None:
                task_gpus: Optional[str] = _gpu_str(gpus[i]) if i < len(gpus) else ""
            else:
                task_gpus = "" if job in vocabulary.SERVICE_JOBS else None
            tasks.append(Task(
                job=job, index=i, endpoint=ep,
                command=tuple(_resolve_command(command, base_dir)),
                args=tuple(args), env=tuple((k, _env_str(v)) for k, v in env.items()),
                task_flags=override.task_flags if override.task_flags is not None
                else spec.program.task_flags,
                cwd=cwd, gpus=task_gpus, restart=override.restart or spec.restart))
        jobs[job] = tasks
    logdir = os.path.normpath(os.path.join(base_dir, os.path.expanduser(spec.logdir)))
    cluster = Cluster(source=source, base_dir=base_dir, jobs=jobs, success=spec.success,
                      restart=spec.restart, logdir=logdir, grace=spec.grace,
                      base_port=spec.base_port, spec=spec, count_jobs=tuple(count_jobs))
    problems.extend(duplicate_endpoints(cluster))
    return cluster, problems


DATA_SERVICE_PROGRAM = ["python", "-I", "-m", "tfcluster.runtime.data_service"]


def with_data_service(data: Dict[str, Any], problems: List[str]) -> Dict[str, Any]:
    """The file with its ``data_service:`` as two jobs, ``tfdata_dispatcher`` (1 task) and
    ``tfdata_worker``, running tfcluster's built-in program, restarted on failure unless
    ``jobs.<job>`` says otherwise. Their shape is checked by the model afterwards."""
    ds, cluster = data.get("data_service"), data.get("cluster")
    if not isinstance(ds, dict) or not isinstance(cluster, dict):
        return data
    taken = [j for j in vocabulary.DATA_SERVICE_JOBS if j in cluster]
    if taken:
        problems.append(f"cluster.{taken[0]}: this job name belongs to data_service:; rename the job")
        return data
    dispatcher, workers = ds.get("dispatcher", 1), ds.get("workers", 1)
    cluster = {**cluster, vocabulary.DATA_DISPATCHER: [dispatcher] if isinstance(dispatcher, str) else dispatcher,
               vocabulary.DATA_WORKER: workers}
    jobs = dict(data.get("jobs") or {}) if isinstance(data.get("jobs") or {}, dict) else data.get("jobs")
    if isinstance(jobs, dict):
        for job, role in ((vocabulary.DATA_DISPATCHER, "dispatcher"), (vocabulary.DATA_WORKER, "worker")):
            spec = jobs.get(job) or {}
            if not isinstance(spec, dict):
                continue
            argv = DATA_SERVICE_PROGRAM + [role]
            if role == "dispatcher" and isinstance(ds.get("work_dir"), str):
                argv += ["--work_dir", ds["work_dir"]]
            restart = spec.get("restart")
            jobs[job] = {"command": argv, "args": [], "task_flags": False, **spec,
                         "restart": {"policy": "on-failure", **restart} if isinstance(restart, dict)
                         else restart if "restart" in spec else {"policy": "on-failure"}}
    return {**data, "cluster": cluster, "jobs": jobs}


def _resolve_command(command: Union[str, List[str], None], base_dir: str) -> List[str]:
    """Words of the command; relative paths that exist beside the file become absolute."""
    if command is None:
        return []
    words = shlex.split(command) if isinstance(command, str) else list(command)
    out = []
    for w in words:
        if w and not w.startswith("-") and not os.path.isabs(w) and ("/" in w or "." in w):
            candidate = os.path.join(base_dir, w)
            if os.path.exists(candidate):
                w = os.path.normpath(candidate)
        out.append(w)
    return out


def _no_override() -> Any:
    """A job without a ``jobs.<job>:`` entry: every key at the model's default."""
    return quick.Section("JobSpec", quick.defaults("JobSpec"))


def _gpu_str(entry: Union[int, str]) -> str:
    return str(entry).strip()


def _env_str(value: Union[str, int, float, bool]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
