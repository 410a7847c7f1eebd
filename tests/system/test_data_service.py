"""The tf.data service from the cluster file (``data_service:``): tfcluster starts a dispatcher
and two data workers with the cluster, hands every training task TFCLUSTER_DATA_SERVICE, and
stops them after training as it stops ps tasks. Real TensorFlow on loopback."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml

from helpers import ROOT
from helpers.launch import assert_all_gone, finish, run_record, start, tail, tasks_of

PROGRAM = os.path.join(ROOT, "tests", "programs", "data_service_reader.py")
DATA_TASKS = ("tfdata_dispatcher:0", "tfdata_worker:0", "tfdata_worker:1")


def run(tmp_path, cluster, data_service, n, during=None, **more):
    """Launch two training workers that read ``range(n)`` through the data service (after
    ``during(proc)``, when given, has run); returns (the elements each saw, the run record)."""
    out = tmp_path / "seen"
    out.mkdir()
    go = tmp_path / "go"
    if during is None:
        go.write_text("")
    doc = {"cluster": cluster, "data_service": data_service,
           "program": {"command": ["python", PROGRAM], "args": [str(out), str(n), str(go)]},
           "success": "all-workers", "logdir": str(tmp_path / "runs"), **more}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = start(str(path), tmp_path)
    if during is not None:
        during(proc)
        go.write_text("")
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


@pytest.mark.tf
def test_a_failed_data_worker_is_restarted(tmp_path, ports):
    """SIGKILL a data worker before the training tasks read: tfcluster starts it again (its
    restart policy is on-failure), and the run still sees every element once."""
    a, b, d, w1, w2 = ports(5)

    def kill_data_worker(proc):
        victim = None
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
            try:
                t = tasks_of(run_record(tmp_path))["tfdata_worker:1"]
            except (FileNotFoundError, ValueError, IndexError, KeyError):
                continue
            if victim is None and t["pid"] and t.get("state") == "running":
                victim = t["pid"]
                time.sleep(2.0)           # past min_uptime: a failure, not a failed start
                os.kill(victim, signal.SIGKILL)
            elif victim is not None and t["pid"] and t["pid"] != victim and (t.get("restarts") or 0) >= 1:
                return
        pytest.fail(f"tfdata_worker:1 was not restarted:\n{tail(proc)}")

    seen, record = run(tmp_path, {"worker": [f"localhost:{a}", f"localhost:{b}"]},
                       {"dispatcher": f"localhost:{d}", "workers": [f"localhost:{w1}", f"localhost:{w2}"]},
                       200, during=kill_data_worker)
    assert sorted(seen[0] + seen[1]) == list(range(200))
    assert tasks_of(record)["tfdata_worker:1"]["restarts"] == 1
