"""Elastic workers in the file and the plan: ``elastic.min_workers`` checked against the run's
workers and backend (one line naming the field), carried by the plan, and the contract's
TFCLUSTER_LIVE_WORKERS / TFCLUSTER_WORKER_RANK for each worker, which the runtime shards by."""
from __future__ import annotations

import json
import os

import pytest

from helpers import cli, load
from tfcluster.errors import UserError
from tfcluster.plan import contract
from tfcluster.plan.runplan import LaunchOptions, RunPlan, build_plan
from tfcluster.runtime.context import parse_tf_config

FILE = """
cluster: {ps: 1, worker: 4}
program: {command: [python, train.py]}
elastic: {min_workers: %s}
"""


def test_the_plan_carries_min_workers_and_each_worker_its_place(tmp_path):
    plan = build_plan(load(FILE % 2, tmp_path))
    assert plan.min_workers == 2 and RunPlan.from_dict(plan.to_dict()).min_workers == 2
    env = plan.env(plan.task("worker:2"))
    assert env[contract.LIVE_WORKERS] == "4" and env[contract.WORKER_RANK] == "2"
    assert contract.LIVE_WORKERS not in plan.env(plan.task("ps:0"))
    # worker:1 left: worker:3 restarting is the third of three
    env = plan.env(plan.task("worker:3"), 1, live=["worker:0", "worker:2", "worker:3"])
    assert env[contract.LIVE_WORKERS] == "3" and env[contract.WORKER_RANK] == "2"
    plain = build_plan(load("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n", tmp_path))
    assert plain.min_workers is None and contract.LIVE_WORKERS not in plain.env(plain.task("worker:1"))


@pytest.mark.parametrize("value,words", [
    ("5", "elastic.min_workers: 5 is more than the run's 4 worker(s)"),
    ("0", "elastic.min_workers"),
    ("two", "elastic.min_workers"),
])
def test_a_bad_min_workers_names_the_field(tmp_path, capsys, value, words):
    p = tmp_path / "cluster.yaml"
    p.write_text(FILE % value)
    (tmp_path / "train.py").write_text("")
    rc, _, err = cli(capsys, "validate", p)
    assert rc == 2 and words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_listed_worker_job_counts_its_entries(tmp_path):
    text = ("cluster: {ps: [localhost:2222], worker: [localhost:2223, localhost:2224]}\n"
            "program: {command: [python, t.py]}\nelastic: {min_workers: 3}\n")
    with pytest.raises(UserError, match=r"elastic.min_workers: 3 is more than the run's 2 worker"):
        build_plan(load(text, tmp_path))


def test_only_workers_are_elastic_and_slurm_is_elastic_too(tmp_path):
    with pytest.raises(UserError, match="only workers are elastic"):
        build_plan(load("cluster: {chief: 1, ps: 1}\nprogram: {command: [python, t.py]}\n"
                        "elastic: {min_workers: 1}\n", tmp_path))
    assert build_plan(load(FILE % 2, tmp_path), LaunchOptions(backend="slurm")).min_workers == 2
    with pytest.raises(UserError, match="elastic.on_change: restart is not on the slurm backend"):
        build_plan(load(FILE.replace("%s}", "%s, on_change: restart}") % 2, tmp_path),
                   LaunchOptions(backend="slurm"))
    assert build_plan(load(FILE % 2, tmp_path), LaunchOptions(backend="ray")).min_workers == 2


def test_the_runtime_shards_by_the_workers_in_the_run(monkeypatch):
    cluster = {"ps": ["h:1"], "worker": [f"h:{i}" for i in range(2, 6)]}
    ctx = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 3}}))
    assert (ctx.live_workers, ctx.live_worker_index) == (4, 3)       # not elastic: as before
    monkeypatch.setenv(contract.LIVE_WORKERS, "3")
    monkeypatch.setenv(contract.WORKER_RANK, "2")
    assert (ctx.live_workers, ctx.live_worker_index) == (3, 2) and ctx.num_workers == 4
    cluster["chief"] = ["h:9"]                                       # the chief is a replica too
    ctx = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 3}}))
    assert (ctx.live_workers, ctx.live_worker_index) == (4, 3)


