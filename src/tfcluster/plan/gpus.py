"""Which NVIDIA GPUs this machine has, without importing TensorFlow; and warnings for tasks whose
``CUDA_VISIBLE_DEVICES`` names a GPU that is not there (CUDA would silently hide it, and the task
would train on CPU).

The GPUs come from ``nvidia-smi -L`` when it is on PATH and answers, else from the driver's
device list ``/proc/driver/nvidia/gpus/*/information``. Indexes follow nvidia-smi's order (PCI
bus order), which is CUDA's when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and the usual numbering
in ``CUDA_VISIBLE_DEVICES``.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

PROC_GPUS = "/proc/driver/nvidia/gpus"
SMI_LINE = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[0-9A-Za-z-]+)\)")
MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[0-9A-Za-z/-]+)\)")


@dataclass
class Gpu:
    index: int
    name: str = ""
    uuid: str = ""
    mig: List[str] = field(default_factory=list)   # UUIDs of its MIG devices


def _from_smi(timeout: float) -> Optional[List[Gpu]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        r = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None      # e.g. "couldn't communicate with the NVIDIA driver"
    gpus: List[Gpu] = []
    for line in r.stdout.splitlines():
        m = SMI_LINE.match(line)
        if m:
            gpus.append(Gpu(int(m.group(1)), m.group(2), m.group(3)))
            continue
        m = MIG_LINE.match(line)
        if m and gpus:
            gpus[-1].mig.append(m.group(1))
    return gpus


def _from_proc(root: str) -> Optional[List[Gpu]]:
    if not os.path.isdir(root):
        return None
    gpus = []
    for i, d in enumerate(sorted(glob.glob(os.path.join(root, "*")))):
        name = uuid = ""
        try:
            with open(os.path.join(d, "information")) as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.strip() == "Model":
                        name = value.strip()
                    elif key.strip() == "GPU UUID":
                        uuid = value.strip()
        except OSError:   # no information file for this GPU: it is listed without a name
            pass
        gpus.append(Gpu(i, name, uuid))
    return gpus


def visible_gpus(timeout: float = 10.0, proc_root: str = PROC_GPUS) -> Optional[List[Gpu]]:
    """The NVIDIA GPUs of this machine, or None when it has no NVIDIA driver.

    An empty list means a driver without devices. CUDA_VISIBLE_DEVICES of this process does not
    matter: tasks get their own.
    """
    gpus = _from_smi(timeout)
    if gpus is not None:
        return gpus
    return _from_proc(proc_root)


def _asks_for_gpus(value: Optional[str]) -> bool:
    if value is None:
        return False
    first = value.split(",")[0].strip()
    return bool(first) and not first.startswith("-")


def gpu_warnings(tasks: Sequence[Tuple[str, Optional[str]]],
                 gpus: Optional[List[Gpu]] = ...) -> List[str]:   # type: ignore[assignment]
    """Warnings (not errors) for ``[(task_name, CUDA_VISIBLE_DEVICES or None), ...]``.

    One per task and missing entry, naming the task; on a machine without an NVIDIA driver, one
    line naming the tasks that ask for GPUs. A task with None (sees every GPU), ``""`` or a
    negative index (sees none) asks for nothing. CUDA reads the list up to its first invalid entry,
    so an entry after a missing one is ignored too; the warning says so.
    """
    if gpus is ...:
        gpus = visible_gpus()
    asking = [(name, value) for name, value in tasks if _asks_for_gpus(value)]
    if not asking:
        return []
    if gpus is None:
        names = ", ".join(name for name, _ in asking)
        return [f"no NVIDIA driver on this machine: {names} "
                f"{'asks' if len(asking) == 1 else 'ask'} for GPUs (CUDA_VISIBLE_DEVICES) and "
                f"will run on CPU"]
    indexes = {str(g.index) for g in gpus}
    uuids = [g.uuid for g in gpus if g.uuid] + [u for g in gpus for u in g.mig]
    have = (f"this machine has {len(gpus)} GPU{'' if len(gpus) == 1 else 's'}"
            + (f": {', '.join(str(g.index) for g in gpus)}" if gpus else ""))
    out = []
    for name, value in asking:
        entries = [e.strip() for e in value.split(",")]
        for pos, entry in enumerate(entries):
            if entry.startswith("-"):
                break               # CUDA stops at a negative index: the rest is hidden on purpose
            if entry in indexes or (entry.startswith(("GPU-", "MIG-")) and
                                    any(u.startswith(entry) for u in uuids)):
                continue
            what = f"GPU {entry}" if entry.isdigit() else f"GPU {entry!r}"
            rest = entries[pos + 1:]
            tail = f"; CUDA also ignores what follows it ({','.join(rest)})" if rest else ""
            cpu = "; it will run on CPU" if pos == 0 else ""
            out.append(f"{name}: CUDA_VISIBLE_DEVICES={value}: {what} does not exist ({have})"
                       f"{tail}{cpu}")
            break
    return out
