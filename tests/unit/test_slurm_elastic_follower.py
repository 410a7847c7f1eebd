"""The Slurm launcher's side of an elastic run (``--no-kill``): a node of the job that Slurm has
down is named and each of its tasks written to the run folder for the other nodes' agents (whose
run machines decide: tests/unit/test_machine_elastic_peers.py); once every other task has ended,
the step's exit code (their highest) goes to ``step_over-0`` for the batch script. Pure: Slurm's
answers are faked, no process is started."""
from __future__ import annotations

import textwrap

from tfcluster.backends.agent.folder import FolderChannel
from tfcluster.backends.slurm import follower
from tfcluster.backends.slurm.batch import plan_data
from tfcluster.backends.slurm.follower import Follower
from tfcluster.clusterfile import config
from tfcluster.plan.runplan import LaunchOptions, build_plan

WHERE = {"ps:0": "n1", "worker:0": "n1", "worker:1": "n2", "worker:2": "n2", "worker:3": "n3"}


def test_a_lost_node_is_told_to_the_agents_and_srun_is_ended_once_the_rest_have(tmp_path, monkeypatch):
    said, asked = [], []
    monkeypatch.setattr(follower, "info", lambda line, *a, **k: said.append(line))

    def lost_nodes(nodes, down_only=False):
        asked.append(down_only)
        return [("n2", "Not responding")]
    monkeypatch.setattr(follower, "lost_nodes", lost_nodes)
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""\
        cluster: {ps: 1, worker: 4}
        program: {command: [python, t.py]}
        elastic: {min_workers: 2}
    """))
    run_dir = tmp_path / "runs" / "e1"
    run_dir.mkdir(parents=True)
    plan = build_plan(config.load(str(tmp_path / "c.yaml")),
                      LaunchOptions(backend="slurm", logdir=str(tmp_path / "runs"), run_id="e1"))
    f = Follower(plan_data(plan), str(run_dir), quiet=True)
    assert f.elastic
    f.segments, f.nodes = 1, ["n1", "n2", "n3"]
    channel = FolderChannel(str(run_dir))
    for i, (task, host) in enumerate(WHERE.items()):
        channel.publish_port(task, {"task": task, "host": host, "port": 2222 + i})
    f._watch_elastic("7")
    assert asked == [True]                  # Slurm's verdict (down), not a missed ping
    assert [(r["task"], r["node"], r["reason"]) for r in channel.lost()] == \
        [("worker:1", "n2", "Not responding"), ("worker:2", "n2", "Not responding")]
    assert "node n2 was lost mid-run (Not responding); it ran worker:1, worker:2: Slurm kept the " \
           "job (--no-kill); the run's agents decide" in said
    assert [(n["node"], n["tasks"], n["slurm"]) for n in f.lost] == [("n2", ["worker:1", "worker:2"], "kept")]
    f.elastic_at = 0.0
    f._watch_elastic("7")                   # the same node again: told once
    assert len(f.lost) == 1 and not (run_dir / "step_over-0").exists()
    for task, code in (("ps:0", 0), ("worker:0", 0), ("worker:3", 0)):
        f.elastic_at = 0.0
        assert not (run_dir / "step_over-0").exists()
        channel.write_exit(task, {"task": task, "final": True, "exit_code": code, "segment": 0})
        f._watch_elastic("7")
    assert (run_dir / "step_over-0").read_text() == "0\n"


def test_a_run_that_is_not_elastic_is_not_watched(tmp_path, monkeypatch):
    (tmp_path / "c.yaml").write_text("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n")
    plan = build_plan(config.load(str(tmp_path / "c.yaml")), LaunchOptions(backend="slurm"))
    assert not Follower(plan_data(plan), str(tmp_path), quiet=True).elastic
