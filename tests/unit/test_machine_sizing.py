"""The sizing policy (``elastic.scale: throughput``, tfcluster.core.policies.sizing) in the run
machine, driven by tables of events as in test_machine.py: a recorded rate model gives the global
steps/s for each number of workers reporting, every worker reports the global step once a second,
the driver's side is played by :func:`drive` (a Start is answered Started, a SIGTERM Exited). No
processes, no clock."""
from __future__ import annotations

import signal

import pytest
from test_machine import logged, make, of, says

from tfcluster.core.machine import (
    Exited,
    Kill,
    Phase,
    Progressed,
    Regroup,
    Regrouped,
    SparePlaced,
    Start,
    Started,
    TaskState,
    Tick,
    replay,
)
from tfcluster.errors import UserError

SIX = ("ps:0",) + tuple(f"worker:{i}" for i in range(6))


def sized(names=SIX, start=2, max_workers=6, **kw):
    kw.setdefault("min_workers", 1)
    kw.setdefault("scale_window", 4.0)
    kw.setdefault("scale_every", 6.0)
    m = make(names, max_workers=max_workers, scale="throughput", **kw)
    for n, t in m.tasks.items():
        t.spare = t.job == "worker" and int(n.split(":")[1]) >= start
    m.log_inputs = True
    return m


def drive(m, rate_of, until, start_delay=1.5, lose=None, deaf=(), inject=()):
    """Run the machine from 0 to ``until`` seconds: Ticks every 0.5 s (the watchdogs look), each
    running worker reports the global step each second once it has been up ``start_delay``;
    the global step grows at ``rate_of(workers reporting)``. ``lose``: (time, worker) that fails;
    ``inject``: (time, event) the driver hands in then.
    Returns every action and the workers reporting at each second."""
    acts, up, step, now, seen = [], {}, 0.0, 0.0, []

    def carry(out):
        for a in out:
            if isinstance(a, Start):
                up[a.task] = now
                acts.extend(m.handle(Started(a.task, 1000 + len(acts), now)))
            elif isinstance(a, Kill) and a.task in up and (a.sig == signal.SIGKILL or a.task not in deaf):
                del up[a.task]
                carry(m.handle(Exited(a.task, -signal.SIGTERM, now + 0.1)))
            elif isinstance(a, Regroup):
                for name in list(up):
                    if m.tasks[name].state == TaskState.STOPPING:
                        del up[name]
                carry(m.handle(Regrouped(True, now)))
        acts.extend(out)

    out = m.begin(0.0)
    carry(out)
    while now < until and not m.finished:
        now = round(now + 0.5, 3)
        if lose and abs(now - lose[0]) < 1e-9 and lose[1] in up:
            del up[lose[1]]
            carry(m.handle(Exited(lose[1], 1, now)))
        for at, ev in inject:
            if abs(now - at) < 1e-9:
                carry(m.handle(ev))
        if now == int(now):
            workers = [n for n, at in up.items() if n.startswith("worker") and now - at >= start_delay]
            step += rate_of(len(workers))
            seen.append((now, len(workers)))
            for n in workers:
                carry(m.handle(Progressed(n, int(step), now)))
        carry(m.handle(Tick(now, True)))
    return acts, seen


def decisions(acts):
    return [(e.event, e.task, e.as_dict()["workers"]) for e in logged(acts, "scaled_up") +
            logged(acts, "scaled_down") + logged(acts, "scale_held")]


def ordered(acts):
    keep = ("scaled_up", "scaled_down", "scale_held")
    return [(a.event, a.task, a.as_dict()["workers"]) for a in acts
            if getattr(a, "event", None) in keep]


