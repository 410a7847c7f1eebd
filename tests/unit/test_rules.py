"""The rulebook (tfcluster/core/rules.py) as tables: job order, stop waves, exit codes, restart
decisions with their reasons and delays, success, grace, seconds, and the watchdog's checks."""
from __future__ import annotations

import math
import signal

import pytest

from tfcluster.core import rules
from tfcluster.core.rules import RestartRule, WatchdogAction

# ---------------------------------------------------------------- job order

@pytest.mark.parametrize("jobs, listed, started, first, then", [
    (["worker", "ps"], ["ps", "worker"], ["ps", "worker"], ["worker"], ["ps"]),
    (["evaluator", "worker", "chief", "ps"], ["chief", "ps", "worker", "evaluator"],
     ["ps", "chief", "worker", "evaluator"], ["chief", "worker", "evaluator"], ["ps"]),
    (["local"], ["local"], ["local"], ["local"], []),
    (["zeta", "worker", "alpha", "ps"], ["ps", "worker", "zeta", "alpha"],
     ["ps", "worker", "zeta", "alpha"], ["worker", "zeta", "alpha"], ["ps"]),
    (["ps"], ["ps"], ["ps"], [], ["ps"]),
    ([], [], [], [], []),
])
def test_listing_start_and_stop_order(jobs, listed, started, first, then):
    assert rules.sort_jobs(jobs) == listed
    assert rules.start_order(jobs) == started          # ps first: the others dial it
    assert rules.stop_waves(jobs) == (first, then)     # ps last: the chief may save through it


@pytest.mark.parametrize("job, rank", [("chief", 0), ("ps", 1), ("worker", 2), ("evaluator", 3),
                                       ("local", 4), ("", 4)])
def test_job_rank(job, rank):
    assert rules.job_rank(job) == rank


# ---------------------------------------------------------------- exit codes

@pytest.mark.parametrize("returncode, code, words", [
    (0, 0, "exit 0"), (1, 1, "exit 1"), (7, 7, "exit 7"), (255, 255, "exit 255"), (256, 1, "exit 256"),
    (-signal.SIGKILL, 137, "SIGKILL"), (-signal.SIGTERM, 143, "SIGTERM"),
    (-signal.SIGINT, 130, "SIGINT"), (-signal.SIGHUP, 129, "SIGHUP"), (-signal.SIGSEGV, 139, "SIGSEGV"),
    (-99, 227, "signal 99"),
])
def test_exit_codes_and_their_words(returncode, code, words):
    assert rules.task_exit_code(returncode) == code
    assert rules.describe_exit(returncode) == words
    if returncode < 0:
        assert rules.signal_exit_code(-returncode) == code


def test_a_running_task_has_no_exit_words():
    assert rules.describe_exit(None) == ""


# ---------------------------------------------------------------- restarts

@pytest.mark.parametrize("backoff, restarts, delay", [
    (1.0, 0, 1.0), (1.0, 1, 2.0), (1.0, 4, 16.0), (1.0, 5, 30.0), (1.0, 1000, 30.0),
    (0.5, 3, 4.0), (0.1, 0, 0.1), (0.0, 10, 0.0), (40.0, 0, 30.0),
])
def test_backoff_doubles_up_to_the_cap(backoff, restarts, delay):
    assert rules.backoff_delay(backoff, restarts) == pytest.approx(delay)


ON = RestartRule("on-failure", max_restarts=2, backoff=1.0)
CODE = RestartRule("exit-code", max_restarts=2, backoff=1.0)
NEVER = RestartRule("never")
TOTAL = RestartRule("on-failure", max_restarts=5, max_total_restarts=3)


