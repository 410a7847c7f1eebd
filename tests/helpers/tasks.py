"""Tasks started by hand, one process (and process group) each, with TF_CONFIG or the seed's
flags: the helpers of tests/system/test_runtime_cluster.py and tests/system/test_trainer.py.
Every process group is killed in a ``finally``."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from helpers import ROOT
from tfcluster.net.ports import free_ports

TRAINER = os.path.join(ROOT, "trainer.py")


@dataclass
class Result:
    task: str
    rc: Optional[int]  # None: still running at the deadline (killed)
    output: str
    secs: float


def _env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    src = os.path.join(ROOT, "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def run_tasks(tasks: Sequence[Tuple[str, List[str], Dict[str, str]]], tmp_path,
              timeout: float = 90.0) -> Dict[str, Result]:
    """Start every (task, argv, env) at once and wait for all of them to end by themselves
    (until ``timeout``); kill every process group in any case."""
    procs = []
    start = time.monotonic()
    try:
        for task, argv, env in tasks:
            log = open(tmp_path / f"{task.replace(':', '')}.log", "w+")
            p = subprocess.Popen(argv, cwd=ROOT, env=_env(env), stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            procs.append((task, p, log))
        ended: Dict[str, float] = {}
        while len(ended) < len(procs) and time.monotonic() - start < timeout:
            for task, p, _ in procs:
                if task not in ended and p.poll() is not None:
                    ended[task] = time.monotonic() - start
            time.sleep(0.1)
        results = {}
        for task, p, log in procs:
            alive = p.poll() is None
            _kill_group(p)
            log.seek(0)
            results[task] = Result(task, None if alive else p.returncode, log.read(),
                                   ended.get(task, time.monotonic() - start))
            log.close()
        return results
    finally:
        for _, p, log in procs:
            _kill_group(p)
            log.close()


def tf_config_tasks(script: str, cluster: Dict[str, List[str]], args: List[str]):
    tasks = []
    for job, hosts in cluster.items():
        for i in range(len(hosts)):
            cfg = json.dumps({"cluster": cluster, "task": {"type": job, "index": i}})
            tasks.append((f"{job}:{i}", [sys.executable, script, *args], {"TF_CONFIG": cfg}))
    return tasks


def seed_flag_tasks(script: str, ps: List[str], workers: List[str], args: List[str]):
    base = [f"--ps_hosts={','.join(ps)}", f"--worker_hosts={','.join(workers)}"]
    return [(f"{job}:{i}", [sys.executable, script, *base, f"--job_name={job}", f"--task_index={i}",
                            *args], {})
            for job, hosts in (("ps", ps), ("worker", workers)) for i in range(len(hosts))]


def assert_all_ended_ok(results: Dict[str, Result]) -> None:
    for r in results.values():
        assert r.rc == 0, f"{r.task} rc={r.rc} after {r.secs:.1f}s\n{r.output[-3000:]}"


SUMMARY = re.compile(r"global_step=(\d+) accuracy=([0-9.]+) loss=([0-9.]+)")


def summary(result: Result) -> Tuple[int, float, float]:
    found = SUMMARY.findall(result.output)
    assert len(found) == 1, f"{result.task}: expected one summary line\n{result.output[-3000:]}"
    step, acc, loss = found[0]
    return int(step), float(acc), float(loss)


def local_cluster(num_ps: int, num_workers: int):
    ports = free_ports(num_ps + num_workers)
    return {"ps": [f"localhost:{p}" for p in ports[:num_ps]],
            "worker": [f"localhost:{p}" for p in ports[num_ps:]]}
