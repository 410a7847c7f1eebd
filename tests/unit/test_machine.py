"""The run machine (tfcluster.core.machine) driven directly by tables of events: no processes, no
threads, no clock. Each test is what a driver would report and what the machine must answer."""
from __future__ import annotations

import signal

import pytest

from tfcluster.core import rules
from tfcluster.core.machine import (
    AskKill,
    ChiefGone,
    ClaimRestart,
    EndRun,
    Exited,
    Finished,
    Interrupt,
    Kill,
    KillRequest,
    LogEvent,
    PeerEnded,
    Phase,
    PortConflict,
    PortOpen,
    Progressed,
    RestartClaim,
    RunMachine,
    RunOver,
    RunState,
    Say,
    Settings,
    Start,
    Started,
    StartFailed,
    TaskState,
    Tick,
    TransitionError,
    Waiting,
    check_phase_change,
    check_transition,
)

TERM, KILL = signal.SIGTERM, signal.SIGKILL


def make(names=("ps:0", "worker:0", "worker:1"), policy="never", max_restarts=3, backoff=1.0,
         min_uptime=0.0, max_total=None, others=None, **kw):
    rule = rules.RestartRule(policy=policy, max_restarts=max_restarts, backoff=backoff,
                             min_uptime=min_uptime, max_total_restarts=max_total)
    kw.setdefault("chief", "worker:0")
    kw.setdefault("grace", 2.0)
    kw.setdefault("stop_timeout", 3.0)
    kw.setdefault("startup_timeout", 0.0)
    kw.setdefault("waiting_timeout", 0.0)
    kw.setdefault("stall_timeout", 0.0)
    kw.setdefault("max_total_restarts", max_total)
    tasks = [(n, n.split(":")[0], rule, 3000 + i) for i, n in enumerate(names)]
    others = others or {}
    return RunMachine(tasks, Settings(**kw), others=others,
                      where={**{n: f"localhost:{3000 + i}" for i, n in enumerate(names)},
                             **{n: f"far:{4000 + i}" for i, n in enumerate(others)}})


def started(m, now=0.0):
    """begin(), and every task reports it started."""
    acts = m.begin(now)
    assert all(isinstance(a, Start) for a in acts)
    out = []
    for i, a in enumerate(acts):
        out += m.handle(Started(a.task, 100 + i, now))
    return acts, out


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def kills(actions):
    return [(a.task, a.sig) for a in of(actions, Kill)]


def says(actions):
    return "\n".join(a.text for a in of(actions, Say))


def logged(actions, event):
    return [a for a in of(actions, LogEvent) if a.event == event]


def stop_everything(m, now):
    """Every task asked to stop exits at once; returns all actions until Finished."""
    out = []
    for _ in range(10):
        if m.finished:
            break
        for name in list(m.alive()):
            if m.tasks[name].state == TaskState.STOPPING:
                out += m.handle(Exited(name, -int(TERM), now))
        out += m.handle(Tick(now))
    return out


# ---------------------------------------------------------------------------- start


def test_begin_starts_ps_first_then_chief_then_workers():
    m = make(names=("worker:0", "worker:1", "chief:0", "ps:0", "evaluator:0"), chief="chief:0")
    assert [a.task for a in m.begin(0.0)] == ["ps:0", "chief:0", "worker:0", "worker:1", "evaluator:0"]


def test_started_moves_pending_to_running_and_records_the_pid():
    m = make()
    started(m)
    assert {n: t.state for n, t in m.tasks.items()} == dict.fromkeys(m.tasks, TaskState.RUNNING)
    assert m.tasks["ps:0"].pid == 100 and m.tasks["ps:0"].first_started == 0.0


def test_an_exit_of_a_task_never_started_is_a_transition_error():
    m = make()
    m.begin(0.0)
    with pytest.raises(TransitionError):
        m.handle(Exited("worker:1", 1, 1.0))


def test_task_state_changes_are_checked():
    assert check_transition(TaskState.FAILED, TaskState.RESTARTING) == TaskState.RESTARTING
    with pytest.raises(TransitionError):
        check_transition(TaskState.SUCCEEDED, TaskState.RUNNING, "worker:0")
    with pytest.raises(TransitionError):
        check_transition(TaskState.PENDING, TaskState.FAILED)


def test_the_run_goes_through_its_phases_and_no_other_way():
    m = make()
    assert m.phase == Phase.START
    started(m)
    assert m.phase == Phase.RUN
    m.handle(Exited("worker:0", 0, 5.0))
    assert m.phase == Phase.GRACE
    m.handle(Tick(7.1))
    assert m.phase == Phase.STOP and m.phase.stopping and m.phase.holds_starts
    stop_everything(m, 8.0)
    assert m.phase == Phase.DONE and m.finished
    assert check_phase_change(Phase.REPLACE, Phase.RUN) == Phase.RUN
    with pytest.raises(TransitionError):
        check_phase_change(Phase.GRACE, Phase.RUN)
    with pytest.raises(TransitionError):
        check_phase_change(Phase.DONE, Phase.STOP)


def test_start_failure_is_bad_input_and_stops_what_runs():
    m = make()
    m.begin(0.0)
    out = m.handle(Started("ps:0", 100, 0.0))
    out += m.handle(StartFailed("worker:0", "worker:0: program not found: nosuch", 0.1))
    assert m.result == RunState.FAILED and m.exit_code == 2
    assert m.root_cause_words == "worker:0: program not found: nosuch"
    assert ("ps:0", TERM) in kills(out)
    assert m.tasks["worker:1"].state == TaskState.STOPPED      # never started
    out += stop_everything(m, 1.0)
    assert of(out, Finished) == [Finished(RunState.FAILED, 2)]