@pytest.mark.parametrize("rule, rc, restarts, total, flags, restart, reason", [
    (ON, 0, 0, 0, {}, False, "exited 0"),
    (ON, 1, 0, 0, {}, True, "restart 1 of 2"),
    (ON, 1, 1, 0, {}, True, "restart 2 of 2"),
    (ON, 1, 2, 0, {}, False, "restart budget spent (2 of 2)"),
    (ON, -9, 0, 0, {}, True, "restart 1 of 2"),
    (ON, 1, 0, 0, {"run_over": True}, False, "the run is over"),
    (ON, 1, 0, 0, {"port_conflict": True}, False, "a port conflict is not retried"),
    (ON, 1, 0, 0, {"early": True}, False, "its first run failed within 1s"),
    (NEVER, 1, 0, 0, {}, False, "restart policy is never"),
    (NEVER, 0, 0, 0, {}, False, "exited 0"),
    (CODE, 1, 0, 0, {}, False, "exit code 1 is a permanent error"),
    (CODE, 127, 0, 0, {}, False, "exit code 127 is a permanent error"),
    (CODE, 128, 0, 0, {}, True, "restart 1 of 2"),
    (CODE, -15, 0, 0, {}, True, "restart 1 of 2"),
    (CODE, 137, 2, 0, {}, False, "restart budget spent"),
    (TOTAL, 1, 0, 2, {}, True, "restart 1 of 5"),
    (TOTAL, 1, 0, 3, {}, False, "the run's restart budget is spent (3 of 3)"),
])
def test_restart_decisions_and_their_reasons(rule, rc, restarts, total, flags, restart, reason):
    d = rules.decide_restart(rule, rc, restarts, total, **flags)
    assert d.restart is restart and reason in d.reason
    assert d.delay == (rules.backoff_delay(rule.backoff, restarts) if restart else 0.0)


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown restart policy 'always'"):
        RestartRule("always")


# ---------------------------------------------------------------- success

@pytest.mark.parametrize("rule, chief, succeeded, chief_here, words", [
    ("chief", "worker:0", {"worker:0": True, "worker:1": False}, True, "worker:0 exited 0"),
    ("chief", "worker:0", {"worker:0": False, "worker:1": True}, True, None),
    ("chief", "chief:0", {"chief:0": True, "worker:0": False, "ps:0": False}, True, "chief:0 exited 0"),
    ("all-workers", "worker:0", {"worker:0": True, "worker:1": False, "ps:0": False}, True, None),
    ("all-workers", "worker:0", {"worker:0": True, "worker:1": True, "ps:0": False}, True,
     "every worker exited 0"),
    ("all-workers", "chief:0", {"chief:0": True, "worker:0": True}, True, "every task here exited 0"),
    ("all-workers", "chief:0", {"chief:0": True, "worker:0": True, "ps:0": False}, True,
     "every worker exited 0"),
    ("all-workers", "chief:0", {"chief:0": True, "worker:0": False}, True, None),
    ("chief", "worker:0", {"worker:1": True, "ps:0": False}, False, "every worker exited 0"),
    ("chief", "worker:0", {"worker:1": False, "ps:0": False}, False, None),
    ("chief", "worker:0", {"ps:0": True}, True, "every task here exited 0"),
    ("chief", "worker:0", {"ps:0": True}, False, "every task here exited 0"),
    ("chief", "worker:0", {}, True, None),
    ("chief", "local:0", {"local:0": True, "local:1": False}, True, "local:0 exited 0"),
    ("all-workers", "local:0", {"local:0": True, "local:1": True, "evaluator:0": False}, True,
     "every worker exited 0"),
])
def test_success_rule(rule, chief, succeeded, chief_here, words):
    assert rules.success_reached(rule, chief, succeeded, chief_here) == words


def test_the_tasks_success_needs_decide_it_for_every_outcome():
    """A driver that counts the tasks of success_needs (instead of asking success_reached after
    every exit) decides the same as the rule, for every subset of tasks that exited 0."""
    import itertools
    for names in (["ps:0", "worker:0", "worker:1"], ["chief:0", "worker:0", "ps:0", "evaluator:0"],
                  ["ps:0", "ps:1"], ["local:0", "local:1"], ["evaluator:0", "custom:0"], []):
        for rule, chief, here in itertools.product(rules.SUCCESS_RULES, ("worker:0", "chief:0"),
                                                   (True, False)):
            needs = rules.success_needs(rule, chief, names, here)
            assert needs <= set(names)
            for done in itertools.product((False, True), repeat=len(names)):
                succeeded = dict(zip(names, done))
                reached = rules.success_reached(rule, chief, succeeded, here) is not None
                assert reached == (bool(needs) and all(succeeded[t] for t in needs)), \
                    (rule, chief, here, succeeded, needs)


def test_an_unknown_success_rule_is_refused():
    with pytest.raises(ValueError, match="unknown success rule 'first'"):
        rules.success_reached("first", "worker:0", {})


@pytest.mark.parametrize("job, waits", [("chief", True), ("worker", True), ("local", True),
                                        ("ps", False), ("evaluator", False)])
def test_who_gets_the_grace_period(job, waits):
    assert rules.waits_for_grace(job) is waits


# ---------------------------------------------------------------- values

@pytest.mark.parametrize("value", [0, 0.0, 0.5, 30, 1e9])
def test_seconds_that_pass(value):
    assert rules.check_seconds(value, "--grace") == value


