"""The rulebook: the rules that decide a run, as pure functions, and the words they are said
in (exit codes, the wording of an exit and of a duration; the cluster file's words -- jobs,
policies, success rules, backends -- are :mod:`tfcluster.clusterfile.vocabulary`'s, re-exported
here).

The run machine (:mod:`tfcluster.core.machine`) acts on these rules for every driver (the
supervisor, the Slurm node agent); the CLI, the Slurm launcher and the Kubernetes renders take
their words from here, so that a rule is written once. Nothing here starts a process, reads a
file or imports TensorFlow. The rules are documented in docs/PLAN.md.
"""
from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Mapping, Optional, Set, Tuple

# ---------------------------------------------------------------------------- vocabulary
# The words a cluster file and a run share (jobs, policies, success rules, backends) live in
# tfcluster.clusterfile.vocabulary, below both the file model and the rules; re-exported here.
from tfcluster.clusterfile.vocabulary import (  # noqa: F401
    BACKENDS,
    DATA_DISPATCHER,
    DATA_SERVICE_JOBS,
    DATA_WORKER,
    KNOWN_JOBS,
    REPLICA_JOBS,
    RESTART_POLICIES,
    SERVICE_JOBS,
    SINGLE_TASK_JOBS,
    SUCCESS_RULES,
    RestartRule,
    job_rank,
    sort_jobs,
)

#: the restart backoff never waits longer than this, however many restarts
BACKOFF_CAP = 30.0

#: what a task's output says when its server's port is taken
PORT_CONFLICT = re.compile(r"Could not start gRPC server|Address already in use|Failed to add port")
#: a task whose CreateSession waits for another task (TensorFlow's own words)
STILL_WAITING = re.compile(r"CreateSession still waiting for response from worker: "
                           r"/job:([A-Za-z0-9_]+)/replica:\d+/task:(\d+)")

# exit codes of tfcluster itself
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def start_order(jobs: Iterable[str]) -> list:
    """Jobs in the order their tasks are started: the tf.data service and ps first (workers
    dial them; the dispatcher before its workers), then the rest."""
    jobs = sort_jobs(jobs)
    first = [j for j in DATA_SERVICE_JOBS + ("ps",) if j in jobs]
    return first + [j for j in jobs if j not in SERVICE_JOBS]


def stop_waves(jobs: Iterable[str]) -> Tuple[list, list]:
    """(first, then): the jobs stopped first -- chief, workers, evaluators, which may save a
    last checkpoint on SIGTERM and need their ps for it -- and the ps tasks (and the tf.data
    service's) after them."""
    jobs = sort_jobs(jobs)
    return [j for j in jobs if j not in SERVICE_JOBS], [j for j in jobs if j in SERVICE_JOBS]


# ---------------------------------------------------------------------------- exit codes

def signal_exit_code(signum: int) -> int:
    """The exit code of a process stopped by signal ``signum`` (the shell's 128+N)."""
    return 128 + int(signum)


def task_exit_code(returncode: int) -> int:
    """A task's return code (negative: killed by signal -N, as Popen reports it) as an exit
    code a process can itself exit with."""
    if returncode < 0:
        return signal_exit_code(-returncode)
    return returncode if returncode < 256 else 1


