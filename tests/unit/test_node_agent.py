"""The node agent on Slurm (tfcluster.backends.agent.node.NodeAgent) built without Slurm: Slurm's
environment, the clock, the program, signals and the step's scancel come in as fakes, and the
run folder is a real folder shared by the nodes of a test. Tables of what happens on a node --
exits, signals, peer reports, restart claims, requeue segments -- and what the driver does.
No processes, no TensorFlow."""
from __future__ import annotations

import json
import os
import signal

from helpers.node_agent import Node
from tfcluster.backends.agent.folder import FolderChannel
from tfcluster.backends.slurm.launcher import _Record
from tfcluster.core import machine as mc
from tfcluster.core import rules

TERM, KILL, HUP = signal.SIGTERM, signal.SIGKILL, signal.SIGHUP


def test_the_chief_exits_0_the_run_succeeds_and_the_step_hears_it(tmp_path):
    n = Node(tmp_path, rank=1)          # worker:0 (the chief); ps:0 runs on the other node
    assert n.agent.name == "worker:0" and n.agent.host == "n2"
    n.start()
    assert n.spawned[0]["ignore"] == ()               # a worker obeys Slurm's SIGTERM
    n.exits(0)
    assert n.agent.machine.finished and n.agent.machine.exit_code_of("worker:0") == 0
    assert n.step_signalled == ["77.0"]               # the other tasks: the run is over
    assert FolderChannel(n.agent.run_dir).over()
    rec = n.record()
    assert (rec["state"], rec["ok"], rec["failed"], rec["final"]) == ("succeeded", True, False, True)
    assert rec["exit"] == "exit 0" and rec["decision"] == "worker:0 exited 0"


def test_a_failing_chief_exits_with_its_own_code_and_its_record_names_the_failure(tmp_path):
    n = Node(tmp_path, rank=1)
    n.start()
    n.exits(3)
    m = n.agent.machine
    assert m.result == mc.RunState.FAILED and m.exit_code_of("worker:0") == 3
    rec = n.record()
    assert rec["failed"] and rec["exit_code"] == 3 and rec["exit"] == "exit 3"
    assert rec["reason"] == "worker:0 failed (exit 3)" and rec["note"] == ""


def test_a_task_killed_by_a_signal_exits_128_plus_n(tmp_path):
    n = Node(tmp_path, rank=1)
    n.start()
    n.exits(-9)
    assert n.agent.machine.exit_code_of("worker:0") == 137
    assert n.record()["exit"] == "SIGKILL"


def test_slurm_sigterm_stops_the_ps_after_the_chief_has_ended_and_with_sighup(tmp_path):
    """A plain scancel, a preemption or a time limit: SIGTERM to every process of the step.
    The ps ignores it (started so) and its agent stops it once the chief's agent has
    recorded its end."""
    ps = Node(tmp_path, rank=0)
    assert ps.agent.name == "ps:0"
    ps.start()
    assert ps.spawned[0]["ignore"] == (TERM,)
    ps.signals.cancelled.append(TERM)
    ps.turn()
    m = ps.agent.machine
    assert m.result == mc.RunState.INTERRUPTED and ps.killed == []   # waits for worker:0
    assert "waiting up to 10s for worker:0 to stop before the ps" in ps.said()
    ps.turn()
    assert ps.killed == []
    FolderChannel(ps.agent.run_dir).write_exit("worker:0", {"task": "worker:0", "ok": False,
                                                       "state": "stopped", "segment": 0})
    ps.turn()
    assert ps.killed == [(ps.proc.pid, HUP)]           # not SIGTERM: the ps ignores that
    ps.exits(-HUP)
    assert m.finished and m.exit_code_of("ps:0") == 128 + TERM
    assert ps.record()["state"] == "stopped"


def test_a_ps_that_handles_sigterm_itself_is_stopped_with_sigterm(tmp_path):
    """A ps program that installed a SIGTERM handler of its own (to end gracefully) no longer
    ignores it: its agent's ordered stop is the SIGTERM it expects."""
    ps = Node(tmp_path, rank=0, ignores_term=False)
    ps.start()
    ps.signals.over.set()                         # the run is over: the chief exited 0
    FolderChannel(ps.agent.run_dir).write_exit("worker:0", {"task": "worker:0", "ok": True,
                                                       "state": "succeeded", "segment": 0})
    ps.turn()
    assert ps.killed == [(ps.proc.pid, TERM)]