@pytest.mark.parametrize("value", [-1, -0.001, math.inf, -math.inf, math.nan])
def test_seconds_that_do_not(value):
    with pytest.raises(ValueError, match=r"^--grace: must be a finite number of seconds, 0 or more"):
        rules.check_seconds(value, "--grace")


# ---------------------------------------------------------------- watchdog

@pytest.mark.parametrize("up, now, timeout, action", [
    (False, 100.0, 60.0, None),                # 40 s in: still inside the deadline
    (False, 160.0, 60.0, None),                # exactly at it
    (False, 161.0, 60.0, WatchdogAction("kill", "ps:0", "watchdog: its server did not open port "
                                                        "2222 within 60s")),
    (True, 500.0, 60.0, None),                 # its port is open
    (False, 500.0, 0, None),                   # no deadline
])
def test_startup_deadline(up, now, timeout, action):
    got = rules.check_startup("ps:0", 100.0, up, now, timeout, 2222)
    if action is None:
        assert got is None
    else:   # the words start as the table says and name the setting that changes them
        assert (got.action, got.task) == (action.action, action.task)
        assert got.reason.startswith(action.reason) and "watchdog.startup_timeout" in got.reason


def test_waiting_kills_a_hung_local_task_and_fails_on_a_missing_remote_one():
    waiting_on = {"ps:0": 0.0, "worker:1": 0.0, "worker:2": 50.0, "ps:1": 0.0}
    here = {"ps:0": True, "worker:1": False, "worker:2": True}      # worker:1 is already being killed
    got = rules.check_waiting("worker:0", waiting_on, now=60.0, timeout=30.0, here=here,
                              where={"ps:1": "10.0.0.2:2222"})
    want = [
        WatchdogAction("kill", "ps:0", "watchdog: worker:0 has waited 30s for it (CreateSession "
                                       "still waiting)"),
        WatchdogAction("fail_run", "ps:1", "watchdog: worker:0 has waited 30s for ps:1 "
                                           "(10.0.0.2:2222), which this launcher does not run; is "
                                           "it started?"),
    ]
    assert [(a.action, a.task) for a in got] == [(a.action, a.task) for a in want]
    assert all(g.reason.startswith(w.reason) and "watchdog.waiting_timeout: 30" in g.reason
               for g, w in zip(got, want))
    assert rules.check_waiting("worker:0", waiting_on, 60.0, 0, here, {}) == []


@pytest.mark.parametrize("best, at, now, timeout, not_running, reason", [
    (None, 0.0, 1000.0, 60.0, (), None),       # no step reported yet
    (40, 100.0, 160.0, 60.0, (), None),
    (40, 100.0, 161.0, 60.0, (), "watchdog: the global step has stood at 40 for 60s; every task "
                                 "is still running"),
    (40, 100.0, 161.0, 60.0, ("worker:1",), "watchdog: the global step has stood at 40 for 60s; "
                                            "not running: worker:1"),
    (40, 100.0, 1e6, 0, (), None),             # no stall timeout
])
def test_stalled_global_step(best, at, now, timeout, not_running, reason):
    got = rules.check_stall(best, at, now, timeout, not_running)
    if reason is None:
        assert got is None
    else:
        head, _, tail = reason.partition(";")
        assert got.action == "fail_run" and got.task is None
        assert got.reason.startswith(head) and tail.strip() in got.reason
        assert "watchdog.stall_timeout" in got.reason


def test_the_data_service_jobs_are_served_like_ps():
    """data_service: its jobs start first (dispatcher before its workers), stop last with the ps,
    get no grace and never decide success."""
    from tfcluster.core.rules import (
        DATA_DISPATCHER,
        DATA_WORKER,
        start_order,
        stop_waves,
        success_needs,
        waits_for_grace,
    )
    jobs = ["worker", DATA_WORKER, "ps", DATA_DISPATCHER, "chief"]
    assert start_order(jobs)[:3] == [DATA_DISPATCHER, DATA_WORKER, "ps"]
    first, then = stop_waves(jobs)
    assert set(first) == {"chief", "worker"} and set(then) == {"ps", DATA_DISPATCHER, DATA_WORKER}
    assert not waits_for_grace(DATA_WORKER) and not waits_for_grace(DATA_DISPATCHER)
    tasks = [f"{DATA_DISPATCHER}:0", f"{DATA_WORKER}:0", "local:0", "local:1"]
    assert success_needs("all-workers", "local:0", tasks) == {"local:0", "local:1"}