def test_on_change_restart_gives_tf_config_the_workers_in_the_run_alone(tmp_path):
    """elastic.on_change restart: TF_CONFIG (and the task flags) list the workers in the run
    alone, numbered in order; every task sees the same cluster. go-on keeps the whole cluster."""
    text = ("cluster: {ps: [localhost:2222], worker: [localhost:2223, localhost:2224, localhost:2225]}\n"
            "program: {command: [python, t.py], task_flags: true}\n"
            "elastic: {min_workers: 1, on_change: restart}\n")
    plan = build_plan(load(text, tmp_path))
    assert plan.elastic_restart and RunPlan.from_dict(plan.to_dict()).elastic_restart
    live = ["worker:0", "worker:2"]
    conf = json.loads(plan.env(plan.task("worker:2"), 1, live=live)[contract.TF_CONFIG])
    assert conf == {"cluster": {"ps": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2225"]},
                    "task": {"type": "worker", "index": 1}}
    ps = json.loads(plan.env(plan.task("ps:0"), 1, live=live)[contract.TF_CONFIG])
    assert ps["cluster"] == conf["cluster"] and ps["task"] == {"type": "ps", "index": 0}
    argv = plan.argv(plan.task("worker:2"), live=live)
    assert "--task_index=1" in argv and "--worker_hosts=localhost:2223,localhost:2225" in argv
    full = json.loads(plan.env(plan.task("worker:2"))[contract.TF_CONFIG])
    assert full["task"]["index"] == 2 and len(full["cluster"]["worker"]) == 3
    go_on = build_plan(load(text.replace(", on_change: restart", ""), tmp_path))
    conf = json.loads(go_on.env(go_on.task("worker:2"), 1, live=live)[contract.TF_CONFIG])
    assert conf["task"]["index"] == 2 and len(conf["cluster"]["worker"]) == 3


def test_validate_says_what_an_elastic_run_does(tmp_path, capsys):
    p = tmp_path / "cluster.yaml"
    p.write_text(FILE % 2)
    (tmp_path / "train.py").write_text("")
    rc, out, _ = cli(capsys, "validate", p)
    assert rc == 0 and "elastic: goes on with at least 2 of 4 workers; when one leaves or comes " \
        "back, the others go on" in out
    p.write_text((FILE % 2).replace("min_workers: 2", "min_workers: 2, on_change: restart"))
    rc, out, _ = cli(capsys, "validate", p)
    assert rc == 0 and "every task restarts with the workers in the run" in out


def test_on_change_restart_chief_gives_the_chief_alone_the_workers_in_the_run(tmp_path):
    """elastic.on_change restart-chief (ParameterServerStrategy): the chief's TF_CONFIG lists the
    workers in the run; the ps and the workers keep the whole cluster and their indices."""
    text = ("cluster: {chief: [localhost:2221], ps: [localhost:2222], "
            "worker: [localhost:2223, localhost:2224, localhost:2225]}\n"
            "program: {command: [python, t.py]}\n"
            "elastic: {min_workers: 1, on_change: restart-chief}\n")
    plan = build_plan(load(text, tmp_path))
    assert plan.on_change == "restart-chief" and not plan.elastic_restart
    assert RunPlan.from_dict(plan.to_dict()).on_change == "restart-chief"
    live = ["worker:0", "worker:2"]
    chief = json.loads(plan.env(plan.task("chief:0"), 1, live=live)[contract.TF_CONFIG])
    assert chief["cluster"]["worker"] == ["localhost:2223", "localhost:2225"]
    assert chief["task"] == {"type": "chief", "index": 0}
    for name in ("ps:0", "worker:2"):
        conf = json.loads(plan.env(plan.task(name), 1, live=live)[contract.TF_CONFIG])
        assert len(conf["cluster"]["worker"]) == 3 and conf["task"]["index"] == plan.task(name).index


def test_validate_and_launch_say_what_growth_does_on_ray_with_go_on(tmp_path, capsys):
    """On Ray a worker coming back lands at a new address: with on_change go-on, validate and
    the launch's elastic line say what that does for the file's shape and which mode
    docs/FAULT_TOLERANCE.md gives, in one line; another mode, or another backend, says nothing
    more."""
    from tfcluster.core.messages import elastic_line
    p = tmp_path / "cluster.yaml"
    p.write_text("backend: ray\n" + FILE % 2)
    (tmp_path / "train.py").write_text("")
    rc, out, _ = cli(capsys, "validate", "--file-only", p)
    line = next(ln for ln in out.splitlines() if ln.startswith("elastic:"))
    assert rc == 0 and line.endswith(
        "the others go on; on Ray a worker coming back lands at a new address, which the ps (TF1) "
        "or the coordinator (ParameterServerStrategy) does not know: it fails its first step or "
        "serves nobody -- docs/FAULT_TOLERANCE.md gives on_change: restart-on-join for TF1, "
        "restart-chief for ParameterServerStrategy"), line
    mwms = elastic_line(1, 2, "go-on", "ray", ["worker"])
    assert "\n" not in mwms and mwms.endswith("docs/FAULT_TOLERANCE.md gives on_change: restart")
    assert elastic_line(1, 2, "restart-on-join", "ray", ["ps", "worker"]) == \
        elastic_line(1, 2, "restart-on-join")
    p.write_text(FILE % 2)                 # local: a worker comes back at its own address
    rc, out, _ = cli(capsys, "validate", "--file-only", p)
    line = next(ln for ln in out.splitlines() if ln.startswith("elastic:"))
    assert rc == 0 and line == elastic_line(2, 4, "go-on"), line
    # the modes the line names are the documented ones
    docs = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "FAULT_TOLERANCE.md")).read()
    assert "on_change: restart-on-join" in docs and "on_change: restart-chief" in docs
