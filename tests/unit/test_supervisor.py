"""The supervisor loop driven by a fake backend and a fake clock: restart, backoff, budgets,
success rules, grace, watchdog and signals, in milliseconds. No processes, no TensorFlow.
(The same behaviours with real processes: test_launch.py.)"""
from __future__ import annotations

import io
import json
import signal

import pytest

from helpers.fake import make
from tfcluster.core.machine import TaskState
from tfcluster.drivers.display import ProgressLines, ProgressPace, View
from tfcluster.drivers.tasks import PROBES_PER_ROUND, StepRate
from tfcluster.plan.runplan import LaunchOptions
from tfcluster.runs.eventlog import NullEventLog

CLUSTER = """\
    cluster: {ps: [localhost:3000], worker: [localhost:3001, localhost:3002]}
    program: {command: [python, t.py]}
    grace: 2
"""


def record(tmp_path):
    return json.loads((tmp_path / "runs" / "t" / "run.json").read_text())


def events(tmp_path):
    path = tmp_path / "runs" / "t" / "events.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else None


def test_chief_success_stops_ps_after_grace(tmp_path):
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {
        "worker:0": [(0, 3.0, ["hello"])], "worker:1": [(0, 4.0, [])]})
    assert sup.run() == 0
    assert [n for n, _ in be.started] == ["ps:0", "worker:0", "worker:1"]   # ps first
    assert "run succeeded (worker:0 exited 0)" in err.getvalue()
    assert "[worker:0] hello" in out.getvalue() and "tfcluster:" not in out.getvalue()
    # the closing line names the run and the commands that show it
    run_dir = str(tmp_path / "runs" / "t")
    assert err.getvalue().rstrip().endswith(
        f"this run: tfcluster status {run_dir}; a picture of it: tfcluster report {run_dir}")
    states = {t["task"]: t["state"] for t in record(tmp_path)["tasks"]}
    assert states == {"ps:0": "stopped", "worker:0": "succeeded", "worker:1": "succeeded"}
    assert be.handles["ps:0"][0].signals[0] == signal.SIGTERM


def test_grace_runs_out_and_the_other_worker_is_stopped(tmp_path):
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {"worker:0": [(0, 1.0, [])]})
    assert sup.run() == 0
    assert "giving worker:1 2s to finish" in err.getvalue()
    states = {t["task"]: t["state"] for t in record(tmp_path)["tasks"]}
    assert states["worker:1"] == "stopped"


def test_all_workers_rule_waits_for_every_worker(tmp_path):
    sup, be, clock, out, err = make(tmp_path, CLUSTER + "    success: all-workers\n", {
        "worker:0": [(0, 1.0, [])], "worker:1": [(0, 6.0, [])]})
    assert sup.run() == 0
    assert clock.now - 1000.0 >= 6.0
    assert "every worker exited 0" in err.getvalue()


def test_restart_with_doubling_backoff_and_restart_count_in_env(tmp_path):
    body = CLUSTER + "    restart: {policy: on-failure, max_restarts: 3, backoff: 1, min_uptime: 0}\n"
    sup, be, clock, out, err = make(tmp_path, body, {
        "worker:1": [(1, 0.5, []), (1, 0.5, []), (0, 0.5, [])],
        "worker:0": [(0, 20.0, [])]})
    assert sup.run() == 0
    starts = [(n, env["TFCLUSTER_RESTART_COUNT"], env["TFCLUSTER_MAX_RESTARTS"])
              for n, env in be.started if n == "worker:1"]
    assert starts == [("worker:1", "0", "3"), ("worker:1", "1", "3"), ("worker:1", "2", "3")]
    h = be.handles["worker:1"]
    assert h[1].start - h[0].end_at == pytest.approx(1.0, abs=0.11)   # backoff 1, then 2
    assert h[2].start - h[1].end_at == pytest.approx(2.0, abs=0.11)
    assert record(tmp_path)["total_restarts"] == 2
    ev = events(tmp_path)
    assert [e["attempt"] for e in ev if e["event"] == "task_restarting"] == [1, 2]