def signal_name(signum: int) -> str:
    """'SIGTERM', or 'signal 99' for a number Python has no name for."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(returncode: Optional[int]) -> str:
    """The one wording of a task's end: 'exit 7', 'SIGKILL', or '' while running (a Popen-style
    returncode: negative, killed by that signal)."""
    if returncode is None:
        return ""
    if returncode < 0:
        return signal_name(-returncode)
    return f"exit {returncode}"


def is_sigkill(returncode: Optional[int]) -> bool:
    """Killed by SIGKILL: -9 from the process itself, 137 through a shell or a remote wrapper."""
    return returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)


def exit_words(exit_code: Any, signal_name_: Any, unknown: str = "?") -> str:
    """The same wording from a record's ``exit_code`` and ``signal`` fields (as events.jsonl
    and run.json keep them); ``unknown`` when neither is known."""
    if signal_name_:
        return str(signal_name_)
    if exit_code is None:
        return unknown
    return f"exit {exit_code}"


def exit_fields(returncode: Optional[int]) -> Dict[str, Any]:
    """``exit_code``, ``signal`` and ``exit`` of a ``task_exited`` event, from a Popen-style
    returncode (negative: killed by that signal)."""
    if returncode is not None and returncode < 0:
        name = signal_name(-returncode)
        return {"exit_code": None, "signal": name, "exit": name}
    return {"exit_code": returncode, "signal": None, "exit": exit_words(returncode, None)}


def format_duration(seconds: Optional[float]) -> str:
    """'4.2s', '3m05s', '2h07m' ('' for None)."""
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def result_of_exit_code(code: Optional[int]) -> str:
    """The run's result (run.json's ``result``) from the exit code its launcher ends with: 0
    succeeded; 128+N (stopped by signal N: Ctrl-C, scancel, a time limit) interrupted; anything
    else, or no code at all (the launcher itself failed), failed."""
    if code == EXIT_OK:
        return "succeeded"
    if code is not None and code > 128:
        return "interrupted"
    return "failed"


def job_verdict(rc: int, failed_tasks: int, lost_nodes: int = 0) -> Tuple[str, int]:
    """A Slurm job's verdict, from the job's exit code, how many tasks recorded a failure of
    their own and how many of its nodes were lost: (``succeeded`` | ``stopped`` | ``failed``,
    the launcher's exit code). A job stopped in order (128+SIGTERM: a time limit, ``tfcluster
    stop``, scancel) with no failed task and no lost node was stopped, not failed."""
    if rc == EXIT_OK and not failed_tasks:
        return "succeeded", EXIT_OK
    if rc == signal_exit_code(signal.SIGTERM) and not failed_tasks and not lost_nodes:
        return "stopped", rc
    return "failed", EXIT_FAILED


# ---------------------------------------------------------------------------- stops on Slurm
#: the signal the Slurm node agent stops its ps with while the ps ignores SIGTERM (see
#: :func:`shielded_from_step_signals`; a ps program that handles SIGTERM itself gets SIGTERM)
SHIELDED_STOP_SIGNAL = signal.SIGHUP


def shielded_from_step_signals(job: str) -> bool:
    """Does a task of ``job`` start on a Slurm node with SIGTERM ignored? Slurm ends a job
    (plain ``scancel``, preemption, a time limit) by sending SIGTERM to every process of the
    step at once; a ps that obeyed it would die before its chief saved its last checkpoint. A
    ps ignores it (the disposition survives exec); its node agent, which hears the SIGTERM
    too, stops it once the chief and workers have ended (Slurm's SIGKILL after KillWait or GraceTime
    bounds it all): with :data:`SHIELDED_STOP_SIGNAL` while it still ignores SIGTERM, with
    SIGTERM where the program installed a handler of its own (which Slurm's SIGTERM reaches)."""
    return job == "ps"


# ---------------------------------------------------------------------------- waits of a stop
#: what a ps waits on top of grace + stop timeout for tasks on other nodes to end
PEER_STOP_MARGIN = 5.0
#: what the Slurm launcher waits on top of grace + 2 stop timeouts for an ordered stop
ORDERED_STOP_MARGIN = 15.0


def peer_stop_wait(grace: float, stop_timeout: float) -> float:
    """How long a ps (Slurm node) waits, once its run is stopping, for the chief and workers on
    other nodes to end before it stops: they get ``grace`` to end by themselves, then their
    own stop timeout, plus a margin for the run folder's news to arrive."""
    return grace + stop_timeout + PEER_STOP_MARGIN


def ordered_stop_wait(grace: float, stop_timeout: float) -> float:
    """How long the Slurm launcher waits for a job it asked to stop in order (Ctrl-C, SIGTERM)
    before it cancels it outright: the first wave (``grace`` + its stop timeout), the ps wave's
    stop timeout, and a margin for Slurm to see the job end."""
    return grace + 2 * stop_timeout + ORDERED_STOP_MARGIN


# ---------------------------------------------------------------------------- restarts

@dataclass(frozen=True)
class Decision:
    restart: bool
    reason: str
    delay: float = 0.0


def backoff_delay(backoff: float, restarts: int) -> float:
    """Seconds before restart number ``restarts + 1``: backoff, 2*backoff, 4*backoff, ...,
    never more than BACKOFF_CAP."""
    if restarts > 64:
        return BACKOFF_CAP
    return min(BACKOFF_CAP, backoff * (2 ** restarts))


def decide_restart(rule: RestartRule, returncode: int, restarts: int, total_restarts: int = 0,
                   *, port_conflict: bool = False, run_over: bool = False,
                   early: bool = False) -> Decision:
    """Is a task that ended with ``returncode`` (negative: killed by signal -returncode) started
    again, having been restarted ``restarts`` times (the whole run: ``total_restarts``)?

    never       never restart.
    on-failure  restart after any non-zero exit or signal.
    exit-code   Kubeflow TFJob's rule: exit codes 1-127 are permanent errors (no restart);
                128-255 and deaths by signal are retryable.
    Never restarted, whatever the policy: an exit 0, a port conflict (the port stays taken),
    a task that ends after the run is over, and one whose first run failed within
    ``min_uptime`` seconds (``early``: a missing module or a bad flag fails the same way
    every time). Budgets: ``max_restarts`` per task and
    ``max_total_restarts`` per run. The delay doubles with each restart (backoff_delay).
    """
    if returncode == 0:
        return Decision(False, "exited 0")
    if run_over:
        return Decision(False, "the run is over")
    if rule.policy == "never":
        return Decision(False, "restart policy is never")
    if port_conflict:
        return Decision(False, "a port conflict is not retried (the port stays taken)")
    if rule.policy == "exit-code" and 1 <= returncode <= 127:
        return Decision(False, f"exit code {returncode} is a permanent error (exit-code policy: "
                               f"1-127 are not retried)")
    if early:
        return Decision(False, f"its first run failed within {rule.min_uptime:g}s "
                               f"(restart.min_uptime: a broken program fails the same way every "
                               f"time; set 0 to restart it anyway)")
    if restarts >= rule.max_restarts:
        return Decision(False, f"restart budget spent ({restarts} of {rule.max_restarts})")
    if rule.max_total_restarts is not None and total_restarts >= rule.max_total_restarts:
        return Decision(False, f"the run's restart budget is spent ({total_restarts} of "
                               f"{rule.max_total_restarts})")
    return Decision(True, f"restart {restarts + 1} of {rule.max_restarts}",
                    delay=backoff_delay(rule.backoff, restarts))


def decide_move(rule: RestartRule, restarts: int, total_restarts: int, node: str) -> Decision:
    """A task whose node was lost (``node``) can only come back on another node, with another
    endpoint. TF_CONFIG names every task's endpoint (a ps that moves above all: every worker
    dials it), so the whole cluster restarts -- every task stopped in order, placed again, and
    started with the new TF_CONFIG, resuming from its checkpoint. Counted as one restart of the
    lost task (``max_restarts``) and one of the run (``max_total_restarts``); ``never`` never
    moves it. A lost node is not the program's fault: no ``min_uptime`` and no exit-code rule
    (it died by SIGKILL, which every policy but ``never`` retries)."""
    lost = f"its node {node} was lost"
    if rule.policy == "never":
        return Decision(False, f"{lost}; restart policy is never")
    if restarts >= rule.max_restarts:
        return Decision(False, f"{lost}; restart budget spent ({restarts} of {rule.max_restarts})")
    if rule.max_total_restarts is not None and total_restarts >= rule.max_total_restarts:
        return Decision(False, f"{lost}; the run's restart budget is spent ({total_restarts} of "
                               f"{rule.max_total_restarts})")
    return Decision(True, f"{lost}: the cluster restarts on the nodes left with a new TF_CONFIG "
                          f"(restart {restarts + 1} of {rule.max_restarts})")


# ---------------------------------------------------------------------------- success

def success_reached(rule: str, chief: str, succeeded: Mapping[str, bool],
                    chief_here: bool = True) -> Optional[str]:
    """Has the run succeeded? ``succeeded`` maps each task this driver knows of
    to whether it has exited 0 by itself. Returns the words that say why, or None.

    chief        the chief (or worker:0) exited 0.
    all-workers  every chief and worker task exited 0.
    A task list with neither (only ps, say) succeeds when every task has exited 0. When the
    chief runs elsewhere (per-host mode, ``chief_here`` False), the local workers decide.
    """
    needed = success_needs(rule, chief, succeeded, chief_here)
    if not needed or not all(succeeded[t] for t in needed):
        return None
    if rule == "chief" and chief_here and chief in succeeded:
        return f"{chief} exited 0"
    if all(succeeded.values()):
        return "every task here exited 0"
    return "every worker exited 0"


def success_needs(rule: str, chief: str, tasks: Iterable[str], chief_here: bool = True) -> Set[str]:
    """The tasks whose exit 0 decides :func:`success_reached` over ``tasks``: the run has
    succeeded exactly when every one of them has (empty: it never does). A driver with a fixed
    task list asks once and counts, instead of looking at every task after every exit."""
    if rule not in SUCCESS_RULES:
        raise ValueError(f"unknown success rule {rule!r}")
    tasks = list(tasks)
    if rule == "chief" and chief_here and chief in tasks:
        return {chief}
    # every task, or every worker: the workers are among the tasks, so the second is the rule
    workers = {t for t in tasks if t.split(":")[0] in REPLICA_JOBS}
    if not workers:
        workers = {t for t in tasks if t.split(":")[0] not in SERVICE_JOBS + ("evaluator",)}
    return workers or set(tasks)


def waits_for_grace(job: str) -> bool:
    """After success, tasks of this job get the grace period to end by themselves (ps and
    evaluator tasks, and the tf.data service's, are stopped at once)."""
    return job not in SERVICE_JOBS + ("evaluator",)


# ---------------------------------------------------------------------------- values

def check_seconds(value: float, what: str) -> float:
    """A finite, non-negative number of seconds, else ValueError naming ``what``."""
    if value != value or math.isinf(value) or value < 0:
        raise ValueError(f"{what}: must be a finite number of seconds, 0 or more (got {value})")
    return value


# ---------------------------------------------------------------------------- watchdog

@dataclass(frozen=True)
class WatchdogAction:
    """What the watchdog asks for: ``kill`` a hung task (its exit then goes through the restart
    rule like any failure) or ``fail_run``."""

    action: str                   # "kill" | "fail_run"
    task: Optional[str]
    reason: str


def check_startup(task: str, started: float, up: bool, now: float, timeout: float,
                  port: Optional[int], last_progress_at: Optional[float] = None) -> Optional[WatchdogAction]:
    """A ps/worker task whose server has not opened its port within ``timeout`` seconds, and
    that has shown no sign of progress since it started (``last_progress_at``: the last
    progress report, parsed step or epoch, or positive steps/s; None when none). A task making
    progress is never killed for its port: it may load data before it makes its strategy, or
    not be a TensorFlow server at all. ``timeout`` 0 turns the check off."""
    if up or not timeout or now - started <= timeout:
        return None
    if last_progress_at is not None and last_progress_at >= started:
        return None
    return WatchdogAction("kill", task, f"watchdog: its server did not open port {port} within "
                                        f"{timeout:g}s and it reported no progress "
                                        f"(watchdog.startup_timeout: {timeout:g}; raise it, or set "
                                        f"0 to turn the check off)")


def check_waiting(waiter: str, waiting_on: Mapping[str, float], now: float, timeout: float,
                  here: Mapping[str, bool], where: Mapping[str, str],
                  life: Optional[Mapping[str, Optional[float]]] = None) -> list:
    """Tasks that ``waiter`` has reported as "CreateSession still waiting" about for
    ``timeout`` seconds. ``here`` maps the tasks this launcher runs to whether they are
    running (and not already being killed); ``where`` gives other tasks' endpoints; ``life``
    the last sign of progress of the tasks here (a task that showed progress within
    ``timeout`` is alive, whatever its port: it is not killed). ``timeout`` 0 turns it off."""
    out = []
    if not timeout:
        return out
    setting = f" (watchdog.waiting_timeout: {timeout:g}; raise it, or set 0 to turn the check off)"
    for other, since in waiting_on.items():
        if now - since < timeout:
            continue
        if other not in here:
            out.append(WatchdogAction(
                "fail_run", other, f"watchdog: {waiter} has waited {timeout:g}s for {other} "
                f"({where.get(other, '?')}), which this launcher does not run; is it started?"
                + setting))
        elif here[other]:
            last = (life or {}).get(other)
            if last is not None and now - last < timeout:
                continue
            out.append(WatchdogAction("kill", other, f"watchdog: {waiter} has waited {timeout:g}s "
                                                     f"for it (CreateSession still waiting)"
                                                     + setting))
    return out


def longest_gap(longest: float, last_life: Optional[float], started: Optional[float],
                now: float) -> float:
    """A task's cadence after a sign of life at ``now``: the longest wait for one so far, counted
    from its last sign of life (or its start). The one liveness rule of the machine's task and
    the output reader's view of it."""
    since = last_life if last_life is not None else started
    return longest if since is None else max(longest, now - since)


def stall_deadline(timeout: float, cadence: float = 0.0) -> float:
    """How long the run may go without a sign of progress: ``timeout``, or twice the longest
    wait for progress the run has already had (its own cadence: a Keras ``verbose=2`` program
    reports once per epoch), whichever is longer."""
    return max(timeout, 2.0 * cadence)


def check_stall(best_step: Optional[int], best_step_at: float, now: float, timeout: float,
                not_running: Iterable[str] = (), last_life_at: Optional[float] = None,
                cadence: float = 0.0, suspects: Iterable[str] = ()) -> Optional[WatchdogAction]:
    """No sign of progress for the stall deadline (:func:`stall_deadline`), once a step has been
    reported at all. Signs of progress: the best global step moving (``best_step_at``), and
    ``last_life_at``, the last time any task showed life (a report whose step, batch or epoch
    moved, positive steps/s). ``timeout`` 0 turns the check off."""
    if not timeout or best_step is None:
        return None
    last = max(best_step_at, last_life_at if last_life_at is not None else best_step_at)
    deadline = stall_deadline(timeout, cadence)
    if now - last <= deadline:
        return None
    gone = list(not_running)
    suspects = list(suspects)
    longer = " (twice its slowest report so far)" if deadline > timeout else ""
    return WatchdogAction("fail_run", None,
                          f"watchdog: the global step has stood at {best_step} for {deadline:g}s"
                          f"{longer}"
                          + (f"; suspects: {', '.join(suspects)}" if suspects else "")
                          + (f"; not running: {', '.join(gone)}" if gone else
                             "; every task is still running")
                          + f" (no other sign of progress either; watchdog.stall_timeout: "
                            f"{timeout:g}; raise it, or set 0 to turn the check off)")


# ---------------------------------------------------------------------------- stuck and ending tasks

def at_final_step(step: Optional[int], total: Optional[int]) -> bool:
    """A task that reports ``step`` of ``total`` and has reached it is *ending*: it saves, says
    goodbye to its peers and exits, which takes a while (MWMS: 7-8 s after its leader)."""
    return step is not None and total is not None and total > 0 and step >= total


def check_ending(task: str, ending_at: float, now: float, timeout: float,
                 step: Optional[int] = None) -> Optional[WatchdogAction]:
    """A task that reached its final step ``timeout`` seconds ago and has not exited is killed
    (the stall deadline no longer applies to it; this one does). ``timeout`` 0: off."""
    if not timeout or now - ending_at <= timeout:
        return None
    at = f" ({step})" if step is not None else ""
    return WatchdogAction("kill", task, f"watchdog: it reached its final step{at} {timeout:g}s ago "
                                        f"and has not exited (watchdog.end_timeout: {timeout:g}; "
                                        f"raise it, or set 0 to turn the check off)")


def stall_warning_after(timeout: float, fraction: float, cadence: float = 0.0) -> float:
    """How long a task may go without a sign of progress before it is named as stuck while the
    run goes on: ``fraction`` of the stall deadline, or twice its own slowest gap between two
    signs of life, whichever is longer (0: the warning is off)."""
    if not timeout or not fraction:
        return 0.0
    return max(timeout * fraction, 2.0 * cadence)


def stuck_tasks(lives: Mapping[str, Tuple[float, float]], now: float, timeout: float,
                fraction: float) -> Tuple[list, list]:
    """(stuck, going): of the tasks in ``lives`` (name -> (last sign of life, its cadence)),
    those silent for :func:`stall_warning_after` while at least one other showed life within
    half that time, and those others. No task is stuck when none goes on: then the whole run
    stands, which :func:`check_stall` judges."""
    stuck, going = [], []
    for name, (last, cadence) in lives.items():
        after = stall_warning_after(timeout, fraction, cadence)
        if not after:
            return [], []
        if now - last >= after:
            stuck.append(name)
        elif now - last < after / 2:
            going.append(name)
    if not going:
        return [], []
    return stuck, going


def describe_silence(task: str, silent: float, step: Optional[int]) -> str:
    """'worker:1 (no progress for 14s, at step 40)': a suspect, for messages."""
    at = f", at step {step}" if step is not None else ""
    return f"{task} (no progress for {silent:.0f}s{at})"