# ---------------------------------------------------------------------------- success


def test_chief_exit_0_succeeds_grace_then_workers_then_ps():
    m = make()
    started(m)
    out = m.handle(Exited("worker:0", 0, 5.0))
    assert m.result == RunState.SUCCEEDED and m.exit_code == 0
    assert "run succeeded (worker:0 exited 0)" in says(out)
    assert "giving worker:1 2s to finish" in says(out)
    assert kills(out) == []                                   # grace first
    out = m.handle(Tick(6.0))
    assert kills(out) == []
    out = m.handle(Tick(7.1))                                 # grace over: worker:1 first
    assert kills(out) == [("worker:1", TERM)]
    out = m.handle(Exited("worker:1", -int(TERM), 7.2), Tick(7.2))
    assert kills(out) == [("ps:0", TERM)]                     # then the ps
    out = m.handle(Exited("ps:0", -int(TERM), 7.3), Tick(7.3))
    assert of(out, Finished) == [Finished(RunState.SUCCEEDED, 0)]
    assert {n: t.state.value for n, t in m.tasks.items()} == {
        "ps:0": "stopped", "worker:0": "succeeded", "worker:1": "stopped"}


def test_a_worker_that_ends_within_grace_is_succeeded_not_stopped():
    m = make()
    started(m)
    m.handle(Exited("worker:0", 0, 5.0))
    out = m.handle(Exited("worker:1", 0, 5.5))
    assert kills(out) == [("ps:0", TERM)]
    assert m.tasks["worker:1"].state == TaskState.SUCCEEDED


def test_a_failure_within_grace_is_said_but_the_run_still_succeeded():
    m = make()
    started(m)
    m.handle(Exited("worker:0", 0, 5.0))
    out = m.handle(Exited("worker:1", 3, 5.5))
    assert "worker:1 ended with exit 3 after the run had succeeded" in says(out)
    assert m.result == RunState.SUCCEEDED


def test_all_workers_rule_waits_for_every_worker():
    m = make(success="all-workers")
    started(m)
    out = m.handle(Exited("worker:0", 0, 1.0))
    assert not m.decided and kills(out) == []
    out = m.handle(Exited("worker:1", 0, 2.0))
    assert m.result == RunState.SUCCEEDED and "every worker exited 0" in says(out)


def test_no_grace_stops_at_once():
    m = make(grace=0.0)
    started(m)
    out = m.handle(Exited("worker:0", 0, 1.0))
    assert kills(out) == [("worker:1", TERM)]


def test_chief_gone_elsewhere_succeeds_per_host_mode():
    m = make(names=("ps:0", "worker:1"), others={"worker:0": "worker"})
    started(m)
    out = m.handle(ChiefGone("worker:0 on far:4000, which runs elsewhere, has ended", 9.0))
    assert m.result == RunState.SUCCEEDED and "which runs elsewhere" in says(out)


def test_per_host_without_the_chief_local_workers_decide():
    m = make(names=("ps:0", "worker:1"), others={"worker:0": "worker"})
    started(m)
    m.handle(Exited("worker:1", 0, 3.0))
    assert m.result == RunState.SUCCEEDED and m.words == "every worker exited 0"


def test_finished_comes_once_and_nothing_after():
    m = make(grace=0.0)
    started(m)
    out = m.handle(Exited("worker:0", 0, 1.0))
    out += stop_everything(m, 2.0)
    assert len(of(out, Finished)) == 1
    assert m.handle(Tick(3.0), Exited("worker:1", 0, 3.0)) == []


def test_each_group_gets_a_last_sigkill_after_its_leader():
    m = make(grace=0.0)
    started(m)
    out = m.handle(Exited("worker:0", 0, 1.0))
    out += stop_everything(m, 2.0)
    last = kills(out)[-2:]
    assert set(last) == {("worker:1", KILL), ("ps:0", KILL)}


# ---------------------------------------------------------------------------- restarts


def test_on_failure_restarts_after_a_doubling_backoff():
    m = make(policy="on-failure", backoff=1.0)
    started(m)
    out = m.handle(Exited("worker:1", 1, 10.0))
    assert m.tasks["worker:1"].state == TaskState.RESTARTING
    assert "worker:1: restart 1 of 3 in 1.0s" in says(out)
    assert of(m.handle(Tick(10.5)), Start) == []
    assert of(m.handle(Tick(11.0)), Start) == [Start("worker:1", 1)]
    assert of(m.handle(Tick(11.1)), Start) == []               # once
    m.handle(Started("worker:1", 200, 11.0))
    out = m.handle(Exited("worker:1", 1, 20.0))
    assert "restart 2 of 3 in 2.0s" in says(out)
    assert [n.as_dict()["attempt"] for n in logged(out, "task_restarting")] == [2]
    assert m.total_restarts == 2


def test_restart_budget_spent_fails_the_run_naming_the_task():
    m = make(policy="on-failure", max_restarts=1, backoff=0.0)
    started(m)
    m.handle(Exited("worker:1", 5, 10.0))
    m.handle(Tick(10.0))
    m.handle(Started("worker:1", 200, 10.0))
    out = m.handle(Exited("worker:1", 5, 20.0))
    assert m.result == RunState.FAILED and m.exit_code == 1 and m.root_cause == "worker:1"
    assert "not restarted: restart budget spent (1 of 1)" in m.tasks["worker:1"].why
    assert "run failed: worker:1 (exit 5); stopping the others" in says(out)