def test_a_local_run_replays_from_its_events_to_the_same_decisions(tmp_path):
    """The launcher logs what came in to its machine (``input`` events in events.jsonl); a new
    machine built from the same plan and fed them writes the same machine events, in order."""
    from tfcluster.core import machine as mc
    body = CLUSTER + "    restart: {policy: on-failure, max_restarts: 3, backoff: 1, min_uptime: 0}\n"
    sup, be, clock, out, err = make(tmp_path, body, {
        "worker:1": [(1, 0.5, []), (0, 0.5, [])], "worker:0": [(0, 6.0, [])]})
    assert sup.run() == 0
    ev = events(tmp_path)
    began = next(e["now"] for e in ev if e["event"] == "input" and e["input"] == "begin")
    inputs = [mc.input_from_fields(e) for e in ev if e["event"] == "input" and e["input"] != "begin"]
    fresh = mc.RunMachine.from_plan(sup.plan)
    replayed = [(a.event, a.task) for a in mc.replay(fresh, began, inputs) if isinstance(a, mc.LogEvent)]
    ran = [(e["event"], e["task"]) for e in ev if e["event"] in
           ("task_exited", "task_restarting", "watchdog", "stop_sent", "decision")]
    assert replayed == ran and ("task_restarting", "worker:1") in ran
    assert (fresh.result, fresh.exit_code) == (mc.RunState.SUCCEEDED, 0)


def test_a_worker_that_left_an_elastic_run_is_left_not_failed_and_the_run_replays(tmp_path):
    """A worker out of its restarts leaves an elastic run that then succeeds: run.json, the
    events and the end summary say ``left`` (not ``failed``: the run did not fail, nothing is a
    "first failure"), and the run's inputs replay to the same decisions."""
    from tfcluster.core import machine as mc
    body = CLUSTER + "    restart: {policy: never}\n    elastic: {min_workers: 1}\n"
    sup, be, clock, out, err = make(tmp_path, body, {
        "worker:1": [(1, 0.5, [])], "worker:0": [(0, 3.0, [])]})
    assert sup.run() == 0
    rows = {t["task"]: t for t in record(tmp_path)["tasks"]}
    assert rows["worker:1"]["state"] == "left" and "left the run" in rows["worker:1"]["note"]
    assert record(tmp_path)["workers"]["left"].keys() == {"worker:1"}
    summary = err.getvalue()[err.getvalue().index("run t succeeded"):]
    assert "first failure" not in summary and "failed" not in summary, summary
    assert any(line.split()[:1] == ["worker:1"] and "left" in line.split() for line in summary.splitlines())
    ev = events(tmp_path)
    began = next(e["now"] for e in ev if e["event"] == "input" and e["input"] == "begin")
    inputs = [mc.input_from_fields(e) for e in ev if e["event"] == "input" and e["input"] != "begin"]
    fresh = mc.RunMachine.from_plan(sup.plan)
    replayed = [(a.event, a.task) for a in mc.replay(fresh, began, inputs) if isinstance(a, mc.LogEvent)]
    assert replayed == [(e["event"], e["task"]) for e in ev if e["event"] in
                        ("task_exited", "run_shrunk", "stop_sent", "decision")]
    assert fresh.tasks["worker:1"].state == TaskState.LEFT and fresh.result == mc.RunState.SUCCEEDED


def test_restart_budget_spent_fails_the_run_naming_the_task(tmp_path):
    body = CLUSTER + "    restart: {policy: on-failure, max_restarts: 1, backoff: 0, min_uptime: 0}\n"
    sup, be, clock, out, err = make(tmp_path, body, {"worker:1": [(5, 0.1, ["boom"])]})
    assert sup.run() == 1
    e = err.getvalue()
    assert "first failure: worker:1 (exit 5)" in e and "not restarted: restart budget spent (1 of 1)" in e
    assert "last lines of worker:1:\n  boom" in e


def test_command_line_restart_overrides_the_file_and_total_budget(tmp_path):
    body = CLUSTER + "    restart: {policy: never, max_total_restarts: 1, backoff: 0, min_uptime: 0}\n"
    sup, be, clock, out, err = make(tmp_path, body, {
        "worker:0": [(1, 0.2, []), (0, 30.0, [])], "worker:1": [(1, 5.0, [])]},
        options=LaunchOptions(run_id="t", restart="on-failure", max_restarts=5))
    assert sup.run() == 1
    assert "not restarted: the run's restart budget is spent (1 of 1)" in err.getvalue()