def test_link_bound_it_grows_while_workers_help_and_removes_the_one_that_does_not():
    m = sized()
    acts, _ = drive(m, lambda n: 10.0 * min(n, 4), until=90)   # the ps saturate at 4 workers
    assert ordered(acts) == [("scaled_up", "worker:2", 3), ("scaled_up", "worker:3", 4),
                             ("scaled_up", "worker:4", 5), ("scaled_down", "worker:4", 4)]
    assert sorted(m.workers_in()) == ["worker:0", "worker:1", "worker:2", "worker:3"]
    down = logged(acts, "scaled_down")[0].as_dict()
    assert down["rate"] == pytest.approx(40, abs=3) and down["base_rate"] == pytest.approx(40, abs=3)
    assert down["measured_workers"] == 5 and down["base_workers"] == 4
    up = logged(acts, "scaled_up")[1].as_dict()      # worker 3 added 10 of 10 per worker
    assert up["rate"] == pytest.approx(30, abs=3) and up["base_rate"] == pytest.approx(20, abs=3)
    w4 = m.tasks["worker:4"]     # removed: out of the run as a worker that left, not failed
    assert w4.spare and w4.state == TaskState.LEFT and "removed by elastic.scale" in w4.left
    shrunk = logged(acts, "run_shrunk")
    assert [(e.task, e.as_dict()["reason"]) for e in shrunk] == [("worker:4", "removed by elastic.scale")]
    assert m.shown("worker:4") == "left" and "worker:4" in m.workers_left()
    assert not m.decided and m.root_cause is None and m.phase == Phase.RUN
    assert "worker:4 left the run (removed by elastic.scale): going on with 4 of 4 workers, min 1, max 6" \
        in says(acts)
    from test_machine import stop_everything
    m.handle(Exited("worker:0", 0, 100.0))                # the chief ends the run
    stop_everything(m, 110.0)
    assert m.result.value == "succeeded" and m.finished, {n: t.state for n, t in m.tasks.items()}
    assert m.tasks["worker:4"].state == TaskState.LEFT and m.tasks["worker:5"].state == TaskState.STOPPED
    assert m.shown("worker:5") == "spare" and m.shown("worker:4") == "left"


def test_it_never_changes_the_workers_sooner_than_scale_every():
    m = sized(scale_every=10.0)
    acts, _ = drive(m, lambda n: 10.0 * min(n, 4), until=120)
    at = [s.task for s in of(acts, Start)]
    assert at[:3] == ["ps:0", "worker:0", "worker:1"]
    times = [a for a in m.inputs if isinstance(a, Started) and a.task not in ("ps:0", "worker:0", "worker:1")]
    times = [a.now for a in times]
    assert len(times) == 3 and all(b - a >= 10.0 for a, b in zip(times, times[1:]))


def test_cpu_bound_it_adds_one_worker_finds_no_gain_removes_it_and_holds():
    m = sized()
    acts, seen = drive(m, lambda n: 30.0 if n else 0.0, until=120)   # the CPU is the bound
    assert ordered(acts) == [("scaled_up", "worker:2", 3), ("scaled_down", "worker:2", 2)]
    assert max(n for _, n in seen) <= 3 and seen[-1][1] == 2
    assert len(of(acts, Start)) == 4                  # ps, the two first workers, worker:2 once


def test_a_small_gain_below_scale_gain_is_not_kept():
    m = sized(scale_gain=0.5)
    # worker 3 adds 4 steps/s where one worker's share is 10: 40% < 50%
    acts, _ = drive(m, lambda n: {0: 0, 1: 10, 2: 20}.get(n, 24.0), until=60)
    assert ordered(acts) == [("scaled_up", "worker:2", 3), ("scaled_down", "worker:2", 2)]


def test_it_holds_at_max_workers():
    m = sized(max_workers=4)
    acts, _ = drive(m, lambda n: 10.0 * n, until=90)
    assert ordered(acts) == [("scaled_up", "worker:2", 3), ("scaled_up", "worker:3", 4),
                             ("scale_held", None, 4)]
    assert "at max_workers (4)" in logged(acts, "scale_held")[0].as_dict()["reason"]
    assert m.tasks["worker:4"].state == TaskState.PENDING      # a spare it never needed