def test_the_ps_wait_for_its_peers_is_bounded(tmp_path):
    ps = Node(tmp_path, rank=0)
    ps.start()
    ps.signals.cancelled.append(TERM)
    ps.turn()
    wait = rules.peer_stop_wait(2, 3)
    assert wait == 10
    ps.turn(wait - 1)
    assert ps.killed == []
    ps.turn(1.5)
    assert ps.killed == [(ps.proc.pid, HUP)]
    ps.turn(3.1)                                       # the stop timeout: SIGKILL
    assert (ps.proc.pid, KILL) in ps.killed


def test_a_second_ctrl_c_kills_at_once(tmp_path):
    n = Node(tmp_path, rank=1)
    n.start()
    n.signals.cancelled += [signal.SIGINT, signal.SIGINT]
    n.turn()
    assert (n.proc.pid, TERM) in n.killed and (n.proc.pid, KILL) in n.killed


def test_the_run_over_elsewhere_ends_this_node_with_0_and_tells_no_one(tmp_path):
    w1 = Node(tmp_path, rank=2, cluster="{ps: 1, worker: 2}")    # worker:1
    w1.start()
    w1.signals.over.set()                                        # SIGURG
    w1.turn()
    assert w1.agent.machine.decided and not w1.agent.machine.decided_here
    assert "giving worker:1 2s to finish" in w1.said() and w1.step_signalled == []
    w1.exits(0)
    assert w1.agent.machine.exit_code_of("worker:1") == 0
    assert w1.record()["decision"] is None


def test_a_kill_request_from_another_node_kills_the_task(tmp_path):
    n = Node(tmp_path, rank=1)
    n.start()
    assert FolderChannel(n.agent.run_dir, 0).request_kill("worker:0", "watchdog: ps:0 waited") is None
    n.turn()
    assert n.killed == [(n.proc.pid, KILL)]
    n.exits(-9)
    rec = n.record()
    assert rec["failed"] and rec["note"] == "watchdog: ps:0 waited" and rec["reason"] == rec["note"]


def test_restart_claims_share_the_runs_budget_and_a_refused_claim_fails_the_task(tmp_path):
    restart = "restart: {policy: on-failure, max_restarts: 5, max_total_restarts: 1, backoff: 1, min_uptime: 0}\n"
    n = Node(tmp_path, rank=1, restart=restart)
    n.start()
    n.exits(1)
    m = n.agent.machine
    assert m.tasks["worker:0"].state == mc.TaskState.RESTARTING
    assert FolderChannel(n.agent.run_dir).restarts_claimed() == 1
    n.turn(1.1)
    assert len(n.procs) == 2 and m.tasks["worker:0"].restarts == 1
    n.agent.reader.join(5)
    n.exits(1)                                   # the run's one restart is spent
    assert m.result == mc.RunState.FAILED and m.tasks["worker:0"].state == mc.TaskState.FAILED
    assert "restart budget is spent" in n.record()["note"]


def test_a_requeued_segment_counts_as_a_restart_and_reads_only_its_own_records(tmp_path):
    ps = Node(tmp_path, rank=0, segment=1)
    assert ps.agent.env(0)["TFCLUSTER_RESTART_COUNT"] == "1"
    FolderChannel(ps.agent.run_dir, 0).write_exit("worker:0", {"task": "worker:0", "ok": True,
                                                          "segment": 0})
    ps.start()
    ps.turn()
    assert "worker:0" not in ps.agent.machine.peer_ok     # the last segment's end is not news
    FolderChannel(ps.agent.run_dir, 1).write_exit("worker:0", {"task": "worker:0", "ok": True,
                                                          "segment": 1})
    ps.turn()
    assert ps.agent.machine.peer_ok == {"worker:0": True}
    assert ps.agent.machine.decided                        # the chief (elsewhere) exited 0
    ps.exits(-HUP)
    assert ps.record()["segment"] == 1


def test_output_lines_reach_the_machine_as_the_local_launcher_reads_them(tmp_path):
    out = (b'@tfcluster progress {"step": 5, "total": 9}\n'
           b"UnknownError: Could not start gRPC server\n")
    n = Node(tmp_path, rank=1, output=out)
    n.start()
    n.turn()
    assert n.agent.machine.tasks["worker:0"].step == 5
    assert n.agent.machine.tasks["worker:0"].port_conflict


