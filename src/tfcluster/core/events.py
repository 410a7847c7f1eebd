"""What goes in and out of the run machine (:mod:`tfcluster.core.machine`): the **events** a
driver reports (``now`` is the driver's clock, in seconds) and the **actions** it carries out;
what one line of a task's output tells the machine (:func:`line_events`); an event as the plain
fields of an ``input`` row of events.jsonl and back (:func:`input_fields`,
:func:`input_from_fields`), which a replay reads; and :func:`check_table`, which checks at import
that a table keyed by these classes (the machine's handlers, a driver's actions) has one entry for
each -- a driver declares an action it does not carry out with :class:`NotHere`. Frozen
dataclasses, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple, Union, get_args

from tfcluster.core import rules
from tfcluster.core.states import RunState
from tfcluster.core.task_output import still_waiting_on

# ---------------------------------------------------------------------------- events
# What a driver reports. ``now`` is the driver's clock (seconds).


@dataclass(frozen=True)
class Tick:
    """Time has passed: deadlines (restart backoff, watchdog, grace, stop timeout) are due.
    ``watch``: whether the watchdogs look now; None (a driver) -- every WATCH_EVERY seconds.
    The machine's input log (:attr:`tfcluster.core.machine.RunMachine.inputs`) records it, so a replay looks when the
    run looked."""
    now: float
    watch: Optional[bool] = None


@dataclass(frozen=True)
class Started:
    task: str
    pid: Optional[int]
    now: float


@dataclass(frozen=True)
class StartFailed:
    """The driver could not start the task (no such program, no such folder): bad input."""
    task: str
    message: str
    now: float
    code: int = rules.EXIT_BAD_INPUT


@dataclass(frozen=True)
class Exited:
    """The task's process ended (its output has been read to the end)."""
    task: str
    returncode: int               # negative: killed by signal -returncode
    now: float
    cause: str = ""               # what the driver learnt of the death (tfcluster.backends.oom,
                                  # the exception in its output: tfcluster.runs.failure)
    lost_node: str = ""           # the task's node was lost: it can only come back elsewhere
    hint: str = ""                # "hint: ..." naming the fix, said with the failure


@dataclass(frozen=True)
class Progressed:
    """The task reported its step (``step``; life when it moved), or showed another sign of
    life (``step`` None: a Keras bar or a TF1 hook line that moved, a protocol report).
    ``total``: the step it trains to, when it says; a task at its final step is ending."""
    task: str
    step: Optional[int]
    now: float
    total: Optional[int] = None


@dataclass(frozen=True)
class PortOpen:
    """The task's server accepts connections."""
    task: str
    now: float


@dataclass(frozen=True)
class PortConflict:
    """The task's output said its port is taken (Could not start gRPC server)."""
    task: str
    now: float


@dataclass(frozen=True)
class Waiting:
    """``task`` printed "CreateSession still waiting for response from" ``on``."""
    task: str
    on: str
    now: float


@dataclass(frozen=True)
class Interrupt:
    """A stop signal reached the driver (Ctrl-C, SIGTERM, SIGHUP, ``tfcluster stop``, Slurm's
    time-limit or preemption signal). A second SIGINT stops at once (SIGKILL)."""
    signum: int
    now: float


@dataclass(frozen=True)
class KillRequest:
    """Another node's watchdog asks to kill ``task`` (which runs here)."""
    task: str
    reason: str
    now: float


@dataclass(frozen=True)
class PeerEnded:
    """A task that runs elsewhere has ended; ``ok``: it exited 0 by itself."""
    task: str
    ok: bool
    now: float


@dataclass(frozen=True)
class RunOver:
    """The run was decided elsewhere (another node's driver ended it)."""
    words: str
    now: float


@dataclass(frozen=True)
class ChiefGone:
    """Per-host mode: the chief, which runs elsewhere, has ended (its server closed)."""
    words: str
    now: float


@dataclass(frozen=True)
class RestartClaim:
    """The driver's answer to :class:`ClaimRestart`: one restart of the run's shared budget
    was (or was not) taken."""
    task: str
    granted: bool
    now: float
    reason: str = ""


@dataclass(frozen=True)
class Regrouped:
    """The driver's answer to :class:`Regroup`: the tasks were placed again (``ok``; the new
    endpoints are the driver's), or could not be (``message`` says why)."""
    ok: bool
    now: float
    message: str = ""


@dataclass(frozen=True)
class HostBack:
    """Elastic runs: ``node``, where workers were lost, takes tasks again (the driver's backend
    reached it); the workers that left with it start again."""
    node: str
    now: float


@dataclass(frozen=True)
class SparePlaced:
    """Sized runs on a backend that places spare workers late (Ray): spare worker ``task`` has
    a place (``node``) and an endpoint now (the driver's plan has it), so the sizing policy may
    add it."""
    task: str
    node: str
    now: float


@dataclass(frozen=True)
class PeerLost:
    """A task run elsewhere was lost with its node, which the driver heard of while the run
    goes on (Slurm with ``--no-kill``: the launcher saw the node down while the job still
    runs), or (``node`` "") it left the run there, out of its restarts (``reason``). An elastic
    worker leaves the run while min_workers allows, as a worker here lost with its host does;
    any other task lost fails the run, as a lost node always did."""
    task: str
    node: str
    now: float
    reason: str = ""


