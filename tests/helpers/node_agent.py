"""The Slurm node agent (tfcluster.backends.agent.node.NodeAgent) built without Slurm, for the
unit tests of the agent (tests/unit/test_node_agent.py, tests/unit/test_node_agent_output.py):
Slurm's environment, the clock, the program, signals and the step's scancel are fakes; the run
folder is a real folder, shared by the nodes of a test."""
from __future__ import annotations

import io
import json
import signal
import textwrap

from tfcluster.backends.agent.folder import FolderChannel
from tfcluster.backends.agent.node import NodeAgent, Signals
from tfcluster.backends.slurm.batch import plan_data
from tfcluster.backends.slurm.layout import rank_table
from tfcluster.backends.slurm.nodes import _expand_hostlist_py
from tfcluster.clusterfile import config
from tfcluster.plan.runplan import LaunchOptions, build_plan

TERM = signal.SIGTERM


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


class Proc:
    """A started program: its output is read to the end at once; ``rc`` set by the test."""

    def __init__(self, pid, output=b""):
        self.pid, self.stdout, self.rc = pid, io.BytesIO(output), None

    def poll(self):
        return self.rc


class Node:
    """One Slurm task's node agent with its fakes."""

    def __init__(self, tmp_path, rank, cluster="{ps: 1, worker: 1}", restart="", segment=0,
                 output=b"", extra="", ignores_term=True):
        text = textwrap.dedent(f"""\
            cluster: {cluster}
            program: {{command: [python, t.py]}}
            logdir: {tmp_path / 'runs'}
            grace: 2
            """) + restart + extra
        path = tmp_path / "c.yaml"
        path.write_text(text)
        plan = build_plan(config.load(str(path)), LaunchOptions(backend="slurm", run_id="r1",
                                                                       stop_timeout=3.0))
        data = plan_data(plan)
        n = len(rank_table(data))
        env = {"SLURM_PROCID": str(rank), "SLURM_STEP_NODELIST": f"n[1-{n}]",
               "SLURM_STEP_TASKS_PER_NODE": f"1(x{n})", "SLURM_JOB_ID": "77",
               "SLURM_STEP_ID": "0", "SLURMD_NODENAME": f"n{rank + 1}", "SLURM_LOCALID": "0",
               "SLURM_RESTART_COUNT": str(segment), "PATH": "/usr/bin"}
        self.clock, self.signals = Clock(), Signals()
        self.out, self.killed, self.spawned, self.step_signalled = io.BytesIO(), [], [], []
        self.output = output
        self.procs = []
        self.agent = NodeAgent(json.loads(json.dumps(data)), env, clock=self.clock, out=self.out,
                         signals=self.signals, spawn=self._spawn, kill=self._kill,
                         probe=lambda host, port: False, hostlist=_expand_hostlist_py,
                         oom=type("NoOom", (), {"words": staticmethod(lambda rc: "")})(),
                         signal_step=self.step_signalled.append,
                         ignored=lambda pid, sig: ignores_term and sig == TERM)
        self.actions = []
        handle = self.agent.machine.handle

        def recorded(*events):   # every action the machine answers, for the replay test
            got = handle(*events)
            self.actions += got
            return got
        self.agent.machine.handle = recorded
        began = self.agent.machine.begin

        def recorded_begin(now):
            got = began(now)
            self.actions += got
            return got
        self.agent.machine.begin = recorded_begin

    def _spawn(self, argv, **kw):
        p = Proc(4000 + len(self.procs), self.output)
        self.procs.append(p)
        self.spawned.append(kw)
        return p

    def _kill(self, pid, sig):
        self.killed.append((pid, sig))

    @property
    def proc(self):
        return self.procs[-1]

    def start(self):
        self.agent.begin()
        self.agent.reader.join(5)

    def turn(self, dt=0.6):
        self.clock.t += dt
        self.agent.turn()

    def exits(self, rc, dt=0.6):
        self.proc.rc = rc
        self.turn(dt)

    def record(self):
        return FolderChannel(self.agent.run_dir).exits()[self.agent.name]

    def said(self):
        return self.out.getvalue().decode()