def test_the_runs_budget_is_shared_by_every_task():
    m = make(policy="on-failure", max_restarts=5, backoff=0.0, max_total=1)
    started(m)
    m.handle(Exited("worker:0", 1, 10.0))
    m.handle(Tick(10.0))
    m.handle(Started("worker:0", 200, 10.0))
    m.handle(Exited("worker:1", 1, 11.0))
    assert m.result == RunState.FAILED
    assert "the run's restart budget is spent (1 of 1)" in m.tasks["worker:1"].why


@pytest.mark.parametrize("policy,rc,restarts", [
    ("never", 1, False), ("never", -9, False),
    ("on-failure", 1, True), ("on-failure", -9, True), ("on-failure", 0, False),
    ("exit-code", 1, False), ("exit-code", 127, False), ("exit-code", 137, True),
    ("exit-code", -15, True), ("exit-code", 255, True),
])
def test_restart_policies(policy, rc, restarts):
    m = make(policy=policy, backoff=0.0, success="all-workers")
    started(m)
    m.handle(Exited("worker:1", rc, 10.0))
    want = TaskState.RESTARTING if restarts else (TaskState.SUCCEEDED if rc == 0 else TaskState.FAILED)
    assert m.tasks["worker:1"].state == want


def test_a_port_conflict_is_exit_2_and_never_retried():
    m = make(policy="on-failure", backoff=0.0)
    started(m)
    m.handle(PortConflict("worker:0", 1.0))
    out = m.handle(Exited("worker:0", 1, 1.5))
    assert m.exit_code == 2 and of(out, Start) == []
    assert "port conflict: localhost:3001 is in use" in m.tasks["worker:0"].why


def test_a_first_run_that_fails_within_min_uptime_is_not_restarted():
    m = make(policy="on-failure", min_uptime=1.0)
    started(m, now=0.0)
    m.handle(Exited("worker:1", 1, 0.5))
    assert m.result == RunState.FAILED
    assert "its first run failed within 1s" in m.tasks["worker:1"].why
    m = make(policy="on-failure", min_uptime=1.0)
    started(m, now=0.0)
    m.handle(Exited("worker:1", 1, 1.5))
    assert m.tasks["worker:1"].state == TaskState.RESTARTING


def test_a_task_that_fails_after_the_run_is_decided_is_not_restarted():
    m = make(policy="on-failure", grace=5.0)
    started(m)
    m.handle(Exited("worker:0", 0, 1.0))
    out = m.handle(Exited("worker:1", 1, 2.0))
    assert of(out, Start) == [] and m.tasks["worker:1"].state == TaskState.FAILED


def test_a_task_waiting_for_its_restart_is_stopped_with_the_run():
    m = make(policy="on-failure", backoff=10.0)
    started(m)
    m.handle(Exited("worker:1", 1, 1.0))
    m.handle(Exited("worker:0", 0, 2.0))
    assert m.tasks["worker:1"].state == TaskState.STOPPED


# ---------------------------------------------------------------------------- shared budget


def test_shared_budget_asks_the_driver_to_claim_and_restarts_when_granted():
    m = make(policy="on-failure", backoff=0.5, max_total=2, shared_budget=True)
    started(m)
    out = m.handle(Exited("worker:1", 1, 5.0))
    assert of(out, ClaimRestart) == [ClaimRestart("worker:1")]
    assert of(m.handle(Tick(6.0)), Start) == []                    # not before the answer
    out = m.handle(RestartClaim("worker:1", True, 6.0))
    assert "worker:1: restart 1 of 3 in 0.5s" in says(out)
    assert of(m.handle(Tick(6.5)), Start) == [Start("worker:1", 1)]


def test_a_claim_that_cannot_be_recorded_grants_no_restart():
    m = make(policy="on-failure", max_total=2, shared_budget=True)
    started(m)
    m.handle(Exited("worker:1", 1, 5.0))
    out = m.handle(RestartClaim("worker:1", False, 5.1, "cannot record the restart: disk full"))
    assert m.result == RunState.FAILED and m.root_cause == "worker:1"
    assert "not restarted: cannot record the restart: disk full" in m.tasks["worker:1"].why
    assert ("ps:0", TERM) not in kills(out) or ("worker:0", TERM) in kills(out)


# ---------------------------------------------------------------------------- signals


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_stop_signal_interrupts_with_128_plus_n_workers_before_ps(sig, code):
    m = make()
    started(m)
    out = m.handle(Interrupt(sig, 3.0))
    assert m.result == RunState.INTERRUPTED and m.exit_code == code
    assert kills(out) == [("worker:0", TERM), ("worker:1", TERM)]
    out = m.handle(Exited("worker:0", -15, 3.1), Exited("worker:1", -15, 3.1), Tick(3.1))
    assert kills(out) == [("ps:0", TERM)]


def test_ctrl_c_says_how_to_force_and_a_second_one_kills_at_once():
    m = make()
    started(m)
    out = m.handle(Interrupt(signal.SIGINT, 3.0))
    assert "press Ctrl-C again" in says(out)
    out = m.handle(Interrupt(signal.SIGINT, 3.2))
    assert set(kills(out)) == {("worker:0", KILL), ("worker:1", KILL)}
    assert "still running" not in says(out)                 # no false stop-timeout words


