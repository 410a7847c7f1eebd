"""A task whose node was lost (the Ray backend's ``Exited.lost_node``): the run machine's rule
(tfcluster.core.rules.decide_move) restarts the whole cluster within the restart budget -- stop
every task in order, ask the driver to place again (Regroup), start every task with the next
restart count once it answers (Regrouped) -- or fails the run naming the node. Tables of
events, as in test_machine.py."""
from __future__ import annotations

import signal

import pytest
from test_machine import TERM, kills, logged, make, of, says, started

from tfcluster.core import rules
from tfcluster.core.machine import (
    Exited,
    Finished,
    Interrupt,
    Phase,
    Regroup,
    Regrouped,
    RunState,
    Start,
    Started,
    TaskState,
    Tick,
    input_fields,
    input_from_fields,
    replay,
)

KILL = signal.SIGKILL
NODE = "127.0.0.3 (abc)"


@pytest.mark.parametrize("policy,max_restarts,restarts,max_total,total,moves,why", [
    ("on-failure", 3, 0, None, 0, True, "restart 1 of 3"),
    ("exit-code", 3, 0, None, 0, True, "restart 1 of 3"),       # a SIGKILL: retryable
    ("on-failure", 3, 2, None, 5, True, "restart 3 of 3"),
    ("never", 3, 0, None, 0, False, "restart policy is never"),
    ("on-failure", 2, 2, None, 0, False, "restart budget spent (2 of 2)"),
    ("on-failure", 3, 0, 1, 1, False, "the run's restart budget is spent (1 of 1)"),
    ("on-failure", 3, 0, 2, 1, True, "restart 1 of 3"),
])
def test_decide_move(policy, max_restarts, restarts, max_total, total, moves, why):
    rule = rules.RestartRule(policy=policy, max_restarts=max_restarts, max_total_restarts=max_total,
                             min_uptime=60.0)     # a lost node is no broken program: no min_uptime
    d = rules.decide_move(rule, restarts, total, NODE)
    assert d.restart is moves
    assert why in d.reason and f"its node {NODE} was lost" in d.reason


def lose_ps(m, now=5.0):
    """ps:0 is lost with its node; every task that is asked to stop exits."""
    out = m.handle(Exited("ps:0", -int(KILL), now, f"its Ray node {NODE} was lost", NODE))
    return out


def test_a_lost_ps_stops_workers_then_asks_to_place_again_then_starts_every_task():
    m = make(policy="on-failure")
    started(m)
    out = lose_ps(m)
    assert m.phase == Phase.REGROUP and m.total_restarts == 1 and not m.decided
    assert kills(out) == [("worker:0", TERM), ("worker:1", TERM)]     # workers first (ps is gone)
    assert logged(out, "cluster_restarting")[0].as_dict()["node"] == NODE
    assert "its node 127.0.0.3 (abc) was lost" in says(out)
    assert not of(out, Regroup)
    out = m.handle(Exited("worker:0", -int(TERM), 6.0))
    assert not of(out, Regroup)
    out = m.handle(Exited("worker:1", -int(TERM), 6.1))
    assert of(out, Regroup) == [Regroup("ps:0", NODE)] and m.phase == Phase.REPLACE
    assert all(m.tasks[n].state == TaskState.RESTARTING for n in m.tasks)
    assert not of(out, Start) and not of(out, Finished)
    out = m.handle(Regrouped(True, 7.0))
    # every task again, ps first, each with the next restart count (TFCLUSTER_RESTART_COUNT)
    assert of(out, Start) == [Start("ps:0", 1), Start("worker:0", 1), Start("worker:1", 1)]
    assert m.phase == Phase.RUN and m.total_restarts == 1
    assert logged(out, "cluster_restarted")
    for i, n in enumerate(m.tasks):
        m.handle(Started(n, 200 + i, 7.5))
    assert all(t.state == TaskState.RUNNING for t in m.tasks.values())
    out = m.handle(Exited("worker:0", 0, 20.0), Tick(20.0))
    assert m.result == RunState.SUCCEEDED


