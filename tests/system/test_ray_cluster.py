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


def record(tmp_path):
    (path,) = list((tmp_path / "runs").glob("*/run.json"))
    rec = json.loads(path.read_text())
    return rec, {t["task"]: t for t in rec["tasks"]}


def test_strict_spread_puts_ps_and_worker_on_different_nodes(two_nodes, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(f"backend: ray\nray: {{strategy: STRICT_SPREAD}}\n"
                 f"cluster: {{ps: 1, worker: 1}}\n"
                 f"program: {{command: [python, {os.path.join(ROOT, 'trainer.py')}], "
                 f"args: [--train_steps=100]}}\nlogdir: {tmp_path / 'runs'}\n")
    rc, out = run(two_nodes, f)
    assert rc == 0, out[-4000:]
    rec, rows = record(tmp_path)
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
    rec, rows = record(tmp_path)
    assert rec["backend"] == "ray"
    with open(rows["chief:0"]["log"]) as log:
        done = [ln for ln in log.read().splitlines() if ln.startswith("keras_tutorial_pss: done: ")]
    assert done, "no history line"
    h = json.loads(done[-1][len("keras_tutorial_pss: done: "):])
    assert len(h["loss"]) == 2
    # SPREAD over two nodes: the four tasks use both
    assert len({row["endpoint"].rsplit(":", 1)[0] for row in rows.values()}) == 2, rows
    assert ray_nodes.leftovers(two_nodes) is None