def test_a_change_of_the_run_after_a_hold_makes_it_measure_and_probe_again():
    m = sized(policy="never")
    acts, _ = drive(m, lambda n: 10.0 * min(n, 3), until=120, lose=(70.0, "worker:1"))
    got = ordered(acts)
    assert got[:3] == [("scaled_up", "worker:2", 3), ("scaled_up", "worker:3", 4),
                       ("scaled_down", "worker:3", 3)]
    assert "elastic.scale: the workers changed" in says(acts)
    assert ("scaled_up", "worker:3", 3) in got[3:]       # the lost worker's place is probed again
    assert m.tasks["worker:3"].restarts == 1             # its second attempt


def test_a_shape_that_restarts_on_a_change_restarts_every_task_to_add_a_worker():
    m = sized(on_change="restart", max_workers=3)
    acts, _ = drive(m, lambda n: 10.0 * n, until=40)
    assert ordered(acts)[0] == ("scaled_up", "worker:2", 3)
    assert logged(acts, "cluster_restarting") and of(acts, Regroup)
    assert "worker:2" in [s.task for s in of(acts, Start)][3:]


def test_a_run_not_sized_never_adds_a_worker():
    m = make(("ps:0", "worker:0", "worker:1"), min_workers=1)
    acts, _ = drive(m, lambda n: 10.0 * n, until=40)
    assert ordered(acts) == [] and len(of(acts, Start)) == 3


def test_a_replay_of_the_logged_inputs_gives_the_same_decisions():
    m = sized()
    acts, _ = drive(m, lambda n: 10.0 * min(n, 4), until=90)
    again = sized()
    assert ordered(replay(again, 0.0, m.inputs)) == ordered(acts)


# ---------------------------------------------------------------------------- the plan
def _plan(tmp_path, elastic, workers="2", backend=""):
    from tfcluster.clusterfile import config
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    f = tmp_path / "c.yaml"
    f.write_text(f"cluster: {{ps: 1, worker: {workers}}}\nprogram: {{command: [python, t.py]}}\n"
                 f"elastic: {elastic}\n" + (f"backend: {backend}\n" if backend else ""))
    return build_plan(config.load(str(f)), LaunchOptions(logdir=str(tmp_path / "runs")))


def test_the_plan_holds_the_extra_workers_in_every_task_s_cluster(tmp_path):
    plan = _plan(tmp_path, "{min_workers: 1, max_workers: 4, scale: throughput, scale_window: 5}")
    assert len(plan.cluster["worker"]) == 4 and len(set(plan.cluster["worker"])) == 4
    assert plan.sizing.start_workers == 2 and plan.sizing.window == 5.0 and plan.sizing.gain == 0.5
    m = __import__("tfcluster.core.machine", fromlist=["RunMachine"]).RunMachine.from_plan(plan)
    assert [n for n, t in m.tasks.items() if t.spare] == ["worker:2", "worker:3"]
    assert [a.task for a in m.begin(0.0)] == ["ps:0", "worker:0", "worker:1"]
    assert m.s.scale == "throughput" and m.s.max_workers == 4
    from tfcluster.plan.runplan import RunPlan
    assert RunPlan.from_dict(plan.to_dict()).sizing == plan.sizing


@pytest.mark.parametrize("elastic, words", [
    ("{min_workers: 1, max_workers: 1, scale: throughput}",
     "elastic.max_workers: 1 is fewer than the file's 2 worker(s)"),
    ("{min_workers: 2, max_workers: 2, scale: throughput}", None),
    ("{min_workers: 1, scale: throughput}", "elastic.scale: needs elastic.max_workers"),
    ("{min_workers: 1, max_workers: 4}", "elastic.max_workers: nothing adds the extra workers"),
])
def test_bad_sizing_is_one_line_naming_the_field(tmp_path, elastic, words):
    if words is None:
        assert _plan(tmp_path, elastic).sizing.max_workers == 2
        return
    with pytest.raises(UserError) as e:
        _plan(tmp_path, elastic)
    assert str(e.value).startswith(words) and "\n" not in str(e.value)


def test_slurm_allocations_do_not_grow(tmp_path):
    with pytest.raises(UserError, match="elastic.max_workers: a Slurm allocation does not grow"):
        _plan(tmp_path, "{min_workers: 1, max_workers: 4, scale: throughput}", backend="slurm")