def test_with_a_chief_the_chief_and_workers_stop_before_the_other_ps():
    m = make(names=("ps:0", "ps:1", "chief:0", "worker:0"), chief="chief:0", policy="on-failure")
    started(m)
    out = m.handle(Exited("ps:1", -int(KILL), 5.0, "", NODE))
    assert kills(out) == [("chief:0", TERM), ("worker:0", TERM)]      # the chief can save
    out = m.handle(Exited("chief:0", 0, 6.0), Exited("worker:0", -int(TERM), 6.0))
    assert kills(out) == [("ps:0", TERM)] and not of(out, Regroup)
    out = m.handle(Exited("ps:0", -int(TERM), 6.5))
    assert of(out, Regroup) == [Regroup("ps:1", NODE)]
    assert not m.decided     # the chief's exit 0 while regrouping is no success


def test_a_task_that_does_not_stop_is_killed_before_the_regroup():
    m = make(policy="on-failure")
    started(m)
    lose_ps(m)
    out = m.handle(Tick(5.0 + 3.0))                         # stop_timeout
    assert kills(out) == [("worker:0", KILL), ("worker:1", KILL)]
    out = m.handle(Exited("worker:0", -int(KILL), 8.5), Exited("worker:1", -int(KILL), 8.5))
    assert of(out, Regroup)


def test_a_second_task_lost_with_the_node_waits_for_the_same_regroup():
    m = make(policy="on-failure")
    started(m)
    lose_ps(m)
    out = m.handle(Exited("worker:1", -int(KILL), 5.5, "", NODE))  # on the same node
    assert not of(out, Regroup) and m.total_restarts == 1
    out = m.handle(Exited("worker:0", -int(TERM), 6.0))
    assert of(out, Regroup) == [Regroup("ps:0", NODE)]


@pytest.mark.parametrize("kw,why", [
    ({"policy": "never"}, ""),          # never: the driver's cause alone, as for any exit
    ({"policy": "on-failure", "max_total": 0}, "the run's restart budget is spent (0 of 0)"),
])
def test_beyond_the_budget_the_run_fails_naming_the_lost_node(kw, why):
    m = make(**kw)
    started(m)
    out = lose_ps(m)
    assert m.result == RunState.FAILED and m.root_cause == "ps:0" and not of(out, Regroup)
    assert NODE in m.tasks["ps:0"].why and why in m.tasks["ps:0"].why


def test_the_budget_counts_each_move():
    m = make(policy="on-failure", max_total=1)
    started(m)
    lose_ps(m)
    m.handle(Exited("worker:0", -int(TERM), 6.0), Exited("worker:1", -int(TERM), 6.0))
    for i, a in enumerate(of(m.handle(Regrouped(True, 7.0)), Start)):
        m.handle(Started(a.task, 300 + i, 7.5))
    out = lose_ps(m, 30.0)        # lost again: the run's budget (1) is spent
    assert m.result == RunState.FAILED and not of(out, Regroup)
    assert "the run's restart budget is spent (1 of 1)" in m.tasks["ps:0"].why


def test_a_cluster_that_cannot_be_placed_again_fails_the_run_naming_the_node():
    m = make(policy="on-failure")
    started(m)
    lose_ps(m)
    m.handle(Exited("worker:0", -int(TERM), 6.0), Exited("worker:1", -int(TERM), 6.0))
    out = m.handle(Regrouped(False, 40.0, "ray: the run's 3 tasks could not be placed within 30s"))
    assert m.result == RunState.FAILED and m.exit_code == rules.EXIT_FAILED
    assert of(out, Finished) and not of(out, Start)
    why = m.tasks["ps:0"].why
    assert f"its node {NODE} was lost and the cluster could not be placed again" in why
    assert "could not be placed within 30s" in why
    assert {t.state for t in m.tasks.values()} == {TaskState.FAILED, TaskState.STOPPED}


