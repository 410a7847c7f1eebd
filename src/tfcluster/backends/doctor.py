"""``tfcluster doctor [FILE]``: before a launch, check every host of the file the way the tasks
will meet it -- the same Python, TensorFlow and tfcluster as here, the same program file, a
clock within MAX_CLOCK_OFFSET of this machine's, each task's port free on its host and reachable
from the other hosts -- and print one table; exit 1 naming what differs or fails.

How each host is reached is the backend's: this machine's hosts run the probe here
(``python -I``), ssh hosts over ssh with the file's ``remote:``/``hosts:`` settings (the remote
interpreter, the ``workdir`` mapping of paths), and inside a Slurm allocation one probe per node
with ``srun`` (facts and ports only: Slurm chooses the nodes when the job starts). The probe is
a small standard-library program (with the port probe, :mod:`tfcluster.net.port_probe`, as
text); it reads what to check as one JSON line (stdin, or
``TFCLUSTER_DOCTOR`` under srun) and writes one JSON line. TensorFlow is never imported: its
version is read from the installed package's metadata.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tfcluster.errors import UserError
from tfcluster.net import port_probe

MAX_CLOCK_OFFSET = 1.0     # seconds a host's clock may differ from this machine's
PROBE_TIMEOUT = 60.0
HERE = "(here)"

_PROBE = r'''
import hashlib, json, os, platform, socket, sys, time
raw = os.environ.get("TFCLUSTER_DOCTOR") or sys.stdin.readline()
head = json.loads(raw)
mode = head["mode"]
def ver(*names):
    try:
        from importlib import metadata
    except ImportError:
        return None
    for n in names:
        try:
            return metadata.version(n)
        except Exception:   # not installed under this name: try the next one
            pass
    return None
from tfcluster.net.port_probe import bind_free, choose_ports  # shipped as text
if mode == "facts":
    out = {"node": os.environ.get("SLURMD_NODENAME") or platform.node(),
           "python": platform.python_version(),
           "tensorflow": ver("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-macos"),
           "tfcluster": ver("tfcluster"), "files": {}, "ports": {}}
    for path in head["files"]:
        try:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out["files"][path] = h.hexdigest()
        except OSError as e:
            out["files"][path] = "missing: " + (e.strerror or str(e))
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpus is None:
        try:
            gpus = ",".join(sorted(n[6:] for n in os.listdir("/dev") if n.startswith("nvidia")
                                   and n[6:].isdigit()))
        except OSError:
            gpus = ""
    out["gpus"] = gpus
    for port in head["ports"]:
        out["ports"][str(port)] = "free" if bind_free(port) else "in use"
    out["time"] = time.time()
    print(json.dumps(out), flush=True)
elif mode == "listen":
    socks, ok = [], []
    for port in head["ports"]:
        held = bind_free(port, hold=True)
        if held:
            for s in held:
                s.listen(16)
            socks.extend(held)
            ok.append(port)
    print(json.dumps({"listening": ok}), flush=True)
    sys.stdin.read()
elif mode == "connect":
    out = {}
    for host, port in head["targets"]:
        try:
            socket.create_connection((host, port), timeout=head.get("timeout", 5)).close()
            out["%s:%d" % (host, port)] = "ok"
        except OSError as e:
            out["%s:%d" % (host, port)] = e.strerror or str(e)
    print(json.dumps(out), flush=True)
'''
#: the probe as it is sent: the port probe's text (:mod:`tfcluster.net.port_probe`) in place of
#: its import line
PROBE = port_probe.ship(_PROBE)


class Host:
    """One place the probe runs: this machine, an ssh host or (srun) every node."""

    def __init__(self, name: str, argv: List[str], files: Dict[str, str], ports: Dict[int, str]):
        self.name, self.argv = name, argv
        self.files = files          # path there -> path here (the reference copy)
        self.ports = ports          # port -> task
        self.facts: Dict[str, Any] = {}
        self.error: Optional[str] = None
        self.offset: Optional[float] = None
        self.addr = name            # how the other hosts reach its tasks (the file's host name)

    def start(self, head: Dict[str, Any]) -> subprocess.Popen:
        p = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        try:
            p.stdin.write((json.dumps(head) + "\n").encode())
            p.stdin.flush()
        except OSError:   # the probe ended at once (ssh refused): _first_line reports its stderr
            pass
        return p


def _first_line(p: subprocess.Popen, timeout: float) -> Tuple[Optional[dict], float, str]:
    """The probe's JSON line, the time it arrived, and what went wrong ("" if nothing)."""
    box: Dict[str, Any] = {}

    def read():
        box["line"] = p.stdout.readline()
        box["at"] = time.time()
    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout)
    line = box.get("line") or b""
    try:
        return json.loads(line.decode()), box.get("at", time.time()), ""
    except ValueError:
        if p.poll() is None:
            p.kill()
        try:
            err = p.stderr.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            err = []
        return None, time.time(), (err[-1] if err else f"no answer (exit code {p.poll()})")