def test_run_json_and_status_show_the_rates_with_the_workers_beside_them():
    from tfcluster.runs.record import workers_fields
    from tfcluster.runs.status import workers_line
    m = sized(max_workers=4)
    drive(m, lambda n: 10.0 * n, until=90)
    fields = workers_fields(len(m.workers_in()), m.workers_total(), 1, m.workers_left(), 4, m.sizing_fields())
    rates = fields["sizing"]["rates"]
    assert [n for _, n, _ in rates][:1] == [2] and rates[-1][1] == 4
    assert all(r == pytest.approx(10.0 * n, rel=0.15) for _, n, r in rates)
    assert [d[1] for d in fields["sizing"]["decisions"]] == ["scaled_up", "scaled_up", "scale_held"]
    line = workers_line({"workers": fields})
    assert line.startswith("workers: 4 of 4, min 1, max 4; sizing: 40") and "scale_held: " in line
    assert make(("ps:0", "worker:0")).sizing_fields() is None


def test_the_report_lists_the_rate_over_time_with_the_workers_beside_it():
    from tfcluster.runs.eventlog import format_event
    from tfcluster.runs.record import workers_fields
    from tfcluster.runs.report_sizing import sizing_html
    m = sized(max_workers=3)
    acts, _ = drive(m, lambda n: 10.0 * n, until=60)
    record = {"workers": workers_fields(3, 3, 1, {}, 3, m.sizing_fields())}
    page = sizing_html(record, 0.0)
    assert "<h2>Workers sized by throughput</h2>" in page and "at most 3" in page
    assert page.count("<tr>") == len(m.sizing_fields()["rates"]) + 1
    assert "scaled_up worker:2: measuring what worker 3 adds" in page
    assert sizing_html({"workers": {"in": 2}}, 0.0) == "" and sizing_html({}, 0.0) == ""
    ev = logged(acts, "scaled_up")[0]
    line = format_event({"time": 1.0, "event": ev.event, "task": ev.task, **ev.as_dict()})
    assert line.startswith("elastic.scale: 20") and "with 2 workers: added worker:2, 3 workers" in line


def test_the_dry_run_names_the_spare_workers_and_the_first_ones_count_the_workers_in_the_run(tmp_path):
    plan = _plan(tmp_path, "{min_workers: 1, max_workers: 3, scale: throughput}")
    assert plan.env(plan.task("worker:0"))["TFCLUSTER_LIVE_WORKERS"] == "2"
    from tfcluster.backends.local import LocalBackend
    from tfcluster.drivers.describe import describe
    text = describe(plan, LocalBackend())
    assert "worker:2  (" in text and "spare: started when elastic.scale adds it" in text.split("worker:2")[1]
    assert "spare" not in text.split("worker:2")[0]


def test_the_supervisor_starts_no_spare_worker_and_records_it_as_spare(tmp_path):
    from helpers.fake import make as make_supervisor
    cluster = ("    cluster: {ps: [localhost:3000], worker: [localhost:3001, localhost:3002]}\n"
               "    program: {command: [python, t.py]}\n    grace: 2\n"
               "    elastic: {min_workers: 1, max_workers: 3, scale: throughput}\n")
    sup, be, clock, out, err = make_supervisor(tmp_path, cluster, {"worker:0": [(0, 3.0, [])]})
    assert sup.run() == 0
    assert [n for n, _ in be.started] == ["ps:0", "worker:0", "worker:1"]
    import json
    rec = json.loads((tmp_path / "runs" / "t" / "run.json").read_text())
    states = {t["task"]: t["state"] for t in rec["tasks"]}
    assert states["worker:2"] == "spare" and states["worker:1"] != "spare"
    assert rec["workers"]["max"] == 3 and rec["workers"]["in"] == 2
    assert "elastic: starts 2 of up to 3 workers" in err.getvalue()