def test_a_slurm_run_replays_from_its_events_to_the_same_decisions(tmp_path):
    """The node logs what came in to its machine (``input`` events); a new machine fed them
    answers exactly what the run's machine answered."""
    restart = "restart: {policy: on-failure, max_restarts: 2, backoff: 1, min_uptime: 0}\n"
    n = Node(tmp_path, rank=1, restart=restart, output=b'@tfcluster progress {"step": 3}\n')
    n.start()
    n.turn()
    n.exits(1)
    n.turn(1.1)
    n.agent.reader.join(5)
    n.turn(0.2)
    n.signals.cancelled.append(TERM)
    n.turn()
    n.exits(-TERM)
    assert n.agent.machine.finished
    path = os.path.join(n.agent.run_dir, "worker-0.events.jsonl")
    rows = [json.loads(line) for line in open(path)]
    began = next(r["now"] for r in rows if r["event"] == "input" and r["input"] == "begin")
    inputs = [mc.input_from_fields(r) for r in rows if r["event"] == "input" and r["input"] != "begin"]
    assert any(isinstance(e, mc.Exited) for e in inputs) and any(isinstance(e, mc.Tick) for e in inputs)
    fresh = mc.RunMachine.from_plan(n.agent.plan, ["worker:0"], shared=True)
    fresh.where = dict(n.agent.where)
    fresh.tasks["worker:0"].port = n.agent.port
    assert mc.replay(fresh, began, inputs) == n.actions
    assert fresh.result == mc.RunState.INTERRUPTED and fresh.exit_code == 143


def test_the_slurm_record_rows_say_what_the_local_record_says(tmp_path):
    """run.json of a Slurm run is built from the nodes' end rows (the machine's end_row): the
    exit in the one wording, the task's note, and the verdict's words from the node that
    reached it -- as the local launcher writes them."""
    ps, chief = Node(tmp_path, rank=0), Node(tmp_path, rank=1)
    ps.start()
    chief.start()
    chief.exits(3)
    ps.turn()
    ps.turn()
    ps.exits(-HUP)
    record = _Record(chief.agent.plan)
    record.close(3, "77")
    rec = json.loads(open(os.path.join(chief.agent.run_dir, "run.json")).read())
    rows = {t["task"]: t for t in rec["tasks"]}
    assert rec["result"] == "failed" and rec["exit_code"] == 3
    assert rec["decision"] == "worker:0 failed (exit 3)"
    assert rows["worker:0"]["exit"] == "exit 3" and rows["worker:0"]["state"] == "failed"
    assert rows["ps:0"]["exit"] == "SIGHUP" and rows["ps:0"]["state"] == "stopped"
    assert rows["ps:0"]["note"] == ""


def test_elastic_a_lost_nodes_worker_leaves_and_a_worker_out_of_restarts_tells_the_others(tmp_path):
    """``elastic: {min_workers: 1}``: the launcher's news of a lost node (``*.lost-0.json``) reaches
    this node's machine, which lets the worker leave and goes on; a worker out of its restarts on
    its own node leaves there, and its end record (not final, ``left``) tells the other nodes."""
    cluster, extra = "{ps: 1, worker: 3}", "elastic: {min_workers: 1}\n"
    ps = Node(tmp_path, rank=0, cluster=cluster, extra=extra)
    w2 = Node(tmp_path, rank=3, cluster=cluster, extra=extra)
    ps.start()
    w2.start()
    assert FolderChannel(ps.agent.run_dir).mark_lost("worker:1", "n3", "Not responding", 1000.0) is None
    ps.turn()
    assert not ps.agent.machine.decided
    assert "worker:1 left the run (its node n3 was lost (Not responding)): going on with 2 of 3 " \
           "workers, min 1" in ps.said()
    w2.exits(1)                                 # policy never: out of restarts, it leaves
    assert not w2.agent.machine.decided
    rec = w2.record()
    assert rec["final"] is False and "left the run" not in rec["left"] and rec["left"].startswith("not restarted")
    ps.turn()
    assert "worker:2 left the run (worker:2 not restarted" in ps.said()
    assert ps.agent.machine.workers_line() == "1 of 3 workers, min 1" and not ps.agent.machine.decided
