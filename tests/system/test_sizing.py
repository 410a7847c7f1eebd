"""Workers sized by throughput with real TensorFlow (``elastic: {max_workers: 4, scale:
throughput}``), on this machine: TF1 asynchronous between-graph training
(tests/programs/tf1_paced.py: each worker held to a pace, as workers bound by their own input or
link are, so that each added worker adds its rate) starts with 2 workers and grows to 4 with
nothing restarted: the extra workers are in every task's ClusterSpec from the start, the ps and
the first workers keep their pids, the workers added start at the run's global step (no step
redone), and the events say scaled_up twice, then scale_held at max_workers."""
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT
from helpers.sizing_runs import launch_until_settled

pytestmark = pytest.mark.tf

PROGRAM = os.path.join(ROOT, "tests", "programs", "tf1_paced.py")


def test_tf1_async_grows_from_2_to_4_workers_with_nothing_restarted(tmp_path, ports):
    base = ports(1)[0]
    stop = tmp_path / "STOP"
    f = tmp_path / "cluster.yaml"
    f.write_text(f"cluster: {{ps: 1, worker: 2}}\nbase_port: {base}\n"
                 f"program: {{command: [python, {PROGRAM}, '1000000', '0.05', '{stop}']}}\n"
                 f"elastic: {{min_workers: 1, max_workers: 4, scale: throughput, scale_window: 2, "
                 f"scale_every: 2, scale_gain: 0.3}}\n"
                 f"logdir: {tmp_path / 'runs'}\n")
    run_dir = str(tmp_path / "runs" / "sized")
    rc, out, ev = launch_until_settled(f, run_dir, stop)
    assert rc == 0, out[-4000:]
    decisions = [(e["event"], e["task"], e.get("workers")) for e in ev
                 if e["event"] in ("scaled_up", "scaled_down", "scale_held")]
    assert decisions == [("scaled_up", "worker:2", 3), ("scaled_up", "worker:3", 4),
                         ("scale_held", None, 4)], out[-4000:]
    up = [e for e in ev if e["event"] == "scaled_up"]
    assert up[0]["rate"] > 0 and up[1]["base_rate"] == up[0]["rate"] and up[1]["rate"] > up[0]["rate"]
    # nothing restarted: one start each, attempt 0; the first tasks keep their pids
    starts = [(e["task"], e["attempt"]) for e in ev if e["event"] == "task_started"]
    assert sorted(starts) == [("ps:0", 0), ("worker:0", 0), ("worker:1", 0), ("worker:2", 0),
                              ("worker:3", 0)], starts
    assert not [e for e in ev if e["event"] in ("task_restarting", "cluster_restarting")]
    rec = json.loads(open(os.path.join(run_dir, "run.json")).read())
    pids = {e["task"]: e["pid"] for e in ev if e["event"] == "task_started"}
    assert {t["task"]: t["pid"] for t in rec["tasks"]} == pids
    # no step redone: an added worker's first step is at least the global step the run had
    # reached when it was started
    for name in ("worker:2", "worker:3"):
        at = next(e["time"] for e in ev if e["event"] == "task_started" and e["task"] == name)
        before = max(e["step"] for e in ev if e["event"] == "progress" and e["time"] <= at)
        log = open(os.path.join(run_dir, f"worker-{name[-1]}.log")).read()
        first = int(log.split("FIRST_STEP ")[1].split()[0])
        assert first >= before > 0, (name, first, before)
    # every task's TF_CONFIG named the four workers from the start
    for t in rec["tasks"]:
        cluster = json.loads(t["env"]["TF_CONFIG"])["cluster"]
        assert len(cluster["worker"]) == 4
    # the run machine is pure: its logged inputs, replayed on a new machine of the same plan,
    # give the same sizing decisions (the Ticks the policy measured on are kept)
    from tfcluster.clusterfile import config
    from tfcluster.core import machine as mc
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    plan = build_plan(config.load(str(f)), LaunchOptions(logdir=str(tmp_path / "again")))
    began = next(e["now"] for e in ev if e["event"] == "input" and e["input"] == "begin")
    inputs = [mc.input_from_fields(e) for e in ev if e["event"] == "input" and e["input"] != "begin"]
    replayed = [(a.event, a.task, a.as_dict()["workers"]) for a in mc.replay(mc.RunMachine.from_plan(plan), began, inputs)
                if isinstance(a, mc.LogEvent) and a.event in ("scaled_up", "scaled_down", "scale_held")]
    assert replayed == decisions
    assert "elastic: starts 2 of up to 4 workers and adds one while it raises the global steps/s" in out
    assert "elastic.scale: " in out and "holding" in out
    # run.json, status and the report: the rate over time with the workers beside it
    w = rec["workers"]
    assert w["max"] == 4 and [d[1] for d in w["sizing"]["decisions"]] == ["scaled_up", "scaled_up", "scale_held"]
    assert w["sizing"]["rates"][0][1] == 2 and w["sizing"]["rates"][-1][1] == 4
    status = subprocess.run([sys.executable, "-m", "tfcluster", "status", run_dir],
                            capture_output=True, text=True, timeout=60)
    assert "workers: 4 of 4, min 1, max 4; sizing: " in status.stdout, status.stdout + status.stderr
    page = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "tfcluster", "report", run_dir, "--output", str(page)],
                   check=True, capture_output=True, timeout=60)
    assert "Workers sized by throughput" in page.read_text()
