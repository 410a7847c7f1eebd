"""A memory cgroup with a limit, made under the test process's own (cgroup v1 or v2), for
tests that need the kernel's OOM killer to act for real. Skips where cgroups cannot be made."""
from __future__ import annotations

import contextlib
import os
import time

import pytest

from tfcluster.backends.oom import cgroup_events_path


@contextlib.contextmanager
def memory_cgroup(name: str, limit_bytes: int):
    """Yield the path of ``cgroup.procs`` of a new memory cgroup limited to ``limit_bytes``;
    remove the cgroup after (its processes must have ended by then)."""
    events = cgroup_events_path()
    if events is None or os.geteuid() != 0:
        pytest.skip("needs root and a readable memory cgroup (cgroup v1 memory or v2 memory.events)")
    parent = os.path.dirname(events)
    d = os.path.join(parent, name)
    try:
        os.mkdir(d)
        if events.endswith("memory.oom_control"):                    # cgroup v1
            _write(d, "memory.limit_in_bytes", limit_bytes)
            if os.path.exists(os.path.join(d, "memory.memsw.limit_in_bytes")):
                _write(d, "memory.memsw.limit_in_bytes", limit_bytes)
        else:                                                         # cgroup v2
            _write(d, "memory.max", limit_bytes)
            if os.path.exists(os.path.join(d, "memory.swap.max")):
                _write(d, "memory.swap.max", 0)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.rmdir(d)
        pytest.skip(f"cannot make a memory cgroup under {parent}: {e}")
    try:
        yield os.path.join(d, "cgroup.procs")
    finally:
        deadline = time.time() + 10
        while True:
            try:
                os.rmdir(d)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)


def _write(d: str, name: str, value) -> None:
    with open(os.path.join(d, name), "w") as f:
        f.write(str(value))


