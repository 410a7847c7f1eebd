"""The guide's smoke test: a two-task cluster {"local": ["localhost:2222", "localhost:2223"]}
of real tf.compat.v1.train.Servers, and a session on task 0 that runs an op placed on task 1."""
import subprocess
import sys

import pytest

from tfcluster.net.ports import describe_port_holder, port_in_use

SCRIPT = r"""
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
cluster = tf.train.ClusterSpec({"local": ["localhost:2222", "localhost:2223"]})
s0 = v1.train.Server(cluster, job_name="local", task_index=0)
s1 = v1.train.Server(cluster, job_name="local", task_index=1)
with tf.device("/job:local/task:1"):
    x = v1.constant(20.0) + v1.constant(22.0)
    dev = x.device
with v1.Session(s0.target) as sess:
    print("RESULT", sess.run(x), dev)
"""


@pytest.mark.tf
def test_seed_smoke_two_local_servers():
    for port in (2222, 2223):
        if port_in_use(port):
            pytest.fail(f"port {port} is already in use{describe_port_holder(port)}")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RESULT 42.0 /job:local/task:1" in r.stdout


@pytest.mark.tf
def test_hello_without_file():
    r = subprocess.run([sys.executable, "-m", "tfcluster", "hello"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "Hello, distributed TensorFlow!"
    # TensorFlow's start-up noise (absl, oneDNN, no GPU, cuInit) folded: the
    # greeting comes first, on the terminal too
    assert not any(w in r.stderr for w in ("oneDNN", "InitializeLog", "cuda drivers", "cuInit")), r.stderr


@pytest.mark.tf
def test_hello_with_file_runs_op_on_second_task(tmp_path, ports):
    """`tfcluster hello FILE` on the guide's local job (one task on IPv4, one on IPv6): the op
    runs on the second task (test_real_programs' hello of the same job, a launch of its own, is
    merged here)."""
    a, b = ports(2)
    f = tmp_path / "c.yaml"
    f.write_text(f'cluster: {{local: ["localhost:{a}", "[::1]:{b}"]}}\n')
    r = subprocess.run([sys.executable, "-m", "tfcluster", "hello", str(f)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Hello, distributed TensorFlow! (computed on /job:local/task:1)" in r.stdout


@pytest.mark.tf
def test_python_api_gives_a_real_cluster_spec():
    code = ("import tfcluster, json\n"
            "c = tfcluster.loads('cluster: {ps: [h:1], worker: [h:2, h:3], evaluator: [h:4]}')\n"
            "spec = c.cluster_spec()\n"
            "print(json.dumps(spec.as_dict()), spec.num_tasks('worker'), type(spec).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[0] == '{"ps": ["h:1"], "worker": ["h:2", "h:3"]} 2 ClusterSpec'
