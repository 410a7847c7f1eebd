"""``launch --backend ray`` on a real several-node Ray on this machine: a head on 127.0.0.2 and a
second raylet on 127.0.0.3, started by the test (tests/helpers/ray_nodes.py). SPREAD places ps
and worker on different nodes and TF_CONFIG names those nodes; TensorFlow's ParameterServer
training with Keras ``fit`` (the tutorial's program, unmodified) runs across them. Nothing is
left afterwards."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from helpers import PROGRAMS, ROOT, ray_nodes

pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def two_nodes():
    cluster = ray_nodes.start((("127.0.0.2", 3, None), ("127.0.0.3", 3, None)))
    yield cluster
    cluster.stop()


def run(cluster, path, timeout=400):
    r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(path), "--no-live"],
                       capture_output=True, text=True, timeout=timeout, env=cluster.env())
    return r.returncode, r.stdout + r.stderr


def test_strict_spread_puts_ps_and_worker_on_different_nodes(two_nodes, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(f"backend: ray\nray: {{strategy: STRICT_SPREAD}}\n"
                 f"cluster: {{ps: 1, worker: 1}}\n"
                 f"program: {{command: [python, {os.path.join(ROOT, 'trainer.py')}], "
                 f"args: [--train_steps=100]}}\nlogdir: {tmp_path / 'runs'}\n")
    rc, out = run(two_nodes, f)
    assert rc == 0, out[-4000:]
    rec, rows = ray_nodes.record(tmp_path)
    hosts = {name: row["endpoint"].rsplit(":", 1)[0] for name, row in rows.items()}
    assert {hosts["ps:0"], hosts["worker:0"]} == {"127.0.0.2", "127.0.0.3"}, hosts
    conf = json.loads(rows["worker:0"]["env"]["TF_CONFIG"])
    assert conf["cluster"] == {"ps": [rows["ps:0"]["endpoint"]], "worker": [rows["worker:0"]["endpoint"]]}
    assert rows["worker:0"]["progress"]["step"] >= 100
    assert ray_nodes.leftovers(two_nodes) is None


@pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None,
                    reason="tf_keras is not installed: pip install -e '.[test,keras2]'")
def test_pss_keras_fit_of_the_tutorial_program_on_ray(two_nodes, tmp_path):
    serve = "{command: [python, -m, tfcluster.runtime.serve], args: [], env: {GRPC_FAIL_FAST: use_caller}}"
    f = tmp_path / "c.yaml"
    f.write_text(f"backend: ray\nray: {{strategy: SPREAD}}\n"
                 f"cluster: {{chief: 1, ps: 1, worker: 2}}\n"
                 f"program:\n  command: [python, {os.path.join(PROGRAMS, 'keras_tutorial_pss.py')}]\n"
                 f"  args: [--input=dataset, --epochs=2, --steps_per_epoch=10]\n"
                 f"  env: {{TF_USE_LEGACY_KERAS: '1'}}\n"
                 f"jobs: {{ps: {serve}, worker: {serve}}}\nsuccess: chief\ngrace: 1\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    rc, out = run(two_nodes, f)
    assert rc == 0, out[-4000:]
    rec, rows = ray_nodes.record(tmp_path)
    assert rec["backend"] == "ray"
    with open(rows["chief:0"]["log"]) as log:
        done = [ln for ln in log.read().splitlines() if ln.startswith("keras_tutorial_pss: done: ")]
    assert done, "no history line"
    h = json.loads(done[-1][len("keras_tutorial_pss: done: "):])
    assert len(h["loss"]) == 2
    # SPREAD over two nodes: the four tasks use both
    assert len({row["endpoint"].rsplit(":", 1)[0] for row in rows.values()}) == 2, rows
    assert ray_nodes.leftovers(two_nodes) is None


def test_ray_job_submit_runs_the_launch_as_kuberay_users_do(tmp_path):
    """docs/BACKENDS.md's KubeRay line on a head with its dashboard and job server: the launcher
    runs as a Ray job with the project folder shipped (--working-dir .); tasks run in Ray's copy."""
    cluster = ray_nodes.start((("127.0.0.2", 4, None),), dashboard=True)
    try:
        project = tmp_path / "project"
        project.mkdir()
        (project / "train.py").write_text((open(os.path.join(ROOT, "trainer.py")).read()))
        (project / "cluster.yaml").write_text(
            f"cluster: {{ps: 1, worker: 1}}\nprogram: {{command: [python, train.py], "
            f"args: [--train_steps=50]}}\nlogdir: {tmp_path / 'runs'}\n")
        env = dict(os.environ, RAY_ADDRESS=cluster.dashboard_url)
        r = subprocess.run([*ray_nodes.RAY, "job", "submit",
                            "--working-dir", ".", "--", "python", "-m", "tfcluster", "launch",
                            "cluster.yaml", "--backend", "ray", "--no-live"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=400)
        assert r.returncode == 0 and "succeeded" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]
        rec, rows = ray_nodes.record(tmp_path)
        assert rec["backend"] == "ray" and rows["worker:0"]["progress"]["step"] >= 50
        assert "_ray_pkg_" in rows["worker:0"]["log"] or "_ray_pkg_" in json.dumps(rows["worker:0"]["argv"])
        assert ray_nodes.leftovers(cluster) is None
    finally:
        cluster.stop()


def test_a_lost_node_whose_tasks_cannot_be_placed_again_fails_the_run_naming_it(two_nodes, tmp_path):
    """Last in this module: it kills the second node. STRICT_SPREAD puts one task on each node;
    the task on the lost node is reported lost, the cluster is stopped to move, and with one node
    left STRICT_SPREAD cannot place it again: the run fails naming the lost task and its node;
    nothing of the run is left on the head."""
    f = tmp_path / "c.yaml"
    f.write_text(f"backend: ray\nray: {{strategy: STRICT_SPREAD, placement_timeout: 10}}\n"
                 f"cluster: {{ps: 1, worker: 1}}\n"
                 f"restart: {{policy: on-failure, max_restarts: 1, backoff: 0.5, min_uptime: 0}}\n"
                 f"program: {{command: [python, {os.path.join(PROGRAMS, 'listener.py')}]}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    rc, out, rows = ray_nodes.launch_and_lose(
        two_nodes, f, tmp_path, lambda rows: all(t["state"] == "running" for t in rows.values()),
        lambda rows: 1, timeout=180)
    lost = next(n for n, t in rows.items() if t["endpoint"].startswith("127.0.0.3:"))
    assert rc == 1, out[-4000:]
    assert f"first failure: {lost}" in out and "was lost" in out, out[-4000:]
    assert "the cluster could not be placed again" in out, out[-4000:]
    assert ray_nodes.leftovers(two_nodes) is None
