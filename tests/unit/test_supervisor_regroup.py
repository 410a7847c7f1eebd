"""The supervisor carrying out a move (a task's node lost) over a fake backend and a fake clock:
it asks the backend to place again, takes the new endpoints into the plan (a new TF_CONFIG for
every task), records them, and starts every task again. No processes, no Ray."""
from __future__ import annotations

import json

from helpers.fake import FakeBackend, make
from tfcluster.errors import UserError

CLUSTER = """\
    cluster: {ps: [localhost:3000], worker: [localhost:3001, localhost:3002]}
    program: {command: [python, t.py]}
    restart: {policy: on-failure, max_restarts: 2, backoff: 1, min_uptime: 0}
    grace: 1
"""
NODE = "10.0.0.3 (abc)"
SCRIPT = {"ps:0": [(-9, 1.0, []), (None, None, [])],       # its node is lost after 1 s
          "worker:0": [(None, None, []), (0, 3.0, [])],    # the chief: done after the move
          "worker:1": [(None, None, [])]}


def moving(backend, placed=None, error=None):
    """``backend`` where ps:0's first process is lost with its node, and place_again answers
    ``placed`` (task -> endpoint), raises ``error``, or (neither) is the base's: cannot move."""
    start = backend.start

    def start_lost(spec):
        h = start(spec)
        if spec.name == "ps:0" and len(backend.handles["ps:0"]) == 1:
            h.lost_node = lambda: NODE
            h.cause = lambda rc: f"its Ray actor or node {NODE} was lost"
        return h

    def place_again(names):
        backend.placed.append(list(names))
        if error:
            raise UserError(error)
        return placed

    backend.start = start_lost
    backend.placed = []
    if placed is not None or error is not None:
        backend.place_again = place_again
    return backend


def rows(tmp_path):
    rec = json.loads((tmp_path / "runs" / "t" / "run.json").read_text())
    return rec, {t["task"]: t for t in rec["tasks"]}


def events(tmp_path):
    path = tmp_path / "runs" / "t" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_lost_node_moves_every_task_with_a_new_tf_config(tmp_path):
    sup, be, clock, out, err = make(tmp_path, CLUSTER, SCRIPT)
    new = {"ps:0": ("10.0.0.4", 4000), "worker:0": ("10.0.0.2", 4001), "worker:1": ("10.0.0.2", 4002)}
    moving(be, placed=new)
    assert sup.run() == 0, err.getvalue()
    assert [n for n, _ in be.started] == ["ps:0", "worker:0", "worker:1"] * 2
    assert be.placed == [["ps:0", "worker:0", "worker:1"]]
    # the workers were stopped (SIGTERM) before the cluster was placed again; ps first again
    assert [s for s in be.signal_log[:2]] == [("worker:0", 15), ("worker:1", 15)]
    for name, env in be.started[3:]:
        conf = json.loads(env["TF_CONFIG"])
        assert conf["cluster"] == {"ps": ["10.0.0.4:4000"], "worker": ["10.0.0.2:4001", "10.0.0.2:4002"]}
        assert env["TFCLUSTER_RESTART_COUNT"] == "1", name
    rec, by = rows(tmp_path)
    assert by["ps:0"]["endpoint"] == "10.0.0.4:4000" and by["ps:0"]["restarts"] == 1
    assert rec["total_restarts"] == 1
    (move,) = rec["moves"]
    assert move["node"] == NODE and move["old"]["ps:0"] == "localhost:3000"
    assert move["new"]["ps:0"] == "10.0.0.4:4000"
    ev = events(tmp_path)
    kinds = [e["event"] for e in ev]
    assert kinds.index("cluster_restarting") < kinds.index("cluster_moved") < kinds.index("cluster_restarted")
    assert "placed again: ps:0 localhost:3000 -> 10.0.0.4:4000" in err.getvalue()


def test_a_cluster_that_cannot_be_placed_again_fails_naming_the_node(tmp_path):
    sup, be, clock, out, err = make(tmp_path, CLUSTER, SCRIPT)
    moving(be, error="ray: the run's 3 tasks could not be placed within 10s")
    assert sup.run() == 1
    rec, by = rows(tmp_path)
    assert f"its node {NODE} was lost and the cluster could not be placed again" in by["ps:0"]["note"]
    assert "could not be placed within 10s" in by["ps:0"]["note"]
    assert rec["root_cause"].startswith("ps:0")
    assert [n for n, _ in be.started] == ["ps:0", "worker:0", "worker:1"]


def test_a_backend_that_cannot_move_a_task_fails_the_run(tmp_path):
    sup, be, clock, out, err = make(tmp_path, CLUSTER, SCRIPT)
    moving(be)
    assert isinstance(be, FakeBackend) and sup.run() == 1
    _, by = rows(tmp_path)
    assert "the fake backend cannot move a task" in by["ps:0"]["note"]
