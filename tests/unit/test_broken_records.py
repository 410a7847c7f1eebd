"""status, runs and report on hostile or broken records: a FIFO or a 3 GB file in
place of a record, numbers out of range or of the wrong type, deep nesting, control characters,
and 1,000 mutated run.json/events.jsonl files. Every case ends with one line (exit 2) or a
result, never a traceback or a hang. No TensorFlow, no process. (A long run's report in bounded memory:
tests/integration/test_report_memory.py.)"""
from __future__ import annotations

import copy
import json
import os
import random
import signal
import time

import pytest

from helpers import fuzz_examples
from helpers.records import good_events, good_record, make, write_events
from tfcluster.cli.main import main
from tfcluster.safe_files import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = 1_764_500_000.0










class Deadline:
    """Fail (instead of hanging the suite) when the block takes longer than ``seconds``."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        def boom(signum, frame):
            raise AssertionError(f"hung for more than {self.seconds}s")
        self.old = signal.signal(signal.SIGALRM, boom)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.old)


def run_cli(capsys, *args, seconds=20):
    with Deadline(seconds):
        rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line_error(rc, out, err, *words):
    assert rc == 2 and out == "", (rc, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("tfcluster: error: "), err
    for w in words:
        assert w in err, (w, err)


# ------------------------------------------------------------------ files that are not files
def test_a_fifo_named_events_jsonl_does_not_hang_report(tmp_path, capsys):
    d = make(tmp_path)
    os.mkfifo(os.path.join(d, "events.jsonl"))
    t = time.time()
    one_line_error(*run_cli(capsys, "report", d), "events.jsonl", "is a FIFO, not a regular file")
    assert time.time() - t < 5
    assert not os.path.exists(os.path.join(d, "report.html"))


def test_a_fifo_named_run_json_is_one_line_and_skipped_by_runs(tmp_path, capsys):
    good = make(tmp_path, "good")
    bad = os.path.join(str(tmp_path), "bad")
    os.makedirs(bad)
    os.mkfifo(os.path.join(bad, "run.json"))
    for cmd in ("status", "report"):
        one_line_error(*run_cli(capsys, cmd, bad), "run.json", "FIFO")
    rc, out, err = run_cli(capsys, "runs", str(tmp_path))
    assert rc == 0 and "good" in out and "bad" not in out
    assert "FIFO" in err and "skipped" in err and len(err.splitlines()) == 1
    assert good


def test_a_3_gb_run_json_is_not_read(tmp_path, capsys):
    d = os.path.join(str(tmp_path), "huge")
    os.makedirs(d)
    with open(os.path.join(d, "run.json"), "wb") as f:   # sparse: costs no disk
        f.truncate(3 << 30)
    t = time.time()
    one_line_error(*run_cli(capsys, "status", d), "run.json", "3.0 GiB", "more than the 64.0 MiB")
    assert time.time() - t < 5


def test_an_overlong_event_line_is_one_line(tmp_path, capsys):
    d = make(tmp_path, events=good_events()[:3])
    with open(os.path.join(d, "events.jsonl"), "a") as f:
        f.write('{"time": 1, "event": "x", "pad": "' + "a" * (2 << 20) + '"}\n')
    one_line_error(*run_cli(capsys, "report", d), "line 4: longer than 1.0 MiB")


# ------------------------------------------------------------------ numbers and shapes
BAD_RECORDS = [
    ('started', 1e20, "started: 1e+20 is not a time"),
    ('started', -5, "started: -5 is not a time"),
    ('ended', 10 ** 30, "ended:"),
    ('launcher_pid', 2 ** 70, "launcher_pid: not a process id"),
    ('total_restarts', "x", "total_restarts"),
    ('total_restarts', -1, "total_restarts"),
    ('exit_code', 1.5, "exit_code"),
    ('tasks', {"worker:0": {}}, "tasks: not a list"),
    ('tasks', [{"task": "worker:0", "state": 3}], "tasks[0].state"),
    ('tasks', [{"task": "worker:0", "state": "failed", "restarts": "x"}], "tasks[0].restarts"),
    ('tasks', [{"task": "worker:0", "state": "failed", "pid": -1}], "tasks[0].pid"),
    ('tasks', [{"task": "worker:0", "state": "failed", "started": 1e300}], "tasks[0].started"),
    ('tasks', [{"task": "worker:0", "state": "failed", "progress": {"step": "many"}}],
     "tasks[0].progress.step"),
    ('tasks', [{"task": "worker:0", "state": "failed", "progress": {"step": 1e30}}],
     "tasks[0].progress.step"),
    ('run_id', ["a"], "run_id: not a string"),
    ('slurm_job', {"id": 1}, "slurm_job"),
]


@pytest.mark.parametrize("key, value, words", BAD_RECORDS)
def test_a_field_of_the_wrong_type_or_range_is_one_line(tmp_path, capsys, key, value, words):
    record = good_record()
    record[key] = value
    d = make(tmp_path, record=record, events=good_events())
    for cmd in ("status", "report"):
        one_line_error(*run_cli(capsys, cmd, d), "run.json", words)
    rc, out, err = run_cli(capsys, "runs", str(tmp_path))
    assert rc == 0 and out.startswith("no runs") and words in err and "skipped" in err


@pytest.mark.parametrize("text, words", [
    ('{"result": "failed", "tasks": [], "x": ' + "[" * 2000 + "]" * 2000 + "}", "nested"),
    ('{"result": "failed", "tasks": [], "x": ' + "[" * 100 + "]" * 100 + "}", "nested"),
    ('{"result": "failed", "started": ' + "9" * 5000 + "}", "not valid JSON"),
    (b'{"result": "failed\xff"}', "not UTF-8"),
])
def test_json_that_python_chokes_on_is_one_line(tmp_path, capsys, text, words):
    d = os.path.join(str(tmp_path), "r")
    os.makedirs(d)
    with open(os.path.join(d, "run.json"), "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    for cmd in ("status", "report"):
        one_line_error(*run_cli(capsys, cmd, d), "run.json", words)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_numbers_json_cannot_hold_are_read_as_null(tmp_path, capsys, value):
    """Python's json reads NaN, Infinity and 1e400 as floats that break date arithmetic; records
    read them as null (unknown), as the launcher writes non-finite numbers."""
    d = os.path.join(str(tmp_path), "r")
    os.makedirs(d)
    with open(os.path.join(d, "run.json"), "w") as f:
        f.write('{"result": "failed", "started": %s, "ended": %s, "exit_code": 1, "tasks": '
                '[{"task": "worker:0", "state": "failed", "started": %s, "progress": {"step": %s}}]}'
                % (value, value, value, value))
    write_events(d, good_events()[:3] + ['{"time": 1764500009, "event": "progress", "task": '
                                         '"worker:0", "step": %s, "total": %s}' % (value, value)])
    rc, out, err = run_cli(capsys, "status", d)
    assert rc == 1 and out.startswith("run r (") and err == ""
    rc, out, err = run_cli(capsys, "status", "--json", d)
    assert rc == 1 and json.loads(out)["started"] is None
    rc, out, err = run_cli(capsys, "report", d)
    assert rc == 0 and err == ""


@pytest.mark.parametrize("line, words", [
    ('{"time": NaN, "event": "x"}', "line 4: time"),
    ('{"time": Infinity, "event": "x"}', "line 4: time"),
    ('{"time": 1e20, "event": "x"}', "line 4: time"),
    ('{"time": -1, "event": "x"}', "line 4: time"),
    ('{"time": 5, "event": "x", "deep": ' + "[" * 2000 + "]" * 2000 + "}", "line 4: not valid JSON (nested"),
    ('{"time": 5, "event": "x", "deep": ' + "{\"a\":" * 50 + "1" + "}" * 50 + "}", "line 4: not valid JSON (nested"),
])
def test_a_hostile_event_line_is_one_line(tmp_path, capsys, line, words):
    d = make(tmp_path, events=good_events()[:3] + [line] + good_events()[3:])
    one_line_error(*run_cli(capsys, "report", d), "events.jsonl", words)


def test_event_values_of_the_wrong_type_are_drawn_as_text_or_left_out(tmp_path, capsys):
    """Optional event keys of the wrong type (an attempt "x", a step "many", a pid list, a
    delay NaN) do not stop the report: the value is shown as text, or not used."""
    events = good_events()
    for e in events:
        for k in ("attempt", "pid", "step", "total", "delay", "exit_code", "metrics", "tasks",
                  "chief", "state", "signal", "exit", "host", "reason", "action", "rule", "result"):
            if k in e:
                e[k] = random.Random(k).choice([["x"], {"a": None}, "x", True, 1e308, -1, None])
    d = make(tmp_path, events=events)
    rc, out, err = run_cli(capsys, "report", d)
    assert rc == 0 and err == "" and out.strip().endswith("report.html")


# ------------------------------------------------------------------ terminal safety
def test_status_and_runs_print_no_control_characters(tmp_path, capsys):
    evil = "\x1b[2J\x1b]0;owned\x07line\nnext\r\u202eevil"
    record = good_record(run_id=evil, root_cause=evil, file="/x/" + evil)
    record["tasks"][0].update(task=evil, exit=evil, endpoint=evil, state=evil)
    d = make(tmp_path, name="r", record=record)
    rc, out, err = run_cli(capsys, "status", d)
    assert rc == 1
    for ch in ("\x1b", "\x07", "\r", "\u202e"):
        assert ch not in out + err
    assert len(out.splitlines()) == 2 + 2 + 1 + 2     # head, file, started, root cause, table
    assert "\\x1b[2J" in out                          # shown, escaped
    rc, out, err = run_cli(capsys, "runs", str(tmp_path))
    assert rc == 0 and "\x1b" not in out and len(out.splitlines()) == 2


# ------------------------------------------------------------------ the fuzz test
def mutations(seed):
    """A mutated (run.json bytes, events.jsonl bytes) pair."""
    rnd = random.Random(seed)
    record, events = good_record(), good_events()
    hostile = [None, True, -1, 0, 1e20, -1e20, 2 ** 64, 1.5, "x", "", "\x1b[31m\n", [], {}, [[]],
               {"a": [1]}, "<script>", 10 ** 30]

    def paths(obj, prefix=()):
        yield prefix
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield from paths(v, prefix + (k,))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                yield from paths(v, prefix + (i,))

    def mutate(obj):
        for _ in range(rnd.randint(1, 3)):
            ps = [p for p in paths(obj) if p]
            if not ps:
                return rnd.choice(hostile)
            p = rnd.choice(ps)
            parent = obj
            for k in p[:-1]:
                parent = parent[k]
            how = rnd.random()
            if how < 0.7:
                parent[p[-1]] = copy.deepcopy(rnd.choice(hostile))
            elif isinstance(parent, dict):
                del parent[p[-1]]
            else:
                parent.pop(p[-1])
        return obj

    which = rnd.random()
    if which < 0.45:
        record = mutate(record)
    elif which < 0.9:
        i = rnd.randrange(len(events))
        events[i] = mutate(events[i])
    else:
        record, events = mutate(record), [mutate(e) if rnd.random() < 0.3 else e for e in events]
    rec = json.dumps(record).encode()
    ev = "".join(json.dumps(e) + "\n" for e in events).encode()
    byte_level = rnd.random()
    if byte_level < 0.15:   # cut, or a flipped byte, or a NaN
        cut = rnd.randrange(len(ev))
        ev = ev[:cut]
    elif byte_level < 0.25:
        i = rnd.randrange(len(rec))
        rec = rec[:i] + bytes([rnd.randrange(256)]) + rec[i + 1:]
    elif byte_level < 0.3:
        rec = rec.replace(b"1764500000.0", b"NaN", 1)
    return rec, ev


def test_mutated_records_give_no_traceback_and_no_hang(tmp_path, capsys):
    """1,000 mutated run.json/events.jsonl pairs in CI (100 with the unit layer's short fuzz
    default, tests/helpers: fuzz_examples): status, status --json, runs and report each end
    with a result or a one-line error (exit 2), never an exception, within the deadline."""
    from tfcluster.cli.main import build_parser
    from tfcluster.errors import UserError, print_error
    parser = build_parser()      # built once: argparse would take most of the time

    def cli(argv):               # what main() does around a command
        args = parser.parse_args(argv)
        try:
            return int(args.func(args) or 0)
        except UserError as e:
            print_error(e)
            return e.exit_code

    start = time.time()
    outcomes = {}
    n = fuzz_examples(1000)
    for seed in range(n):
        d = os.path.join(str(tmp_path), "logdir", f"run{seed % 2}")   # runs sees 2 runs a time
        os.makedirs(d, exist_ok=True)
        rec, ev = mutations(seed)
        with open(os.path.join(d, "run.json"), "wb") as f:
            f.write(rec)
        with open(os.path.join(d, "events.jsonl"), "wb") as f:
            f.write(ev)
        for cmd in (["status", d], ["status", "--json", d], ["runs", os.path.dirname(d)],
                    ["report", d, "-o", os.path.join(str(tmp_path), "r.html")]):
            try:
                with Deadline(10):
                    rc = cli(cmd)
            except BaseException as e:  # the point: nothing may escape
                raise AssertionError(f"seed {seed}: {cmd[0]} raised {e!r}") from e
            out = capsys.readouterr()
            if rc == 2:
                assert len(out.err.splitlines()) == 1 and out.out == "", (seed, cmd, out)
            else:
                assert rc in (0, 1, 3, 4, 5), (seed, cmd, rc)
            if cmd[:2] == ["status", "--json"] and rc != 2:
                json.loads(out.out)                   # valid JSON, even from a NaN record
            outcomes[rc] = outcomes.get(rc, 0) + 1
    took = time.time() - start
    print(f"{n} mutated runs: exit codes {sorted(outcomes.items())}, {took:.1f}s")
    assert outcomes.get(2, 0) > n // 10 and outcomes.get(0, 0) + outcomes.get(1, 0) > n // 10


# ------------------------------------------------------------------ long runs




HOSTILE_VALUES = [None, True, -1, 1e20, 2 ** 64, "\x1b[31m\n<script>", {"a": [1]},
                  ["worker:0", 3, None]]


def test_every_event_key_with_every_hostile_value(tmp_path, capsys):
    """Not left to chance: each key of each event of a run, in turn, set to each hostile value
    (time, event and task included), gives a report or one line naming the line."""
    from tfcluster.cli.main import build_parser
    from tfcluster.errors import UserError, print_error
    parser = build_parser()
    base = good_events()
    d = make(tmp_path, name="r")
    out = os.path.join(str(tmp_path), "r.html")
    counts = {0: 0, 2: 0}
    for i, event in enumerate(base):
        for key in event:
            for value in HOSTILE_VALUES:
                events = copy.deepcopy(base)
                events[i][key] = value
                write_events(d, events)
                args = parser.parse_args(["report", d, "-o", out])
                try:
                    rc = args.func(args)
                except UserError as e:
                    print_error(e)
                    rc = 2
                got = capsys.readouterr()
                if rc == 2:
                    assert len(got.err.splitlines()) == 1 and f"line {i + 1}:" in got.err, got.err
                else:
                    assert rc == 0 and got.err == "", (i, key, value, got.err)
                counts[rc] += 1
    assert counts[0] > 300 and counts[2] > 50


def test_every_run_json_key_with_every_hostile_value(tmp_path, capsys):
    """Each key of run.json and of its tasks (and of a task's progress), in turn, set to each
    hostile value: status, runs and report give a result or one line, never an exception."""
    from tfcluster.cli.main import build_parser
    from tfcluster.errors import UserError, print_error
    parser = build_parser()
    base = good_record(result="running")
    paths = [(k,) for k in base] + [("tasks", i, k) for i, t in enumerate(base["tasks"]) for k in t]
    paths += [("tasks", 0, "progress", k) for k in base["tasks"][0]["progress"]]
    d = make(tmp_path, name="r", events=good_events())
    out = os.path.join(str(tmp_path), "r.html")
    codes, counts = set(), {}
    for path in paths:
        for value in HOSTILE_VALUES:
            record = copy.deepcopy(base)
            parent = record
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]] = value
            write_json(os.path.join(d, "run.json"), record)
            for argv in (["status", d], ["status", "--json", d], ["runs", str(tmp_path)],
                         ["report", d, "-o", out]):
                args = parser.parse_args(argv)
                try:
                    rc = args.func(args)
                except UserError as e:
                    print_error(e)
                    rc = 2
                got = capsys.readouterr()
                if rc == 2:
                    assert len(got.err.splitlines()) == 1 and "run.json" in got.err, (path, value, got)
                codes.add(rc)
                counts[rc] = counts.get(rc, 0) + 1
    print(f"{len(paths)} keys x {len(HOSTILE_VALUES)} values: exit codes {sorted(counts.items())}")
    assert {0, 2, 5} <= codes