def test_a_removed_worker_that_ignores_sigterm_gets_sigkill_after_the_stop_timeout():
    m = sized(stop_timeout=3.0)
    acts, _ = drive(m, lambda n: 30.0 if n else 0.0, until=60, deaf=("worker:2",))
    kills = [(a.task, a.sig) for a in of(acts, Kill)]
    assert kills == [("worker:2", signal.SIGTERM), ("worker:2", signal.SIGKILL)]
    term = next(i for i, a in enumerate(m.inputs) if isinstance(a, Exited))
    assert m.inputs[term].task == "worker:2" and m.tasks["worker:2"].spare
    assert m.shown("worker:2") == "left" and not m.decided


@pytest.mark.parametrize("top, words", [
    (4, "elastic: starts 2 of up to 4 workers and adds one while it raises the global steps/s"),
    (1, "elastic: goes on with at least 1 of 2 workers")])
def test_validate_says_what_a_sized_run_does_and_exits_2_for_too_few(tmp_path, capsys, top, words):
    from helpers import cli
    p = tmp_path / "c.yaml"
    p.write_text("cluster: {ps: 1, worker: 2}\nprogram: {command: [python, t.py]}\n"
                 f"elastic: {{min_workers: 1, max_workers: {top}, scale: throughput}}\n")
    (tmp_path / "t.py").write_text("")
    rc, out, err = cli(capsys, "validate", p)
    assert any(ln.startswith(words) for ln in out.splitlines()), out
    assert rc == (0 if top == 4 else 2)
    if top == 1:
        assert "elastic.max_workers: 1 is fewer than the file's 2 worker(s)" in err


def test_parameter_server_strategy_restarts_the_chief_alone_to_add_a_worker():
    m = sized(on_change="restart-chief", max_workers=3)
    acts, _ = drive(m, lambda n: 10.0 * n, until=40)
    assert ordered(acts)[0] == ("scaled_up", "worker:2", 3)
    stopped = [a.task for a in of(acts, Kill) if a.sig == signal.SIGTERM]
    assert stopped == ["worker:0"]                     # the chief (coordinator) alone
    starts = [(s.task, s.attempt) for s in of(acts, Start)][3:]
    assert ("worker:0", 1) in starts and ("worker:2", 0) in starts and len(starts) == 2
    assert m.tasks["ps:0"].restarts == 0 and m.tasks["worker:1"].restarts == 0


# ---------------------------------------------------------------------------- spares placed late (Ray)
def test_a_spare_not_placed_yet_is_not_added_and_one_placed_later_is_after_a_new_measurement():
    """Ray places a spare worker's bundle only when the cluster has room (BackendKind.
    places_spares_late): until the driver says SparePlaced the policy holds, naming the spare
    it waits for; once placed (a node joined) it measures a new base and adds it, and no sooner
    than scale_every after the last change."""
    m = _unplaced()
    placed = SparePlaced("worker:2", "10.0.0.3 (6c1f0e)", 40.0)
    acts, _ = drive(m, lambda n: 10.0 * n, until=80, inject=((40.0, placed),))
    got = ordered(acts)
    assert got[0] == ("scale_held", None, 2), got
    held = logged(acts, "scale_held")[0].as_dict()["reason"]
    assert held.startswith("no spare worker placed yet (worker:2: no room in the cluster so far"), held
    up = [i for i, a in enumerate(acts) if getattr(a, "event", None) == "scaled_up"]
    at = [i for i, a in enumerate(acts) if getattr(a, "event", None) == "spare_placed"]
    assert len(at) == 1 and len(up) == 1 and at[0] < up[0], got
    assert logged(acts, "spare_placed")[0].as_dict() == {"node": "10.0.0.3 (6c1f0e)"}
    assert "room for worker:2 on 10.0.0.3 (6c1f0e) (its bundle is placed): elastic.scale may add it" in says(acts)
    assert "elastic.scale: room for another worker; measuring the rate again" in says(acts)
    started = [a for a in m.inputs if isinstance(a, Started) and a.task == "worker:2"]
    assert started and started[0].now >= 40.0 + m.s.scale_window     # measured again first
    assert logged(acts, "cluster_restarting") or of(acts, Regroup)    # restart-on-join: every task
    assert ordered(replay(_unplaced(), 0.0, m.inputs)) == got         # the input is replayed


