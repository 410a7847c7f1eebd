"""A real one-node Slurm (munged + slurmctld + slurmd as children of the test process) for the
integration layer; the fixtures are in tests/integration/conftest.py."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time

import pytest

from tfcluster.net.ports import free_port_run

# Time limits: sbatch takes the good ones (checked on the real Slurm in tests/integration)
GOOD_TIMES = ["30", "0:30", "5:30", "1:00:00", "100:00:00", "2-0", "2-12", "1-12:30", "1-0:0:1",
              "7-23:59:59", "UNLIMITED", "infinite", "0", "1:75:00", "10:60", "1-24"]
# sbatch takes these two too, but they are none of its documented formats: refused, clearer
UNDOCUMENTED = ["-5", "1-"]
BAD_TIMES = ["abc", "1h", "1:00:00:00", "1:2:3-4", "", "1.5", "1::00", "one", "1 -2",
             "1:00:00\n#SBATCH --x"] + UNDOCUMENTED

# cred_expire=10: a requeued job waits ~10 s before it may start again, not Slurm's 120 s
# (the requeue tests of test_slurm.py; tests/helpers/slurm_nodes.py does the same)
SLURM_CONF = """\
ClusterName=tfctest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock,cred_expire=10
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
KillWait=5
MinJobAge=300
InactiveLimit=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel")


class SlurmQueue:
    """The queue of a test Slurm (its daemons and jobs belong to the tests)."""

    def queue(self) -> str:
        return subprocess.run(["squeue", "-h"], capture_output=True, text=True, timeout=10).stdout.strip()

    def wait_empty_queue(self, timeout=30.0) -> str:
        deadline = time.time() + timeout
        q = self.queue()
        while q and time.time() < deadline:
            time.sleep(0.3)
            q = self.queue()
        return q

    def cancel_all(self) -> None:
        """Cancel every job of this test Slurm."""
        try:
            if self.queue():
                subprocess.run(["scancel", "--full", "--user=root"], capture_output=True, timeout=10)
                self.wait_empty_queue(20)
        except Exception:
            pass


class OneNodeSlurm(SlurmQueue):
    """munged, slurmctld and slurmd in the foreground, as children of the test process."""

    def __init__(self, base: str, conf: str = SLURM_CONF):
        self.dir = base
        self.template = conf
        self.procs = []
        self.conf = os.path.join(base, "slurm.conf")

    def start(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "log"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o600)
        self._spawn(["munged", "-F", "--force", f"--socket={d}/munge.sock", f"--key-file={key}",
                     f"--pid-file={d}/munged.pid", f"--log-file={d}/log/munged.log",
                     f"--seed-file={d}/munged.seed"], "munged")
        self._wait(lambda: os.path.exists(f"{d}/munge.sock"), "munged did not create its socket")
        ctld_port = free_port_run(2, 16800 + os.getpid() % 1000)
        with open(self.conf, "w") as f:
            f.write(self.template.format(dir=d, ctld_port=ctld_port, d_port=ctld_port + 1))
        os.environ["SLURM_CONF"] = self.conf
        self._spawn(["slurmctld", "-D", "-i", "-f", self.conf], "slurmctld")
        self._spawn(["slurmd", "-D", "-N", "localhost", "-f", self.conf], "slurmd")
        self._wait(self._idle, "the node did not become idle (sinfo)", timeout=30)

    def _spawn(self, argv, name) -> None:
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "wb")
        self.procs.append((name, subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                                  stderr=subprocess.STDOUT)))
        log.close()

    def _idle(self) -> bool:
        for name, p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}: {self.log(name)}")
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=10)
        return r.returncode == 0 and r.stdout.strip() == "idle"

    def _wait(self, cond, what, timeout=10.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.2)
        raise RuntimeError(what)

    def log(self, name) -> str:
        try:
            with open(os.path.join(self.dir, "log", f"{name}.out")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        self.cancel_all()
        for _name, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        os.environ.pop("SLURM_CONF", None)


def one_node_slurm(tmp_path_factory):
    """Start a one-node Slurm (a generator for a fixture: yields it, stops it); skip cleanly
    where Slurm, munge or root are missing."""
    missing = [t for t in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel")
               if not shutil.which(t)]
    if missing:
        pytest.skip(f"Slurm is not installed here (missing {', '.join(missing)}; "
                    f"apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("the one-node Slurm of these tests runs its daemons as root")
    old = os.environ.get("SLURM_CONF")
    s = OneNodeSlurm(str(tmp_path_factory.mktemp("slurm")))
    try:
        s.start()
    except Exception as e:
        s.stop()
        pytest.skip(f"could not start a one-node Slurm: {e}")
    yield s
    s.stop()
    if old is not None:
        os.environ["SLURM_CONF"] = old


def gpu_slurm(tmp_path_factory):
    """A one-node Slurm with four stand-in GPUs (gres/gpu on character devices made with mknod:
    Slurm binds them and sets CUDA_VISIBLE_DEVICES; nothing opens them). A generator for a
    fixture, like one_node_slurm."""
    if not all(shutil.which(t) for t in ("munged", "slurmctld", "slurmd", "sbatch")) or os.geteuid():
        pytest.skip("needs Slurm and munge installed, and root (see tests/helpers/slurm.py)")
    base = str(tmp_path_factory.mktemp("gpuslurm"))
    try:
        for i in range(4):
            os.mknod(os.path.join(base, f"gpu{i}"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except (OSError, AttributeError) as e:
        pytest.skip(f"cannot make stand-in GPU device files here: {e}")
    with open(os.path.join(base, "gres.conf"), "w") as f:
        f.write(f"Name=gpu File={base}/gpu[0-3]\n")
    node = "NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN"
    assert node in SLURM_CONF
    conf = SLURM_CONF.replace(node, "GresTypes=gpu\n" + node.replace(
        "State=UNKNOWN", "Gres=gpu:4 State=UNKNOWN"))
    s = OneNodeSlurm(base, conf)
    try:
        s.start()
    except Exception as e:
        s.stop()
        pytest.skip(f"could not start a one-node Slurm with stand-in GPUs: {e}")
    yield s
    s.stop()
