"""Was a SIGKILL the kernel's out-of-memory killer? Ask the kernel, do not guess.

A task that dies of SIGKILL (exit 137 through a shell) without tfcluster sending it may have
been killed by the OOM killer, or by a person, or by a scheduler. Two counters tell the OOM
killer apart, and both only grow:

* ``oom_kill`` in ``/proc/vmstat`` (Linux 4.13+): every OOM kill on the machine, the global
  OOM killer's and memory cgroups' alike (so it may be another program's: "possibly");
* ``oom_kill`` in the launcher's memory cgroup (v2 ``memory.events``, v1
  ``memory.oom_control``): kills inside the cgroup that the launcher and its local tasks
  share (a container's, a systemd unit's or a job's memory limit).

:class:`OomWatch` reads both when the run starts and again when a task dies of SIGKILL; a
counter that grew names the cause. Where neither can be read (another OS, a hidden /proc),
it says nothing rather than guess; where they can and did not grow, it says so: "not
tfcluster, not the OOM killer" (the run machine names the kills tfcluster sent itself, which
win). It only speaks for tasks on this machine.
"""
from __future__ import annotations

import os
from typing import Dict, Optional

from tfcluster.core.rules import is_sigkill

VMSTAT = "/proc/vmstat"
CGROUP_SELF = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"


def _counter(path: str, key: str = "oom_kill") -> Optional[int]:
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
    except (OSError, ValueError):
        return None
    return None


def cgroup_events_path(cgroup_self: str = CGROUP_SELF, root: str = CGROUP_ROOT) -> Optional[str]:
    """The file that counts OOM kills in this process's memory cgroup: ``memory.events`` under
    cgroup v2 (the ``0::/path`` line), ``memory.oom_control`` under v1 (the ``N:memory:/path``
    line); None where neither exists (a cgroup namespace that hides the path, no cgroups)."""
    found = []
    try:
        with open(cgroup_self) as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) != 3:
                    continue
                rel = parts[2].lstrip("/")
                if "memory" in parts[1].split(","):
                    found.insert(0, os.path.join(root, "memory", rel, "memory.oom_control"))
                elif parts[0] == "0" and parts[1] == "":
                    found.append(os.path.join(root, rel, "memory.events"))
                    found.append(os.path.join(root, "unified", rel, "memory.events"))
    except OSError:
        return None
    for path in found:
        if _counter(path) is not None:
            return path
    return None


class OomWatch:
    """The OOM counters at the start of a run, and what has grown since."""

    def __init__(self, vmstat: str = VMSTAT, events: Optional[str] = None):
        self.paths: Dict[str, Optional[str]] = {
            "kernel": vmstat, "cgroup": events if events is not None else cgroup_events_path()}
        self.start = {k: (_counter(p) if p else None) for k, p in self.paths.items()}

    def grown(self) -> Dict[str, int]:
        """How many OOM kills each readable counter has counted since the run started."""
        out = {}
        for k, p in self.paths.items():
            if p is None or self.start[k] is None:
                continue
            now = _counter(p)
            if now is not None and now > self.start[k]:
                out[k] = now - self.start[k]
        return out

    def words(self, returncode: Optional[int]) -> str:
        """For a task that died of SIGKILL: the OOM killer's part in it; where its counters
        did not grow, "not tfcluster, not the OOM killer" (the run machine names the kills
        tfcluster sent itself before it reads this); '' where no counter can be read."""
        if not is_sigkill(returncode):
            return ""
        grown = self.grown()
        if "cgroup" in grown:
            return (f"out of memory: the memory limit of the launcher's cgroup was hit and the "
                    f"kernel killed a process in it (oom_kill in {self.paths['cgroup']})")
        if "kernel" in grown:
            return ("possibly out of memory: the kernel's out-of-memory killer ran during the "
                    "run (oom_kill in /proc/vmstat)")
        read = [self.paths[k] for k in ("kernel", "cgroup") if self.start.get(k) is not None]
        if not read:
            return ""
        return (f"not tfcluster, not the OOM killer (its counters did not grow: oom_kill in "
                f"{' and '.join(read)}); Linux does not say which process sent a SIGKILL")