def test_a_signal_during_grace_keeps_the_success_and_stops():
    m = make(grace=30.0)
    started(m)
    m.handle(Exited("worker:0", 0, 1.0))
    out = m.handle(Interrupt(signal.SIGTERM, 2.0))
    assert m.result == RunState.SUCCEEDED and ("worker:1", TERM) in kills(out)


# ---------------------------------------------------------------------------- stop timeouts


def test_sigkill_after_the_stop_timeout_names_the_timeout():
    m = make(grace=0.0, stop_timeout=1.5)
    started(m)
    m.handle(Exited("worker:0", 0, 1.0))
    m.handle(Exited("worker:1", -15, 1.1), Tick(1.1))          # ps:0 now gets SIGTERM
    assert m.handle(Tick(2.0)) == []
    out = m.handle(Tick(2.7))
    assert kills(out) == [("ps:0", KILL)]
    assert "ps:0 (pid 100) still running 1.5s after SIGTERM: SIGKILL" in says(out)


def test_a_task_that_survives_sigkill_is_named_and_the_run_still_ends():
    m = make(grace=0.0, stop_timeout=1.0)
    started(m)
    m.handle(Exited("worker:0", 0, 1.0))
    m.handle(Exited("worker:1", -15, 1.0), Tick(1.0))
    m.handle(Tick(2.1))
    out = m.handle(Tick(12.2))
    assert "ps:0 (pid 100) did not die after SIGKILL" in says(out)
    assert of(out, Finished)


# ---------------------------------------------------------------------------- watchdogs


def test_startup_watchdog_kills_a_server_that_never_opens_its_port():
    m = make(startup_timeout=3.0)
    started(m)
    m.handle(PortOpen("worker:0", 1.0), PortOpen("worker:1", 1.0))
    assert m.handle(Tick(2.9)) == []
    out = m.handle(Tick(3.5))
    assert kills(out) == [("ps:0", KILL)]
    assert m.unopened() == []                             # being killed: no more probes
    m.handle(Exited("ps:0", -9, 3.6))
    assert m.root_cause == "ps:0" and "did not open port 3000 within 3s" in m.tasks["ps:0"].why


def test_unopened_lists_every_task_with_a_port_but_only_servers_face_the_startup_watchdog():
    m = make(names=("chief:0", "ps:0", "worker:0", "evaluator:0"), chief="chief:0",
             startup_timeout=3.0)
    started(m)
    m.tasks["evaluator:0"].port = None               # an evaluator is not in the cluster spec
    assert sorted(m.unopened()) == ["chief:0", "ps:0", "worker:0"]
    out = m.handle(Tick(3.5))
    assert sorted(t for t, _ in kills(out)) == ["ps:0", "worker:0"]
    assert m.shown("evaluator:0") == "running"


def test_waiting_watchdog_kills_the_task_others_wait_for():
    m = make(waiting_timeout=2.0)
    started(m)
    m.handle(Waiting("worker:0", "worker:1", 1.0))
    assert kills(m.handle(Tick(2.5))) == []
    out = m.handle(Tick(3.1))
    assert kills(out) == [("worker:1", KILL)]
    assert "worker:0 has waited 2s for it" in says(out)


def test_waiting_on_a_task_this_launcher_does_not_run_fails_the_run():
    m = make(names=("ps:0", "worker:0"), waiting_timeout=2.0, others={"worker:1": "worker"})
    started(m)
    m.handle(Waiting("worker:0", "worker:1", 1.0))
    out = m.handle(Tick(3.5))
    assert m.result == RunState.FAILED and "which this launcher does not run" in m.root_cause_words
    assert of(out, AskKill) == []


def test_waiting_on_a_task_on_another_node_asks_that_node_to_kill_it():
    m = make(names=("worker:0",), waiting_timeout=2.0, others={"ps:0": "ps", "worker:1": "worker"},
             remote_kill=True, peers_report=True)
    started(m)
    m.handle(Waiting("worker:0", "worker:1", 1.0))
    out = m.handle(Tick(3.5))
    assert [(a.task, a.reason.split(" (watchdog.")[0]) for a in of(out, AskKill)] == [
        ("worker:1", "watchdog: worker:0 has waited 2s for it (CreateSession still waiting)")]
    assert "watchdog.waiting_timeout: 2" in of(out, AskKill)[0].reason   # names its setting
    assert not m.decided


def test_a_kill_request_from_another_node_kills_the_task_here():
    m = make(names=("worker:1",), others={"worker:0": "worker", "ps:0": "ps"}, peers_report=True)
    started(m)
    out = m.handle(KillRequest("worker:1", "watchdog: worker:0 has waited 2s for it", 5.0))
    assert kills(out) == [("worker:1", KILL)]
    assert m.tasks["worker:1"].forced.startswith("watchdog:")


def test_stall_watchdog_fails_the_run_and_progress_keeps_it_alive():
    m = make(stall_timeout=4.0)
    started(m)
    m.handle(Progressed("worker:0", 5, 1.0))
    out = m.handle(Tick(4.0))                # 3 s after the step: within the 4 s deadline
    assert not m.decided and not logged(out, "watchdog") and not kills(out)
    m.handle(Progressed("worker:0", 6, 4.5))
    m.handle(Tick(8.0))
    assert not m.decided
    m.handle(Tick(8.6))          # the run's own cadence (3.5 s between steps) doubles the deadline
    assert not m.decided
    out = m.handle(Tick(11.6))
    assert m.result == RunState.FAILED
    assert "the global step has stood at 6" in m.root_cause_words
    assert logged(out, "watchdog")


