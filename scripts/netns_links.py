"""Simulated network links for scripts/benchmark.py (``--only links``): a ps/worker cluster on
network-namespace hosts whose links are rate-limited with ``tc`` token buckets.

Topology: one worker host (namespace ``W``) and one namespace per ps host (``P0``, ``P1``,
...). Each ps host has its own veth link to the worker host, shaped in both directions with a
``tbf`` qdisc at ``rate`` (on the ps side for ps -> worker, on the worker side for
worker -> ps): every ps host has a full-duplex link of that rate, as a NIC would. The worker
host's links are the ps hosts' links, so adding a ps host adds bandwidth (the worker host is
taken to have a link at least as fast as all ps links together). Nothing is connected to the
root namespace: the traffic stays inside the namespaces made here, and they are deleted (with
their veths and every process in them) at the end, on error and on Ctrl-C.

Addresses: link ``i`` is ``10.N.i.0/24``, the worker side ``.1``, ps ``i`` ``.2``; the workers
are reachable at ``10.N.0.1`` from every ps host (their default route is their link). Every task
is started directly with ``ip netns exec NS python bench_programs/links.py`` and its TF_CONFIG
(tfcluster's runtime inside; no launcher, which is measured elsewhere).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
LINKS = os.path.join(HERE, "bench_programs", "links.py")
PY = sys.executable
PORT = 2222


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _tc(ns: str, *args: str) -> None:
    subprocess.run(["tc", "-n", ns, *args], capture_output=True, text=True, timeout=30, check=True)


def unavailable() -> Optional[str]:
    """Why this machine cannot run the mode (one line), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [t for t in ("ip", "tc") if not shutil.which(t)]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install iproute2)"
    probe = f"tflp{os.getpid() % 100000}"
    try:
        _ip("netns", "add", probe)
        try:
            _ip("-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb")
            _tc(probe, "qdisc", "add", "dev", "pa", "root", "tbf", "rate", "1gbit",
                "burst", "256kb", "latency", "50ms")
        finally:
            _ip("netns", "del", probe, check=False)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        err = getattr(e, "stderr", "") or str(e)
        return f"cannot make a namespace with a tbf-shaped veth here ({err.strip().splitlines()[-1] if err.strip() else e})"
    return None


def tbf_args(rate_bps: float) -> List[str]:
    """A token bucket of ``rate_bps`` bits/s; the bucket holds >= 4 ms of traffic and at
    least a 64 KB GSO segment (a smaller bucket cannot pass one)."""
    burst = max(256 * 1024, int(rate_bps / 8 * 0.004))
    return ["tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "latency", "100ms"]


def _router(ns: str, made: List[str]) -> None:
    """A namespace ``ns`` that forwards between its links (``made``: it is added there)."""
    _ip("netns", "add", ns)
    made.append(ns)
    _ip("-n", ns, "link", "set", "lo", "up")
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
                   capture_output=True, timeout=30, check=True)


def _leaf(router: str, dev: str, ns: str, subnet: str, rate_bps: float, made: List[str]) -> None:
    """A namespace ``ns`` on a veth link to ``router`` (its end there named ``dev``), shaped at
    ``rate_bps`` in both directions: ``SUBNET.1`` on the router's end, ``SUBNET.2`` (``eth0``,
    the default route) on the leaf's."""
    _ip("netns", "add", ns)
    made.append(ns)
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", router, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _ip("-n", router, "addr", "add", f"{subnet}.1/24", "dev", dev)
    _ip("-n", ns, "addr", "add", f"{subnet}.2/24", "dev", "eth0")
    _ip("-n", router, "link", "set", dev, "up")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "route", "add", "default", "via", f"{subnet}.1")
    _tc(router, "qdisc", "add", "dev", dev, "root", *tbf_args(rate_bps))   # router -> leaf
    _tc(ns, "qdisc", "add", "dev", "eth0", "root", *tbf_args(rate_bps))    # leaf -> router


