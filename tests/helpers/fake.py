"""A fake backend and a fake clock that drive the real supervisor loop (no processes)."""
from __future__ import annotations

import io
import signal
import textwrap

from tfcluster.backends.base import Backend, Handle
from tfcluster.clusterfile import config
from tfcluster.drivers.display import View
from tfcluster.drivers.supervisor import Supervisor
from tfcluster.plan.runplan import LaunchOptions, build_plan


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
        self.stdout = io.BytesIO("".join(ln + "\n" for ln in lines).encode())
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


def make(tmp_path, body, script, options=None, clock=None):
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(body) + f"logdir: {tmp_path / 'runs'}\n")
    cluster = config.load(str(p))
    plan = build_plan(cluster, options or LaunchOptions(run_id="t"))
    clock = clock or Clock()
    backend = FakeBackend(clock, script)

    def nap(runs, seconds):
        # A fake task's output is all there at its start: let its reader hand every line to
        # the supervisor before fake time moves on (a loaded machine must not reorder them).
        for tr in runs:
            if tr.reader is not None:
                tr.reader.join(timeout=5.0)
        clock.now += seconds

    out, err = io.StringIO(), io.StringIO()
    sup = Supervisor(plan, backend, View(stream=out, err_stream=err, progress_every=5.0),
                     clock=clock, nap=nap)
    sup.check_ports = lambda: None
    return sup, backend, clock, out, err