def test_a_first_run_that_fails_at_once_is_not_restarted(tmp_path):
    """restart.min_uptime (1 s by default): a broken program fails the same way every time."""
    body = CLUSTER + "    restart: {policy: on-failure, max_restarts: 5, backoff: 0}\n"
    sup, be, clock, out, err = make(tmp_path, body, {"worker:1": [(1, 0.3, ["No module named x"])]})
    assert sup.run() == 1
    assert sum(1 for n, _ in be.started if n == "worker:1") == 1
    assert "not restarted: its first run failed within 1s (restart.min_uptime" in err.getvalue()
    # a failure after min_uptime is restarted
    (tmp_path / "later").mkdir()
    sup, be, clock, out, err = make(tmp_path / "later", body, {
        "worker:1": [(1, 1.5, []), (0, 0.5, [])], "worker:0": [(0, 5.0, [])]})
    assert sup.run() == 0
    assert sum(1 for n, _ in be.started if n == "worker:1") == 2


def test_exit_code_policy_does_not_retry_permanent_errors(tmp_path):
    body = CLUSTER + "    restart: {policy: exit-code, backoff: 0}\n"
    sup, be, clock, out, err = make(tmp_path, body, {"worker:1": [(2, 0.1, [])]})
    assert sup.run() == 1
    assert "exit code 2 is a permanent error" in err.getvalue()


def test_port_conflict_is_exit_2_and_never_retried(tmp_path):
    body = CLUSTER + "    restart: {policy: on-failure, backoff: 0}\n"
    sup, be, clock, out, err = make(tmp_path, body, {
        "worker:0": [(1, 0.1, ["UnknownError: Could not start gRPC server"])]})
    assert sup.run() == 2
    assert sum(1 for n, _ in be.started if n == "worker:0") == 1


def test_watchdog_startup_kills_a_server_that_never_opens_its_port(tmp_path):
    body = CLUSTER + "    watchdog: {startup_timeout: 3}\n"
    sup, be, clock, out, err = make(tmp_path, body, {"worker:0": [(0, 60.0, [])]})
    be.up = {3001, 3002}         # ps:0 never listens
    assert sup.run() == 1
    assert "first failure: ps:0 (SIGKILL) — watchdog: its server did not open port 3000 within 3s" in err.getvalue()


def test_watchdog_waiting_kills_the_task_others_wait_for(tmp_path):
    body = CLUSTER + "    watchdog: {waiting_timeout: 2, startup_timeout: 0}\n"
    line = "CreateSession still waiting for response from worker: /job:worker/replica:0/task:1"
    sup, be, clock, out, err = make(tmp_path, body, {"worker:0": [(None, None, [line])]})
    assert sup.run() == 1
    assert "first failure: worker:1 (SIGKILL) — watchdog: worker:0 has waited 2s for it" in err.getvalue()


def test_watchdog_stall_fails_the_run(tmp_path):
    # (stall 6 s > progress_every 5 s: a step that never moves gets its line after 5 s)
    body = CLUSTER + "    watchdog: {stall_timeout: 6, startup_timeout: 0}\n"
    sup, be, clock, out, err = make(tmp_path, body, {
        "worker:0": [(None, None, ['@tfcluster progress {"step": 5, "total": 10, "loss": 0.5}'])]})
    assert sup.run() == 1
    e = err.getvalue()
    assert "cause: watchdog: the global step has stood at 5 for 6s" in e
    assert "@tfcluster progress" not in out.getvalue()    # consumed, not echoed
    assert "worker:0: step 5/10" in e and "loss 0.5" in e  # the periodic human line


def test_signal_stops_the_run_with_128_plus_n(tmp_path):
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {})
    real_nap = sup.nap_fn

    def nap(runs, seconds):
        real_nap(runs, seconds)
        if clock.now > 1003 and not sup.interrupted:
            sup.interrupt(signal.SIGTERM)
    sup.nap_fn = nap
    assert sup.run() == 143
    rec = record(tmp_path)
    assert rec["result"] == "interrupted"
    # workers are stopped before the ps
    terms = [n for n, sig in be.signal_log if sig == signal.SIGTERM]
    assert terms == ["worker:0", "worker:1", "ps:0"]


