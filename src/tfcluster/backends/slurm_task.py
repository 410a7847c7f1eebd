"""One Slurm task of a tfcluster run (``srun ... python -m tfcluster.backends.slurm_task``).

It reads the plan from ``TFCLUSTER_SLURM_PLAN``, works out its TensorFlow job and index from
``SLURM_PROCID`` and the step's node list (see :mod:`tfcluster.backends.slurm`), sets
``TF_CONFIG``, runs the program in its own process group, prefixes its output lines with
``[job:index]`` (and copies them to ``<run_dir>/<job>-<index>.log``). It is a driver of the run
machine (:mod:`tfcluster.machine`), the same one the local launcher drives: restarts, the
success rule, grace, watchdogs and the stop order are the machine's. What the other nodes say
comes through the run folder (:mod:`.runfolder`):

* SIGURG (from the task that ends the run, through ``scancel --signal=URG JOB.STEP``): the run
  is over; workers get ``grace`` seconds; a ps waits until the other tasks have ended (so a
  chief can save its last checkpoint); exit 0.
* SIGTERM / SIGINT / SIGHUP (scancel, time limit, preemption, Ctrl-C): stop in order, chief and
  workers first, a ps after them; exit 128+N.
"""
from __future__ import annotations

import signal
import threading

_over = threading.Event()         # the run is over (SIGURG)
_cancelled: list = []             # stop signals received (SIGTERM, SIGINT, SIGHUP)


def _on_over(signum, frame):
    _over.set()


def _on_cancel(signum, frame):
    _cancelled.append(signum)


# Installed first thing: a stop signal may come soon after start.
signal.signal(signal.SIGURG, _on_over)
for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, _on_cancel)

import collections  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Dict, List, Optional  # noqa: E402

from .. import contract, machine as mc, rules, secrets  # noqa: E402
from ..hosts import accepts  # noqa: E402
from ..oom import OomWatch  # noqa: E402
from ..plan import RunPlan  # noqa: E402
from ..reader import MAX_LINE, READ_SIZE, OutputReader, Seen, still_waiting_on  # noqa: E402
from ..terminal import decode  # noqa: E402
from .base import start_child  # noqa: E402
from .runfolder import RunFolder  # noqa: E402
from .slurm import (PLAN_ENV, SECRET_PREFIX, STOP_SIGNAL, expand_hostlist,  # noqa: E402
                    expand_tasks_per_node, fill_secrets, layout)


def _err(msg: str, prefix: str = "") -> None:
    sys.stdout.write(f"{prefix}tfcluster: {msg}\n")
    sys.stdout.flush()


def _env(name: str, *alts: str) -> Optional[str]:
    for n in (name,) + alts:
        v = os.environ.get(n)
        if v:
            return v
    return None


