"""The Ray backend's pure parts: the file's ``ray:`` section, the placement it asks for, the
address, the plan with the endpoints Ray gave, and ``launch --dry-run --backend ray`` (no Ray
connection)."""
from __future__ import annotations

import json
import os

import pytest

from helpers import cli, load
from tfcluster.clusterfile.ray import RaySpec, address, bundles, describe_bundle, runtime_env
from tfcluster.errors import UserError
from tfcluster.plan import contract
from tfcluster.plan.runplan import LaunchOptions, build_plan

FILE = """
backend: ray
cluster: {chief: 1, ps: 2, worker: 2, evaluator: 1}
program: {command: [python, train.py]}
ray:
  address: 10.0.0.1:6379
  strategy: SPREAD
  placement_timeout: 30
  runtime_env: {working_dir: ., env_vars: {A: "1"}, pip: [tf_keras]}
  resources: {num_cpus: 2}
  jobs:
    worker: {num_gpus: 1, memory: 2000000000, resources: {accel: 1}}
"""


def test_one_bundle_per_task_ps_asks_no_gpu_and_jobs_override_the_defaults(tmp_path):
    c = load(FILE, tmp_path)
    spec = c.spec.ray
    plan = build_plan(c)
    got = bundles(spec, [t.job for t in plan.selected_tasks])
    by_task = dict(zip([t.name for t in plan.selected_tasks], got))
    assert len(got) == 6
    assert by_task["ps:0"] == {"CPU": 2.0} and by_task["chief:0"] == {"CPU": 2.0}
    assert by_task["worker:1"] == {"CPU": 2.0, "GPU": 1.0, "memory": 2e9, "accel": 1.0}
    assert describe_bundle(by_task["worker:1"]) == "CPU 2, GPU 1, memory 2.0 GB, accel 1"
    assert bundles(RaySpec(), ["ps"]) == [{"CPU": 1.0}]     # nothing said: one CPU, no GPU


def test_the_address_follows_rays_conventions():
    spec = RaySpec(address="10.0.0.1:6379")
    assert address(spec, {"RAY_ADDRESS": "auto"}) == "auto"      # RAY_ADDRESS wins
    assert address(spec, {}) == "10.0.0.1:6379"
    assert address(RaySpec(), {}) is None                        # Ray's default


def test_runtime_env_working_dir_is_relative_to_the_file(tmp_path):
    c = load(FILE, tmp_path)
    env = runtime_env(c.spec.ray, c.base_dir)
    assert env == {"working_dir": str(tmp_path), "env_vars": {"A": "1"}, "pip": ["tf_keras"]}


@pytest.mark.parametrize("text, field", [
    ("ray: {strategy: SPREADS}", "ray.strategy"),
    ("ray: {jobs: {worker: {num_gpu: 1}}}", "ray.jobs.worker.num_gpu"),
    ("ray: {placement_timeout: 0}", "ray.placement_timeout"),
    ("backend: kubernetes", "backend"),
])
def test_bad_ray_settings_name_the_field(tmp_path, text, field):
    with pytest.raises(UserError) as e:
        load("cluster: {ps: 1, worker: 1}\nprogram: {command: [python, t.py]}\n" + text, tmp_path)
    assert field in str(e.value)


def test_the_file_picks_ray_counts_are_allowed_and_every_task_is_selected(tmp_path):
    plan = build_plan(load(FILE, tmp_path))
    assert plan.backend == "ray"
    assert len(plan.selected) == 6
    assert build_plan(load(FILE, tmp_path), LaunchOptions(backend="local")).backend == "local"
    with pytest.raises(UserError, match="--host: per-host mode does not apply to --backend ray"):
        build_plan(load(FILE, tmp_path), LaunchOptions(hosts=("a",)))


def test_the_plan_takes_the_endpoints_ray_gave(tmp_path):
    plan = build_plan(load(FILE, tmp_path))
    given = {t.name: (f"10.0.0.{i}", 40000 + i) for i, t in enumerate(plan.tasks)}
    placed = plan.with_endpoints(given)
    assert placed.task("worker:1").endpoint == "10.0.0.%d:%d" % (
        given["worker:1"][1] - 40000, given["worker:1"][1])
    assert "evaluator" not in placed.cluster                 # TensorFlow's rule
    assert placed.cluster["ps"] == [f"{h}:{p}" for h, p in (given["ps:0"], given["ps:1"])]
    conf = json.loads(placed.env(placed.task("worker:0"))[contract.TF_CONFIG])
    assert conf["cluster"] == placed.cluster and conf["task"] == {"type": "worker", "index": 0}
    assert placed.task("worker:0").local_tasks == 1           # each on a host of its own here