def test_ctrl_c_while_regrouping_stops_the_run():
    m = make(policy="on-failure")
    started(m)
    lose_ps(m)
    out = m.handle(Interrupt(signal.SIGINT, 5.5))
    assert m.result == RunState.INTERRUPTED and m.phase == Phase.STOP
    out += m.handle(Exited("worker:0", -int(TERM), 6.0), Exited("worker:1", -int(TERM), 6.0))
    assert of(out, Finished) and not of(out, Regroup)
    assert m.handle(Regrouped(True, 7.0)) == []


def test_a_driver_that_cannot_share_a_move_fails_the_run():
    """A Slurm node's machine shares its budget through the run folder: a lost node there is
    not moved by this machine."""
    m = make(policy="on-failure", shared_budget=True)
    started(m)
    lose_ps(m)
    assert m.result == RunState.FAILED and "this backend cannot move it" in m.tasks["ps:0"].why


def test_the_input_log_replays_a_move():
    m = make(policy="on-failure")
    m.log_inputs = True
    started(m)
    lose_ps(m)
    m.handle(Exited("worker:0", -int(TERM), 6.0), Exited("worker:1", -int(TERM), 6.0))
    m.handle(Regrouped(True, 7.0))
    inputs = [input_from_fields(input_fields(ev)) for ev in m.take_inputs()]
    assert Regrouped(True, 7.0) in inputs and any(getattr(e, "lost_node", "") == NODE for e in inputs)
    again = make(policy="on-failure")
    acts = replay(again, 0.0, inputs)
    assert of(acts, Regroup) == [Regroup("ps:0", NODE)]
    assert of(acts, Start)[-3:] == [Start("ps:0", 1), Start("worker:0", 1), Start("worker:1", 1)]


# ---- a port chosen where the task runs, taken before its server bound it: chosen again
def _conflict(m, name="worker:0", now=5.0):
    from tfcluster.core.machine import PortConflict
    m.handle(PortConflict(name, now))
    return m.handle(Exited(name, 1, now + 0.1))


def test_a_chosen_port_taken_before_the_server_bound_it_is_chosen_again_not_counted():
    m = make(policy="never", names=("ps:0", "worker:0"))
    m.movable_ports = {"ps:0", "worker:0"}
    started(m)
    out = _conflict(m)
    assert m.phase == Phase.REGROUP and not m.decided and m.total_restarts == 0
    assert "its port 3001 was taken before its server bound it: ports are chosen again (1 of 3)" in says(out)
    assert kills(out) == [("ps:0", TERM)]
    out = m.handle(Exited("ps:0", -int(TERM), 6.0))
    assert of(out, Regroup) == [Regroup("worker:0", "")] and m.phase == Phase.REPLACE
    out = m.handle(Regrouped(True, 7.0))
    assert [a.task for a in of(out, Start)] == ["ps:0", "worker:0"] and m.phase == Phase.RUN
    assert "placed again with ports chosen again" in says(out)


def test_a_listed_port_taken_fails_the_run_as_before_and_chosen_ports_are_chosen_again_three_times():
    m = make(policy="never", names=("ps:0", "worker:0"))
    started(m)
    _conflict(m)
    assert m.decided and m.exit_code == rules.EXIT_BAD_INPUT      # a listed port: bad input
    m = make(policy="never", names=("ps:0", "worker:0"))
    m.movable_ports = {"worker:0"}
    started(m)
    now = 5.0
    for attempt in range(3):
        _conflict(m, now=now)
        m.handle(Exited("ps:0", -int(TERM), now + 1))
        m.handle(Regrouped(True, now + 2))
        for n in ("ps:0", "worker:0"):
            m.handle(Started(n, 200 + attempt, now + 2))
        now += 10
    _conflict(m, now=now)
    assert m.decided, "a fourth taken port fails the run"