class Hosts:
    """A worker host and ``num_ps`` ps hosts, each ps host linked to the worker host at
    ``rate_bps`` (both directions). Use as a context manager: the namespaces go at exit."""

    def __init__(self, num_ps: int, rate_bps: float):
        tag = f"{os.getpid() % 10000}{random.randint(0, 99)}"
        self.worker_ns = f"tfl{tag}w"
        self.ps_ns = [f"tfl{tag}p{i}" for i in range(num_ps)]
        self.rate_bps = rate_bps
        self.net = self._free_net()
        self.made: List[str] = []
        self.procs: List[subprocess.Popen] = []

    @staticmethod
    def _free_net() -> str:
        used = _ip("-4", "addr").stdout + _ip("-4", "route").stdout
        for _ in range(200):
            net = f"10.{random.randint(100, 250)}"
            if f" {net}." not in used and f"inet {net}." not in used:
                return net
        raise RuntimeError("no free 10.N.0.0/16 network")

    def ps_addr(self, i: int) -> str:
        return f"{self.net}.{i}.2"

    @property
    def worker_addr(self) -> str:
        return f"{self.net}.0.1"

    def __enter__(self) -> "Hosts":
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make(self) -> None:
        # the worker host routes between ps hosts (a ps reads from another ps in sync mode:
        # SyncReplicasOptimizer's global step and token queue live on ps 0)
        _router(self.worker_ns, self.made)
        for i, ns in enumerate(self.ps_ns):     # worker -> ps i and ps i -> worker at rate_bps
            _leaf(self.worker_ns, f"ps{i}", ns, f"{self.net}.{i}", self.rate_bps, self.made)

    def start(self, ns: str, argv: Sequence[str], env: Dict[str, str], log_path: str) -> subprocess.Popen:
        with open(log_path, "wb") as logf:
            p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=logf,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                 start_new_session=True)
        self.procs.append(p)
        return p

    def kill_tasks(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for ns in self.made:   # anything else still in a namespace
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []

    def close(self) -> None:
        self.kill_tasks()
        for ns in reversed(self.made):    # deleting a namespace deletes its veths
            _ip("netns", "del", ns, check=False)
        self.made = []


class Star(Hosts):
    """A hub namespace that routes between leaf hosts, each on its own link to the hub shaped
    in both directions (a ``tbf`` on each end of its veth): one ps host at ``ps_rate_bps`` and
    ``workers`` worker hosts at ``worker_rate_bps`` each (issue 50's ``sizing.links``: each
    worker on a slow link, the ps on a faster one that saturates at some worker count). Leaf
    ``i`` (the ps first, then the workers) is ``10.N.i.2`` behind the hub's ``10.N.i.1``; its
    default route is its link. Nothing is connected to the root namespace; the namespaces go
    (with their veths and every process in them) at exit, on error and on Ctrl-C."""

    def __init__(self, workers: int, worker_rate_bps: float, ps_rate_bps: float):
        tag = f"{os.getpid() % 10000}{random.randint(0, 99)}"
        self.worker_ns = f"tfs{tag}h"       # the hub (Hosts.close deletes what ``made`` lists)
        self.ps_ns = [f"tfs{tag}p"]
        self.leaf_ns = [f"tfs{tag}w{j}" for j in range(workers)]
        self.rates = [ps_rate_bps] + [worker_rate_bps] * workers
        self.net = self._free_net()
        self.made = []
        self.procs = []

    def addresses(self) -> Dict[str, List[List[str]]]:
        """For each job, ``[namespace, address]`` of every task index."""
        return {"ps": [[self.ps_ns[0], f"{self.net}.0.2"]],
                "worker": [[ns, f"{self.net}.{j + 1}.2"] for j, ns in enumerate(self.leaf_ns)]}

    def _make(self) -> None:
        _router(self.worker_ns, self.made)
        for i, (ns, rate) in enumerate(zip(self.ps_ns + self.leaf_ns, self.rates)):
            _leaf(self.worker_ns, f"l{i}", ns, f"{self.net}.{i}", rate, self.made)


def run_cluster(hosts: Hosts, workers: int, prog_args: Sequence[str], tmp: str, tag: str,
                timeout: float) -> Optional[Dict[str, Any]]:
    """One run of links.py on ``hosts``: the chief's ``@bench`` dict, or None (logs kept in tmp)."""
    cluster = {"ps": [f"{hosts.ps_addr(i)}:{PORT}" for i in range(len(hosts.ps_ns))],
               "worker": [f"{hosts.worker_addr}:{PORT + j}" for j in range(workers)]}
    ntasks = len(cluster["ps"]) + workers
    base_env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2",
                    TFCLUSTER_LOCAL_TASKS=str(ntasks))     # every namespace shares these cores
    chief_log = ""
    try:
        for job, nss in (("ps", hosts.ps_ns), ("worker", [hosts.worker_ns] * workers)):
            for i, ns in enumerate(nss):
                env = dict(base_env, TFCLUSTER_TASK=f"{job}:{i}",
                           TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": job, "index": i}}))
                path = os.path.join(tmp, f"{tag}-{job}{i}.log")
                if job == "worker" and i == 0:
                    chief_log = path
                hosts.start(ns, [PY, LINKS, *prog_args], env, path)
        worker_procs = hosts.procs[len(cluster["ps"]):]
        deadline = time.monotonic() + timeout
        ps_procs = hosts.procs[:len(cluster["ps"])]
        # (time, CPU seconds of every task, of the ps tasks): the run's CPU profile
        samples = []
        while any(p.poll() is None for p in worker_procs) and time.monotonic() < deadline:
            ps_cpu = _cpu_seconds(ps_procs)
            samples.append((time.monotonic(), ps_cpu + _cpu_seconds(worker_procs), ps_cpu,
                            _machine_busy_seconds()))
            time.sleep(0.1)
    finally:
        hosts.kill_tasks()
    try:
        with open(chief_log, errors="replace") as f:
            for line in f:
                if line.startswith("@bench "):
                    b = json.loads(line[len("@bench "):])
                    window = b.get("window", (0, 0))
                    b["cpu_busy"] = _busy(samples, *window)
                    # every process on the machine (others' work too: a shared machine)
                    b["machine_cpu_busy"] = _busy([(x[0], x[3]) for x in samples], *window)
                    b["cpu_seconds_per_step"] = _per_step(samples, window, b.get("steps_per_s"))
                    b["ps_cpu_seconds_per_step"] = _per_step(samples, window, b.get("steps_per_s"),
                                                             column=2)
                    return b
    except OSError:
        pass
    return None


def _machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (not idle or iowait) since boot."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _cpu_seconds(procs: Sequence[subprocess.Popen]) -> float:
    import psutil

    total = 0.0
    for p in procs:
        try:
            t = psutil.Process(p.pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _per_step(samples: List[tuple], window: Sequence[float], steps_per_s: Optional[float],
              column: int = 1) -> Optional[float]:
    """CPU seconds per global step over the measured window: all tasks (``column`` 1) or
    the ps tasks (2); the samples' own interval over the run's step rate."""
    t0, t1 = window
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if not steps_per_s or len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][column] - inside[0][column]) / ((inside[-1][0] - inside[0][0]) * steps_per_s)


