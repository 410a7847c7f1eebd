"""The node agent: the process on a node that starts and supervises tasks for the launcher.

Today it runs on Slurm, one per Slurm task (``srun ... python -c <the batch script's command>``
runs this module, :mod:`tfcluster.backends.slurm.batch`), for that one TensorFlow task. It reads
the plan from ``TFCLUSTER_SLURM_PLAN``, works out its TensorFlow job and index from
``SLURM_PROCID`` and the step's node list (:mod:`tfcluster.backends.slurm.layout`), sets
``TF_CONFIG``, runs the program in its own process group, prefixes its output lines with
``[job:index]`` (and copies them to ``<run_dir>/<job>-<index>.log``). It is a driver of the run
machine (:mod:`tfcluster.core.machine`), the same one the local launcher drives: restarts, the
success rule, grace, watchdogs and the stop order are the machine's. What the other nodes say
comes through the folder channel (:mod:`tfcluster.backends.agent.folder`):

* SIGURG (from the task that ends the run, through ``scancel --signal=URG JOB.STEP``): the run
  is over; workers get ``grace`` seconds; a ps waits until the other tasks have ended (so a
  chief can save its last checkpoint); exit 0.
* SIGTERM / SIGINT / SIGHUP (scancel, time limit, preemption, Ctrl-C): stop in order, chief and
  workers first, a ps after them; exit 128+N.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional

from tfcluster import safe_files
from tfcluster.backends.agent.folder import EVENTS_SUFFIX, FolderChannel, stem
from tfcluster.backends.base import ignores, signal_group, start_child
from tfcluster.backends.oom import OomWatch
from tfcluster.backends.slurm.batch import PLAN_ENV
from tfcluster.backends.slurm.held_secrets import SECRET_PREFIX, fill_secrets
from tfcluster.backends.slurm.layout import layout
from tfcluster.backends.slurm.nodes import expand_hostlist, expand_tasks_per_node
from tfcluster.clusterfile import secrets
from tfcluster.core import machine, rules
from tfcluster.core.events import ACTIONS, check_table
from tfcluster.core.output_patterns import keras_sums_over
from tfcluster.core.task_output import MAX_LINE, READ_SIZE, OutputReader, Seen
from tfcluster.net.ports import accepts
from tfcluster.plan import contract
from tfcluster.plan.runplan import RunPlan
from tfcluster.runs.eventlog import EventLog
from tfcluster.terminal import decode

STOP_SIGNAL = signal.SIGURG          # "the run is over": default action is ignore


class Signals:
    """What reached the agent: SIGURG (the run is over) and stop signals (SIGTERM, SIGINT,
    SIGHUP). :func:`main` installs the handlers first thing (a stop signal may come soon after
    start); importing this module installs none."""

    def __init__(self):
        self.over = threading.Event()
        self.cancelled: List[int] = []

    def install(self) -> None:
        signal.signal(STOP_SIGNAL, lambda signum, frame: self.over.set())
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, lambda signum, frame: self.cancelled.append(signum))


def _err(msg: str, prefix: str = "", out=None) -> None:
    out = out if out is not None else sys.stdout.buffer
    out.write(f"{prefix}tfcluster: {msg}\n".encode("utf-8", "replace"))
    out.flush()


def _env(env: Mapping[str, str], name: str, *alts: str) -> Optional[str]:
    for n in (name,) + alts:
        v = env.get(n)
        if v:
            return v
    return None


class NodeAgent:
    """The node agent of one TensorFlow task on a Slurm node: a driver of the run machine for
    this one task, with the folder channel (the run folder the nodes share) as the place tasks
    tell each other things.

    Only I/O lives here; every rule is the machine's (:mod:`tfcluster.core.machine`) or the
    rulebook's (:mod:`tfcluster.core.rules`). What it touches comes in, so a unit test builds it
    without Slurm: ``env`` (Slurm's variables; default ``os.environ``), ``clock``, ``out`` (the
    step's output, bytes), ``signals``, ``spawn`` (starts the program: :func:`start_child`),
    ``kill`` (:func:`signal_group`), ``probe`` (does a port accept connections), ``hostlist``
    (Slurm's node list expanded), ``oom``, ``signal_step`` (tells every task of the step the run
    is over: ``scancel --signal=URG``), ``ignored`` (does a process ignore a signal now)."""

    def __init__(self, data: Dict[str, Any], env: Optional[Mapping[str, str]] = None, *,
                 clock: Callable[[], float] = time.time, out=None,
                 signals: Optional[Signals] = None, spawn=start_child, kill=signal_group,
                 probe=accepts, hostlist=expand_hostlist, oom=None, signal_step=None,
                 ignored=ignores):
        self.environ: Mapping[str, str] = os.environ if env is None else env
        self.clock, self.spawn, self.kill, self.probe = clock, spawn, kill, probe
        self.ignored = ignored
        self.out = out if out is not None else sys.stdout.buffer
        self.signals = signals if signals is not None else Signals()
        self.signal_step = signal_step if signal_step is not None else self._scancel_step
        environ = self.environ
        self.data = data
        missing = fill_secrets(data, dict(environ))
        if missing:
            raise ValueError(f"secret values not passed to the job: {', '.join(missing)} (export "
                             f"them where sbatch runs)")
        self.plan = RunPlan.from_dict(data)
        rank = int(environ["SLURM_PROCID"])
        nodes = hostlist(_env(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") or "")
        per_node = expand_tasks_per_node(_env(environ, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") or "")
        table = layout(data, nodes, per_node)
        self.rank = rank
        self.job, self.index, self.host, self.port = table[rank]
        self.name = f"{self.job}:{self.index}"
        self.prefix = f"[{self.name}] "
        localid = environ.get("SLURM_LOCALID")
        self.localid = int(localid) if localid and localid.isdigit() else 0
        node = environ.get("SLURMD_NODENAME")
        if (node and node != self.host) or (localid is not None and self.port != self.plan.base_port + int(localid)):
            raise ValueError(f"rank {rank} runs on {node} (local id {localid}) but the block layout "
                             f"puts it on {self.host}:{self.port}; run srun with --distribution=block")
        self.held: List[Any] = []       # the sockets that keep the ports chosen here until the start
        self.cluster = contract.cluster_dict(_endpoints(table))
        self.local_tasks = per_node[nodes.index(self.host)] if self.host in nodes else 1
        self.task = self.plan.task(self.name)
        self.run_dir = self.plan.run_dir
        if self.run_dir:
            self.run_dir = self.run_dir.replace("{job_id}", environ.get("SLURM_JOB_ID", "nojob"))
        #: a requeued job (time limit, preemption) is the next segment of the same run
        self.segment = _int_env(environ, "SLURM_RESTART_COUNT")
        self.channel = FolderChannel(self.run_dir, self.segment) if self.run_dir else None
        step_id = _env(environ, "SLURM_STEP_ID", "SLURM_STEPID")
        self.step = f"{environ['SLURM_JOB_ID']}.{step_id}" if environ.get("SLURM_JOB_ID") and step_id else None
        self.where = {f"{j}:{i}": f"{h}:{p}" for j, i, h, p in table}
        self.mask = secrets.Masker(self.plan.secret_values())
        self.oom = oom if oom is not None else OomWatch()   # this node's OOM-kill counters
        # the machine: this task here, the others on other nodes; a ps waits, bounded
        # (rules.peer_stop_wait), for the others to end before it stops
        self.machine = machine.RunMachine.from_plan(self.plan, [self.name], shared=self.channel is not None)
        self.machine.where = dict(self.where)
        self.machine.tasks[self.name].port = self.port
        self.machine.log_inputs = self.channel is not None
        self.status = self.machine.tasks[self.name]
        #: a ps outlives Slurm's SIGTERM to the whole step; this agent stops it after the chief
        self.shielded = rules.shielded_from_step_signals(self.job)
        self.proc: Optional[subprocess.Popen] = None
        self.reader: Optional[threading.Thread] = None
        self.inbox: collections.deque = collections.deque()
        self.seen = Seen()               # what the reader saw (signs of life)
        self.life_fed: Optional[float] = None
        self.log = None
        self.events: Optional[EventLog] = None
        self.peers_seen: set = set()
        self.last_look = 0.0
        self.over_fed = self.stop_fed = False
        self.signals_fed = 0
        if self.run_dir:
            try:
                os.makedirs(self.run_dir, mode=0o700, exist_ok=True)
                self.log = safe_files.open_log(os.path.join(self.run_dir, stem(self.name) + ".log"))
            except OSError as e:
                _err(f"cannot write the log in {self.run_dir}: {e}", self.prefix, self.out)
            self.events = EventLog(self.run_dir, clock=clock,
                                   events_file=stem(self.name) + EVENTS_SUFFIX, log_file=None)

    # ---- what runs: the plan and the task contract, as everywhere
    def argv(self) -> List[str]:
        return contract.resolve_argv(self.plan.argv(self.task, cluster=self.cluster), [sys.executable])

    def env(self, restarts: int) -> Dict[str, str]:
        env = {k: v for k, v in self.environ.items() if not k.startswith(SECRET_PREFIX)}
        env.pop(PLAN_ENV, None)
        run_plan = self.plan.with_run_dir(self.run_dir) if self.run_dir else self.plan
        # TFCLUSTER_RESTART_COUNT counts the job's segments too: a requeued job is a restart
        env.update(run_plan.env(self.task, self.segment + restarts, cluster=self.cluster,
                                local_tasks=self.local_tasks))
        env[contract.LAUNCHER_PID] = str(os.getpid())   # this agent supervises the program
        return env

    # ---- output
    def emit(self, data: bytes) -> None:
        if self.mask.pattern is not None:
            data = self.mask(decode(data)).encode("utf-8", "replace")
        line = self.prefix.encode() + data
        if not line.endswith(b"\n"):
            line += b"\n"
        try:
            self.out.write(line)
            self.out.flush()
        except (BrokenPipeError, ValueError, OSError):   # srun's pipe is gone: the log keeps it
            pass
        if self.log is not None:
            try:
                self.log.write(data if data.endswith(b"\n") else data + b"\n")
                self.log.flush()
            except (OSError, ValueError) as e:   # a full disk: said once, the task goes on
                log, self.log = self.log, None
                try:
                    log.close()
                except (OSError, ValueError):   # closing a broken file: nothing more to lose
                    pass
                self.say(f"the task log could not be written ({e}); output goes on, unlogged")

    def say(self, msg: str) -> None:
        self.emit(f"tfcluster: {msg}".encode())

    def _pump(self, stream) -> None:
        """The program's output (reader thread): shown and logged as the program wrote it, a
        line at a time (a line cut every 64 KiB); what the machine needs to hear goes to the
        inbox, which the loop hands on. The bytes are read by the local launcher's own reader
        (:class:`tfcluster.core.task_output.OutputReader`) and its lines classified by the
        machine's :func:`tfcluster.core.machine.line_events`, so a run under Slurm is read by the
        same rules."""
        seen = self.seen
        reader = OutputReader(self.name, stream, None, seen, threading.RLock(), self.mask,
                              self.clock, self._heard, summed_over=keras_sums_over(self.cluster))
        read = getattr(stream, "read1", None) or stream.read   # what has arrived, at once
        pending = bytearray()
        while True:
            try:
                data = read(READ_SIZE)
            except InterruptedError:
                continue
            except (OSError, ValueError) as e:   # the pipe broke: said, and read as its end
                self.say(f"reading the task's output failed ({e}); its output ends here")
                data = b""
            if not data:
                break
            reader.feed(data)
            pending += data
            while pending:
                i = pending.find(b"\n")
                if i < 0 and len(pending) < MAX_LINE:
                    break
                cut = i + 1 if 0 <= i < MAX_LINE else MAX_LINE
                self.emit(bytes(pending[:cut]))
                del pending[:cut]
        reader.end()
        if pending:
            self.emit(bytes(pending))
        try:
            stream.close()
        except OSError:   # the pipe is read to its end; a failed close loses nothing
            pass

    def _heard(self, line: str, p) -> None:
        """What the reader took from a line (reader thread), for the loop."""
        self.inbox.extend(machine.line_events(self.name, line, p, self.clock()))

    def _life(self) -> List[Any]:
        """A sign of life the reader saw since the last look (a redraw, a hook line)."""
        at = self.seen.life_at
        if at is None or at == self.life_fed or not self.status.state.alive:
            return []
        self.life_fed = at
        return [machine.Progressed(self.name, None, at)]

    # ---- the ports: chosen on this node, gathered through the run folder
    def rendezvous(self, timeout: float = 300.0, nap: Callable[[float], None] = time.sleep) -> None:
        """Choose this task's port on its node (and its profiler's, when the run has one):
        free here, from ``base_port`` + its local id when the file gives ``base_port``, else a
        port the kernel picks; held until the task starts. Publish them in the run folder and
        wait until every task of the run has, then write TF_CONFIG from what was published:
        two jobs of one file on one node, or a port another user holds, do not collide. The
        ``base_port`` + local id layout stands without a run folder."""
        if self.channel is None:
            return
        from tfcluster.backends.agent.host import choose_ports
        base = self.plan.base_port + self.localid if self.plan.base_port_given else None
        want_profiler = self.plan.profiler and self.job != "evaluator"
        try:
            got = choose_ports(1, base) + (choose_ports(1, None) if want_profiler else [])
        except OSError as e:
            raise ValueError(f"{self.name}: {e}")
        self.held = [s for _, held in got for s in held]
        self.port = got[0][0]
        profiler = got[1][0] if want_profiler else None
        err = self.channel.publish_port(self.name, {"task": self.name, "host": self.host, "port": self.port,
                                                    "profiler_port": profiler, "rank": self.rank})
        if err:
            raise ValueError(f"{self.name}: its port cannot be written in the run folder ({err})")
        names = [t.name for t in self.plan.tasks]
        deadline = self.clock() + timeout
        while True:
            seen = self.channel.ports()
            missing = [n for n in names if n not in seen]
            if not missing:
                break
            if self.signals.cancelled or self.signals.over.is_set() or self.clock() > deadline:
                self._release()
                raise ValueError(f"{self.name}: the ports of {', '.join(missing[:5])} were not published "
                                 f"within {timeout:g}s (their node agents did not start?)")
            nap(0.1)
        table = [(t.job, t.index, seen[t.name]["host"], seen[t.name]["port"]) for t in self.plan.tasks]
        self.cluster = contract.cluster_dict(_endpoints(table))
        self.where = {f"{j}:{i}": f"{h}:{p}" for j, i, h, p in table}
        self.machine.where = dict(self.where)
        self.machine.tasks[self.name].port = self.port
        self.task = replace(self.task, host=self.host, port=self.port, profiler_port=profiler)

    def _release(self) -> None:
        for s in self.held:
            s.close()
        self.held = []

    # ---- life: the loop that drives the machine
    def run(self) -> int:
        self.rendezvous(timeout=self.plan.watchdog.startup_timeout or 300.0)
        self.begin()
        while not self.machine.finished:
            self.turn()
            if not self.machine.finished:
                time.sleep(0.1)
        return self.machine.exit_code_of(self.name)

    def begin(self) -> None:
        if self.rank == 0:
            self.say(f"TF_CONFIG cluster: {json.dumps(self.cluster)}")
        now = self.clock()
        if self.events is not None:
            self.events.emit("input", self.name, input="begin", now=now)
        self._act(self.machine.begin(now))

    def turn(self) -> None:
        """One turn of the loop: what happened since the last, handed to the machine."""
        now = self.clock()
        events: List[Any] = []
        cancelled = self.signals.cancelled
        while self.signals_fed < len(cancelled):
            events.append(machine.Interrupt(cancelled[self.signals_fed], now))
            self.signals_fed += 1
        look = now - self.last_look >= 0.5
        if not self.over_fed and (self.signals.over.is_set()
                                  or (look and self.channel and self.channel.over())):
            self.over_fed = True
            events.append(machine.RunOver("the run is over", now))
        if not self.stop_fed and look and self.channel and self.channel.stop_requested():
            self.stop_fed = True        # the time limit is near (or tfcluster stop): in order
            self.say("a stop was asked for (Slurm's time-limit warning or tfcluster stop)")
            events.append(machine.Interrupt(signal.SIGTERM, now))
        exited = None
        if self.proc is not None and self.status.state.alive:
            rc = self.proc.poll()
            if rc is not None:
                if self.reader is not None:
                    self.reader.join(5)
                exited = machine.Exited(self.name, rc, self.clock(), self.oom.words(rc))
        while self.inbox:
            events.append(self.inbox.popleft())
        events += self._life()
        if exited is not None:
            events.append(exited)
        if look:
            self.last_look = now
            events += self._look(now)
        events.append(machine.Tick(self.clock()))
        self._act(self.machine.handle(*events))

    def _look(self, now: float) -> List[Any]:
        """What the other nodes and the port say (every half second)."""
        out: List[Any] = []
        if self.name in self.machine.unopened() and self.probe("localhost", self.port):
            out.append(machine.PortOpen(self.name, now))
        if self.channel is None:
            return out
        reason = self.channel.take_kill_request(self.name)
        if reason:
            out.append(machine.KillRequest(self.name, reason, now))
        for task, rec in self.channel.exits(self.segment).items():
            if task != self.name and task not in self.peers_seen and task in self.machine.others:
                self.peers_seen.add(task)
                if rec.get("left") and isinstance(rec["left"], str):   # out of its restarts there
                    out.append(machine.PeerLost(task, "", now, f"{task} {rec['left']}"))
                else:
                    out.append(machine.PeerEnded(task, bool(rec.get("ok")), now))
        if self.plan.min_workers is not None:    # elastic: tasks lost with their node (--no-kill)
            for rec in self.channel.lost():
                task = rec["task"]
                if task not in self.peers_seen and task in self.machine.others:
                    self.peers_seen.add(task)
                    out.append(machine.PeerLost(task, rec["node"], now, str(rec.get("reason") or "")))
        return out

    def _act(self, actions) -> None:
        """Carry out the machine's actions, each by its entry in :data:`CARRY`."""
        self._log_inputs()
        for a in actions:
            CARRY[type(a)](self, a)

    def _do_start(self, a: machine.Start) -> None:
        self._start(a.attempt)

    def _do_kill(self, a: machine.Kill) -> None:
        self._kill(a.sig)

    def _do_log(self, a: machine.LogEvent) -> None:
        if self.events is not None:
            self.events.emit(a.event, a.task, **a.as_dict())
        if a.event == "task_exited" and a.as_dict().get("state") == "succeeded":
            self._write_exit(final=False)   # others may be waiting for it (all-workers)
        elif a.event == "run_shrunk" and a.task == self.name:
            self._write_exit(final=False)   # it left the run: the others stop counting it

    def _do_say(self, a: machine.Say) -> None:
        self.say(a.text)

    def _do_claim(self, a: machine.ClaimRestart) -> None:
        granted, why = self.channel.claim_restart(self.status.rule.max_total_restarts)
        self._act(self.machine.handle(machine.RestartClaim(a.task, granted, self.clock(), why)))

    def _do_ask_kill(self, a: machine.AskKill) -> None:
        if self.channel is not None:
            err = self.channel.request_kill(a.task, a.reason)
            if err:
                self.say(f"cannot ask {a.task} to stop: {err}")

    def _do_end_run(self, a: machine.EndRun) -> None:
        self.end_run()

    def _do_finished(self, a: machine.Finished) -> None:
        self._write_exit(final=True)

    def _do_regroup(self, a: machine.Regroup) -> None:
        """Slurm placed the run's tasks (srun): an agent cannot place them again, and the plan
        never lets a run on Slurm regroup (its restart budget is shared, which fails a lost
        node's task instead of moving it; ports are not chosen again; elastic.on_change is
        go-on there). Were it asked, it answers that it cannot, and the machine fails the run
        rather than wait for ever."""
        self._act(self.machine.handle(machine.Regrouped(
            False, self.clock(), "a Slurm node agent cannot place tasks again (srun placed them)")))

    def _log_inputs(self) -> None:
        """The machine's inputs to this task's events (a test replays a run from them)."""
        for ev in self.machine.take_inputs():
            if self.events is not None:
                self.events.emit("input", self.name, **machine.input_fields(ev))

    def _kill(self, sig: int) -> None:
        if self.proc is None:
            return
        if sig == signal.SIGTERM and self.shielded and self.ignored(self.proc.pid, sig):
            sig = rules.SHIELDED_STOP_SIGNAL     # the ps still ignores SIGTERM (Slurm's, to the step)
        self.kill(self.proc.pid, sig)

    def _start(self, attempt: int) -> None:
        self._release()            # the task binds its port itself now
        try:
            # the program dies with its agent, even when the agent is SIGKILLed
            self.proc = self.spawn(self.argv(), env=self.env(attempt), cwd=self.task.cwd,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   ignore=(signal.SIGTERM,) if self.shielded else ())
        except OSError as e:
            self.say(f"cannot start {self.task.argv[0]}: {e.strerror or e}")
            self._act(self.machine.handle(machine.StartFailed(
                self.name, f"cannot start: {e.strerror or e}", self.clock(), code=127)))
            return
        self._act(self.machine.handle(machine.Started(self.name, self.proc.pid, self.clock())))
        self.say(f"started on {self.host}:{self.port} (pid {self.proc.pid})"
                 + (f", restart {attempt}" if attempt else ""))
        if self.events is not None:
            self.events.emit("task_started", self.name, pid=self.proc.pid, attempt=attempt,
                             host=self.host)
        self.seen.reset()
        self.reader = threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True)
        self.reader.start()

    def _write_exit(self, final: bool) -> None:
        if self.channel is None:
            return
        row = self.machine.end_row(self.name, final)
        err = self.channel.write_exit(self.name, {
            "task": self.name, "host": self.host, "port": self.port, "rank": self.rank,
            "profiler_port": self.task.profiler_port,
            **row, "time": self.clock(), "segment": self.segment})
        if err:     # the other nodes will not hear of this end: a ps waits its bound out
            self.say(f"cannot record this task's end in the run folder: {err}")
        if final:
            if self.events is not None:
                self.events.close()
            if self.log is not None:
                self.log.close()
                self.log = None

    def end_run(self) -> None:
        """Tell every task of the step that the run is over (SIGURG through Slurm)."""
        if self.channel is not None:
            err = self.channel.mark_over()
            if err:
                self.say(f"cannot mark the run over in the run folder ({err}); Slurm's signal tells the others")
        if self.step:
            self.signal_step(self.step)

    def _scancel_step(self, step: str) -> None:
        for attempt in range(2):   # twice: a task may not have installed its handler yet
            try:
                subprocess.run(["scancel", f"--signal={int(STOP_SIGNAL)}", step],
                               capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as e:
                self.say(f"cannot signal the job step {step}: {e}")
                return
            if attempt == 0:
                time.sleep(1.0)

#: what the node agent does with each action of the machine: one entry per action class
#: (checked when the module loads)
CARRY = {
    machine.Start: NodeAgent._do_start, machine.Kill: NodeAgent._do_kill, machine.LogEvent: NodeAgent._do_log,
    machine.Say: NodeAgent._do_say, machine.ClaimRestart: NodeAgent._do_claim,
    machine.AskKill: NodeAgent._do_ask_kill, machine.EndRun: NodeAgent._do_end_run,
    machine.Finished: NodeAgent._do_finished, machine.Regroup: NodeAgent._do_regroup,
}
check_table(CARRY, ACTIONS, "the node agent's actions (tfcluster.backends.agent.node.CARRY)")


def _int_env(env: Mapping[str, str], name: str) -> int:
    try:
        return max(0, int(env.get(name) or 0))
    except ValueError:
        return 0


def _endpoints(table) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for job, _idx, host, port in table:
        out.setdefault(job, []).append(f"{host}:{port}")
    return out


def main() -> int:
    signals = Signals()
    signals.install()   # first thing: a stop signal may come soon after start
    os.umask(0o077)     # inside an allocation no batch script set it: the run's files are private
    text = os.environ.get(PLAN_ENV)
    if not text:
        _err(f"{PLAN_ENV} is not set; this module runs inside a job made by tfcluster "
             f"(tfcluster render slurm / launch --backend slurm)")
        return 2
    if "SLURM_PROCID" not in os.environ:
        _err("SLURM_PROCID is not set: run this module with srun")
        return 2
    try:
        agent = NodeAgent(json.loads(text), signals=signals)
    except (ValueError, KeyError, IndexError) as e:
        _err(f"rank {os.environ.get('SLURM_PROCID')}: {e}")
        return 2
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())