def test_a_step_that_does_not_grow_is_not_progress():
    m = make(stall_timeout=4.0)
    started(m)
    m.handle(Progressed("worker:0", 5, 1.0))
    m.handle(Progressed("worker:0", 5, 4.0))
    m.handle(Tick(5.1))
    assert m.result == RunState.FAILED


def test_any_sign_of_life_keeps_the_stall_and_startup_watchdogs_away():
    """A Keras bar that moves (life without a global step) counts; a server making progress
    is never killed for its port."""
    m = make(stall_timeout=4.0, startup_timeout=3.0)
    started(m)
    m.handle(PortOpen("ps:0", 0.5), PortOpen("worker:1", 0.5))
    m.handle(Progressed("worker:0", 5, 1.0))
    for t in (2.0, 3.0, 4.0, 5.0, 6.0, 7.0):
        m.handle(Progressed("worker:0", None, t), Tick(t + 0.5))
    assert not m.decided and m.tasks["worker:0"].forced == ""
    m.handle(Tick(20.0))
    assert m.result == RunState.FAILED


def test_watchdogs_are_off_at_zero():
    m = make()
    started(m)
    m.handle(Waiting("worker:0", "worker:1", 1.0), Progressed("worker:0", 1, 1.0))
    assert m.handle(Tick(10_000.0)) == [] and not m.decided


# ---------------------------------------------------------------------------- other nodes


def test_run_over_elsewhere_stops_here_without_telling_back():
    m = make(names=("ps:0",), others={"worker:0": "worker"}, peers_report=True, peer_stop_wait=0.0)
    started(m)
    out = m.handle(RunOver("the run is over", 5.0))
    assert m.result == RunState.SUCCEEDED and of(out, EndRun) == []
    assert kills(out) == [("ps:0", TERM)]


def test_a_decision_made_here_is_told_to_the_other_nodes():
    m = make(names=("worker:0",), others={"ps:0": "ps"}, peers_report=True)
    started(m)
    out = m.handle(Exited("worker:0", 0, 5.0))
    assert of(out, EndRun) == [EndRun(RunState.SUCCEEDED, "worker:0 exited 0")]


def test_a_peer_chief_that_succeeded_decides_the_run_on_a_ps_node():
    m = make(names=("ps:0",), others={"worker:0": "worker"}, peers_report=True)
    started(m)
    out = m.handle(PeerEnded("worker:0", True, 5.0))
    assert m.result == RunState.SUCCEEDED and ("ps:0", TERM) in kills(out)


def test_the_ps_waits_for_the_chief_on_another_node_before_it_stops():
    """A Slurm job that gets SIGTERM: every node hears it at once, but the ps stops last."""
    m = make(names=("ps:0",), others={"worker:0": "worker", "worker:1": "worker"},
             peers_report=True, stop_timeout=5.0, peer_stop_wait=30.0)
    started(m)
    out = m.handle(Interrupt(signal.SIGTERM, 1.0))
    assert kills(out) == [] and "to stop before the ps" in says(out)
    assert kills(m.handle(PeerEnded("worker:0", False, 2.0))) == []
    out = m.handle(PeerEnded("worker:1", False, 3.0))
    assert kills(out) == [("ps:0", TERM)]


def test_the_ps_does_not_wait_forever_for_peers():
    m = make(names=("ps:0",), others={"worker:0": "worker"}, peers_report=True, peer_stop_wait=4.0)
    started(m)
    m.handle(Interrupt(signal.SIGTERM, 1.0))
    assert kills(m.handle(Tick(4.9))) == []
    assert kills(m.handle(Tick(5.1))) == [("ps:0", TERM)]


def test_a_task_exited_event_carries_the_signal():
    m = make(grace=0.0)
    started(m)
    out = m.handle(Exited("worker:0", 0, 1.0))
    out += m.handle(Exited("worker:1", -9, 1.2), Tick(1.2))
    exited = {n.task: n.as_dict() for n in logged(out, "task_exited")}
    assert exited["worker:0"]["exit_code"] == 0 and exited["worker:0"]["state"] == "succeeded"
    assert exited["worker:1"]["signal"] == "SIGKILL" and exited["worker:1"]["state"] == "stopped"


def test_from_plan_reads_the_plan(tmp_path):
    from tfcluster.clusterfile import config
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    p = tmp_path / "c.yaml"
    p.write_text("cluster: {ps: [localhost:3000], worker: [localhost:3001, localhost:3002]}\n"
                 "program: {command: [python, t.py]}\n"
                 "restart: {policy: on-failure, max_restarts: 2, max_total_restarts: 3}\n"
                 "watchdog: {startup_timeout: 7}\n"
                 f"logdir: {tmp_path}\n")
    plan = build_plan(config.load(str(p)), LaunchOptions(run_id="t"))
    m = RunMachine.from_plan(plan)
    assert list(m.tasks) == ["ps:0", "worker:0", "worker:1"]
    assert m.s.startup_timeout == 7 and m.s.max_total_restarts == 3 and not m.s.shared_budget
    assert m.tasks["worker:1"].rule.max_restarts == 2 and m.tasks["worker:1"].port == 3002
    node = RunMachine.from_plan(plan, ["worker:1"], shared=True)
    assert list(node.tasks) == ["worker:1"] and node.others == {"ps:0": "ps", "worker:0": "worker"}
    assert node.s.shared_budget and node.s.peers_report and node.s.remote_kill