def test_sigkill_after_the_stop_timeout_for_a_task_that_ignores_sigterm(tmp_path):
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {
        "ps:0": [(None, None, [], True)], "worker:0": [(0, 1.0, [])], "worker:1": [(0, 1.0, [])]},
        options=LaunchOptions(run_id="t", stop_timeout=1.5))
    assert sup.run() == 0
    assert be.handles["ps:0"][0].signals[:2] == [signal.SIGTERM, signal.SIGKILL]
    assert "ps:0 (pid 101) still running 1.5s after SIGTERM: SIGKILL" in err.getvalue()


def test_live_table_marks_the_chief_and_shows_rate_and_metrics(tmp_path):
    from rich.console import Console
    lines = ['@tfcluster progress {"step": 10, "total": 100, "loss": 0.5, "accuracy": 0.75}']
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {"worker:0": [(0, 2.0, lines)]})
    assert sup.run() == 0
    tr = sup.runs["worker:0"]
    tr.own_rate = StepRate()
    tr.own_rate.add(clock.now, 10)
    tr.own_rate.add(clock.now + 2, 30)
    buf = io.StringIO()
    Console(file=buf, width=160).print(sup._live_table())
    text = buf.getvalue()
    assert "worker:0 (chief)" in text and "loss" in text and "accuracy" in text
    assert "0.75" in text and "10.0" in text, text    # the metric and 10 steps/s
    assert "global step 10/100" in text


def test_live_table_follows_an_unmodified_keras_program(tmp_path):
    """Keras' own lines (no tfcluster import): the epoch and step reach the live table and
    run.json."""
    from rich.console import Console
    lines = ["Epoch 1/3", "10/10 [==============================] - 1s 50ms/step - loss: 0.5000",
             "Epoch 2/3", "7/10 [====================>.........] - ETA: 0s - loss: 0.3000"]
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {"worker:0": [(0, 2.0, lines)]})
    assert sup.run() == 0
    buf = io.StringIO()
    Console(file=buf, width=200).print(sup._live_table())
    text = buf.getvalue()
    assert "epoch" in text, text
    progress = {t["task"]: t.get("progress") for t in record(tmp_path)["tasks"]}["worker:0"]
    assert progress and progress.get("epoch") == 2, progress


def test_live_table_says_starting_serving_and_running(tmp_path):
    """The live table's state column: ``serving`` for a ps whose port is open, ``running`` for
    a task that reports steps, ``starting`` for one that has done neither yet."""
    from rich.console import Console
    lines = ['@tfcluster progress {"step": 3, "total": 100}']
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {"worker:0": [(0, 3.0, lines)]})
    be.up.add(3000)                                  # the ps's server accepts connections
    seen = {}
    real_nap = sup.nap_fn

    def nap(runs, seconds):
        real_nap(runs, seconds)
        if clock.now >= 1001.5 and not seen:
            buf = io.StringIO()
            Console(file=buf, width=160).print(sup._live_table())
            for row in buf.getvalue().splitlines():
                if row.split() and row.split()[0] in ("ps:0", "worker:0", "worker:1"):
                    seen[row.split()[0]] = row.split()[2 if "(chief)" in row else 1]
    sup.nap_fn = nap
    assert sup.run() == 0
    assert seen == {"ps:0": "serving", "worker:0": "running", "worker:1": "starting"}, seen


def test_the_end_of_a_run_names_the_chiefs_summaries_folder(tmp_path):
    (tmp_path / "ckpt").mkdir()
    body = CLUSTER.replace("program: {command: [python, t.py]}",
                           f"program: {{command: [python, t.py], args: [--checkpoint_dir={tmp_path / 'ckpt'}]}}")
    sup, be, clock, out, err = make(tmp_path, body, {"worker:0": [(0, 1.0, [])]})
    assert sup.run() == 0
    assert f"summaries and checkpoints: {tmp_path / 'ckpt'} (tfcluster tensorboard t)" in err.getvalue()