def _unplaced():
    m = sized(SIX[:4], max_workers=3, on_change="restart-on-join")
    m.tasks["worker:2"].placed = False
    return m


def test_a_spare_placed_changes_nothing_for_a_spare_placed_already_or_a_task_it_does_not_know():
    m = sized(max_workers=3)
    assert m.handle(SparePlaced("worker:2", "n", 1.0)) == []     # placed from the start (local)
    assert m.handle(SparePlaced("worker:9", "n", 1.0)) == []


def test_a_sized_plan_on_ray_holds_its_spares_unplaced_and_refuses_a_strict_strategy(tmp_path):
    from tfcluster.core.machine import RunMachine
    plan = _plan(tmp_path, "{min_workers: 1, max_workers: 4, scale: throughput, on_change: restart-on-join}",
                 backend="ray")
    m = RunMachine.from_plan(plan)
    assert [n for n, t in m.tasks.items() if not t.placed] == ["worker:2", "worker:3"]
    assert [a.task for a in m.begin(0.0)] == ["ps:0", "worker:0", "worker:1"]
    f = tmp_path / "c.yaml"
    strict = f.read_text() + "ray: {strategy: STRICT_PACK}\n"
    local = RunMachine.from_plan(_plan(tmp_path, "{min_workers: 1, max_workers: 4, scale: throughput}"))
    assert all(t.placed for t in local.tasks.values())
    f.write_text(strict)
    from tfcluster.clusterfile import config
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    with pytest.raises(UserError) as e:
        build_plan(config.load(str(f)), LaunchOptions(logdir=str(tmp_path / "runs")))
    assert str(e.value).startswith("elastic.max_workers: ray.strategy STRICT_PACK") and "\n" not in str(e.value)


def test_the_dry_run_on_ray_gives_each_spare_worker_a_group_of_its_own(tmp_path):
    from tfcluster.clusterfile import config
    from tfcluster.drivers.ray_launcher import RayLauncher
    plan = _plan(tmp_path, "{min_workers: 1, max_workers: 3, scale: throughput, on_change: restart-on-join}",
                 backend="ray")
    text = RayLauncher(plan, config.load(str(tmp_path / "c.yaml"))).describe()
    lines = [ln for ln in text.splitlines() if ln.startswith("# ray: worker:")]
    assert len(lines) == 3 and "spare" not in lines[0] + lines[1], lines
    assert "(spare: a placement group of its own, placed when the cluster has room" in lines[2]


def test_after_a_removal_a_spare_placed_later_is_the_one_probed_not_the_one_removed():
    """worker:2 (on the head) adds nothing and is removed; then a node joins and worker:3 is
    placed there: the policy probes worker:3, not worker:2 again."""
    m = sized(SIX[:5], max_workers=4)
    m.tasks["worker:3"].placed = False
    acts, _ = drive(m, lambda n: 30.0 if n else 0.0, until=90,
                    inject=((40.0, SparePlaced("worker:3", "10.0.0.3 (6c1f0e)", 40.0)),))
    got = ordered(acts)
    assert got[:2] == [("scaled_up", "worker:2", 3), ("scaled_down", "worker:2", 2)], got
    assert ("scaled_up", "worker:3", 3) in got[2:] and ("scaled_up", "worker:2", 3) not in got[2:], got


def test_the_rate_is_timed_by_when_the_step_moved_not_by_other_signs_of_life():
    """A log line (a sign of life without a step) after a step does not date that step; an
    evaluator's own counter is not the run's global step."""
    from tfcluster.core.policies.sizing import global_step
    m = make(("ps:0", "worker:0", "worker:1", "evaluator:0"))
    for i, a in enumerate(m.begin(0.0)):
        m.handle(Started(a.task, 100 + i, 0.0))
    m.handle(Progressed("worker:0", 100, 10.0))
    m.handle(Progressed("worker:0", None, 14.9))
    m.handle(Progressed("evaluator:0", 5000, 15.0))
    assert global_step(m) == (10.0, 100)
    m.handle(Progressed("worker:1", 120, 16.0))
    assert global_step(m) == (16.0, 120)