Event = Union[Tick, Started, StartFailed, Exited, Progressed, PortOpen, PortConflict, Waiting,
              Interrupt, KillRequest, PeerEnded, RunOver, ChiefGone, RestartClaim, Regrouped,
              HostBack, SparePlaced, PeerLost]


# ---------------------------------------------------------------------------- actions
# What the driver carries out.


@dataclass(frozen=True)
class Start:
    task: str
    attempt: int                  # 0: first start; N: the N-th restart


@dataclass(frozen=True)
class Kill:
    """Deliver ``sig`` to the task's whole process group."""
    task: str
    sig: int


@dataclass(frozen=True)
class LogEvent:
    """A row for the run's event log (events.jsonl, and its line in launcher.log): ``event`` is
    the row's name (``task_exited``), ``fields`` its other keys."""
    event: str
    task: Optional[str] = None
    fields: Tuple[Tuple[str, object], ...] = ()

    def as_dict(self) -> Dict[str, object]:
        return dict(self.fields)


@dataclass(frozen=True)
class Say:
    """A line for the person watching (stderr)."""
    text: str
    error: bool = False


@dataclass(frozen=True)
class ClaimRestart:
    """Take one restart of the run's budget, shared with other nodes; answer RestartClaim."""
    task: str


@dataclass(frozen=True)
class AskKill:
    """``task`` runs elsewhere: ask the driver that runs it to kill it."""
    task: str
    reason: str


@dataclass(frozen=True)
class EndRun:
    """The run was decided here: tell the drivers elsewhere (Slurm: the other nodes)."""
    result: RunState
    words: str


@dataclass(frozen=True)
class Finished:
    """Every task here has ended; the driver closes its records and exits with ``exit_code``."""
    result: RunState
    exit_code: int


@dataclass(frozen=True)
class Regroup:
    """Every task has stopped because ``task``'s node (``node``) was lost, or (``node`` "") the
    port chosen for it was taken before its server bound it: place the tasks again (the lost
    node excluded; ports chosen again), give them new endpoints, and answer
    :class:`Regrouped`; the machine then starts every task (a new TF_CONFIG, the next restart
    count)."""
    task: str
    node: str
    place: bool = True       # False: nothing moves (an elastic run's workers changed): answer at once


Action = Union[Start, Kill, LogEvent, Say, ClaimRestart, AskKill, EndRun, Finished, Regroup]


def log_event(event: str, task: Optional[str] = None, **fields) -> LogEvent:
    """A :class:`LogEvent` with its fields as keywords."""
    return LogEvent(event, task, tuple(fields.items()))



# ---------------------------------------------------------------------------- task output
def line_events(task: str, line: str, progress, now: float) -> List[Event]:
    """What one line of a task's output tells the machine, for every driver (the output reader,
    :class:`tfcluster.core.task_output.OutputReader`, finds the line and its progress report): a report
    (``progress``, its step) is progress; else TensorFlow's "CreateSession still waiting" line
    names the task waited on, and "Could not start gRPC server" a taken port."""
    out: List[Event] = []
    if rules.PORT_CONFLICT.search(line):
        out.append(PortConflict(task, now))
    waiting = still_waiting_on(line)
    if waiting:
        out.append(Waiting(task, waiting, now))
    if progress is not None:
        out.append(Progressed(task, progress.step, now, progress.total))
    return out


# ---------------------------------------------------------------------------- the input log
_INPUTS = {cls.__name__: cls for cls in get_args(Event)}


def input_fields(ev: Event) -> Dict[str, object]:
    """An input as plain fields -- ``input`` (its kind) and ``data`` (its fields) -- for an
    ``input`` row of events.jsonl."""
    return {"input": type(ev).__name__, "data": dict(ev.__dict__)}


def input_from_fields(fields: Mapping[str, object]) -> Event:
    """The input that :func:`input_fields` wrote (ValueError for anything else)."""
    cls = _INPUTS.get(str(fields.get("input")))
    data = fields.get("data")
    if cls is None or not isinstance(data, dict):
        raise ValueError(f"not a machine input: {fields.get('input')!r}")
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in data.items() if k in names})



#: every event class and every action class, in the order the unions name them
EVENTS = get_args(Event)
ACTIONS = get_args(Action)


@dataclass(frozen=True)
class NotHere:
    """A driver's entry for an action it does not carry out, on purpose: ``why`` it does not
    apply to that driver (in a driver's table of actions, :func:`check_table`)."""
    why: str


def check_table(table: Mapping[type, object], classes: Iterable[type], what: str) -> None:
    """TypeError unless ``table`` has exactly one entry for each of ``classes``: a table of
    handlers checked when its module loads, so that an event or action class added, renamed or
    removed breaks at import, not when it first comes."""
    classes = tuple(classes)
    missing = [c.__name__ for c in classes if c not in table]
    extra = [getattr(c, "__name__", repr(c)) for c in table if c not in classes]
    if missing or extra:
        raise TypeError(f"{what}: " + "; ".join(
            part for part in (f"no entry for {', '.join(missing)}" if missing else "",
                              f"entries for what is not one: {', '.join(extra)}" if extra else "")
            if part))
