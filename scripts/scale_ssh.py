"""The launcher at scale over ssh (``scripts/benchmark.py --only scale``): ``tfcluster launch``
with the ssh backend starting N trivial tasks spread over 3 hosts (one node agent per host, over
one ssh session each), against the same N tasks started by ``tfcluster launch`` on this machine
and against a shell loop of plain ``ssh host cmd &`` (what a user would write by hand), side by
side in one run. The hosts are network namespaces joined by a bridge, each with its own address
and its own sshd (Debian's openssh-server, a key made for the run), made by
tests/helpers/netns.py as for tests/integration/test_ssh.py; only the network is separate, so
the tasks' mark files (scale_local) and pids are visible here. Needs root, ``ip``, ``ssh``,
``ssh-keygen`` and ``/usr/sbin/sshd``; otherwise skipped with one line. The namespaces, the veth
and every sshd are removed at the end, on error and on Ctrl-C.

Figures, per N of ``scale_ssh_totals``: start to all running for each of the three
(``start_seconds``, ``local_start_seconds``, ``shell_loop_start_seconds``) and the ratio the
issue asks for, ``start_over_local``; a ``hold`` run's wall time, SIGTERM to the launcher to every
task gone, and the launcher's CPU, peak RSS, threads and open files; what is left on the hosts
(and what the shell loop left, ``shell_loop_left_behind``). Once per run: ``ssh_floor_seconds``,
3 fresh ssh connections at once each running ``true`` -- what any ssh launcher pays before its
first task -- and ``ssh_one_host_seconds``, one alone.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict, List

import scale_local

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
from helpers.netns import NamespaceHosts, unavailable  # the tests' ssh hosts


def _shell_loop(hosts, per_host: int, mark: str, hold: float, tmp: str, tag: str) -> str:
    """A bash script that starts every task with its own ``ssh host 'cmd' &`` and waits: the
    baseline a user would write (the same ssh options, key and command as the launcher's)."""
    import shlex

    from tfcluster.backends.ssh import ssh_argv
    from tfcluster.clusterfile.models import RemoteSpec
    spec = RemoteSpec(**{k: v for k, v in hosts.remote().items() if k != "python"})
    cmd = scale_local.task_command(mark, hold)
    lines = ["#!/bin/bash", "PIDS=()"]
    for a in hosts.addrs:
        base = " ".join(shlex.quote(w) for w in ssh_argv(spec, a))
        for k in range(per_host):
            task = f"worker:{hosts.addrs.index(a) * per_host + k}"
            remote = f"TFCLUSTER_TASK={task} " + " ".join(shlex.quote(w) for w in cmd)
            lines.append(f"{base} {shlex.quote(remote)} </dev/null >/dev/null 2>&1 & PIDS+=($!)")
    lines.append('trap \'kill -TERM "${PIDS[@]}" 2>/dev/null; wait\' TERM')
    lines.append('wait')
    path = os.path.join(tmp, f"shell-{tag}.sh")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def bench_scale_ssh(cfg: Dict[str, Any], tmp: str, popen, done, tfcluster_argv: List[str],
                    log: Callable[[str], None]) -> Dict[str, Any]:
    why = unavailable()
    if why:
        return {"skipped": why}
    totals = list(cfg["scale_ssh_totals"])
    hold = cfg["scale_hold"]
    base = os.path.join(tmp, "ssh")
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    med, r_ = scale_local._med, scale_local._r
    res: Dict[str, Any] = {"hosts": 3, "hold_seconds": hold}
    counter = [0]

    def one(kind: str, hosts, n: int, stop: bool) -> Dict[str, Any]:
        counter[0] += 1
        per_host = n // 3
        tag = f"ssh-{kind}-{n}-{'stop' if stop else 'run'}-{counter[0]}"
        mark = os.path.join(tmp, "marks", tag)
        os.makedirs(mark, exist_ok=True)
        os.chmod(mark, 0o777)
        h = 0 if stop else hold
        if kind == "local":
            argv = tfcluster_argv + ["launch", scale_local.cluster_file(tmp, n, mark, h, tag), "--no-live",
                                     "--grace=0", "--network=host"]
        elif kind == "shell":
            argv = ["bash", _shell_loop(hosts, per_host, mark, h, tmp, tag)]
        else:
            cluster = {"worker": n}
            path = os.path.join(tmp, f"scale-{tag}.yaml")
            with open(path, "w") as f:
                json.dump({"cluster": cluster, "hosts": {a: {"slots": per_host} for a in hosts.addrs},
                           "program": {"command": scale_local.task_command(mark, h)},
                           "watchdog": {"startup_timeout": 0}, "success": "all-workers",
                           "remote": hosts.remote(), "logdir": os.path.join(tmp, "runs")}, f)
            argv = tfcluster_argv + ["launch", path, "--no-live", "--backend=ssh", "--grace=0"]
        r = scale_local.one_run(popen, done, argv, n, mark, stop, 300.0, cfg["scale_sample"])
        if kind == "shell" and "still alive" in (r.get("error") or ""):
            # the hand-written loop's own way: a killed ssh client leaves its remote command to
            # the host (no pty, no hangup); counted, not a failed measurement (killed above)
            r["left_behind"] = r.pop("error")
        if r.get("error"):
            log(f"  scale {tag}: {r['error']}")
        return r

    def floor(hosts) -> Dict[str, Any]:
        """The least any ssh launcher pays before its first task: 3 fresh connections at once,
        each running ``true`` (key exchange, authentication, the remote login shell)."""
        import subprocess
        import time

        from tfcluster.backends.ssh import ssh_argv
        from tfcluster.clusterfile.models import RemoteSpec
        spec = RemoteSpec(**{k: v for k, v in hosts.remote().items() if k != "python"})
        walls, alone = [], []
        for _ in range(3):
            t0 = time.monotonic()
            procs = [popen(ssh_argv(spec, a) + ["true"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for a in hosts.addrs]
            for q in procs:
                q.wait(60)
                done(q)
            walls.append(time.monotonic() - t0)
            t0 = time.monotonic()
            q = popen(ssh_argv(spec, hosts.addrs[0]) + ["true"], stdin=subprocess.DEVNULL,
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            q.wait(60)
            done(q)
            alone.append(time.monotonic() - t0)
        return {"ssh_floor_seconds": r_(med(walls), 3), "ssh_one_host_seconds": r_(med(alone), 3)}

    with NamespaceHosts(base, 3, prefix="tfs", subnet="10.234", sessions=512) as hosts:
        res["namespaces"] = list(hosts.made_ns)
        res.update(floor(hosts))
        for n in totals:
            n -= n % 3
            log(f"  scale ssh: {n} tasks on 3 hosts: tfcluster (one node agent per host) vs the same "
                f"tasks here vs a shell loop of ssh host cmd &")
            runs: Dict[str, List[Dict[str, Any]]] = {"ssh": [], "local": [], "shell": [], "ssh.stop": []}
            for i in range(cfg["scale_reps"]):
                order = ("ssh", "local", "shell") if i % 2 == 0 else ("shell", "local", "ssh")
                for kind in order:
                    runs[kind].append(one(kind, hosts, n, False))
                runs["ssh.stop"].append(one("ssh", hosts, n, True))
            ok = {k: [x for x in v if not x.get("error")] for k, v in runs.items()}

            def m(key, which, ok=ok):
                return med([x.get(key) for x in ok[which]])
            start, local = m("start_seconds", "ssh"), m("start_seconds", "local")
            cpu, hwm = m("cpu_seconds", "ssh"), m("hwm_kb", "ssh")
            res[str(n)] = {
                "tasks": n, "tasks_per_host": n // 3,
                "start_seconds": r_(start, 3), "local_start_seconds": r_(local, 3),
                "shell_loop_start_seconds": r_(m("start_seconds", "shell"), 3),
                "start_over_local": r_(None if start is None or not local else start / local),
                "wall_seconds": r_(m("wall_seconds", "ssh"), 3),
                "stop_seconds": r_(m("stop_seconds", "ssh.stop"), 3),
                "launcher_cpu_seconds": r_(cpu, 3),
                "cpu_ms_per_task": r_(None if cpu is None else 1000 * cpu / n, 3),
                "launcher_peak_rss_kb": hwm, "threads": m("threads", "ssh"), "open_files": m("fds", "ssh"),
                "shell_loop_left_behind": [x["left_behind"] for x in runs["shell"] if x.get("left_behind")],
                "failed_runs": sum(1 for v in runs.values() for x in v if x.get("error")),
                "errors": sorted({x["error"][:200] for v in runs.values() for x in v if x.get("error")})[:3],
                "left_on_hosts": hosts.wait_quiet(15),
            }
    res["namespaces_left"] = hosts.left()
    return res