def test_port_probes_are_bounded_per_round_and_reach_every_task(tmp_path):
    """200 tasks whose ports never open: each probe round connects to at most PROBES_PER_ROUND
    of them, in turn, so every task is probed within a few rounds."""
    n = 200
    body = ("    cluster: {worker: [" + ", ".join(f"localhost:{4000 + i}" for i in range(n)) + "]}\n"
            "    program: {command: [python, t.py]}\n"
            "    watchdog: {startup_timeout: 0}\n")
    sup, be, clock, out, err = make(tmp_path, body, {f"worker:{i}": [(0, 3.0, [])] for i in range(n)})
    rounds = []
    real = be.accepts

    def accepts(host, port):
        if not rounds or rounds[-1][0] != clock.now:
            rounds.append((clock.now, []))
        rounds[-1][1].append(port)
        return real(host, port)
    be.accepts = accepts
    assert sup.run() == 0
    assert rounds and max(len(ports) for _, ports in rounds) <= PROBES_PER_ROUND
    first = [p for _, ports in rounds[:4] for p in ports]
    assert set(first) == {4000 + i for i in range(n)}       # 4 rounds of 64 cover 200 tasks


def _many(n, extra=""):
    return ("    cluster: {ps: [localhost:3999], worker: [" +
            ", ".join(f"localhost:{4000 + i}" for i in range(n)) + "]}\n"
            "    program: {command: [python, t.py]}\n"
            "    watchdog: {startup_timeout: 0}\n"
            "    success: all-workers\n" + extra)


def test_a_big_start_wave_starts_side_by_side_and_reports_in_order(tmp_path):
    """A backend that allows it gets a big wave of one job's starts from several threads; the
    machine still hears of them in the plan's order, ps first."""
    import threading

    from tfcluster.drivers import supervisor as sv
    n = 40
    sup, be, clock, out, err = make(tmp_path, _many(n), {f"worker:{i}": [(0, 2.0, [])] for i in range(n)})
    be.parallel_starts = True
    threads = set()
    real = be.start

    def start(spec):
        threads.add(threading.current_thread().name)
        return real(spec)
    be.start = start
    assert sup.run() == 0
    assert threads - {"MainThread"} and all(t.startswith("start") for t in threads - {"MainThread"})
    started = [e["task"] for e in events(tmp_path) if e["event"] == "task_started"]
    assert started == ["ps:0"] + [f"worker:{i}" for i in range(n)]
    assert n >= sv.PARALLEL_FROM


def test_tasks_of_a_big_wave_are_dated_when_they_started_not_when_the_wave_ended(tmp_path):
    import threading
    n = 40
    sup, be, clock, out, err = make(tmp_path, _many(n), {f"worker:{i}": [(0, 2.0, [])] for i in range(n)})
    be.parallel_starts = True
    real, lock, when = be.start, threading.Lock(), {}

    def start(spec):              # each start takes 10 ms of the (fake) clock
        with lock:
            clock.now += 0.01
            when[spec.name] = clock.now
            return real(spec)
    be.start = start
    assert sup.run() == 0
    dated = {e["task"]: e["time"] for e in events(tmp_path) if e["event"] == "task_started"}
    assert dated == pytest.approx(when)
    assert len(set(dated.values())) == n + 1
    in_record = {t["task"]: t["first_started"] for t in record(tmp_path)["tasks"]}
    assert in_record == pytest.approx(when)


def test_a_task_that_cannot_start_in_a_big_wave_fails_the_run_and_stops_the_others(tmp_path):
    n = 40
    sup, be, clock, out, err = make(tmp_path, _many(n), {f"worker:{i}": [(None, None, [])] for i in range(n)})
    be.parallel_starts = True
    real = be.start

    def start(spec):
        if spec.name == "worker:7":
            raise FileNotFoundError(2, "No such file or directory", "python")
        return real(spec)
    be.start = start
    with pytest.raises(Exception) as got:
        sup.run()
    assert "worker:7" in str(got.value)
    states = {t["task"]: t["state"] for t in record(tmp_path)["tasks"]}
    assert states["worker:7"] in ("pending", "stopped")     # never started
    assert not [name for name, s in states.items() if s == "running"], states
    for name, hs in be.handles.items():       # every task that started was stopped
        assert hs[-1].signals, name


def test_piped_progress_lines_come_every_few_seconds_the_first_after_the_first_step():
    """Without a live table the first progress line comes once the step has moved past the
    first report (not a lone line at step 0), then every progress_every seconds."""
    from tfcluster.plan.progress import PIPED_PROGRESS_EVERY
    assert PIPED_PROGRESS_EVERY <= 5.0 and View().progress_every == PIPED_PROGRESS_EVERY
    pace = ProgressPace(5.0)
    assert not pace.due(0, 100.0) and not pace.due(0, 101.0)     # step 0 only
    assert pace.due(3, 101.5)                         # the step moved: the first line now
    assert not pace.due(3, 104.0) and pace.due(4, 106.5)
    # a step that never moves still gets its line after progress_every
    pace = ProgressPace(5.0)
    assert not pace.due(0, 200.0) and pace.due(0, 205.0)


