"""Elastic workers on a node agent (Slurm: one machine per node, the other tasks elsewhere):
a worker elsewhere lost with its node (:class:`PeerLost`, which the launcher hears of while the
job runs on under ``--no-kill``) leaves the run by the same rule as a worker here -- while
min_workers allows -- and the run goes on without waiting for it; the chief and the ps lost
fail the run, as a lost node always did. Tables of events, as in test_machine.py."""
from __future__ import annotations

from test_machine import logged, make, of, says, started, stop_everything

from tfcluster.core.machine import (
    EndRun,
    Exited,
    PeerEnded,
    PeerLost,
    RunState,
    input_fields,
    input_from_fields,
)

OTHERS = {"worker:0": "worker", "worker:1": "worker", "worker:2": "worker", "worker:3": "worker"}


def node(here="ps:0", min_workers=2, **kw):
    """The machine of one Slurm node running ``here``; every other task elsewhere."""
    others = {"ps:0": "ps", **OTHERS}
    others.pop(here)
    m = make(names=(here,), others=others, min_workers=min_workers, peers_report=True,
             shared_budget=True, remote_kill=True, peer_stop_wait=5.0, **kw)
    started(m)
    return m


def test_workers_lost_elsewhere_leave_while_min_workers_allows():
    m = node()
    assert m.workers_line() == "4 of 4 workers, min 2"
    out = m.handle(PeerLost("worker:1", "n2", 5.0), PeerLost("worker:2", "n2", 5.0))
    assert not m.decided
    assert "worker:1 left the run (its node n2 was lost): going on with 3 of 4 workers, min 2" in says(out)
    assert "going on with 2 of 4 workers, min 2" in says(out)
    rows = [(e.task, e.as_dict()["node"], e.as_dict()["workers"]) for e in logged(out, "run_shrunk")]
    assert rows == [("worker:1", "n2", 3), ("worker:2", "n2", 2)]
    assert set(m.workers_left()) == {"worker:1", "worker:2"}
    # the same news again (every look reads the run folder) changes nothing
    again = m.handle(PeerLost("worker:1", "n2", 6.0))
    assert not logged(again, "run_shrunk") and m.workers_line() == "2 of 4 workers, min 2"


def test_below_min_workers_a_lost_worker_fails_the_run():
    m = node(min_workers=3)
    m.handle(PeerLost("worker:1", "n2", 5.0))
    out = m.handle(PeerLost("worker:2", "n2", 5.0))
    assert m.result == RunState.FAILED and "worker:2 was lost (its node n2 was lost)" in m.words
    assert of(out, EndRun), out


def test_the_chief_and_the_ps_lost_fail_the_run():
    m = node(here="worker:3")
    m.handle(PeerLost("worker:0", "n1", 5.0))           # worker:0 is the chief
    assert m.result == RunState.FAILED
    m = node(here="worker:3")
    m.handle(PeerLost("ps:0", "n1", 5.0))
    assert m.result == RunState.FAILED


def test_not_elastic_a_lost_peer_fails_the_run():
    m = node(min_workers=None)
    m.handle(PeerLost("worker:3", "n3", 5.0))
    assert m.result == RunState.FAILED


def test_the_ps_does_not_wait_for_workers_that_left():
    m = node()
    m.handle(PeerLost("worker:1", "n2", 5.0), PeerLost("worker:2", "n2", 5.0))
    m.handle(PeerEnded("worker:0", True, 10.0))           # the chief ended: the run succeeds
    out = m.handle(PeerEnded("worker:3", True, 10.5))
    assert m.result == RunState.SUCCEEDED
    assert "waiting up to" not in says(out + stop_everything(m, 11.0))


def test_all_workers_counts_the_workers_in_the_run_elsewhere():
    m = node(here="worker:3", success="all-workers")
    m.handle(PeerLost("worker:2", "n2", 5.0))
    m.handle(PeerEnded("worker:0", True, 8.0), PeerEnded("worker:1", True, 8.0))
    assert not m.decided
    m.handle(Exited("worker:3", 0, 9.0))
    assert m.result == RunState.SUCCEEDED


def test_peer_lost_is_logged_and_replayed():
    ev = PeerLost("worker:1", "n2", 5.0, "Not responding")
    assert input_from_fields(input_fields(ev)) == ev


def test_a_worker_that_left_on_its_node_is_not_counted_elsewhere():
    """A worker out of its restarts on its own node leaves there; its agent's end record says so
    and the other nodes' machines take it as gone (node ''), by the same rule."""
    m = node(success="all-workers")
    out = m.handle(PeerLost("worker:2", "", 5.0, "worker:2 not restarted: restart budget spent (1 of 1)"))
    assert "worker:2 left the run (worker:2 not restarted: restart budget spent (1 of 1)): going on " \
           "with 3 of 4 workers, min 2" in says(out)
    m.handle(*(PeerEnded(w, True, 9.0) for w in ("worker:0", "worker:1", "worker:3")))
    assert m.result == RunState.SUCCEEDED