def test_dry_run_shows_the_placement_without_connecting(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    (tmp_path / "train.py").write_text("print('hi')\n")
    c = tmp_path / "cluster.yaml"
    c.write_text(FILE)
    rc, out, err = cli(capsys, "launch", str(c), "--dry-run")
    assert rc == 0, err
    assert "# ray: address 10.0.0.1:6379; one placement group, strategy SPREAD" in out
    assert "# ray: worker:1 bundle: CPU 2, GPU 1, memory 2.0 GB, accel 1" in out
    assert "# ray: ps:0 bundle: CPU 2\n" in out
    assert "(backend ray)" in out


@pytest.mark.parametrize("backend_from", ["file", "flag"])
def test_a_data_service_on_ray_is_one_line_exit_2_before_anything_starts(tmp_path, capsys,
                                                                         monkeypatch, backend_from):
    """docs/CLUSTER_YAML.md, the tf.data service: "Ray: not yet" -- launch refuses it, the dry
    run too, naming data_service and the backend; no run folder is made."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    c = tmp_path / "cluster.yaml"
    c.write_text("cluster: {worker: 2}\ndata_service: {dispatcher: 1, workers: 2}\n"
                 "program: {command: [python, train.py]}\n"
                 + ("backend: ray\n" if backend_from == "file" else ""))
    flags = () if backend_from == "file" else ("--backend", "ray")
    for dry in (("--dry-run",), ()):
        rc, out, err = cli(capsys, "launch", str(c), *flags, *dry)
        assert rc == 2 and out == "", (out, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith("tfcluster: error: data_service:") and "--backend ray" in err, err
    assert sorted(os.listdir(tmp_path)) == ["cluster.yaml", "train.py"]     # no runs/ folder
    rc, out, err = cli(capsys, "launch", str(c), "--backend", "local", "--dry-run")
    assert rc == 0 and "tfdata_dispatcher:0" in out, err      # the other backends carry it


# ---- Ray's bootstrap file (RAY_TMPDIR/ray/ray_current_cluster) is followed only when it is safe
def _bootstrap(tmp_path, text="10.9.9.9:6379", folder_mode=0o700, file_mode=0o600):
    folder = tmp_path / "ray"
    folder.mkdir(mode=folder_mode)
    os.chmod(folder, folder_mode)
    f = folder / "ray_current_cluster"
    f.write_text(text)
    os.chmod(f, file_mode)
    return {"RAY_TMPDIR": str(tmp_path)}, f


def test_ray_address_and_the_files_address_win_over_the_bootstrap_file(tmp_path):
    from tfcluster.backends.ray_placement import ray_address
    from tfcluster.clusterfile.models import RaySpec
    env, _ = _bootstrap(tmp_path, folder_mode=0o777)       # not read at all
    assert ray_address(RaySpec(), dict(env, RAY_ADDRESS="h:1")) == "h:1"
    assert ray_address(RaySpec(address="ray://h:10001"), env) == "ray://h:10001"


def test_an_own_bootstrap_file_in_a_private_folder_is_read(tmp_path):
    from tfcluster.backends.ray_placement import ray_address
    env, _ = _bootstrap(tmp_path)
    assert ray_address(None, env) == "10.9.9.9:6379"
    assert ray_address(None, {"RAY_TMPDIR": str(tmp_path / "none")}) is None


@pytest.mark.parametrize("folder_mode, file_mode, words", [
    (0o777, 0o600, "which others can change"),          # Ray's own /tmp/ray is 0777: anyone may swap it
    (0o700, 0o666, "can be written by others"),
])
def test_a_bootstrap_file_others_could_have_written_is_not_followed(tmp_path, folder_mode, file_mode, words):
    from tfcluster.backends.ray_placement import ray_address
    from tfcluster.errors import UserError
    env, _ = _bootstrap(tmp_path, folder_mode=folder_mode, file_mode=file_mode)
    with pytest.raises(UserError, match=f"ray: Ray's bootstrap file .* {words}; it is not followed: "
                       "set RAY_ADDRESS"):
        ray_address(None, env)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_bootstrap_file_another_user_wrote_is_not_followed(tmp_path):
    from tfcluster.backends.ray_placement import ray_address
    from tfcluster.errors import UserError
    env, f = _bootstrap(tmp_path)
    os.chown(f, 65534, 65534)
    with pytest.raises(UserError, match=r"belongs to another user \(uid 65534\)"):
        ray_address(None, env)