def test_an_eta_rate_is_steady_recent_and_never_from_the_first_report():
    r = StepRate(monotonic=True)
    r.add(100.0, 0)                 # the run's first report; its first step took 6 s
    r.add(106.0, 1)
    assert r.value == pytest.approx(1 / 6) and r.steady(106.0) is None    # never from step 1
    for i in range(1, 4):
        r.add(106.0 + i, 1 + 100 * i)
    assert r.steady(109.0) == pytest.approx(100.0)      # 4 reports after the first, one pace
    assert r.steady(109.0 + 3.5) is None and r.current(112.5) is None     # stale: no report for 3 gaps
    assert r.steady(110.0) == pytest.approx(100.0)
    speeding = StepRate()
    for i, step in enumerate([0, 1, 10, 30, 70, 150, 310]):
        speeding.add(200.0 + i, step)
    assert speeding.steady(206.0) is None                # the halves' rates differ
    behind = StepRate(monotonic=True)                    # a worker that read the step earlier
    for i, step in enumerate([0, 50, 40, 150, 200, 250]):
        behind.add(300.0 + i, step)
    assert [s for _, s in behind.points] == [0, 50, 50, 150, 200, 250]


class _Task:
    def __init__(self, name, step, total, at, own=None):
        from tfcluster.plan.progress import Progress
        self.name, self.state = name, TaskState.RUNNING
        self.progress = Progress(step=step, total=total, metrics={})
        self.seen = type("Seen", (), {"progress_at": at})()
        self.own_rate = StepRate()


def test_progress_lines_say_a_stall_once_and_its_growth_when_it_doubles():
    lines = ProgressLines(5.0)
    t = _Task("worker:0", 317, 2000, 1000.0)
    assert lines.lines([t], 10.0, 1001.0) == ["worker:0: step 317/2000, ETA 2m48s"]
    assert lines.lines([t], 10.0, 1006.0) == []             # the same line is not said again
    said = []
    for now in range(1007, 1100):
        said += [(now, x) for x in lines.lines([t], 10.0, float(now))]
    assert said == [(1011, "worker:0: no progress report for 11.0s (at step 317/2000)"),
                    (1022, "worker:0: still no progress report for 22.0s (at step 317/2000)"),
                    (1044, "worker:0: still no progress report for 44.0s (at step 317/2000)"),
                    (1088, "worker:0: still no progress report for 1m28s (at step 317/2000)")]
    t.progress.step, t.seen.progress_at = 318, 1100.0        # reports again
    assert lines.lines([t], None, 1100.5) == ["worker:0: step 318/2000"]   # no steady rate: no ETA


TF_TRACEBACK = (["Traceback (most recent call last):"]
                + [f'  File "/venv/lib/python3.11/site-packages/tensorflow/x{i}.py", line {i}, in f'
                   for i in range(60)]
                + ["tensorflow.python.framework.errors_impl.NotFoundError: Restoring from checkpoint "
                   "failed. Original error:", "", "Key model/hidden3/bias not found in checkpoint",
                   "\t [[{{node save/RestoreV2}}]]"])


def test_a_failure_says_its_cause_first_and_folds_its_traceback(tmp_path):
    """A task that fails with a long traceback: the first tfcluster line after it names the
    exception; the traceback comes after it, folded to where it is whole and its exception."""
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {
        "worker:0": [(1, 2.0, ["training"] + TF_TRACEBACK)], "worker:1": [(None, None, [])]})
    assert sup.run() == 1
    e = err.getvalue().splitlines()
    failed = next(i for i, x in enumerate(e) if "worker:0 failed" in x)
    assert e[failed].startswith("tfcluster: worker:0 failed (exit 1): NotFoundError: Key "
                                "model/hidden3/bias not found in checkpoint; hint: the checkpoint "
                                "the program restores no longer matches the model"), e
    assert e[failed].endswith(f"(tfcluster launch {tmp_path}/c.yaml --arg --checkpoint_dir=NEW_FOLDER)")
    shown = [x for x in out.getvalue().splitlines() if x.startswith("[worker:0]")]
    assert shown == [
        "[worker:0] training",
        "[worker:0] Traceback (most recent call last): 65 lines folded: tfcluster logs t worker:0 shows them",
        "[worker:0] tensorflow.python.framework.errors_impl.NotFoundError: Restoring from checkpoint "
        "failed. Original error:",
        "[worker:0] Key model/hidden3/bias not found in checkpoint"], shown
    log = (tmp_path / "runs" / "t" / "worker-0.log").read_text()
    assert all(x in log for x in TF_TRACEBACK if x.strip())       # the log has it whole
    assert "first failure: worker:0 (exit 1) — NotFoundError: Key model/hidden3/bias" in err.getvalue()