def test_the_live_state_says_starting_serving_running_and_stopping():
    """What the live table shows for a running task: ``starting`` while TensorFlow loads (no
    open port, no step), ``serving`` once its port accepts connections (a ps stays there),
    ``running`` once it reports steps, ``stopping`` while the run stops it."""
    m = make(names=("ps:0", "worker:0", "worker:1"))
    started(m)
    assert [m.shown(n) for n in ("ps:0", "worker:0", "worker:1")] == ["starting"] * 3
    assert sorted(m.unopened()) == ["ps:0", "worker:0", "worker:1"]
    m.handle(PortOpen("ps:0", 1.0), PortOpen("worker:0", 1.0))
    assert m.shown("ps:0") == "serving" and m.shown("worker:0") == "serving"
    assert m.unopened() == ["worker:1"]
    m.handle(Progressed("worker:0", 1, 2.0), Progressed("worker:1", 1, 2.0))
    assert m.shown("worker:0") == "running" and m.shown("worker:1") == "running"
    out = m.handle(Interrupt(signal.SIGINT, 3.0))
    assert kills(out) == [("worker:0", TERM), ("worker:1", TERM)]
    # the ps waits for its wave, and is already shown as stopping
    assert [m.shown(n) for n in ("ps:0", "worker:0", "worker:1")] == ["stopping"] * 3
    m.handle(Exited("worker:0", -TERM, 4.0))
    assert m.shown("worker:0") == "stopped"


def test_several_tasks_failing_together_announce_the_run_failure_once():
    m = make()
    started(m)
    out = m.handle(Exited("worker:1", 5, 1.0), Exited("worker:0", 6, 1.0), Exited("ps:0", 7, 1.0))
    assert says(out).count("run failed:") == 1
    assert "run failed: worker:1 (exit 5)" in says(out)
    assert m.tasks["worker:1"].why == "" and m.root_cause == "worker:1"


def test_a_cause_the_driver_learnt_becomes_why_the_failed_task_ended():
    m = make()
    started(m)
    out = m.handle(Exited("worker:1", -9, 1.0, "out of memory: the memory limit was hit"))
    assert "worker:1 failed (SIGKILL): out of memory: the memory limit was hit" in says(out)
    assert m.tasks["worker:1"].why == "out of memory: the memory limit was hit"


def test_a_sigkill_says_who_sent_it_as_far_as_tfcluster_can_tell():
    """Linux does not tell a parent who sent a SIGKILL: tfcluster knows its own kills, the
    driver reads the OOM killer's counters; anything else is said to be neither."""
    outside = "not tfcluster, not the OOM killer (its counters did not grow: oom_kill in /proc/vmstat)"
    m = make()
    started(m)
    out = m.handle(Exited("worker:1", -9, 1.0, outside))
    assert f"worker:1 failed (SIGKILL): {outside}" in says(out) and m.tasks["worker:1"].why == outside
    # the driver could ask no counter (another host): still not tfcluster
    m = make()
    started(m)
    m.handle(Exited("worker:1", -9, 1.0))
    assert m.tasks["worker:1"].why.startswith("not tfcluster (SIGKILL from elsewhere; whether the "
                                              "OOM killer sent it could not be read here)")
    # a SIGKILL tfcluster sent in a stop that timed out: its own, whatever the counters say
    m = make(stop_timeout=3.0)
    started(m)
    m.handle(Interrupt(TERM, 1.0))
    m.handle(Exited("worker:0", -TERM, 1.5))
    out = m.handle(Tick(4.5))
    assert ("worker:1", KILL) in kills(out)
    m.handle(Exited("worker:1", -9, 4.6, outside))
    assert m.tasks["worker:1"].why == "killed by tfcluster: still running 3s after SIGTERM"
    # the watchdog's kill: its reason names it
    m = make(startup_timeout=2.0)
    started(m)
    m.handle(PortOpen("worker:0", 0.5), PortOpen("worker:1", 0.5))
    out = m.handle(Tick(3.0))
    assert ("ps:0", KILL) in kills(out)
    m.handle(Exited("ps:0", -9, 3.1, outside))
    assert m.tasks["ps:0"].why.startswith("watchdog: its server did not open port 3000 within 2s")
    # a second Ctrl-C
    m = make()
    started(m)
    m.handle(Interrupt(signal.SIGINT, 1.0))
    m.handle(Interrupt(signal.SIGINT, 1.2))
    m.handle(Exited("worker:0", -9, 1.3, outside))
    assert m.tasks["worker:0"].why == "killed by tfcluster: a second Ctrl-C killed every task at once"


# ---------------------------------------------------------------------------- stuck and ending tasks
# A stuck task is named early, the stall names suspects, the summary keeps it; the watchdogs
# read the run as it is ("still waiting" then progress, final steps).


def test_a_still_waiting_line_followed_by_progress_is_cleared():
    """TensorFlow prints "CreateSession still waiting" once when a ps starts late, then trains:
    the waiter's progress clears the wait, and the ps keeps running."""
    m = make(waiting_timeout=2.0)
    started(m)
    m.handle(Waiting("worker:0", "ps:0", 1.0))
    m.handle(Progressed("worker:0", 1, 1.5))
    out = m.handle(Tick(10.0))
    assert kills(out) == [] and not m.tasks["ps:0"].forced
    m.handle(Waiting("worker:0", "ps:0", 11.0))         # a new wait counts from its own line
    assert kills(m.handle(Tick(12.5))) == []
    assert kills(m.handle(Tick(13.1))) == [("ps:0", KILL)]