class Task:
    """One TensorFlow task on a Slurm node: a driver of the run machine for this one task,
    with the run folder -- shared by the nodes -- as the place tasks tell each other things."""

    def __init__(self, data: Dict[str, Any]):
        self.data = data
        missing = fill_secrets(data, dict(os.environ))
        if missing:
            raise ValueError(f"secret values not passed to the job: {', '.join(missing)} (export "
                             f"them where sbatch runs)")
        self.plan = RunPlan.from_dict(data)
        rank = int(os.environ["SLURM_PROCID"])
        nodes = expand_hostlist(_env("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") or "")
        per_node = expand_tasks_per_node(_env("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") or "")
        table = layout(data, nodes, per_node)
        self.rank = rank
        self.job, self.index, self.host, self.port = table[rank]
        self.name = f"{self.job}:{self.index}"
        self.prefix = f"[{self.name}] "
        localid = os.environ.get("SLURM_LOCALID")
        node = os.environ.get("SLURMD_NODENAME")
        if (node and node != self.host) or (localid is not None and self.port != self.plan.base_port + int(localid)):
            raise ValueError(f"rank {rank} runs on {node} (local id {localid}) but the block layout "
                             f"puts it on {self.host}:{self.port}; run srun with --distribution=block")
        self.cluster = contract.cluster_dict(_endpoints(table))
        self.local_tasks = per_node[nodes.index(self.host)] if self.host in nodes else 1
        self.task = self.plan.task(self.name)
        self.run_dir = self.plan.run_dir
        if self.run_dir:
            self.run_dir = self.run_dir.replace("{job_id}", os.environ.get("SLURM_JOB_ID", "nojob"))
        #: a requeued job (time limit, preemption) is the next segment of the same run
        self.segment = _int_env("SLURM_RESTART_COUNT")
        self.folder = RunFolder(self.run_dir, self.segment) if self.run_dir else None
        self.step = (f"{os.environ['SLURM_JOB_ID']}.{_env('SLURM_STEP_ID', 'SLURM_STEPID')}"
                     if os.environ.get("SLURM_JOB_ID") and _env("SLURM_STEP_ID", "SLURM_STEPID") else None)
        self.where = {f"{j}:{i}": f"{h}:{p}" for j, i, h, p in table}
        self.mask = secrets.Masker(self.plan.secret_values())
        # the machine: this task here, the others on other nodes; a ps waits for the others to
        # end before it stops (bounded: grace + stop timeout + a margin)
        wait = self.plan.grace + self.plan.stop_timeout + 5.0
        self.oom = OomWatch()    # this node's OOM-kill counters (tfcluster.oom)
        self.machine = mc.RunMachine.from_plan(self.plan, [self.name], shared=self.folder is not None,
                                               peer_stop_wait=wait)
        self.machine.where = dict(self.where)
        self.machine.tasks[self.name].port = self.port
        self.status = self.machine.tasks[self.name]
        self.proc: Optional[subprocess.Popen] = None
        self.reader: Optional[threading.Thread] = None
        self.inbox: collections.deque = collections.deque()
        self.seen = Seen()               # what the reader saw (signs of life)
        self.life_fed: Optional[float] = None
        self.log = None
        self.events = None
        self.peers_seen: set = set()
        self.last_look = 0.0
        if self.run_dir:
            try:
                os.makedirs(self.run_dir, mode=0o700, exist_ok=True)
                fd = os.open(os.path.join(self.run_dir, f"{self.job}-{self.index}.log"),
                             os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self.log = os.fdopen(fd, "ab")
                self.events = _TaskEvents(self.folder.events_path(self.name))
            except OSError as e:
                _err(f"cannot write the log in {self.run_dir}: {e}", self.prefix)

    # ---- what runs: the plan and the task contract, as everywhere
    def argv(self) -> List[str]:
        return contract.resolve_argv(self.plan.argv(self.task, cluster=self.cluster), [sys.executable])

    def env(self, restarts: int) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(SECRET_PREFIX)}
        env.pop(PLAN_ENV, None)
        run_plan = self.plan.with_run_dir(self.run_dir) if self.run_dir else self.plan
        # TFCLUSTER_RESTART_COUNT counts the job's segments too: a requeued job is a restart
        env.update(run_plan.env(self.task, self.segment + restarts, cluster=self.cluster,
                                local_tasks=self.local_tasks))
        env[contract.LAUNCHER_PID] = str(os.getpid())   # this wrapper supervises the program
        return env

    # ---- output
    def emit(self, data: bytes) -> None:
        if self.mask.pattern is not None:
            data = self.mask(decode(data)).encode("utf-8", "replace")
        line = self.prefix.encode() + data
        if not line.endswith(b"\n"):
            line += b"\n"
        try:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass
        if self.log is not None:
            try:
                self.log.write(data if data.endswith(b"\n") else data + b"\n")
                self.log.flush()
            except (OSError, ValueError) as e:   # a full disk: said once, the task goes on
                log, self.log = self.log, None
                try:
                    log.close()
                except (OSError, ValueError):
                    pass
                self.say(f"the task log could not be written ({e}); output goes on, unlogged")

    def say(self, msg: str) -> None:
        self.emit(f"tfcluster: {msg}".encode())

    def _pump(self, stream) -> None:
        """The program's output (reader thread): shown and logged as the program wrote it, a
        line at a time (a line cut every 64 KiB); what the machine needs to hear goes to the
        inbox, which the loop hands on. The bytes are read as they arrive by the local
        launcher's own reader (:class:`tfcluster.reader.OutputReader`: progress reports
        anywhere in a line, carriage-return redraws, Keras bars and epochs and TF1 hook lines as
        signs of life, once a program reports itself its other output as life only, "still
        waiting" and taken-port lines), so a run under Slurm is read by the same rules."""
        seen = self.seen
        reader = OutputReader(self.name, stream, None, seen, threading.RLock(), self.mask,
                              time.time, self._heard)
        read = getattr(stream, "read1", None) or stream.read   # what has arrived, at once
        pending = bytearray()
        while True:
            try:
                data = read(READ_SIZE)
            except InterruptedError:
                continue
            except (OSError, ValueError):
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
        except OSError:
            pass

    def _heard(self, line: str, p) -> None:
        """What the reader took from a line (reader thread), for the loop: the same classes of
        lines the local launcher hands its machine (Supervisor._on_line)."""
        now = time.time()
        if p is not None:
            self.inbox.append(mc.Progressed(self.name, p.step, now))
            return
        waiting = still_waiting_on(line)
        if waiting:
            self.inbox.append(mc.Waiting(self.name, waiting, now))
        if rules.PORT_CONFLICT.search(line):
            self.inbox.append(mc.PortConflict(self.name, now))

    def _life(self) -> List[Any]:
        """A sign of life the reader saw since the last look (a redraw, a hook line)."""
        at = self.seen.life_at
        if at is None or at == self.life_fed or not self.status.state.alive:
            return []
        self.life_fed = at
        return [mc.Progressed(self.name, None, at)]

    # ---- life: the loop that drives the machine
    def run(self) -> int:
        if self.rank == 0:
            self.say(f"TF_CONFIG cluster: {json.dumps(self.cluster)}")
        self._act(self.machine.begin(time.time()))
        over_fed = stop_fed = False
        signals_fed = 0
        while not self.machine.finished:
            now = time.time()
            events: List[Any] = []
            while signals_fed < len(_cancelled):
                events.append(mc.Interrupt(_cancelled[signals_fed], now))
                signals_fed += 1
            if not over_fed and (_over.is_set() or (now - self.last_look >= 0.5 and self.folder
                                                    and self.folder.over())):
                over_fed = True
                events.append(mc.RunOver("the run is over", now))
            if not stop_fed and now - self.last_look >= 0.5 and self.folder \
                    and self.folder.stop_requested():
                stop_fed = True        # the time limit is near (or tfcluster stop): in order
                self.say("a stop was asked for (Slurm's time-limit warning or tfcluster stop)")
                events.append(mc.Interrupt(signal.SIGTERM, now))
            exited = None
            if self.proc is not None and self.status.state.alive:
                rc = self.proc.poll()
                if rc is not None:
                    if self.reader is not None:
                        self.reader.join(5)
                    exited = mc.Exited(self.name, rc, time.time(), self.oom.words(rc))
            while self.inbox:
                events.append(self.inbox.popleft())
            events += self._life()
            if exited is not None:
                events.append(exited)
            if now - self.last_look >= 0.5:
                self.last_look = now
                events += self._look(now)
            events.append(mc.Tick(time.time()))
            self._act(self.machine.handle(*events))
            if not self.machine.finished:
                time.sleep(0.1)
        return self._exit_code()

    def _look(self, now: float) -> List[Any]:
        """What the other nodes and the port say (every half second)."""
        out: List[Any] = []
        if self.name in self.machine.unopened() and accepts("localhost", self.port):
            out.append(mc.PortOpen(self.name, now))
        if self.folder is None:
            return out
        reason = self.folder.take_kill_request(self.name)
        if reason:
            out.append(mc.KillRequest(self.name, reason, now))
        for task, rec in self.folder.exits(self.segment).items():
            if task != self.name and task not in self.peers_seen and task in self.machine.others:
                self.peers_seen.add(task)
                out.append(mc.PeerEnded(task, bool(rec.get("ok")), now))
        return out

    def _act(self, actions) -> None:
        for a in actions:
            if isinstance(a, mc.Start):
                self._start(a.attempt)
            elif isinstance(a, mc.Kill):
                if self.proc is not None:
                    try:
                        os.killpg(self.proc.pid, a.sig)
                    except (ProcessLookupError, PermissionError):   # the group is gone
                        pass
            elif isinstance(a, mc.Note):
                if self.events is not None:
                    self.events.emit(a.event, a.task, a.as_dict())
                if a.event == "task_exited" and a.as_dict().get("state") == "succeeded":
                    self._write_exit(final=False)   # others may be waiting for it (all-workers)
            elif isinstance(a, mc.Say):
                self.say(a.text)
            elif isinstance(a, mc.ClaimRestart):
                granted, why = self.folder.claim_restart(self.status.rule.max_total_restarts)
                self._act(self.machine.handle(mc.RestartClaim(a.task, granted, time.time(), why)))
            elif isinstance(a, mc.AskKill):
                if self.folder is not None:
                    err = self.folder.request_kill(a.task, a.reason)
                    if err:
                        self.say(f"cannot ask {a.task} to stop: {err}")
            elif isinstance(a, mc.EndRun):
                self.end_run()
            elif isinstance(a, mc.Finished):
                self._write_exit(final=True)

    def _start(self, attempt: int) -> None:
        try:
            # the program dies with its wrapper, even when the wrapper is SIGKILLed
            self.proc = start_child(self.argv(), env=self.env(attempt), cwd=self.task.cwd,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            self.say(f"cannot start {self.task.argv[0]}: {e.strerror or e}")
            self._act(self.machine.handle(mc.StartFailed(
                self.name, f"cannot start: {e.strerror or e}", time.time(), code=127)))
            return
        self._act(self.machine.handle(mc.Started(self.name, self.proc.pid, time.time())))
        self.say(f"started on {self.host}:{self.port} (pid {self.proc.pid})"
                 + (f", restart {attempt}" if attempt else ""))
        if self.events is not None:
            self.events.emit("task_started", self.name, {"pid": self.proc.pid, "attempt": attempt,
                                                         "host": self.host})
        self.seen.reset()
        self.reader = threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True)
        self.reader.start()

    def _exit_code(self) -> int:
        m = self.machine
        if m.result == mc.RunState.FAILED and m.root_cause == self.name \
                and self.status.returncode is not None:
            return rules.task_exit_code(self.status.returncode)
        return m.exit_code if m.exit_code is not None else rules.EXIT_FAILED

    def _write_exit(self, final: bool) -> None:
        if self.folder is None:
            return
        t, m = self.status, self.machine
        failed = final and m.result == mc.RunState.FAILED and m.root_cause in (self.name, None)
        reason = t.note or (m.words if final else "") or rules.describe_exit(t.returncode)
        self.folder.write_exit(self.name, {
            "task": self.name, "host": self.host, "port": self.port, "rank": self.rank,
            "exit_code": self._exit_code() if final else 0,
            "returncode": t.returncode, "state": t.state.value,
            "ok": t.state == mc.TaskState.SUCCEEDED, "failed": bool(failed),
            "reason": reason, "restarts": t.restarts, "pid": t.pid,
            "started": t.started, "first_started": t.first_started, "ended": t.ended,
            "time": time.time(), "final": final, "segment": self.segment})
        if final:
            if self.events is not None:
                self.events.close()
            if self.log is not None:
                self.log.close()
                self.log = None

    def end_run(self) -> None:
        """Tell every task of the step that the run is over (SIGURG through Slurm)."""
        if self.folder is not None:
            self.folder.mark_over()
        if not self.step:
            return
        for attempt in range(2):   # twice: a task may not have installed its handler yet
            try:
                subprocess.run(["scancel", f"--signal={int(STOP_SIGNAL)}", self.step],
                               capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as e:
                self.say(f"cannot signal the job step {self.step}: {e}")
                return
            if attempt == 0:
                time.sleep(1.0)


class _TaskEvents:
    """This task's events (the launcher merges every task's into the run's events.jsonl)."""

    def __init__(self, path: str):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
        self.f = os.fdopen(fd, "a", encoding="utf-8")

    def emit(self, event: str, task: Optional[str], fields: Dict[str, Any]) -> None:
        rec = {"time": time.time(), "event": event, "task": task}
        rec.update({k: v for k, v in fields.items() if v is not None or k == "exit_code"})
        try:
            self.f.write(json.dumps(rec, default=str) + "\n")
            self.f.flush()
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        try:
            self.f.close()
        except OSError:
            pass


def _int_env(name: str) -> int:
    try:
        return max(0, int(os.environ.get(name) or 0))
    except ValueError:
        return 0


def _endpoints(table) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for job, idx, host, port in table:
        out.setdefault(job, []).append(f"{host}:{port}")
    return out


def main() -> int:
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
        task = Task(json.loads(text))
    except (ValueError, KeyError, IndexError) as e:
        _err(f"rank {os.environ.get('SLURM_PROCID')}: {e}")
        return 2
    return task.run()


if __name__ == "__main__":
    sys.exit(main())
