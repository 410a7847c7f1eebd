"""The supervisor loop (fake backend, fake clock) with the watchdogs' view of life: a task that
shows progress is not killed for its port; one that shows none still is. No processes.
(The fake backend is test_supervisor.py's, copied so that this file stands alone.)"""
from __future__ import annotations

import io
import signal
import textwrap

from tfcluster import config
from tfcluster.backends.base import Backend, Handle
from tfcluster.launch import Supervisor, View
from tfcluster.plan import LaunchOptions, build_plan


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeHandle(Handle):
    """A task whose life is a script: exit with ``rc`` after ``after`` seconds (None: never);
    ``lines`` are its output."""

    def __init__(self, backend, spec, rc, after, lines, ignore_term=False):
        self.backend, self.spec, self.rc, self.lines = backend, spec, rc, lines
        self.pid = 100 + len(backend.started)
        self.start = backend.clock()
        self.end_at = None if after is None else self.start + after
        self.stdout = io.BytesIO("".join(l + "\n" for l in lines).encode())
        self.signals = []
        self.ignore_term = ignore_term

    def poll(self):
        if self.end_at is not None and self.backend.clock() >= self.end_at:
            return self.rc
        return None

    def signal(self, sig):
        self.signals.append(sig)
        self.backend.signal_log.append((self.spec.name, sig))
        if self.end_at is not None and self.backend.clock() >= self.end_at:
            return
        if sig == signal.SIGKILL or not self.ignore_term:
            self.rc, self.end_at = -int(sig), self.backend.clock()


class FakeBackend(Backend):
    name = "fake"

    def __init__(self, clock, script):
        self.clock = clock
        self.script = script          # task -> list of (rc, after, lines) per attempt
        self.started = []             # (task, env) in start order
        self.up = set()
        self.handles = {}
        self.signal_log = []

    def accepts(self, host, port):
        return port in self.up

    def start(self, spec):
        attempts = self.script.get(spec.name, [(None, None, [])])
        n = sum(1 for name, _ in self.started if name == spec.name)
        rc, after, lines, *more = attempts[min(n, len(attempts) - 1)]
        self.started.append((spec.name, dict(spec.env)))
        h = FakeHandle(self, spec, rc, after, lines, ignore_term=bool(more and more[0]))
        self.handles.setdefault(spec.name, []).append(h)
        return h


def _make(tmp_path, body, script, options=None, clock=None):
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(body) + f"logdir: {tmp_path / 'runs'}\n")
    cluster = config.load(str(p))
    plan = build_plan(cluster, options or LaunchOptions(run_id="t"))
    clock = clock or Clock()
    backend = FakeBackend(clock, script)

    def nap(runs, seconds):
        clock.now += seconds

    out, err = io.StringIO(), io.StringIO()
    sup = Supervisor(plan, backend, View(stream=out, err_stream=err, progress_every=5.0),
                     clock=clock, nap=nap)
    sup.check_ports = lambda: None
    return sup, backend, clock, out, err


CLUSTER = """\
    cluster: {ps: [localhost:3000], worker: [localhost:3001, localhost:3002]}
    program: {command: [python, t.py]}
    grace: 2
"""



def make(*args, **kwargs):
    """The harness, with a nap that first lets every reader read its task's (finite, fake)
    output: the loop can otherwise cover fake seconds before a reader runs."""
    sup, be, clock, out, err = _make(*args, **kwargs)

    def nap(runs, seconds):
        for tr in sup.runs.values():
            if tr.reader is not None:
                tr.reader.join(5.0)
        clock.now += seconds

    sup._nap_fn = nap
    return sup, be, clock, out, err


def test_a_task_that_reports_progress_is_not_killed_for_its_port(tmp_path):
    body = CLUSTER + "    watchdog: {startup_timeout: 3}\n"
    report = '@tfcluster progress {"step": 1, "total": 10}'
    sup, be, clock, out, err = make(tmp_path, body, {
        "ps:0": [(None, None, [])],
        "worker:0": [(0, 10.0, ["loading data", report])],      # never opens its port
        "worker:1": [(0, 10.0, ["Epoch 1/3"])]})                 # nor this one: a Keras header
    be.up = {3000}
    assert sup.run() == 0, err.getvalue()
    assert "did not open port" not in err.getvalue()


def test_a_server_that_shows_nothing_is_still_killed_naming_the_setting(tmp_path):
    body = CLUSTER + "    watchdog: {startup_timeout: 3}\n"
    sup, be, clock, out, err = make(tmp_path, body, {"worker:0": [(0, 60.0, ["starting"])]})
    be.up = {3001, 3002}
    assert sup.run() == 1
    e = err.getvalue()
    assert "ps:0 (SIGKILL) — watchdog: its server did not open port 3000 within 3s" in e
    assert "watchdog.startup_timeout: 3" in e