def test_a_step_that_stands_still_does_not_clear_a_wait():
    m = make(waiting_timeout=2.0)
    started(m)
    m.handle(Progressed("worker:0", 5, 0.5))
    m.handle(Waiting("worker:0", "ps:0", 1.0))
    m.handle(Progressed("worker:0", 5, 1.5))
    assert kills(m.handle(Tick(3.1))) == [("ps:0", KILL)]


def test_tasks_at_their_final_step_are_under_the_end_deadline_not_the_stall():
    """Tasks that take 12 s to exit after their final step pass under stall_timeout 5."""
    m = make(names=("ps:0", "worker:0", "worker:1"), stall_timeout=5.0, end_timeout=60.0)
    started(m)
    for t in range(1, 11):
        m.handle(Progressed("worker:0", t, float(t), 10), Progressed("worker:1", t, float(t), 10),
                 Tick(float(t)))
    out = []
    for t in range(11, 23):
        out += m.handle(Tick(float(t)))
    assert not m.decided and kills(out) == [] and "stood at" not in says(out)
    out = m.handle(Exited("worker:0", 0, 22.0), Exited("worker:1", 0, 22.1))
    out += stop_everything(m, 22.2)
    assert m.result == RunState.SUCCEEDED
    assert m.tasks["worker:1"].state == TaskState.SUCCEEDED


def test_a_task_past_the_end_deadline_is_killed_naming_the_setting():
    m = make(names=("ps:0", "worker:0"), stall_timeout=5.0, end_timeout=8.0)
    started(m)
    out = m.handle(Progressed("worker:0", 10, 1.0, 10))
    assert logged(out, "task_ending")
    assert kills(m.handle(Tick(8.9))) == []
    out = m.handle(Tick(9.5))
    assert kills(out) == [("worker:0", KILL)]
    assert "watchdog.end_timeout: 8" in says(out)


def test_one_task_at_its_end_and_another_stuck_still_stalls_the_run():
    m = make(stall_timeout=5.0, stall_warning=0.0)
    started(m)
    m.handle(Progressed("worker:0", 10, 1.0, 10), Progressed("worker:1", 7, 1.0, 10))
    m.handle(Tick(7.0))
    assert m.result == RunState.FAILED
    assert "suspects: worker:1 (no progress for 6s, at step 7)" in m.root_cause_words


def test_one_task_at_its_end_and_another_that_never_reported_still_stalls_the_run():
    m = make(stall_timeout=5.0, stall_warning=0.0)
    started(m)
    m.handle(Progressed("worker:0", 10, 1.0, 10))
    m.handle(Tick(7.0))
    assert m.result == RunState.FAILED and "stood at 10" in m.root_cause_words


def test_a_worker_at_its_final_step_may_exit_by_itself_after_its_leader():
    """MWMS: the chief exits 0, the other worker logs coordination errors and exits 0 by itself
    7-8 s later: with its final step reported it is a success, not stopped after the grace."""
    m = make(names=("ps:0", "worker:0", "worker:1"), grace=2.0, end_timeout=60.0)
    started(m)
    m.handle(Progressed("worker:0", 40, 1.0, 40), Progressed("worker:1", 40, 1.0, 40))
    out = m.handle(Exited("worker:0", 0, 2.0))
    assert m.result == RunState.SUCCEEDED
    # one deadline, said once: the one applied (the grace is 2 s, end_timeout keeps it 60 s
    # from its final step, at 1.0)
    said = [s for s in says(out).splitlines() if "to finish" in s or "final step" in s]
    assert said == ["giving worker:1 up to 59s to finish: worker:1 reached the final step, and "
                    "may take 60s from there to exit by itself (watchdog.end_timeout)"], said
    assert kills(m.handle(Tick(6.0))) == []            # past the 2 s grace: still its own
    out = m.handle(Exited("worker:1", 0, 9.5), Tick(9.6))
    assert m.tasks["worker:1"].state == TaskState.SUCCEEDED
    assert kills(out) == [("ps:0", TERM)]


def test_a_worker_without_a_final_step_still_gets_only_the_grace():
    m = make(grace=2.0, end_timeout=60.0)
    started(m)
    m.handle(Progressed("worker:1", 30, 1.0, 40))
    m.handle(Exited("worker:0", 0, 2.0))
    assert kills(m.handle(Tick(4.1))) == [("worker:1", TERM)]


def test_a_task_whose_progress_stops_while_others_go_on_is_named_early():
    """worker:1 stuck after 2 s, stall_timeout 24: named within half the deadline; the stall's
    suspects and the end summary name it too, even though the run succeeds."""
    m = make(stall_timeout=24.0, stall_warning=0.4, grace=1.0)
    started(m)
    m.run_ref = "runs/r1"
    out = []
    for i in range(1, 30):
        t = float(i)
        evs = [Progressed("worker:0", 10 * i, t)]
        if t <= 2.0:
            evs.append(Progressed("worker:1", 10 * i + 1, t))
        out += m.handle(*evs, Tick(t + 0.1))
        if "worker:1 (no progress" in says(out):
            break
    assert t <= 2.0 + 24.0 / 2, t                 # within about half the deadline
    line = [a.text for a in of(out, Say) if "worker:1 (no progress" in a.text][0]
    assert "while worker:0 goes on" in line and "tfcluster stack runs/r1 worker:1" in line
    assert [n.task for n in logged(out, "task_stalled")] == ["worker:1"]
    assert "worker:0 (no" not in says(out)          # the one going on is not named
    m.handle(Exited("worker:0", 0, 30.0))
    assert m.result == RunState.SUCCEEDED
    stop_everything(m, 31.5)
    assert m.tasks["worker:1"].state == TaskState.STOPPED
    assert m.tasks["worker:1"].why.startswith("stopped making progress at step 21")
    [line] = m.stalled()
    assert line.startswith("worker:1 stopped making progress at step 21")


