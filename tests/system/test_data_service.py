"""The tf.data service from the cluster file (``data_service:``): tfcluster starts a dispatcher
and two data workers with the cluster, hands every training task TFCLUSTER_DATA_SERVICE, and
stops them after training as it stops ps tasks. Real TensorFlow on loopback."""
from __future__ import annotations

import json
import os

import pytest
import yaml

from helpers import ROOT
from helpers.launch import assert_all_gone, finish, run_record, start, tail, tasks_of

PROGRAM = os.path.join(ROOT, "tests", "programs", "data_service_reader.py")
DATA_TASKS = ("tfdata_dispatcher:0", "tfdata_worker:0", "tfdata_worker:1")


def run(tmp_path, cluster, data_service, n, **more):
    """Launch two training workers that read ``range(n)`` through the data service; returns
    (the elements each saw, the run record)."""
    out = tmp_path / "seen"
    out.mkdir()
    doc = {"cluster": cluster, "data_service": data_service,
           "program": {"command": ["python", PROGRAM], "args": [str(out), str(n)]},
           "success": "all-workers", "logdir": str(tmp_path / "runs"), **more}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = start(str(path), tmp_path)
    assert finish(proc, timeout=180) == 0, tail(proc)
    seen = [json.loads((out / f"worker-{i}.json").read_text()) for i in (0, 1)]
    record = run_record(tmp_path)
    assert set(DATA_TASKS) <= set(tasks_of(record))
    assert all(tasks_of(record)[t]["pid"] for t in DATA_TASKS)
    assert_all_gone(record)          # no data-service process is left
    return seen, record


@pytest.mark.tf
def test_two_workers_share_one_distributed_epoch_through_the_data_service(tmp_path, ports):
    a, b, d, w1, w2 = ports(5)
    seen, _ = run(tmp_path, {"worker": [f"localhost:{a}", f"localhost:{b}"]},
                  {"dispatcher": f"localhost:{d}", "workers": [f"localhost:{w1}", f"localhost:{w2}"]}, 300)
    # every element exactly once between the two workers
    assert sorted(seen[0] + seen[1]) == list(range(300)), (len(seen[0]), len(seen[1]))


@pytest.mark.tf
def test_data_service_with_counts(tmp_path, ports):
    """dispatcher: 1 and workers: 2 as counts: ports are assigned at launch, like a count job."""
    seen, _ = run(tmp_path, {"worker": 2}, {"dispatcher": 1, "workers": 2}, 120, base_port=ports(1)[0])
    assert sorted(seen[0] + seen[1]) == list(range(120))
