"""A real Slurm of three nodes on one machine: one slurmctld and three slurmd, each slurmd in its
own network namespace on a bridge (tests/helpers/netns.py), with one munge key (one munged,
whose socket is a file every namespace reaches) and the file system shared. Used by the
``multinode`` tests (tests/integration/test_slurm_nodes.py).

Topology::

    root ns   slurmctld, munged       <net>.1  (SlurmctldHost=localhost(<net>.1))
    ns a      slurmd -N n1            <net>.2
    ns b      slurmd -N n2            <net>.3
    ns c      slurmd -N n3            <net>.4

The node names resolve on the nodes: each slurmd runs in a mount namespace of its own where a
hosts file of the test's is bound over /etc/hosts (``unshare --mount``, then ``nsenter --net``;
not ``ip netns exec``, whose fresh /sys hides the cgroup file systems slurmd needs), so
TensorFlow tasks find each other by node name, as on a real cluster. Every daemon runs in a session of its own and
is ended by its pid; whatever still runs in a namespace (slurmstepd, tasks) is killed with the
namespace. Nothing here imports TensorFlow.

Two partitions, for preemption: ``low`` (the default, PriorityTier=1) and ``high``
(PriorityTier=10), with ``PreemptType=preempt/partition_prio`` and ``PreemptMode=REQUEUE``: a job
in ``high`` that needs a node takes it from a ``low`` job, which is requeued (or cancelled when
it cannot be). ``JobRequeue=0``: a job is requeued (after a node failure, a preemption) only if
it asked for it (``sbatch --requeue``; tfcluster's ``slurm.requeue``), otherwise it ends
(NODE_FAIL). ``cred_expire=10`` makes a requeued job wait ~10 s, not Slurm's 120 s;
``SlurmdTimeout=10``: a node that stops answering is down after ~10-20 s. A preempted ``low``
job gets ``GraceTime=20`` s (its tasks are SIGTERMed at once; it is requeued when the grace
ends, if it still runs), and every job ends within ``KillWait=15`` s of Slurm's SIGTERM (scancel,
the time limit, the requeue): time for trainer.py's chief to write its final checkpoint, ps last.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Callable, Dict, List, Optional

from .netns import NamespaceHosts, detached, ip
from .slurm import SlurmQueue

NODES = ("n1", "n2", "n3")

SLURM_CONF = """\
ClusterName=tfcnodes
SlurmctldHost=localhost({ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock,cred_expire=10
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=0
ReturnToService=2
SlurmdTimeout=10
MessageTimeout=5
KillWait=15
MinJobAge=300
InactiveLimit=0
{nodes}
PartitionName=low Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=20
PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10
"""


class ThreeNodeSlurm(SlurmQueue):
    """munged and slurmctld here, one slurmd per namespace; ``start()``, ``stop()``."""

    def __init__(self, base: str, prefix: str = "tsl"):
        self.dir = base
        self.net = NamespaceHosts(os.path.join(base, "net"), n=len(NODES), prefix=prefix,
                                  subnet="10.234", sshd=False)
        self.nodes = list(NODES)
        self.addr = dict(zip(self.nodes, self.net.addrs))
        self.ns = dict(zip(self.nodes, self.net.names))
        self.conf = os.path.join(base, "slurm.conf")
        self.daemons: Dict[str, subprocess.Popen] = {}
        self._old_conf: Optional[str] = None

    # ---- life
    def start(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "log", "net"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        for n in self.nodes:
            os.makedirs(os.path.join(d, "spool", n), exist_ok=True)
        self.net.start()
        self.hosts = os.path.join(d, "hosts")
        with open(self.hosts, "w") as f:      # the nodes' /etc/hosts
            f.write("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in self.addr.items()))
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o600)
        self._spawn("munged", ["munged", "-F", "--force", f"--socket={d}/munge.sock",
                               f"--key-file={key}", f"--pid-file={d}/munged.pid",
                               f"--log-file={d}/log/munged.log", f"--seed-file={d}/munged.seed"])
        self._wait(lambda: os.path.exists(f"{d}/munge.sock"), "munged did not create its socket")
        from tfcluster.net.ports import free_port_run
        ctld_port = free_port_run(1, 17800 + os.getpid() % 1000)
        nodes = "\n".join(f"NodeName={n} NodeAddr={a} CPUs=2 State=UNKNOWN"
                          for n, a in self.addr.items())
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(dir=d, ctld_addr=self.net.gateway, ctld_port=ctld_port,
                                      d_port=ctld_port + 1, nodes=nodes))
        self._old_conf = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = self.conf
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        for n in self.nodes:
            self.start_node(n)
        self._wait(lambda: self.states() == {n: "idle" for n in self.nodes},
                   "the three nodes did not become idle", timeout=40)

    def start_node(self, node: str, apart: bool = False) -> None:
        """(Re)start ``node``'s slurmd in its namespace (``apart``: not a child of this
        process, for a node revived after a test; still ended by its pid and session)."""
        script = 'mount --bind "$1" /etc/hosts && exec nsenter --net=/run/netns/"$2" slurmd -D -N "$3" -f "$4"'
        self._spawn(f"slurmd-{node}", ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                       script, "sh", self.hosts, self.ns[node], node, self.conf],
                    apart=apart)

    def stop(self) -> None:
        self.cancel_all()
        for name in reversed(list(self.daemons)):
            self._end(name)
        self.net.stop()          # kills what is left in the namespaces, removes them
        os.environ.pop("SLURM_CONF", None)
        if self._old_conf is not None:
            os.environ["SLURM_CONF"] = self._old_conf

    def left(self) -> List[str]:
        """What this Slurm left behind: namespaces, daemons."""
        out = [f"namespace {n}" for n in self.net.left()]
        out += [f"{name} (pid {p.pid})" for name, p in self.daemons.items() if p.poll() is None]
        return out

    # ---- losing a node
    def lose_node(self, node: str) -> None:
        """``node`` dies: its link goes down, its slurmd and everything of its jobs are killed."""
        i = self.nodes.index(node)
        self.net.link(i, up=False)
        self._end(f"slurmd-{node}", sig=signal.SIGKILL)
        for pid in ip("netns", "pids", self.ns[node], check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    def revive_node(self, node: str) -> None:
        self.net.link(self.nodes.index(node), up=True)
        self.start_node(node, apart=True)

    def revive_all(self, timeout: float = 40.0) -> None:
        """Every node lost by a test back, idle (a down node returns: ReturnToService=2)."""
        for node in self.nodes:
            p = self.daemons.get(f"slurmd-{node}")
            if p is None or p.poll() is not None:
                self.revive_node(node)
        for node in self.nodes:
            if self.states().get(node, "").startswith(("down", "drain", "fail")):
                subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                               capture_output=True, timeout=10)
        self._wait(lambda: self.states() == {n: "idle" for n in self.nodes},
                   "the nodes did not come back idle", timeout=timeout)

    # ---- queries
    def states(self) -> Dict[str, str]:
        for name, p in self.daemons.items():
            if p.poll() is not None and not name.startswith("slurmd-"):
                raise RuntimeError(f"{name} exited with {p.returncode}: {self.log(name)}")
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                           timeout=10)
        out: Dict[str, str] = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.dir, "log", f"{name}.out"), errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    # ---- processes
    def _spawn(self, name: str, argv: List[str], apart: bool = False) -> None:
        path = os.path.join(self.dir, "log", f"{name}.out")
        if apart:     # a session of its own whose parent (sh) has exited
            self.daemons[name] = detached(argv, path)
            return
        log = open(path, "ab")
        self.daemons[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def _end(self, name: str, sig: int = signal.SIGTERM) -> None:
        p = self.daemons.get(name)
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, sig)       # its own session and group: the daemon and its children
        except ProcessLookupError:
            pass
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def _wait(self, cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.3)
        raise RuntimeError(f"{what}: {self.states()} {self.log('slurmctld')[-600:]}")


def unavailable() -> Optional[str]:
    """Why a three-node Slurm cannot run here (one line), or None."""
    from .netns import unavailable as no_netns
    missing = [t for t in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel",
                           "sinfo") if not shutil.which(t)]
    if missing:
        return f"Slurm is not installed here (missing {', '.join(missing)}; apt-get install slurm-wlm munge)"
    return no_netns("tsl")
