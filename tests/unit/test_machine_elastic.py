"""Elastic workers in the run machine (``elastic: {min_workers: N}``): a worker out of its
restarts, or lost with its host, leaves the run while at least min_workers workers are still in
it; the run goes on and says so, its success rule counts the workers in it, and a worker lost with
its host starts again when the driver reports the host back (HostBack). Tables of events, as in
test_machine.py."""
from __future__ import annotations

from test_machine import kills, logged, make, of, says, started, stop_everything

from tfcluster.core.machine import (
    Exited,
    HostBack,
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

FOUR = ("ps:0", "worker:0", "worker:1", "worker:2", "worker:3")


def test_a_worker_out_of_restarts_leaves_and_the_run_goes_on_then_ends_with_the_chief():
    m = make(FOUR, policy="on-failure", max_restarts=1, min_workers=2)
    started(m)
    out = m.handle(Exited("worker:2", 1, 5.0))
    assert of(out, Start) == [] and m.tasks["worker:2"].state == TaskState.RESTARTING
    out = m.handle(Tick(6.5))
    assert of(out, Start) == [Start("worker:2", 1)]
    m.handle(Started("worker:2", 300, 6.5))
    out = m.handle(Exited("worker:2", 1, 9.0))          # its budget is spent: it leaves
    assert not m.decided and m.phase == Phase.RUN
    t = m.tasks["worker:2"]
    assert t.state == TaskState.LEFT and "restart budget spent" in t.left and t.left_node == ""
    assert "worker:2 left the run (not restarted: restart budget spent (1 of 1)): going on with " \
           "3 of 4 workers, min 2" in says(out)
    shrunk = logged(out, "run_shrunk")[0].as_dict()
    assert logged(out, "run_shrunk")[0].task == "worker:2" and shrunk["workers"] == 3 and shrunk["min_workers"] == 2
    assert m.workers_line() == "3 of 4 workers, min 2" and m.root_cause is None
    out = m.handle(Exited("worker:0", 0, 20.0))         # the chief: the run succeeds
    assert m.result == RunState.SUCCEEDED and m.exit_code == 0
    stop_everything(m, 21.0)
    assert m.result == RunState.SUCCEEDED


def test_below_min_workers_the_run_fails_as_it_always_did():
    m = make(("ps:0", "worker:0", "worker:1", "worker:2"), min_workers=2)
    started(m)
    out = m.handle(Exited("worker:2", 1, 5.0))          # 2 left: min 2 holds
    assert not m.decided and "going on with 2 of 3 workers, min 2" in says(out)
    out = m.handle(Exited("worker:1", 1, 6.0))          # 1 would be left: below min
    assert m.result == RunState.FAILED and m.root_cause == "worker:1"
    assert "run failed: worker:1" in says(out)


def test_the_chief_and_the_ps_are_not_elastic():
    m = make(FOUR, min_workers=1)
    started(m)
    m.handle(Exited("worker:0", 1, 5.0))                # worker:0 is the chief here
    assert m.result == RunState.FAILED and m.root_cause == "worker:0"
    m = make(FOUR, min_workers=1)
    started(m)
    m.handle(Exited("ps:0", 1, 5.0))
    assert m.result == RunState.FAILED and m.root_cause == "ps:0"


def test_not_elastic_without_min_workers():
    m = make(FOUR)
    started(m)
    m.handle(Exited("worker:3", 1, 5.0))
    assert m.result == RunState.FAILED and m.root_cause == "worker:3"


def test_all_workers_counts_the_workers_in_the_run():
    m = make(FOUR, success="all-workers", min_workers=1)
    started(m)
    m.handle(Exited("worker:1", 0, 5.0))               # the first exit 0: the rule's tasks fixed
    m.handle(Exited("worker:3", 1, 6.0))               # leaves
    assert not m.decided
    m.handle(Exited("worker:2", 0, 7.0))
    assert not m.decided
    out = m.handle(Exited("worker:0", 0, 8.0))
    assert m.result == RunState.SUCCEEDED and "every worker exited 0" in says(out)


def test_all_workers_when_the_worker_leaves_before_any_exit_0():
    m = make(("ps:0", "worker:0", "worker:1"), success="all-workers", min_workers=1)
    started(m)
    m.handle(Exited("worker:1", 1, 5.0))
    m.handle(Exited("worker:0", 0, 8.0))
    assert m.result == RunState.SUCCEEDED


def test_a_host_lost_shrinks_at_once_and_its_return_starts_the_worker_again():
    """A lost host (ssh: Exited.lost_node): no restart attempt into the dead host, whatever the
    policy; HostBack starts it again, as a new attempt, and the run can shrink again later."""
    m = make(FOUR, policy="on-failure", min_workers=2, moves_nodes=False)
    started(m)
    out = m.handle(Exited("worker:3", 255, 5.0, "host 10.0.0.4 lost", "10.0.0.4"))
    t = m.tasks["worker:3"]
    assert t.left_node == "10.0.0.4" and t.state == TaskState.LEFT and not of(out, Start)
    assert "starts again when 10.0.0.4 answers" in says(out) and m.left_nodes() == ["10.0.0.4"]
    assert not of(m.handle(HostBack("10.0.0.9", 6.0)), Start)     # another host: none of ours
    assert m.tasks["worker:3"].state == TaskState.LEFT
    out = m.handle(HostBack("10.0.0.4", 7.0))
    assert of(out, Start) == [Start("worker:3", 1)]
    assert "10.0.0.4 answers again: starting worker:3; 4 of 4 workers, min 2" in says(out)
    assert logged(out, "run_grew")[0].task == "worker:3"
    assert m.left_nodes() == [] and t.left == "" and t.state == TaskState.RESTARTING
    m.handle(Started("worker:3", 400, 7.1))
    assert t.state == TaskState.RUNNING
    m.handle(Exited("worker:3", 255, 9.0, "host 10.0.0.4 lost", "10.0.0.4"))   # lost again
    assert t.left_node == "10.0.0.4" and not m.decided


def test_without_elastic_a_lost_ssh_host_is_an_ordinary_failure():
    """ssh cannot move a task: a lost host (no elastic) goes through the restart rules as before."""
    m = make(FOUR, policy="never", moves_nodes=False)
    started(m)
    m.handle(Exited("worker:3", 255, 5.0, "host 10.0.0.4 lost", "10.0.0.4"))
    assert m.result == RunState.FAILED and m.phase != Phase.REGROUP


def test_on_ray_a_worker_lost_with_its_node_leaves_and_a_lost_ps_still_moves_the_cluster():
    """A backend that moves tasks (Ray): a worker lost with its node leaves the run (no regroup,
    no task of the other node restarted) and starts again when its place is found again (the
    driver's HostBack: Ray placed its bundle on a node that joined); the ps is not elastic: its
    node lost, the whole cluster moves as before."""
    m = make(FOUR, policy="on-failure", min_workers=2, moves_nodes=True)
    started(m)
    lost = "10.0.0.3 (a1b2c3d4e5f6)"
    out = m.handle(Exited("worker:2", -9, 5.0, "its Ray node was lost", lost))
    out += m.handle(Exited("worker:3", -9, 5.1, "its Ray node was lost", lost))
    assert m.phase == Phase.RUN and not of(out, Regroup) and not of(out, Start) and not kills(out)
    assert "it starts again when its place can be found again" in says(out)
    assert m.workers_line() == "2 of 4 workers, min 2" and m.left_nodes() == [lost]
    out = m.handle(HostBack(lost, 9.0))
    assert of(out, Start) == [Start("worker:2", 1), Start("worker:3", 1)]
    assert f"room again for the workers lost with {lost}: starting worker:2, worker:3" in says(out)
    assert [e.task for e in logged(out, "run_grew")] == ["worker:2", "worker:3"]
    out = m.handle(Exited("ps:0", -9, 12.0, "its Ray node was lost", "10.0.0.2 (ffeeddccbbaa)"))
    assert m.phase == Phase.REGROUP and not m.decided


def test_elastic_inputs_replay_to_the_same_actions():
    m = make(FOUR, policy="on-failure", min_workers=2, moves_nodes=False)
    m.log_inputs = True
    acts, first = started(m)
    got = list(acts) + first
    for ev in [Exited("worker:3", 255, 5.0, "host h lost", "h"), HostBack("h", 7.0),
               Started("worker:3", 401, 7.1), Exited("worker:0", 0, 9.0)]:
        got += m.handle(ev)
    got += stop_everything(m, 10.0)
    inputs = [input_from_fields(input_fields(ev)) for ev in m.take_inputs()]
    assert any(isinstance(ev, HostBack) for ev in inputs)
    again = make(FOUR, policy="on-failure", min_workers=2, moves_nodes=False)
    assert says(replay(again, 0.0, inputs)) == says(got)
    assert again.result == m.result == RunState.SUCCEEDED and again.tasks["worker:3"].restarts == 1


def test_on_change_restart_stops_every_task_then_starts_them_with_the_workers_in_the_run():
    """elastic.on_change restart (sync training, MWMS): a worker leaving stops every task in
    order (the chief saves), then every task but it starts again (no placement: Regroup with
    place False, answered at once), not counted as a restart of the run; its return does the same."""
    m = make(FOUR, min_workers=2, moves_nodes=False, on_change="restart")
    started(m)
    out = m.handle(Exited("worker:3", 255, 5.0, "host h lost", "h"))
    assert m.phase == Phase.REGROUP and not m.decided
    assert "worker:3 left: restarting every task with 3 of 4 workers, min 2" in says(out)
    assert sorted(kills(out)) == [("worker:0", 15), ("worker:1", 15), ("worker:2", 15)]
    for n in ("worker:0", "worker:1", "worker:2"):
        out = m.handle(Exited(n, -15, 6.0))
    assert ("ps:0", 15) in kills(out)
    out = m.handle(Exited("ps:0", -15, 6.5))
    assert of(out, Regroup) == [Regroup("worker:3", "", place=False)]
    out = m.handle(Regrouped(True, 7.0))
    assert of(out, Start) == [Start("ps:0", 1), Start("worker:0", 1), Start("worker:1", 1), Start("worker:2", 1)]
    assert m.phase == Phase.RUN and m.total_restarts == 0 and m.tasks["worker:3"].left
    assert "starting every task with 3 of 4 workers, min 2" in says(out)
    for i, n in enumerate(("ps:0", "worker:0", "worker:1", "worker:2")):
        m.handle(Started(n, 500 + i, 7.5))
    out = m.handle(HostBack("h", 9.0))                   # back: every task again, with 4
    assert m.phase == Phase.REGROUP and "worker:3 came back" in says(out)
    for n in ("worker:0", "worker:1", "worker:2"):
        m.handle(Exited(n, -15, 9.5))
    out = m.handle(Exited("ps:0", -15, 9.6))
    out = m.handle(Regrouped(True, 10.0))
    assert of(out, Start) == [Start("ps:0", 2), Start("worker:0", 2), Start("worker:1", 2),
                              Start("worker:2", 2), Start("worker:3", 1)]   # its second process
    assert m.workers_line() == "4 of 4 workers, min 2"


def test_on_change_restart_chief_lets_a_worker_leave_and_restarts_the_chief_alone_when_it_is_back():
    """elastic.on_change restart-chief (ParameterServerStrategy): a worker leaving changes
    nothing; when it comes back, the chief alone (the coordinator) is stopped, then started
    again with the worker back, neither counted as a restart; the ps and the other workers are
    never signalled."""
    names = ("ps:0", "chief:0", "worker:0", "worker:1", "worker:2")
    m = make(names, chief="chief:0", min_workers=1, moves_nodes=True, on_change="restart-chief")
    started(m)
    out = m.handle(Exited("worker:2", 255, 5.0, "node n lost", "n"))
    assert m.phase == Phase.RUN and kills(out) == [] and of(out, Start) == []
    assert "worker:2 left the run" in says(out)
    out = m.handle(HostBack("n", 9.0))
    assert m.phase == Phase.REGROUP and kills(out) == [("chief:0", 15)]
    assert "worker:2 came back: restarting chief:0 with 3 of 3 workers, min 1 " \
           "(elastic.on_change: restart-chief)" in says(out)
    out = m.handle(Exited("chief:0", -15, 9.5))
    assert of(out, Regroup) == [Regroup("worker:2", "", place=False)]
    assert all(k[0] == "chief:0" for k in kills(out))
    out = m.handle(Regrouped(True, 10.0))
    assert sorted(of(out, Start), key=lambda a: a.task) == [Start("chief:0", 1), Start("worker:2", 1)]
    assert "starting " in says(out) and m.phase == Phase.RUN and m.total_restarts == 0
    for n in ("ps:0", "worker:0", "worker:1"):
        assert m.tasks[n].state == TaskState.RUNNING and m.tasks[n].restarts == 0
    m.handle(Started("chief:0", 600, 10.5))
    m.handle(Started("worker:2", 601, 10.5))
    m.handle(Exited("chief:0", 0, 20.0))
    assert m.result == RunState.SUCCEEDED


def test_on_change_restart_on_join_goes_on_when_a_worker_leaves_and_restarts_every_task_when_it_is_back():
    """elastic.on_change restart-on-join (asynchronous training on Ray: a worker back at a new
    address that the ps do not know): leaving changes nothing; coming back stops every task in
    order and starts them all again, the worker back with them."""
    m = make(FOUR, min_workers=2, moves_nodes=True, on_change="restart-on-join")
    started(m)
    out = m.handle(Exited("worker:3", 255, 5.0, "node n lost", "n"))
    assert m.phase == Phase.RUN and kills(out) == [] and of(out, Start) == []
    out = m.handle(HostBack("n", 9.0))
    assert m.phase == Phase.REGROUP
    assert "worker:3 came back: restarting every task with 4 of 4 workers, min 2 " \
           "(elastic.on_change: restart-on-join)" in says(out)
    assert sorted(kills(out)) == [("worker:0", 15), ("worker:1", 15), ("worker:2", 15)]
    for n in ("worker:0", "worker:1", "worker:2"):
        out = m.handle(Exited(n, -15, 9.5))
    out = m.handle(Exited("ps:0", -15, 9.6))
    out = m.handle(Regrouped(True, 10.0))
    assert of(out, Start) == [Start("ps:0", 1), Start("worker:0", 1), Start("worker:1", 1),
                              Start("worker:2", 1), Start("worker:3", 1)]
    assert m.phase == Phase.RUN and m.total_restarts == 0 and m.workers_line() == "4 of 4 workers, min 2"


def test_a_worker_that_leaves_here_has_no_node_and_its_event_names_none():
    """Locally a worker leaves without a node: run_shrunk leaves the field out (no ``node=``,
    empty), in events.jsonl and in the line launcher.log and the report show; a worker lost
    with its host names the host."""
    from tfcluster.runs.eventlog import format_event
    m = make(FOUR, policy="never", min_workers=2, moves_nodes=False)
    started(m)
    out = m.handle(Exited("worker:2", 1, 5.0))
    [shrunk] = logged(out, "run_shrunk")
    assert "node" not in shrunk.as_dict(), shrunk
    line = format_event({"time": 5.0, "event": "run_shrunk", "task": "worker:2", **shrunk.as_dict()})
    assert "node" not in line and "=," not in line, line
    assert line == ("worker:2 left the run: not restarted: restart policy is never; "
                    "3 workers in the run, min 2"), line
    out = m.handle(Exited("worker:3", 255, 6.0, "host 10.0.0.4 lost", "10.0.0.4"))
    [lost] = logged(out, "run_shrunk")
    assert lost.as_dict()["node"] == "10.0.0.4"
    line = format_event({"time": 6.0, "event": "run_shrunk", "task": "worker:3", **lost.as_dict()})
    assert line == "worker:3 left the run: its host 10.0.0.4 was lost; 2 workers in the run, min 2", line
    back = logged(m.handle(HostBack("10.0.0.4", 7.0)), "run_grew")[0]
    line = format_event({"time": 7.0, "event": "run_grew", "task": "worker:3", **back.as_dict()})
    assert line == "worker:3 back in the run on 10.0.0.4 (restart 1); 3 workers in the run, min 2", line
