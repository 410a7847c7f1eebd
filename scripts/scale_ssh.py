"""The launcher at scale over ssh (``scripts/benchmark.py --only scale``): ``tfcluster launch``
with the ssh backend supervising ``scale_ssh_tasks`` trivial tasks on each of 3 hosts. The hosts
are network namespaces joined by a bridge, each with its own address and its own sshd (Debian's
openssh-server, a key made for the run), made by tests/helpers/netns.py as for tests/integration/test_ssh.py; only the network is
separate, so the task's mark files (scale_local) and pids are visible here. Needs root, ``ip``,
``ssh``, ``ssh-keygen`` and ``/usr/sbin/sshd``; otherwise skipped with one line. The namespaces,
the veth and every sshd are removed at the end, on error and on Ctrl-C.

Figures (no baseline script: the issue asks only for the figures): start to all running, a
``hold`` run's wall time, SIGTERM to the launcher to every task gone, and the launcher's CPU,
peak RSS, threads and open files (per task: the gross figure / tasks).
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict, List

import scale_local

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
from helpers.netns import NamespaceHosts, unavailable  # noqa: E402  (the tests' ssh hosts)


def bench_scale_ssh(cfg: Dict[str, Any], tmp: str, popen, done, tfcluster_argv: List[str],
                    log: Callable[[str], None]) -> Dict[str, Any]:
    why = unavailable()
    if why:
        return {"skipped": why}
    per_host = cfg["scale_ssh_tasks"]
    hold = cfg["scale_hold"]
    base = os.path.join(tmp, "ssh")
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    res: Dict[str, Any] = {"hosts": 3, "tasks_per_host": per_host, "tasks": 3 * per_host,
                           "hold_seconds": hold}
    runs: Dict[str, List[Dict[str, Any]]] = {"run": [], "stop": []}
    with NamespaceHosts(base, 3, prefix="tfs", subnet="10.234", sessions=256) as hosts:
        res["namespaces"] = list(hosts.made_ns)
        n = 3 * per_host
        for i in range(cfg["scale_reps"]):
            for stop in (False, True):
                tag = f"ssh-{'stop' if stop else 'run'}-{i}"
                mark = os.path.join(tmp, "marks", tag)
                os.makedirs(mark, exist_ok=True)
                os.chmod(mark, 0o777)
                cluster = {"worker": [f"{a}:{2222 + k}" for a in hosts.addrs for k in range(per_host)]}
                path = os.path.join(tmp, f"scale-{tag}.yaml")
                with open(path, "w") as f:
                    json.dump({"cluster": cluster,
                               "program": {"command": scale_local.task_command(mark, 0 if stop else hold)},
                               "watchdog": {"startup_timeout": 0}, "success": "all-workers",
                               "remote": hosts.remote(), "logdir": os.path.join(tmp, "runs")}, f)
                r = scale_local.one_run(popen, done, tfcluster_argv + ["launch", path, "--no-live",
                                                                       "--backend=ssh", "--grace=0"],
                                        n, mark, stop, 180.0, cfg["scale_sample"])
                if r.get("error"):
                    log(f"  scale {tag}: {r['error']}")
                runs["stop" if stop else "run"].append(r)
    left = hosts.left()
    med = scale_local._med
    r_ = scale_local._r
    ok = {k: [x for x in v if not x.get("error")] for k, v in runs.items()}
    allok = ok["run"] + ok["stop"]
    n = 3 * per_host

    def m(key, which=None):
        xs = allok if which is None else ok[which]
        return med([x.get(key) for x in xs])

    cpu = m("cpu_seconds", "run")
    hwm = m("hwm_kb")
    res.update({
        "start_seconds": r_(m("start_seconds"), 3),
        "wall_seconds": r_(m("wall_seconds", "run"), 3),
        "stop_seconds": r_(m("stop_seconds", "stop"), 3),
        "launcher_cpu_seconds": r_(cpu, 3),
        "cpu_ms_per_task": r_(None if cpu is None else 1000 * cpu / n, 3),
        "launcher_peak_rss_kb": hwm,
        "rss_kb_per_task_gross": r_(None if hwm is None else hwm / n, 1),
        "threads": m("threads"), "open_files": m("fds"),
        "tree_cpu_seconds": r_(m("tree_cpu_seconds", "run"), 3),
        "failed_runs": sum(1 for v in runs.values() for x in v if x.get("error")),
        "errors": sorted({x["error"][:200] for v in runs.values() for x in v if x.get("error")})[:3],
        "namespaces_left": left,
    })
    return res
