"""``launch --backend ray`` when the node of the ps is lost mid-run: TensorFlow's rule (a ps that
moves means a new TF_CONFIG for every task) carried out by the run core
(:func:`tfcluster.core.rules.decide_move`, the machine's regroup) and the Ray driver (placed
again without the lost node). A real three-node Ray on this machine (tests/helpers/ray_nodes.py),
real trainer.py, a real checkpoint to resume from."""
from __future__ import annotations

import json
import os

import pytest

from helpers import ROOT, ray_nodes

pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(900)


def test_a_lost_ps_node_moves_the_cluster_and_trainer_resumes_from_its_checkpoint(tmp_path):
    """A head (127.0.0.2) and two raylets (.3, .4) that alone offer the resource ps tasks ask
    for: ps:0 lands on one of them, worker:0 on the head. That node is killed mid-run (its raylet
    and workers, by its session): ps:0 is lost, the cluster is stopped in order and placed again
    with ps:0 on the other raylet, every task gets the new TF_CONFIG, and trainer.py finishes
    from its checkpoint. run.json and the events record the old and new endpoints."""
    cluster = ray_nodes.start((("127.0.0.2", 3, {"head": 1}), ("127.0.0.3", 1, {"spot": 1}),
                               ("127.0.0.4", 1, {"spot": 1})))
    try:
        ckpt = tmp_path / "ckpt"
        f = tmp_path / "c.yaml"
        f.write_text(f"backend: ray\n"
                     f"ray: {{placement_timeout: 60, jobs: {{ps: {{resources: {{spot: 0.5}}}}, "
                     f"worker: {{resources: {{head: 0.5}}}}}}}}\n"
                     f"cluster: {{ps: 1, worker: 1}}\n"
                     f"restart: {{policy: on-failure, max_restarts: 5, backoff: 2, min_uptime: 0}}\n"
                     f"program: {{command: [python, {os.path.join(ROOT, 'trainer.py')}], "
                     f"args: [--train_steps=3000, --checkpoint_dir={ckpt}, "
                     f"--save_checkpoint_steps=50]}}\nlogdir: {tmp_path / 'runs'}\n")

        def ready(rows):
            step = (rows["worker:0"].get("progress") or {}).get("step") or 0
            return step >= 150 and (ckpt / "checkpoint").exists()

        def ps_node(rows):
            host = rows["ps:0"]["endpoint"].rsplit(":", 1)[0]
            assert host in ("127.0.0.3", "127.0.0.4"), rows
            return 1 if host == "127.0.0.3" else 2

        rc, out, then = ray_nodes.launch_and_lose(cluster, f, tmp_path, ready, ps_node,
                                                  ready_timeout=240)
        assert then["worker:0"]["progress"]["step"] < 3000, "trained to the end before the kill"
        old_ps = then["ps:0"]["endpoint"]
        host = old_ps.rsplit(":", 1)[0]
        assert rc == 0, out[-6000:]
        rec, rows = ray_nodes.record(tmp_path)
        other = "127.0.0.4" if host == "127.0.0.3" else "127.0.0.3"
        assert rows["ps:0"]["endpoint"].startswith(other + ":"), rows["ps:0"]
        assert rows["ps:0"]["restarts"] == 1 and rows["worker:0"]["restarts"] >= 1
        assert rows["ps:0"]["env"]["TFCLUSTER_RESTART_COUNT"] == "1"
        conf = json.loads(rows["worker:0"]["env"]["TF_CONFIG"])
        assert conf["cluster"]["ps"] == [rows["ps:0"]["endpoint"]]
        (move,) = rec["moves"]
        assert move["task"] == "ps:0" and host in move["node"]
        assert move["old"]["ps:0"] == old_ps and move["new"]["ps:0"] == rows["ps:0"]["endpoint"]
        events = [json.loads(ln) for ln in open(os.path.join(rec["run_dir"], "events.jsonl"))]
        assert [e for e in events if e.get("event") == "cluster_moved"]
        assert "was lost" in out and "placed again" in out, out[-4000:]
        with open(rows["worker:0"]["log"]) as log:
            text = log.read()
        assert "restored " in text.split("tfcluster: restart")[-1], text[-3000:]
        assert rows["worker:0"]["progress"]["step"] >= 3000
        assert ray_nodes.leftovers(cluster) is None
    finally:
        cluster.stop()