def test_a_stuck_task_that_resumes_is_cleared():
    m = make(stall_timeout=10.0, stall_warning=0.5)
    started(m)
    out = []
    for i in range(1, 9):
        evs = [Progressed("worker:0", i, float(i))]
        if i == 1:
            evs += [Progressed("worker:1", 0, 0.5), Progressed("worker:1", 1, 1.0)]
        out += m.handle(*evs, Tick(i + 0.1))
    assert logged(out, "task_stalled")
    out = m.handle(Progressed("worker:1", 2, 9.0))
    assert "worker:1 makes progress again" in says(out) and m.stalled() == []


def test_a_task_with_a_slow_cadence_is_not_named_within_its_own_rhythm():
    """A task that reports once every 6 s (Keras verbose=2, an epoch) is not stuck at 5 s."""
    m = make(stall_timeout=10.0, stall_warning=0.5)
    started(m)
    out = []
    for i in range(1, 30):
        t = float(i)
        evs = [Progressed("worker:0", i, t)]
        if i % 6 == 0:
            evs.append(Progressed("worker:1", i, t))
        out += m.handle(*evs, Tick(t + 0.1))
    assert not logged(out, "task_stalled")


def test_the_whole_run_standing_still_is_warned_once_naming_suspects():
    m = make(stall_timeout=20.0, stall_warning=0.4)
    started(m)
    m.handle(Progressed("worker:0", 40, 1.0), Progressed("worker:1", 39, 2.0))
    out = []
    for t in (5.0, 8.0, 9.5, 10.0, 12.0):
        out += m.handle(Tick(t))
    warned = [a.text for a in of(out, Say) if a.text.startswith("no task has made progress")]
    assert len(warned) == 1
    assert "suspects: worker:0 (no progress for 9s, at step 40), worker:1 (no progress for 8s" \
        in warned[0] and "where each task is: tfcluster stack RUN" in warned[0]
    assert not m.decided
    m.handle(Tick(22.5))
    assert m.result == RunState.FAILED and "suspects: worker:0" in m.root_cause_words


def test_the_stall_warning_states_the_deadline_the_watchdog_applies():
    """A run whose slowest wait for progress was 26 s fails 52 s after its last progress, not at
    stall_timeout 40: the warning says so (the 2x rule), and the run fails then."""
    m = make(stall_timeout=40.0, stall_warning=0.4)
    started(m)
    for t in (1.0, 2.0, 28.0, 30.0):
        m.handle(Progressed("worker:0", int(t), t), Progressed("worker:1", int(t), t), Tick(t + 0.1))
    out = []
    for t in range(31, 50):
        out += m.handle(Tick(float(t)))
    [warned] = [a.text for a in of(out, Say) if a.text.startswith("no task has made progress")]
    assert "no task has made progress for 16s (global step 30); the run fails in 36s if nothing " \
        "moves, 52s after the last progress (twice its slowest report so far; " \
        "watchdog.stall_timeout: 40)" in warned, warned
    m.handle(Tick(75.0))
    assert not m.decided                            # past 30 + 40: the 2x rule holds it
    m.handle(Tick(82.5))
    assert m.result == RunState.FAILED and "for 52s (twice its slowest report so far)" in m.root_cause_words


def test_the_stall_warning_names_the_timeout_when_it_is_the_deadline():
    m = make(stall_timeout=20.0, stall_warning=0.4)
    started(m)
    m.handle(Progressed("worker:0", 40, 1.0), Progressed("worker:1", 39, 2.0))
    out = m.handle(Tick(10.5))
    [warned] = [a.text for a in of(out, Say) if a.text.startswith("no task has made progress")]
    assert "the run fails in 12s if nothing moves, 20s after the last progress " \
        "(watchdog.stall_timeout: 20)" in warned, warned


def test_one_task_going_on_goes_on_several_go_on():
    m = make(names=("ps:0", "worker:0", "worker:1", "worker:2"), stall_timeout=20.0, stall_warning=0.4)
    started(m)
    out = []
    for i in range(1, 14):
        t = float(i)
        evs = [Progressed("worker:0", 10 * i, t), Progressed("worker:2", 10 * i, t)]
        if t <= 2.0:
            evs.append(Progressed("worker:1", 10 * i + 1, t))
        out += m.handle(*evs, Tick(t + 0.1))
    [line] = [a.text for a in of(out, Say) if "worker:1 (no progress" in a.text]
    assert "while worker:0, worker:2 go on:" in line, line
    m = make(stall_timeout=20.0, stall_warning=0.4)
    started(m)
    out = []
    for i in range(1, 14):
        t = float(i)
        evs = [Progressed("worker:0", 10 * i, t)] + ([Progressed("worker:1", i, t)] if t <= 2 else [])
        out += m.handle(*evs, Tick(t + 0.1))
    [line] = [a.text for a in of(out, Say) if "worker:1 (no progress" in a.text]
    assert "while worker:0 goes on:" in line, line


def test_ps_tasks_and_tasks_without_progress_are_never_named_stuck():
    m = make(stall_timeout=10.0, stall_warning=0.3)
    started(m)
    out = []
    for i in range(1, 12):
        out += m.handle(Progressed("worker:0", i, float(i)), Tick(i + 0.1))
    assert not logged(out, "task_stalled") and m.stalled() == []
