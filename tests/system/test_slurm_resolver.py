"""The Slurm backend's rank layout gives every task the job, index, host and port that
TensorFlow's own SlurmClusterResolver gives it (imports TensorFlow in the test)."""
from __future__ import annotations

import textwrap

from tfcluster.backends.slurm.batch import plan_data
from tfcluster.backends.slurm.layout import layout
from tfcluster.clusterfile import config
from tfcluster.plan.runplan import LaunchOptions, build_plan


def _cluster(text: str, tmp_path) -> config.Cluster:
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(text))
    return config.load(str(p))


def _plan(c, **opts):
    return plan_data(build_plan(c, LaunchOptions(backend="slurm", **opts)))


def test_layout_matches_slurm_cluster_resolver(tmp_path, monkeypatch):
    """Same jobs, hosts and ports as tf.distribute.cluster_resolver.SlurmClusterResolver."""
    c = _cluster("""
        cluster: {chief: 1, ps: 2, worker: 4, evaluator: 1}
        program: {command: [python, t.py]}
        base_port: 8888
    """, tmp_path)
    plan = _plan(c)
    nodes, per_node = ["n1", "n2", "n3"], [3, 3, 2]
    ours = layout(plan, nodes, per_node)
    assert [(j, i) for j, i, _, _ in ours][:4] == [("chief", 0), ("evaluator", 0), ("ps", 0), ("ps", 1)]
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import SlurmClusterResolver
    for rank in range(8):
        monkeypatch.setenv("SLURM_PROCID", str(rank))
        r = SlurmClusterResolver(jobs={"chief": 1, "ps": 2, "worker": 4, "evaluator": 1},
                                 port_base=8888, gpus_per_node=3, gpus_per_task=1,
                                 tasks_per_node=dict(zip(nodes, per_node)), auto_set_gpu=False)
        spec = r.cluster_spec().as_dict()
        job, idx, host, port = ours[rank]
        assert r.get_task_info() == (job, idx)
        assert spec[job][idx] == f"{host}:{port}"
