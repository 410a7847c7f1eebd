"""Run one task of a ``tfcluster launch`` in its own network namespace, for the link-bound sizing
benchmark (scripts/bench_sizing.py, ``sizing.links``).

``python netns_task.py --hosts=FILE -- PROGRAM ARGS...``: FILE (JSON, written by the benchmark)
names for each job the namespace and address of every task index, ``{"ps": [[ns, addr]],
"worker": [[ns, addr], ...]}``. The launcher runs the cluster on this machine (``network:
host``, every address ``localhost:PORT`` with the ports it chose); this wrapper reads the task
from TF_CONFIG, puts every task of the ClusterSpec at its namespace's address (the port kept),
and replaces itself with ``ip netns exec NS PROGRAM ARGS...`` (the same pid: the launcher's
signals, progress pipe and exit status are the program's). No TensorFlow here.
"""
import json
import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if "--" not in argv or not argv[0].startswith("--hosts="):
        sys.exit("usage: netns_task.py --hosts=FILE -- PROGRAM ARGS...")
    with open(argv[0].split("=", 1)[1]) as f:
        hosts = json.load(f)
    program = argv[argv.index("--") + 1:]
    cfg = json.loads(os.environ["TF_CONFIG"])
    cluster = {}
    for job, addrs in cfg["cluster"].items():
        if isinstance(addrs, dict):     # the sparse form {index: address}
            cluster[job] = {k: f"{hosts[job][int(k)][1]}:{a.rsplit(':', 1)[1]}" for k, a in addrs.items()}
        else:
            cluster[job] = [f"{hosts[job][i][1]}:{a.rsplit(':', 1)[1]}" for i, a in enumerate(addrs)]
    cfg["cluster"] = cluster
    task = cfg["task"]
    env = dict(os.environ, TF_CONFIG=json.dumps(cfg))
    if program and program[0] == "python":
        program[0] = sys.executable
    ns = hosts[task["type"]][int(task["index"])][0]
    os.execvpe("ip", ["ip", "netns", "exec", ns, *program], env)


if __name__ == "__main__":
    main()