def test_the_rate_is_the_slope_of_every_report_in_the_window_not_its_two_ends(monkeypatch):
    """A run at 4.4 steps/s whose two workers report the whole steps done, each about once a
    second (the times jitter, as a pipe's do): each measured rate is the least-squares slope of
    every report in its window (not its two ends), within 5% of the truth; the same reports
    replayed give the same rates."""
    import math

    from tfcluster.core.policies import sizing as policy

    jitter = (0.0, 0.21, -0.17, 0.08, -0.22, 0.15, -0.05, 0.19, -0.12, 0.02, 0.24, -0.2)
    windows = []

    def recorded(points):
        windows.append(list(points))
        return slope(points)

    slope = policy.slope
    monkeypatch.setattr(policy, "slope", recorded)
    for phase in (0.0, 0.25, 0.5, 0.75):
        m = sized(scale_window=3.0, scale_every=0.0, max_workers=2)    # it measures, holds
        for i, a in enumerate(m.begin(0.0)):
            m.handle(Started(a.task, 100 + i, 0.0))
        for k in range(48):
            now = round(1.0 + 0.5 * k + jitter[k % len(jitter)] * 0.5, 3)
            m.handle(Progressed(f"worker:{k % 2}", math.floor(4.4 * now + phase), now))
            m.handle(Tick(now, True))
        dog = next(d for d in m.watchdogs.run if isinstance(d, policy.Sizing))
        assert len(dog.history) >= 4, phase
        for (_, _, rate), points in zip(dog.history, windows[-len(dog.history):]):
            assert len(points) >= 6 and rate == round(slope(points), 3), points
            assert rate == pytest.approx(4.4, rel=0.05), (phase, points)
        again = sized(scale_window=3.0, scale_every=0.0, max_workers=2)
        replay(again, 0.0, m.inputs)
        assert next(d for d in again.watchdogs.run if isinstance(d, policy.Sizing)).history == dog.history
    assert slope([(0.0, 0), (2.0, 8)]) == 4.0 and slope([(1.0, 3)]) is None
    assert slope([(0.0, 0), (1.0, 5), (2.0, 8)]) == 4.0


def test_a_short_gain_is_measured_over_a_window_twice_as_long_before_the_worker_is_removed():
    """Worker 3's first seconds dip (the ps link was busy): its gain over the first window falls
    short, so the same window goes on for another scale_window; over both it helps, and it is
    kept. A worker that does not help is removed after the longer window, not the first."""
    from tfcluster.core.policies.sizing import Sizing

    with_three = []

    def rate(n):       # 10 steps/s a worker; with 3, the first 4 s at 22 (a gain of 2 < 5 needed)
        if n != 3:
            return 10.0 * n
        with_three.append(n)
        return 22.0 if len(with_three) <= 4 else 30.0

    m = sized(max_workers=3, scale_window=4.0, scale_every=0.0)
    acts, _ = drive(m, rate, until=60)
    assert ordered(acts)[:2] == [("scaled_up", "worker:2", 3), ("scale_held", None, 3)], ordered(acts)
    assert "measuring it for another 4s before removing it" in says(acts), says(acts)
    dog = next(d for d in m.watchdogs.run if isinstance(d, Sizing))
    assert [n for _, n, _ in dog.history][:2] == [2, 3]     # the short window is not a measurement
    assert dog.history[1][0] - dog.history[0][0] >= 8.0

    m = sized(max_workers=3, scale_window=4.0, scale_every=0.0)
    acts, _ = drive(m, lambda n: 20.0 + (n > 2), until=60)
    assert ordered(acts)[:2] == [("scaled_up", "worker:2", 3), ("scaled_down", "worker:2", 2)]
    dog = next(d for d in m.watchdogs.run if isinstance(d, Sizing))
    assert dog.history[1][0] - dog.history[0][0] >= 8.0     # removed after the longer window
    assert "measuring it for another 4s" in says(acts)