def _finish(p: subprocess.Popen) -> None:
    try:
        p.stdin.close()
    except OSError:   # the probe has exited (a broken pipe on the flush): waited for below
        pass
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def program_files(plan) -> List[Tuple[str, str]]:
    """(task's folder, file) of the program files in the tasks' command lines (existing files
    here, as written in the plan)."""
    out = []
    for t in plan.tasks:
        for w in t.argv[1:]:
            path = w if os.path.isabs(w) else os.path.join(t.cwd, w)
            if os.path.isfile(path) and path not in [p for _, p in out]:
                out.append((t.cwd, os.path.abspath(path)))
    return out


def hosts_of(plan, cluster) -> List[Host]:
    """The places to probe, from the plan: this machine and every ssh host."""
    from tfcluster.net.addresses import is_local
    files = [p for _, p in program_files(plan)]
    here = [sys.executable, "-I", "-c", PROBE]
    by_host: Dict[str, Dict[int, str]] = {}
    for t in plan.tasks:
        ports = by_host.setdefault(t.host or "localhost", {})
        if plan.network == "private":   # the run's own network: this machine's ports do not matter
            continue
        ports[t.port] = t.name
        if t.profiler_port:
            ports[t.profiler_port] = f"{t.name}'s profiler"
    out = [Host(HERE, here, {f: f for f in files}, {})]
    ssh = None
    for host, ports in by_host.items():
        remote = plan.kind.over_ssh and (host in cluster.spec.hosts or not is_local(host))
        if not remote:
            out[0].ports.update(ports)
            out[0].addr = host
            continue
        if ssh is None:
            from tfcluster.backends.ssh import SshBackend
            ssh = SshBackend(cluster)
        from tfcluster.backends.ssh import ssh_argv
        s = ssh.settings(host)
        python = " ".join(shlex.quote(w) for w in ssh.python(host))
        argv = ssh_argv(s, host) + ["--", f"{python} -c {shlex.quote(PROBE)}"]
        out.append(Host(host, argv, {ssh._map_path(f, s): f for f in files}, dict(ports)))
    return out


