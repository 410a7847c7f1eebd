"""tfcluster report on a long run's records, in a process of its own (its peak memory is
measured): the events are streamed, so the memory stays bounded whatever the length of
events.jsonl. No TensorFlow. (Broken and hostile records: tests/unit/test_broken_records.py.)"""
from __future__ import annotations

import os
import subprocess
import sys

from helpers import ROOT
from helpers.records import T0, good_record, make

GEN = r"""
import json, sys
d, tasks, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = 1764500000.0
with open(d + "/events.jsonl", "w") as f:
    f.write(json.dumps({"time": t0, "event": "run_started", "task": None, "tasks":
                        [f"worker:{i}" for i in range(tasks)], "chief": "worker:0"}) + "\n")
    for i in range(tasks):
        f.write(json.dumps({"time": t0, "event": "task_started", "task": f"worker:{i}", "pid": 10 + i,
                            "attempt": 0}) + "\n")
    line = ('{"time": %.3f, "event": "progress", "task": "worker:%d", "step": %d, "total": 100000000, '
            '"metrics": {"loss": 0.%06d, "accuracy": 0.9%05d, "learning_rate": 0.001}}\n')
    for s in range(n):
        f.write("".join(line % (t0 + 1 + s + i / 1000.0, i, s * 10, s, s) for i in range(tasks)))
"""

# The peak of this process's own memory: VmHWM (ru_maxrss would count the test process too:
# Linux keeps the larger of the two across the exec, and pytest grows over a long session)
MEASURE = r"""
import sys, time
from tfcluster.runs.report import write_report
t = time.time()
path = write_report(sys.argv[1])
with open("/proc/self/status") as f:
    hwm = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
print(hwm // 1024, round(time.time() - t, 1))
"""


def test_report_of_a_long_run_stays_within_a_memory_bound(tmp_path):
    """A long run's events are streamed: 20 tasks x 4,000 progress reports (about 14 MB of
    events.jsonl) make a report in bounded memory, with at most MAX_POINTS points per task.
    (100 tasks x 3 h, 122 MB of events, is measured in docs/LAUNCH.md.)"""
    d = make(tmp_path, record=good_record(tasks=[], ended=T0 + 7000))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    subprocess.run([sys.executable, "-c", GEN, d, "20", "4000"], check=True, timeout=120, env=env)
    size = os.path.getsize(os.path.join(d, "events.jsonl"))
    r = subprocess.run([sys.executable, "-c", MEASURE, d], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    peak_mb, seconds = r.stdout.split()
    page = os.path.getsize(os.path.join(d, "report.html"))
    print(f"events.jsonl {size / 1e6:.0f} MB: peak RSS {peak_mb} MB, {seconds}s, page {page / 1e6:.1f} MB")
    assert size > 10e6
    assert int(peak_mb) < 150          # the whole file as dicts would take well over 200 MB
    assert page < 3e6
