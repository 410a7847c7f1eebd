"""Slurm's nodes: its node-list and tasks-per-node expressions expanded, a job's nodes, and
those that Slurm has down."""
from __future__ import annotations

import re
import shutil
import subprocess
from typing import List, Sequence, Tuple

from tfcluster.terminal import printable


def expand_hostlist(text: str, use_scontrol: bool = True) -> List[str]:
    """'n[1-2],m5' -> ['n1', 'n2', 'm5'], with ``scontrol show hostnames`` when available."""
    if use_scontrol and shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True,
                                 text=True, timeout=30)
            hosts = out.stdout.split()
            if out.returncode == 0 and hosts:
                return hosts
        except (OSError, subprocess.SubprocessError):   # scontrol failed: expanded here instead
            pass
    return _expand_hostlist_py(text)


def _expand_hostlist_py(text: str) -> List[str]:
    parts, cur, depth = [], "", 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    hosts: List[str] = []
    for part in parts:
        m = re.fullmatch(r"([^\[\]]*)(?:\[([^\]]+)\])?(.*)", part)
        if not m or "[" in m.group(3):
            raise ValueError(f"cannot expand host list '{text}'")
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            hosts.append(part)
            continue
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            hi = hi or lo
            width = len(lo)
            for i in range(int(lo), int(hi) + 1):
                hosts.append(f"{prefix}{str(i).zfill(width)}{suffix}")
    return hosts


def expand_tasks_per_node(text: str) -> List[int]:
    """'3(x2),2,1' -> [3, 3, 2, 1]."""
    out: List[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"cannot read tasks per node '{text}'")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out



def job_nodes(job_id: str) -> List[str]:
    """The nodes of a running job (``scontrol show job``'s NodeList, expanded)."""
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    m = re.search(r"\bNodeList=(\S+)", r.stdout)
    if r.returncode != 0 or not m or m.group(1) in ("(null)", ""):
        return []
    return expand_hostlist(m.group(1))


def lost_nodes(nodes: Sequence[str], down_only: bool = False) -> List[Tuple[str, str]]:
    """(node, reason) of those of ``nodes`` that Slurm has down, failing or not responding
    (``down_only``: down or failing alone -- Slurm's own verdict, ``SlurmdTimeout`` after a node
    stopped answering -- not a node that missed a ping)."""
    if not nodes:
        return []
    try:
        r = subprocess.run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%t|%E"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in r.stdout.splitlines():
        node, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        if node in nodes and node not in [n for n, _ in out] and (
                state.startswith(("down", "fail")) or (state.endswith("*") and not down_only)):
            out.append((node, printable(reason.strip()) if reason.strip() != "none" else ""))
    return out