def _busy(samples: List[tuple], t0: float, t1: float) -> Optional[float]:
    """The tasks' CPU use over [t0, t1] as a fraction of all cores (1.0: every core busy)."""
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    (a, ca), (b, cb) = inside[0][:2], inside[-1][:2]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return (cb - ca) / (b - a) / cores


def bench_links(cfg: Dict[str, Any], tmp: str, out: Dict[str, Any], notes: List[str],
                log: Callable[[str], None]) -> None:
    """Step time against the links' physical floor: round robin vs greedy vs greedy with
    partitioning over 1, 2, 4 ps hosts, async and sync, at each rate in cfg['link_rates']."""
    why = unavailable()
    if why:
        log(f"links: skipped: {why}")
        out["links"] = {"skipped": why}
        notes.append(f"links: skipped ({why})")
        return
    mb, workers, pmin = cfg["link_mb"], int(cfg.get("link_workers", 2)), 2**20
    extra = list(cfg.get("link_args") or [])   # more links.py flags (levers), in every cell
    strategies = {"round_robin": ["--ps_strategy=round_robin"],
                  "greedy": ["--ps_strategy=greedy"],
                  "greedy_partitioned": ["--ps_strategy=greedy", f"--partition_min_bytes={pmin}"],
                  # the runtime's PrefetchCache (async only): same placement, same bytes each way
                  # per step; each step's read of the next variables overlaps its update
                  "greedy_partitioned_prefetch": ["--ps_strategy=greedy",
                                                  f"--partition_min_bytes={pmin}", "--prefetch=1"]}
    rows: List[Dict[str, Any]] = []
    made: List[str] = []
    log(f"links: {mb} MB skewed model, 1 worker host ({workers} workers) + ps hosts at "
        f"{', '.join(f'{r / 1e9:g} Gbit/s' for r in cfg['link_rates'])} (tbf)")
    for rate in cfg["link_rates"]:
        for num_ps in cfg["link_ps"]:
            with Hosts(num_ps, rate) as hosts:
                made.extend([hosts.worker_ns, *hosts.ps_ns])
                for mode in cfg["link_modes"]:
                    names = [k for k in strategies if k in cfg["link_placements"]]
                    if num_ps == 1:  # one ps: every placement is the same
                        names = ["greedy_partitioned"] + [
                            k for k in names if k == "greedy_partitioned_prefetch"]
                    if mode == "sync":  # prefetching is async only
                        names = [k for k in names if k != "greedy_partitioned_prefetch"]
                    runs: Dict[str, List[Optional[float]]] = {k: [] for k in names}
                    busy: Dict[str, List[Optional[float]]] = {k: [] for k in names}
                    mbusy: Dict[str, List[Optional[float]]] = {k: [] for k in names}
                    cps: Dict[str, List[Optional[float]]] = {k: [] for k in names}
                    ps_cps: Dict[str, List[Optional[float]]] = {k: [] for k in names}
                    info: Dict[str, Dict[str, Any]] = {}
                    for rep in range(cfg["link_reps"]):
                        for k in (names if rep % 2 == 0 else names[::-1]):
                            # the floor decides the step count: about link_secs of steps
                            model_bytes = mb * 2**20
                            per_step = model_bytes * (workers if mode == "sync" else 1)
                            floor = per_step / (num_ps * rate / 8)
                            steps = int(max(8, min(400, cfg["link_secs"] / floor)) + 4)
                            b = run_cluster(hosts, workers, [f"--mb={mb}", f"--mode={mode}",
                                                             f"--steps={steps}", "--warmup=4",
                                                             *strategies[k], *extra],
                                            tmp, f"links-{rate:g}-{num_ps}-{mode}-{k}-{rep}",
                                            min(cfg["run_timeout"], 60 + 4 * cfg["link_secs"]))
                            runs[k].append(b["steps_per_s"] if b and b.get("steps_per_s") else None)
                            busy[k].append(b.get("cpu_busy") if b else None)
                            mbusy[k].append(b.get("machine_cpu_busy") if b else None)
                            cps[k].append(b.get("cpu_seconds_per_step") if b else None)
                            ps_cps[k].append(b.get("ps_cpu_seconds_per_step") if b else None)
                            if b:
                                info[k] = b
                    for k in names:
                        b = info.get(k)
                        sps = _median(runs[k])
                        row: Dict[str, Any] = {"rate_gbit": rate / 1e9, "ps": num_ps, "mode": mode,
                                               "placement": k, "steps_per_s": _r(sps, 2),
                                               "runs_steps_per_s": [_r(x, 2) for x in runs[k]],
                                               "cpu_busy": _r(_median(busy[k]), 3),
                                               "machine_cpu_busy": _r(_median(mbusy[k]), 3),
                                               # the tasks' CPU seconds per global step (all;
                                               # the ps tasks' part)
                                               "cpu_seconds_per_step": _r(_median(cps[k]), 5),
                                               "ps_cpu_seconds_per_step": _r(_median(ps_cps[k]), 5),
                                               "workers": workers}
                        if b:
                            replicas = workers if mode == "sync" else 1
                            per_dir = b["model_bytes"] * replicas      # bytes each way per global step
                            floor = per_dir / (num_ps * rate / 8)      # all ps links busy, balanced
                            busiest = max(b["bytes_per_ps"]) * replicas / (rate / 8)
                            row.update({"bytes_per_step_each_way": per_dir,
                                        "floor_seconds": _r(floor, 5),
                                        "placement_floor_seconds": _r(busiest, 5),
                                        "bytes_per_ps": b["bytes_per_ps"]})
                            if sps:
                                row["step_seconds"] = _r(1 / sps, 5)
                                row["over_floor"] = _r(1 / sps / floor, 3)
                        rows.append(row)
                        log(f"  {rate / 1e9:g} Gbit/s, {num_ps} ps, {mode}, {k}: "
                            f"{row.get('step_seconds')} s/step, floor {row.get('floor_seconds')} s "
                            f"({row.get('over_floor')}x; tasks' CPU {row.get('cpu_busy')} of the cores "
                            f"(machine {row.get('machine_cpu_busy')}), "
                            f"{row.get('cpu_seconds_per_step')} CPU s/step)")
    out["links"] = {"model": f"skewed: {mb} MB embedding + 5 small dense layers, SGD",
                    "workers": workers, "args": extra, "partition_min_bytes": pmin, "rows": rows,
                    "scaling": scaling(rows), "namespaces": made}


def scaling(rows: List[Dict[str, Any]]) -> Dict[str, Dict[str, Optional[float]]]:
    """Greedy + partitioning (without prefetching): speed-up of the step from 1 to N ps hosts,
    per rate and mode."""
    out: Dict[str, Dict[str, Optional[float]]] = {}
    for r in rows:
        if r["placement"] != "greedy_partitioned" or r["ps"] == 1:
            continue
        one = [x for x in rows if x["placement"] == "greedy_partitioned" and x["ps"] == 1
               and x["mode"] == r["mode"] and x["rate_gbit"] == r["rate_gbit"]]
        if one and one[0]["steps_per_s"] and r["steps_per_s"]:
            key = f"{r['rate_gbit']:g}gbit.{r['mode']}"
            out.setdefault(key, {})[str(r["ps"])] = _r(r["steps_per_s"] / one[0]["steps_per_s"], 3)
    return out


def _median(xs: Sequence[Optional[float]]) -> Optional[float]:
    import statistics

    xs = [x for x in xs if x is not None]
    return float(statistics.median(xs)) if xs else None


def _r(x: Optional[float], n: int = 4) -> Optional[float]:
    return None if x is None else round(float(x), n)