def slurm_hosts(plan) -> List[Host]:
    """Inside an allocation: one probe per node (srun); the node's ports base_port and up when
    the file gives base_port."""
    if not os.environ.get("SLURM_JOB_ID"):
        raise UserError("doctor with --backend slurm runs inside an allocation, where the nodes "
                        "are known: salloc -N NODES tfcluster doctor FILE --backend slurm")
    files = [p for _, p in program_files(plan)]
    n = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
    per_node = min(len(plan.tasks), max(1, -(-len(plan.tasks) // n)))
    # ports are chosen free on each node when the job starts; only a base_port the file gives
    # (a firewall's range) is looked at here
    ports = {plan.base_port + i: f"local rank {i}" for i in range(per_node)} if plan.base_port_given else {}
    argv = ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--overlap",
            sys.executable, "-I", "-c", PROBE]
    return [Host(HERE, [sys.executable, "-I", "-c", PROBE], {f: f for f in files}, {}),
            Host("slurm", argv, {f: f for f in files}, ports)]


def check(plan, cluster) -> Tuple[List[List[str]], List[str]]:
    """Probe every host; (table rows, problems)."""
    hosts = slurm_hosts(plan) if plan.kind.takes_slurm_options else hosts_of(plan, cluster)
    rows: List[Tuple[Host, Dict[str, Any]]] = []
    problems: List[str] = []

    def facts(h: Host) -> None:
        head = {"mode": "facts", "files": list(h.files), "ports": sorted(h.ports)}
        if h.name == "slurm":     # srun passes the environment, not one stdin to every task
            env = dict(os.environ, TFCLUSTER_DOCTOR=json.dumps(head))
            p = subprocess.Popen(h.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env)
            out, err = p.communicate(timeout=PROBE_TIMEOUT)
            got = []
            for line in out.decode("utf-8", "replace").splitlines():
                try:
                    got.append(json.loads(line))
                except ValueError:   # srun's own words: no answer at all is an error below
                    pass
            if not got:
                h.error = (err.decode("utf-8", "replace").strip().splitlines() or ["srun failed"])[-1]
            h.facts = {"nodes": got, "at": time.time()}
            return
        p = h.start(head)
        data, at, why = _first_line(p, PROBE_TIMEOUT)
        _finish(p)
        if data is None:
            h.error = why
        else:
            h.facts, h.offset = data, data["time"] - at
    threads = [threading.Thread(target=facts, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PROBE_TIMEOUT + 15)
    ref = hosts[0].facts
    for h in hosts:
        if h.name == "slurm":
            for node in h.facts.get("nodes", []):
                sub = Host(node.get("node", "?"), [], h.files, h.ports)
                sub.facts, sub.offset = node, node["time"] - h.facts["at"]
                rows.append((sub, node))
        else:
            rows.append((h, h.facts))
        if h.error:
            problems.append(f"host {h.name}: cannot run the check there: {h.error}")
    for h, f in rows:
        if not f or h.name == HERE and not ref:
            continue
        if h.name != HERE:
            for key, word in (("python", "Python"), ("tensorflow", "TensorFlow"), ("tfcluster", "tfcluster")):
                mine, theirs = ref.get(key), f.get(key)
                if key == "python" and mine and theirs:
                    mine, theirs = ".".join(mine.split(".")[:2]), ".".join(theirs.split(".")[:2])
                if mine != theirs:
                    problems.append(f"host {h.name}: {word} {f.get(key) or 'not installed'} "
                                    f"(here {ref.get(key) or 'not installed'})")
            for there, local in h.files.items():
                got, want = f.get("files", {}).get(there), ref.get("files", {}).get(local)
                if got != want:
                    what = got if got and got.startswith("missing") else "differs from the one here"
                    problems.append(f"host {h.name}: program file {there} {what}"
                                    + ("" if there == local else f" ({local})"))
            if h.offset is not None and abs(h.offset) > MAX_CLOCK_OFFSET:
                problems.append(f"host {h.name}: clock off by {h.offset:+.1f}s (more than "
                                f"{MAX_CLOCK_OFFSET:g}s from here)")
        for port, state in sorted(f.get("ports", {}).items(), key=lambda kv: int(kv[0])):
            if state != "free":
                problems.append(f"host {h.name}: port {port} of {h.ports.get(int(port), '?')} is {state}")
    if plan.kind.over_ssh and not problems:
        problems += _reachable(hosts)
    table = [["HOST", "PYTHON", "TENSORFLOW", "TFCLUSTER", "PROGRAM", "GPUS", "CLOCK", "PORTS"]]
    for h, f in rows:
        files = f.get("files", {}) if f else {}
        prog = ", ".join(("missing" if v.startswith("missing") else v[:12]) for v in files.values()) or "-"
        ports = f.get("ports", {}) if f else {}
        table.append([h.name, f.get("python") or "?", f.get("tensorflow") or "-",
                      f.get("tfcluster") or "-", prog, (f.get("gpus") or "-") if f else "?",
                      "-" if h.offset is None or h.name == HERE else f"{h.offset:+.2f}s",
                      ",".join(f"{p}:{s.replace('in use', 'used')}" for p, s in ports.items()) or "-"])
    return table, problems


def _reachable(hosts: List[Host]) -> List[str]:
    """Each task's port, listened on by its host, reached from every other host."""
    problems = []
    listeners = []
    try:
        for h in hosts:
            if h.ports:
                p = h.start({"mode": "listen", "ports": sorted(h.ports)})
                data, _, why = _first_line(p, PROBE_TIMEOUT)
                listeners.append(p)
                if data is None:
                    problems.append(f"host {h.name}: cannot listen for the reachability check: {why}")
        results: Dict[str, Dict[str, str]] = {}

        def connect(h: Host) -> None:
            targets = [(o.addr, port) for o in hosts if o is not h for port in sorted(o.ports)]
            if not targets:
                return
            p = h.start({"mode": "connect", "targets": targets, "timeout": 5})
            data, _, why = _first_line(p, PROBE_TIMEOUT)
            _finish(p)
            results[h.name] = data if data is not None else {"*": why}
        threads = [threading.Thread(target=connect, args=(h,), daemon=True) for h in hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(PROBE_TIMEOUT + 15)
        owner = {f"{o.addr}:{port}": task for o in hosts for port, task in o.ports.items()}
        for frm, got in sorted(results.items()):
            for target, state in sorted(got.items()):
                if state != "ok":
                    problems.append(f"{owner.get(target, target)}'s port {target} cannot be reached "
                                    f"from host {frm}: {state}")
    finally:
        for p in listeners:
            _finish(p)
    return problems


def format_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def who_can_connect(plan) -> List[str]:
    """Who can reach the run's ports, per place: nobody else in a private network; every user
    of this machine in its network; on other hosts, their users and whoever reaches them."""
    from tfcluster.net.addresses import is_local
    by_host: Dict[str, List[str]] = {}
    for t in plan.tasks:
        ports = [str(p) for p in (t.port, t.profiler_port) if p]
        by_host.setdefault(t.host or "(Slurm's nodes)", []).extend(ports)
    out = []
    for host, ports in by_host.items():
        listed = ", ".join(ports) if ports else "chosen on the nodes"
        if plan.network == "private":
            from tfcluster.net.private import unavailable
            why = unavailable()
            out.append(f"{host} ports {listed}: this run's processes only (network: private)" if not why
                       else f"{host} ports {listed}: none: a launch here starts nothing ({why}; "
                            f"--network host runs it in this machine's network, exposed)")
        elif not plan.kind.reaches_other_hosts or (host != "(Slurm's nodes)" and is_local(host)
                                                   and not plan.kind.takes_slurm_options):
            out.append(f"{host} ports {listed}: every user of this machine"
                       + (f" (network: host: {plan.network_why})" if plan.network_why else " (network: host)")
                       + (", and other hosts" if not is_local(host) else ""))
        else:
            out.append(f"{host} ports {listed}: every user of {host} and whoever reaches it "
                       f"(fence them: tfcluster help security)")
    return out


def run(plan, cluster, out=sys.stdout) -> int:
    """Print the table, who can connect to the run's ports, and the problems; 0 when every host
    agrees, 1 otherwise."""
    table, problems = check(plan, cluster)
    print(format_table(table), file=out)
    print("who can connect to the run's ports:", file=out)
    for line in who_can_connect(plan):
        print(f"  {line}", file=out)
    for p in problems:
        print(f"tfcluster doctor: {p}", file=sys.stderr)
    if problems:
        print(f"tfcluster doctor: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("tfcluster doctor: every host agrees with this one", file=sys.stderr)
    return 0