def test_a_traceback_of_a_task_that_goes_on_is_shown_whole():
    from tfcluster.drivers.display import TracebackFold
    fold = TracebackFold()
    assert fold.feed("before", 0.0) == ["before"]
    assert fold.feed("Traceback (most recent call last):", 1.0) == []
    assert fold.feed('  File "x.py", line 1, in f', 1.1) == [] and fold.feed("KeyError: 'a'", 1.2) == []
    assert not fold.due(10.9) and fold.due(11.0)                 # held HOLD seconds at most
    assert fold.release() == ["Traceback (most recent call last):", '  File "x.py", line 1, in f',
                              "KeyError: 'a'"]
    assert fold.feed("after", 12.0) == ["after"] and fold.fold("tfcluster logs r w") == []


def test_launcher_log_records_each_start_once(tmp_path):
    """The console's "started worker:0 (pid N)" is not written to launcher.log beside the
    task_started event's line."""
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {
        "worker:0": [(0, 3.0, ['@tfcluster progress {"step": 5, "total": 10}'])],
        "worker:1": [(0, 4.0, [])]})
    assert sup.run() == 0
    log = (tmp_path / "runs" / "t" / "launcher.log").read_text().splitlines()
    starts = [x for x in log if "worker:0" in x and "started" in x and "pid" in x]
    assert len(starts) == 1, log
    assert "started worker:0 (pid" in err.getvalue()          # the console still says it


def test_live_table_shows_each_task_its_own_rate_not_the_global_one(tmp_path):
    """Both workers report the same global step (40 a second between them); worker:0
    ran 30 of those steps a second itself (local_step), worker:1 reports only the global step.
    The table gives worker:0 its own 30.0, marks worker:1 'global', and the caption keeps the
    run's global rate."""
    from rich.console import Console

    from tfcluster.plan.progress import parse_progress
    sup, be, clock, out, err = make(tmp_path, CLUSTER, {"worker:0": [(0, 2.0, [])],
                                                         "worker:1": [(0, 2.0, [])]})
    assert sup.run() == 0
    sup.events = NullEventLog()
    w0, w1 = sup.runs["worker:0"], sup.runs["worker:1"]
    for i in range(6):
        clock.now += 1.0
        for tr, own in ((w0, 30 * i), (w1, None)):
            body = '{"step": %d, "total": 1000' % (40 * i) + (
                ', "local_step": %d}' % own if own is not None else "}")
            line = "@tfcluster progress " + body
            p = parse_progress(line)
            tr.seen.progress = p
            sup._on_line(tr, line, p)
    assert w0.own_rate.value == pytest.approx(30.0) and w1.own_rate.value is None
    buf = io.StringIO()
    Console(file=buf, width=160).print(sup._live_table())
    text = buf.getvalue()
    row0 = next(ln for ln in text.splitlines() if ln.startswith("worker:0"))
    row1 = next(ln for ln in text.splitlines() if ln.startswith("worker:1"))
    assert " 30.0 " in row0 and " global " in row1 and "40.0" not in row1, text
    assert "global step 200/1000  40.0 steps/s  ETA 20.0s" in text   # the run's rate, in the caption
    # the piped lines: the own rate where there is one; the ETA from the global step's rate
    for tr in (w0, w1):
        tr.track.state = TaskState.RUNNING
        tr.seen.progress_at = clock.now
    lines = ProgressLines(5.0).lines([w0, w1], sup.rate.steady(clock.now), clock.now)
    assert lines == ["worker:0: step 200/1000, 30.0 steps/s, ETA 20.0s",
                     "worker:1: step 200/1000, ETA 20.0s"], lines
