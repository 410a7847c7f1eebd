"""Slurm: run the cluster as one Slurm job step, one Slurm task per TensorFlow task.

What runs where
  * ``tfcluster launch FILE --backend slurm`` (this module's :func:`launch`) submits a batch
    script with ``sbatch`` -- or, inside an allocation (``SLURM_JOB_ID`` set), runs ``srun``
    directly -- then follows the job, streams its output and returns its result.
  * The job runs ``srun ... python -c <TASK_COMMAND>``, which runs the node agent
    (:mod:`tfcluster.backends.agent.node`), one Slurm task per TensorFlow task. Each works out its job and index from ``SLURM_PROCID``,
    sets ``TF_CONFIG`` and runs the program as a child in its own process group.

Hosts, counts and ports (as TensorFlow's ``SlurmClusterResolver``)
  Job entries are counts (``worker: 4``; a list counts its entries, its hosts are not used).
  Ranks go to jobs in sorted job-name order (chief, evaluator, ps, worker), as
  ``SlurmClusterResolver`` does, so a program that uses that resolver agrees with
  ``TF_CONFIG``. Node names come from the step's node list (expanded with ``scontrol show
  hostnames``), tasks per node from ``SLURM_STEP_TASKS_PER_NODE``; the tasks on a node get ports
  ``base_port``, ``base_port+1``, ... Unlike the resolver, nodes keep Slurm's order instead of
  being sorted as strings, which is the order ``--distribution=block`` places ranks in.

How the job ends
  ps tasks never end by themselves. When the chief (or ``worker:0``) exits 0 (or, with
  ``success: all-workers``, when every worker has), its wrapper sends ``SIGURG`` to the job step
  (``scancel --signal=URG JOB.STEP``); SIGURG is ignored by default, so only the wrappers act on
  it: ps tasks are stopped at once, workers get ``grace`` seconds to finish, then are stopped,
  and all exit 0. A task that fails beyond its restart budget does the same and exits with its
  own code. ``srun`` exits with the highest task exit code, so the job's exit code is the
  chief's result (or the first failure's). ``scancel JOB`` (Ctrl-C in the launcher) sends
  SIGTERM: the wrappers stop their programs (SIGTERM to the group, then SIGKILL) and exit 143.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, IO, Iterator, List, Optional, Sequence, Tuple

from tfcluster import safe_files
from tfcluster.core import rules
from tfcluster.clusterfile.config import check_text
from tfcluster.terminal import printable
from tfcluster.terminal import terminal_text
from tfcluster.errors import UserError
from tfcluster.plan.runplan import RunPlan
from tfcluster.plan.progress import split_progress
from tfcluster.core.task_output import NoiseFold
from tfcluster.backends.base import Launcher, start_child
from tfcluster.backends.agent.folder import FolderChannel

PLAN_ENV = "TFCLUSTER_SLURM_PLAN"
STOP_SIGNAL = signal.SIGURG          # "the run is over": default action is ignore
TASK_MODULE = "tfcluster.backends.agent.node"
# The node's Python runs the wrapper with the current folder off its module path (what -P does
# on 3.11+, for any Python 3): a tfcluster.py or runpy.py planted in the job's folder is never
# imported. PYTHONPATH (an HPC module's TensorFlow) still counts, unlike with -I.
TASK_COMMAND = (f"import sys; del sys.path[0]; import runpy; "
                f"runpy.run_module({TASK_MODULE!r}, run_name='__main__', alter_sys=True)")
TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED")

EXIT_OK, EXIT_FAILED = rules.EXIT_OK, rules.EXIT_FAILED
EXIT_INTERRUPTED = rules.signal_exit_code(signal.SIGINT)


# --------------------------------------------------------------------------------------
# The plan: the run plan as JSON (:meth:`tfcluster.plan.runplan.RunPlan.to_dict`), with the
# interpreter that runs the node wrapper; no cluster file is needed on the nodes.

def plan_data(plan: RunPlan) -> Dict[str, Any]:
    """The run plan as the batch script exports it and the node wrapper reads it."""
    d = plan.to_dict()
    d["extra"]["python"] = sys.executable
    return d


SECRET_PREFIX = "TFCLUSTER_SECRET__"
_TASK_LINE = re.compile(r"^\[([A-Za-z][A-Za-z0-9_]*:\d+)\] (.*)$")


def secret_var(job: str, key: str) -> str:
    """The variable that carries a secret value of ``job``'s env from the submitting shell to
    the job (sbatch and srun pass the submitting environment on): the script never holds it."""
    return f"{SECRET_PREFIX}{job}__{key}"


def argv_var(job: str, i: int) -> str:
    """The variable that carries word ``i`` of ``job``'s argv when it holds a secret."""
    return f"{SECRET_PREFIX}{job}__ARGV{i}"


def hold_back_secrets(data: Dict[str, Any]) -> Dict[str, str]:
    """Take secret values (tfcluster.clusterfile.secrets' policy) out of the plan data, in place: a secret
    env value becomes null in the script; a program argument that holds one (``--api-key=V``,
    ``--password V``, ``DB_TOKEN=V``, or a word holding a secret env value) is shown masked,
    and its index is listed in the job's ``held_argv``. Returns {carrier variable: value} for
    the submitting environment (sbatch and srun pass it on); the job gets the real values back
    from there (:func:`fill_secrets`)."""
    from tfcluster.clusterfile import secrets
    declared = data.get("secret_names") or ()
    carried: Dict[str, str] = {}
    for job, j in data["jobs"].items():
        env_values = secrets.secret_values({k: v for k, v in j["env"].items() if v}, declared=declared)
        for k, v in list(j["env"].items()):
            if v and secrets.is_secret(k, declared):
                carried[secret_var(job, k)] = v
                j["env"][k] = None
        argv = [str(w) for w in j["argv"]]
        masked = secrets.mask_argv(argv, declared, env_values)
        held = [i for i, (a, b) in enumerate(zip(argv, masked)) if a != b]
        for i in held:
            carried[argv_var(job, i)] = argv[i]
        if held:
            j["argv"] = masked
            j["held_argv"] = held
    return carried


def held_variables(data: Dict[str, Any]) -> List[str]:
    """The carrier variables the job needs from the submitting environment."""
    return [secret_var(job, k) for job, j in data["jobs"].items()
            for k, v in j["env"].items() if v is None] + \
        [argv_var(job, i) for job, j in data["jobs"].items() for i in j.get("held_argv") or ()]


def fill_secrets(data: Dict[str, Any], environ: Dict[str, str]) -> List[str]:
    """In the job: put the carried secret values back into the plan data (env values and
    program arguments); returns the carrier variables that are missing."""
    missing = []
    for job, j in data["jobs"].items():
        for k, v in j["env"].items():
            if v is None:
                value = environ.get(secret_var(job, k))
                if value is None:
                    missing.append(secret_var(job, k))
                j["env"][k] = value or ""
        for i in j.pop("held_argv", None) or ():
            value = environ.get(argv_var(job, i))
            if value is None:
                missing.append(argv_var(job, i))
            else:
                j["argv"][i] = value
    return missing


def job_order(plan: Dict[str, Any]) -> List[str]:
    """SlurmClusterResolver's order of jobs: ``sorted(jobs.items())``."""
    return sorted(plan["jobs"])


def ntasks(plan: Dict[str, Any]) -> int:
    return sum(j["count"] for j in plan["jobs"].values())


def rank_table(plan: Dict[str, Any]) -> List[Tuple[str, int]]:
    """(job, index) of every rank: jobs in plan order, indexes within a job."""
    return [(job, i) for job in job_order(plan) for i in range(plan["jobs"][job]["count"])]


def srun_argv(plan: Dict[str, Any], name: Optional[str] = None, overcommit: bool = True) -> List[str]:
    argv = ["srun", f"--ntasks={ntasks(plan)}", "--distribution=block", "--kill-on-bad-exit=0"]
    if overcommit:
        argv.append("--overcommit")
    if name:
        argv.append(f"--job-name={name}")
    gpus = (plan["extra"].get("slurm") or {}).get("gpus_per_task") or 0
    if gpus:
        argv.append(f"--gpus-per-task={gpus}")
    return argv + [plan["extra"].get("python", "python3"), "-c", TASK_COMMAND]


def batch_script(plan: Dict[str, Any], partition: Optional[str] = None, time: Optional[str] = None,
                 name: Optional[str] = None, overcommit: bool = True,
                 output: Optional[str] = None) -> str:
    """An sbatch script that runs the plan (the text ``tfcluster render slurm`` prints)."""
    n = ntasks(plan)
    for where, value in (("--name", name), ("--partition", partition), ("--time", time),
                         ("--output", output), ("the run folder", plan.get("run_dir"))):
        check_text(where, value)
    # sbatch splits an #SBATCH line at spaces: a value with one would add options of its own
    for where, value, pattern, what in (
            ("--name", name, _SBATCH_NAME, "a Slurm job name (letters, digits, '.', '_', '+', "
                                            "'-'; up to 128 characters)"),
            ("--partition", partition, _SBATCH_NAME, "a Slurm partition name"),
            ("--time", time, _SBATCH_TIME, "a Slurm time limit (e.g. 1:00:00, 2-00:00:00)"),
            ("--output", output, _SBATCH_PATH, "a path an #SBATCH line can hold (no spaces, "
                                                "quotes or '#')")):
        if value is not None and not pattern.fullmatch(str(value)):
            raise UserError(f"{where}: {_short_word(value)} is not {what}")
    lines = ["#!/bin/bash",
             f"# Generated by tfcluster{' from ' + printable(plan['source']) if plan.get('source') else ''}; "
             f"submit with: sbatch THIS_FILE"]
    if name:
        lines.append(f"#SBATCH --job-name={name}")
    lines.append(f"#SBATCH --ntasks={n}")
    if overcommit:
        lines.append("#SBATCH --overcommit")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time:
        lines.append(f"#SBATCH --time={time}")
    if output:
        lines.append(f"#SBATCH --output={output}")
    lines.extend((plan["extra"].get("slurm") or {}).get("lines") or [])
    lines.append("#")
    lines.append("# Slurm task (SLURM_PROCID) -> TensorFlow task, in SlurmClusterResolver's order;")
    lines.append(f"# the tasks on each node listen on ports {plan['base_port']}, "
                 f"{plan['base_port'] + 1}, ...:")
    rank = 0
    for job in job_order(plan):
        c = plan["jobs"][job]["count"]
        span = f"{rank}" if c == 1 else f"{rank}-{rank + c - 1}"
        tasks = f"{job}:0" if c == 1 else f"{job}:0..{job}:{c - 1}"
        lines.append(f"#   {span:<8} {tasks}")
        rank += c
    lines.append(f"# The run ends when {plan['chief']} "
                 + ("exits" if plan["success"] == "chief" else "and every worker exit")
                 + "; ps tasks are then stopped. Stop it early with: scancel $SLURM_JOB_ID")
    held = held_variables(plan)
    if held:
        lines.append("# Secret values are not in this script: export " + " ".join(held)
                     + " in the shell that runs sbatch (sbatch passes its environment on).")
    lines.append("")
    # Files made from here on are the user's alone; SLURM_UMASK (sbatch's umask, which srun
    # would otherwise pass on) carries that to the tasks (run_over, logs, exit files).
    lines.append("umask 077")
    lines.append("export SLURM_UMASK=0077")
    if output:   # Slurm made it before the script ran, with the submitting shell's umask
        lines.append(f"chmod 600 {_output_word(output)} 2>/dev/null")
    lines.append(f"export {PLAN_ENV}={shlex.quote(json.dumps(plan, separators=(',', ':')))}")
    run_dir = plan.get("run_dir")
    if run_dir:
        lines.append(f"RUN_DIR={_shell_path(run_dir)}")
        lines.append('mkdir -p "$RUN_DIR"')
    srun = " ".join(shlex.quote(w) for w in srun_argv(plan, overcommit=overcommit))
    slurm_extra = plan["extra"].get("slurm") or {}
    if run_dir:       # USR1 to the batch shell: stop in order (Slurm's time-limit warning too)
        lines.extend(_ordered_stop_lines(srun, slurm_extra))
    else:
        lines.append(srun)
        lines.append("rc=$?")
    if run_dir:
        lines.append('echo $rc > "$RUN_DIR/exit_code"')
    lines.append("exit $rc")
    return "\n".join(lines) + "\n"


def _ordered_stop_lines(srun: str, extra: Dict[str, Any]) -> List[str]:
    """The batch script's ordered stop: SIGUSR1 to this shell only -- Slurm's warning before the
    time limit (``--signal=B:USR1@LEAD``), or ``scancel --batch --signal=USR1 JOB`` -- becomes an
    ordered stop through the run folder (chief and workers first, the ps after them:
    :mod:`.runfolder`); then, with ``requeue``, the job is requeued and its next segment resumes
    from the checkpoint. A plain ``scancel JOB``, a preemption or a time limit without
    ``--signal`` sends SIGTERM to every process of the job at once: the shell waits on for srun
    (a trap, not an ignore: srun gets the default back), and the nodes keep the order themselves
    (a ps ignores SIGTERM until its chief has ended: :func:`tfcluster.core.rules.shielded_from_step_signals`).
    With ``requeue``, a job preempted under a partition's GraceTime that stopped in order within
    it is requeued by this script (Slurm requeues only a job still running when the grace ends)."""
    sig = extra.get("lead_signal") or "USR1"
    out = ['SEG=${SLURM_RESTART_COUNT:-0}   # a requeued job is the next segment of the same run',
           'STOPPED=0',
           f'trap \'STOPPED=1; : > "$RUN_DIR/stop-$SEG"\' {sig}   # stop in order, ps last',
           "trap : TERM   # scancel, preemption: the nodes stop in order; wait for srun's end",
           f"{srun} &",
           "SRUN=$!",
           "while :; do wait $SRUN; rc=$?; kill -0 $SRUN 2>/dev/null || break; done"]
    if extra.get("requeue"):
        n = int(extra.get("max_segments") or 1)
        out += [f'if [ "$STOPPED" = 1 ] && [ $((SEG + 1)) -lt {n} ]; then',
                f'  echo "tfcluster: segment $SEG stopped before the time limit; requeueing the job '
                f'(segment $((SEG + 1)), at most {n})"',
                '  scontrol requeue "$SLURM_JOB_ID" && exit 0',
                'fi',
                # preempted with the partition's GraceTime: Slurm SIGTERMs the tasks at once
                # (not this shell) and requeues the job only if it still runs when the grace
                # ends; stopped in order before that, it would end as done -- requeue it now,
                # as Slurm would have (within max_segments, as every requeue)
                f'if [ "$STOPPED" = 0 ] && [ "$rc" != 0 ] && [ $((SEG + 1)) -lt {n} ] && scontrol show job "$SLURM_JOB_ID" 2>/dev/null'
                ' | grep -q "PreemptTime=[0-9]"; then',
                '  echo "tfcluster: segment $SEG was preempted and stopped in order; requeueing the job '
                f'(segment $((SEG + 1)), at most {n})"',
                '  scontrol requeue "$SLURM_JOB_ID" && exit 0',
                'fi']
    return out


_SBATCH_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
_SBATCH_TIME = re.compile(r"[0-9:-]{1,20}|UNLIMITED|INFINITE|unlimited|infinite")
_SBATCH_PATH = re.compile(r"[^\s\"'#\\]+")


def _short_word(value: Any) -> str:
    text = printable(str(value))
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _output_word(output: str) -> str:
    """The shell word for an sbatch --output pattern with %j (and %%) filled in."""
    parts = [shlex.quote(p) if p else "" for p in output.replace("%%", "\0").split("%j")]
    return '"${SLURM_JOB_ID}"'.join(parts).replace("\0", "%")


def _shell_path(path: str) -> str:
    """A shell word for ``path`` where ``{job_id}`` becomes ``$SLURM_JOB_ID``."""
    return '"${SLURM_JOB_ID}"'.join(shlex.quote(p) if p else "" for p in path.split("{job_id}"))


# --------------------------------------------------------------------------------------
# Slurm's node list and tasks-per-node expressions.

def expand_hostlist(text: str, use_scontrol: bool = True) -> List[str]:
    """'n[1-2],m5' -> ['n1', 'n2', 'm5'], with ``scontrol show hostnames`` when available."""
    if use_scontrol and shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True,
                                 text=True, timeout=30)
            hosts = out.stdout.split()
            if out.returncode == 0 and hosts:
                return hosts
        except (OSError, subprocess.SubprocessError):   # scontrol failed: expanded here instead
            pass
    return _expand_hostlist_py(text)


def _expand_hostlist_py(text: str) -> List[str]:
    parts, cur, depth = [], "", 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    hosts: List[str] = []
    for part in parts:
        m = re.fullmatch(r"([^\[\]]*)(?:\[([^\]]+)\])?(.*)", part)
        if not m or "[" in m.group(3):
            raise ValueError(f"cannot expand host list '{text}'")
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            hosts.append(part)
            continue
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            hi = hi or lo
            width = len(lo)
            for i in range(int(lo), int(hi) + 1):
                hosts.append(f"{prefix}{str(i).zfill(width)}{suffix}")
    return hosts


def expand_tasks_per_node(text: str) -> List[int]:
    """'3(x2),2,1' -> [3, 3, 2, 1]."""
    out: List[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"cannot read tasks per node '{text}'")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def layout(plan: Dict[str, Any], nodes: Sequence[str], per_node: Sequence[int]
           ) -> List[Tuple[str, int, str, int]]:
    """(job, index, host, port) of every rank: ranks fill nodes in order (block distribution),
    the tasks of a node get ports port_base, port_base+1, ..."""
    if len(nodes) != len(per_node):
        raise ValueError(f"{len(nodes)} nodes but tasks per node for {len(per_node)}")
    slots = [(host, plan["base_port"] + i) for host, n in zip(nodes, per_node) for i in range(n)]
    table = rank_table(plan)
    if len(slots) != len(table):
        raise ValueError(f"the step has {len(slots)} Slurm tasks but the cluster has {len(table)} "
                         f"TensorFlow tasks")
    return [(job, idx, host, port) for (job, idx), (host, port) in zip(table, slots)]


# --------------------------------------------------------------------------------------
# The launcher side: tfcluster launch FILE --backend slurm.

def launch(plan: RunPlan, dry_run: bool = False, quiet: bool = False,
           progress_every: float = 15.0, echo_progress: bool = False, output=None,
           show_tf_noise: bool = False) -> int:
    """Submit (sbatch) or run (srun, inside an allocation) the plan, follow it, stream its
    output and return 0 (succeeded), 1 (failed), 2 (bad input) or 130 (interrupted; the job
    is cancelled)."""
    data = plan_data(plan)
    carried = hold_back_secrets(data)
    run_dir = plan.run_dir
    out = sys.stdout
    inside = bool(os.environ.get("SLURM_JOB_ID"))
    name = f"tfcluster-{plan.run_id}"
    if dry_run:
        print(dry_run_text(plan), end="", file=out)
        return EXIT_OK
    tool = "srun" if inside else "sbatch"
    if not shutil.which(tool):
        raise UserError(f"--backend slurm: '{tool}' not found on PATH (is Slurm installed here?)")
    # the logdir checked, the run folder made without following links
    folder = safe_files.make_run_folder(plan.logdir, plan.run_id, plan.run_id_given)
    if folder.path != run_dir:   # a default run id taken meanwhile: the next free one
        plan, run_dir = plan.with_run_dir(folder.path), folder.path
        data = plan_data(plan)
        carried = hold_back_secrets(data)
    from tfcluster.runs import index as runindex  # tfcluster status/logs/stop find it from any folder
    why = runindex.register(run_dir, plan.run_id, plan.source)
    if why:
        _info(f"warning: {why}")
    listed = [j for j in plan.jobs if j not in plan.count_jobs]
    counts = ", ".join(f"{j}: {data['jobs'][j]['count']}" for j in job_order(data))
    _info(f"run {plan.run_id}: {ntasks(data)} Slurm task(s) ({counts}); "
          f"logs in {run_dir}" + (f"; hosts listed for {', '.join(listed)} are not used, Slurm "
                                  f"chooses the nodes" if listed else ""))
    follower = _Follower(data, run_dir, quiet=quiet, carried=carried,
                         progress_every=progress_every, echo_progress=echo_progress,
                         output=output, show_tf_noise=show_tf_noise)
    record = _Record(plan)
    follower.on_submitted = lambda job_id: record.write("running", None, job_id)
    code = None
    try:
        code = follower.run_srun(name) if inside else follower.run_sbatch(name)
    finally:   # the record is closed on every path: success, failure, Ctrl-C, a refused job
        try:
            record.close(code, follower.job_id, segments=follower.segments, lost=follower.lost)
        finally:
            folder.close()    # the run folder's descriptor, held since make_run_folder
    return code


def dry_run_text(plan: RunPlan) -> str:
    """What ``launch --backend slurm --dry-run`` prints: the srun line inside an allocation,
    else the batch script (secrets held back)."""
    data = plan_data(plan)
    hold_back_secrets(data)
    name = f"tfcluster-{plan.run_id}"
    if os.environ.get("SLURM_JOB_ID"):
        return (f"{PLAN_ENV}={shlex.quote(json.dumps(data))} \\\n  "
                + " ".join(shlex.quote(w) for w in srun_argv(data, name=name)) + "\n")
    return batch_script(data, name=name, output=os.path.join(plan.run_dir, "slurm-%j.out"))


class SlurmLauncher(Launcher):
    """The Slurm side of the launcher seam: one batch job (or an srun step inside an
    allocation) whose node wrappers drive the run machine; the launcher follows it."""

    no_detach = "with --backend slurm the job runs under Slurm already; leave --detach out"
    takes_slurm_options = True

    def __init__(self, plan: RunPlan):
        self.plan = plan

    def describe(self) -> str:
        return dry_run_text(self.plan)

    def run(self, view) -> int:
        return launch(self.plan, quiet=view.quiet, progress_every=view.progress_every,
                      echo_progress=view.echo_progress, output=getattr(view, "output", None),
                      show_tf_noise=getattr(view, "show_tf_noise", False))


class _Record:
    """run.json for a Slurm run, by the one record writer (:mod:`tfcluster.runs.record`): written
    when the launch starts, closed with its result and each task's own end (its exit record in
    the run folder: state, exit, restarts). The tasks' events are merged into events.jsonl."""

    def __init__(self, plan: RunPlan):
        self.plan, self.started = plan, time.time()
        self.channel = FolderChannel(plan.run_dir)
        self.write("running", None, None)

    def close(self, code: Optional[int], job_id: Optional[str], segments: int = 0,
              lost: Sequence[Dict[str, Any]] = ()) -> None:
        result = rules.result_of_exit_code(code)
        self.lost = list(lost)
        self._merge_events()
        self.segments = segments
        self.write(result, EXIT_FAILED if code is None else code, job_id, ended=time.time())

    def write(self, result: str, code: Optional[int], job_id: Optional[str],
              ended: Optional[float] = None) -> None:
        from tfcluster.plan.contract import profiler_port
        from tfcluster.runs.record import run_record, task_row, write_record
        ends = self.channel.exits()
        tasks = []
        for t in self.plan.tasks:
            rec = ends.get(t.name) or {}
            state = rec.get("state") if isinstance(rec.get("state"), str) else (
                "running" if ended is None else "stopped")
            tasks.append(task_row(
                t.name, host=rec.get("host"),
                endpoint=f"{rec['host']}:{rec['port']}" if rec.get("host") else "",
                chief=t.name == self.plan.chief, pid=rec.get("pid"), state=state,
                exit_code=rec.get("returncode"), exit=str(rec.get("exit") or ""),
                restarts=rec.get("restarts") if isinstance(rec.get("restarts"), int) else 0,
                started=rec.get("started"), first_started=rec.get("first_started"),
                ended=rec.get("ended"),
                log=os.path.join(self.plan.run_dir, f"{t.file_stem}.log"),
                note=str(rec.get("note") or ""),
                profiler_port=profiler_port(rec.get("port"), t.job)))
        failures = self.channel.failures()
        # the verdict's words, from the node that reached it (the machine's end_row)
        decided = sorted((r for r in ends.values() if isinstance(r.get("decision"), str)),
                         key=lambda r: r.get("time") or 0)
        root = None
        if failures:
            name, rec = failures[0]
            reason = str(rec.get("reason") or "")
            root = reason if reason.startswith(name) else f"{name} {reason}".strip()
        lost = getattr(self, "lost", [])
        if lost and (root is None or result == "failed"):
            first = lost[0]
            root = (f"node {first['node']} lost ({first['reason'] or 'down'})"
                    + (f" with {', '.join(first['tasks'])}" if first["tasks"] else "")
                    + (f"; then {root}" if root else ""))
        data = run_record(
            self.plan, backend="slurm", started=self.started, ended=ended, result=result,
            exit_code=code, decision=decided[0]["decision"] if decided else None, root_cause=root,
            total_restarts=self.channel.restarts_claimed() or sum(t["restarts"] for t in tasks),
            tasks=tasks, slurm_job=job_id, segments=getattr(self, "segments", 0) or None,
            lost_nodes=lost or None)
        try:
            write_record(self.plan.run_dir, data)
        except OSError as e:
            _info(f"cannot write run.json: {e}")

    def _merge_events(self) -> None:
        """The tasks' events (written on their nodes) into the run's events.jsonl."""
        events = self.channel.task_events()
        events += [{"event": "node_lost", "task": t, **{k: v for k, v in n.items() if k != "tasks"}}
                   for n in getattr(self, "lost", []) for t in (n["tasks"] or [None])]
        events.sort(key=lambda e: e.get("time") or 0)
        if not events:
            return
        try:
            from tfcluster.runs.eventlog import EventLog
            log = EventLog(self.plan.run_dir)
            for ev in events:
                fields = {k: v for k, v in ev.items() if k not in ("event", "task")}
                log.emit(str(ev.get("event")), ev.get("task") if isinstance(ev.get("task"), str)
                         else None, **fields)
            log.close()
        except (OSError, ValueError, TypeError) as e:
            _info(f"cannot merge the tasks' events: {e}")


def _info(line: str, stream: IO[str] = sys.stderr) -> None:
    try:
        stream.write(f"tfcluster: {line}\n")
        stream.flush()
    except (BrokenPipeError, ValueError):   # stderr closed (`... 2>&- `): the record keeps it
        pass


class _Follower:
    def __init__(self, plan: Dict[str, Any], run_dir: str, quiet: bool,
                 carried: Optional[Dict[str, str]] = None, progress_every: float = 15.0,
                 echo_progress: bool = False, output=None, show_tf_noise: bool = False):
        self.plan, self.run_dir, self.quiet = plan, run_dir, quiet
        self.output = output                      # --tasks, --timestamps (display.OutputOptions)
        self.noise = NoiseFold(show=show_tf_noise)   # TensorFlow's start-up noise, as locally
        self.env = {**os.environ, **(carried or {})}   # secrets travel in the environment
        self.progress: Dict[str, Any] = {}
        self.progress_at = 0.0
        self.progress_every, self.echo_progress = progress_every, echo_progress
        self.job_id: Optional[str] = os.environ.get("SLURM_JOB_ID")
        self.on_submitted = None
        self.segments = 0                 # how many times the job started running (requeues)
        self.nodes: List[str] = []        # the running segment's nodes (scontrol's NodeList)
        self.lost: List[Dict[str, Any]] = []   # nodes lost mid-run: node, reason, tasks, segment

    # ---- output
    def _line(self, text: str) -> None:
        """A line of the job's output: the tasks' lines to stdout (prefixed by their wrappers);
        progress-protocol lines are consumed, as locally, into a periodic line on stderr. As
        locally too: ``--tasks`` chooses whose lines are shown, ``--timestamps`` dates them, and
        TensorFlow's start-up noise is folded into one note unless ``--show-tf-noise``."""
        m = _TASK_LINE.match(text)
        visible, found = split_progress(m.group(2)) if m else (text, [])
        if found:
            self.progress[m.group(1)] = found[-1]
            now = time.time()
            if now - self.progress_at >= self.progress_every:
                self.progress_at = now
                for task, q in sorted(self.progress.items()):
                    _info(f"{task}: step {q.step}" + (f"/{q.total}" if q.total else "")
                          + "".join(f", {k} {v:.4g}" for k, v in q.metrics.items()))
            if not self.echo_progress:
                if not visible.replace("\r", "").strip():
                    return           # only reports
            else:
                visible = m.group(2)
        if m:
            task = m.group(1)
            if self.output is not None and not self.output.shows(task):
                return
            if not visible.startswith("tfcluster:"):
                hide, note = self.noise.fold(visible)
                if hide:
                    if note is None:
                        return
                    visible = note
            prefix = self.output.prefix(task) if self.output is not None else f"[{task}] "
            text = prefix + visible
        if self.quiet and "tfcluster:" not in text:
            return
        text = terminal_text(text.rstrip("\n"))     # printable text only (tfcluster.terminal)
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):   # `| head` closed it: the job's logs keep it
            pass

    # ---- inside an allocation: srun here
    def run_srun(self, name: str) -> int:
        env = dict(self.env)
        env[PLAN_ENV] = json.dumps(self.plan, separators=(",", ":"))
        argv = srun_argv(self.plan, name=name)
        _info(f"inside Slurm job {os.environ['SLURM_JOB_ID']}: " + " ".join(argv[:-3]))
        # srun ends the step (its tasks with it) on SIGTERM: it gets one when the launcher dies
        proc = start_child(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True, death_signal=signal.SIGTERM)
        reader = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        reader.start()
        try:
            with _sigterm_as_interrupt():
                rc = proc.wait()
        except KeyboardInterrupt:
            _info("interrupted: cancelling the job step")
            self._cancel_step(name, proc)
            reader.join(5)
            return EXIT_INTERRUPTED
        reader.join(10)
        return self._result(rc, f"srun exited with {rc}")

    def _pump(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            self._line(raw.decode("utf-8", "replace").rstrip("\n"))

    def _cancel_step(self, name: str, proc: subprocess.Popen) -> None:
        job = os.environ.get("SLURM_JOB_ID", "")
        step = None
        try:
            out = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"],
                                 capture_output=True, text=True, timeout=30).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == name:
                    step = parts[0]
        except (OSError, subprocess.SubprocessError):   # no step found: srun is signalled instead
            pass
        if step:
            subprocess.run(["scancel", step], capture_output=True, timeout=30)
        else:
            try:
                os.kill(proc.pid, signal.SIGTERM)  # srun forwards SIGTERM to the tasks
            except ProcessLookupError:   # srun has ended already
                pass
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ---- outside: sbatch and follow
    def run_sbatch(self, name: str) -> int:
        output = os.path.join(self.run_dir, "slurm-%j.out")
        script = batch_script(self.plan, name=name, output=output)
        path = os.path.join(self.run_dir, "job.sbatch")
        write_batch_script(path, script)
        r = subprocess.run(["sbatch", "--parsable", path], capture_output=True, text=True, timeout=60,
                           env=self.env)
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip().replace("\n", "; ")
            raise UserError(f"--backend slurm: sbatch refused the job: {msg}")
        job_id = self.job_id = r.stdout.strip().split(";")[0]
        if self.on_submitted is not None:   # the record names the job while it runs
            self.on_submitted(job_id)
        out_path = output.replace("%j", job_id)
        _info(f"submitted Slurm job {job_id} ({name}); output: {out_path}; stop it with: scancel {job_id}")
        tail = _Tail(out_path)
        state, exit_code = "PENDING", None
        try:
            with _sigterm_as_interrupt():
                last = ""
                while True:
                    for line in tail.read():
                        self._line(line)
                    state, exit_code = job_state(job_id)
                    if last == "RUNNING" and state not in ("RUNNING", "COMPLETING", "UNKNOWN"):
                        self._note_lost_nodes(job_id, state)   # the segment has ended
                    if state != last and state in ("PENDING", "RUNNING", "REQUEUED"):
                        if state == "RUNNING":
                            self.segments += 1
                            self.nodes = job_nodes(job_id)
                        if last == "RUNNING" and state != "RUNNING":
                            _info(f"job {job_id} was requeued: its next segment resumes from the "
                                  f"checkpoint")
                        _info(f"job {job_id} is {state.lower()}"
                              + (f" (segment {self.segments})" if self.segments > 1 and state == "RUNNING" else ""))
                        last = state
                    if state is None or state in TERMINAL_STATES:
                        break
                    time.sleep(0.5)
        except KeyboardInterrupt:
            if self._ordered_stop(job_id, tail):
                return EXIT_INTERRUPTED
            _info(f"interrupted: cancelling Slurm job {job_id}")
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
            deadline = time.time() + 60
            while time.time() < deadline:
                st, _ = job_state(job_id)
                if st is None or st in TERMINAL_STATES:
                    break
                time.sleep(0.5)
            for line in tail.read(final=True):
                self._line(line)
            return EXIT_INTERRUPTED
        # the output file may lag behind the job's end by a moment
        deadline = time.time() + 5
        rc = _read_exit_file(self.run_dir)
        while rc is None and state == "COMPLETED" and time.time() < deadline:
            time.sleep(0.2)
            rc = _read_exit_file(self.run_dir)
        time.sleep(0.3)
        for line in tail.read(final=True):
            self._line(line)
        if rc is None:
            rc = exit_code if exit_code is not None else (0 if state == "COMPLETED" else 1)
        return self._result(rc, f"Slurm job {job_id} {(state or 'ended').lower()}, exit code {rc}")

    def _note_lost_nodes(self, job_id: str, state: Optional[str]) -> None:
        """The segment just ended: name its nodes that Slurm now has down (a node lost mid-run:
        its slurmd stopped answering), the tasks that ran there, and what Slurm did with the
        job -- requeued it (``--requeue``: ``slurm.requeue``, or the cluster's JobRequeue) or
        ended it (NODE_FAIL)."""
        down = lost_nodes(self.nodes)
        if not down:
            return
        where = {}
        for ev in FolderChannel(self.run_dir).task_events():
            if ev.get("event") == "task_started" and isinstance(ev.get("host"), str):
                where[ev.get("task")] = ev["host"]
        action = "failed the job" if state in TERMINAL_STATES else "requeued the job"
        for node, reason in down:
            tasks = sorted(str(t) for t, h in where.items() if h == node)
            self.lost.append({"node": node, "reason": reason, "tasks": tasks,
                              "segment": max(self.segments - 1, 0), "time": time.time(),
                              "slurm": action.split()[0], "job_state": state})
            _info(f"node {node} was lost mid-run ({reason or 'down'})"
                  + (f"; it ran {', '.join(tasks)}" if tasks else "")
                  + f": Slurm {action} ({(state or 'gone').lower()})")

    def _ordered_stop(self, job_id: str, tail: "_Tail") -> bool:
        """Ctrl-C (or SIGTERM, ``tfcluster stop``) on the launcher: ask the running job to stop in
        order through the run folder (chief and workers first, ps last), as Slurm's time-limit
        warning does; True once the job has ended, False to cancel it outright."""
        state, _ = job_state(job_id)
        if state != "RUNNING":
            return False
        wait = rules.ordered_stop_wait(float(self.plan.get("grace", 5.0)),
                                       float(self.plan.get("stop_timeout", 5.0)))
        _info(f"interrupted: stopping Slurm job {job_id} in order (chief first, ps last; up to "
              f"{wait:g}s; Ctrl-C again cancels it at once)")
        for seg in range(max(1, self.segments)):
            err = FolderChannel(self.run_dir, seg).request_stop()
            if err:
                _info(f"cannot ask segment {seg} to stop in order ({err}); waiting, then cancelling")
        deadline = time.time() + wait
        try:
            while time.time() < deadline:
                for line in tail.read():
                    self._line(line)
                st, _ = job_state(job_id)
                if st is None or st in TERMINAL_STATES:
                    for line in tail.read(final=True):
                        self._line(line)
                    return True
                time.sleep(0.5)
        except KeyboardInterrupt:   # a second Ctrl-C: cancel at once (the caller does)
            pass
        return False

    def _result(self, rc: int, what: str) -> int:
        failed = FolderChannel(self.run_dir).failures()
        verdict, code = rules.job_verdict(rc, len(failed), lost_nodes=len(self.lost))
        _info(f"run {verdict}: {what}")
        if verdict != "failed":
            return code
        for lost in self.lost[:1]:
            _info(f"lost node: {lost['node']} ({lost['reason'] or 'down'})"
                  + (f", with {', '.join(lost['tasks'])}" if lost["tasks"] else ""))
        for name, rec in failed[:1]:
            _info(f"first failure: {name} on {rec.get('host', '?')}: {rec.get('reason', '?')}")
            log = os.path.join(self.run_dir, f"{name.replace(':', '-')}.log")
            try:
                lines = log_tail(log, 10)
            except OSError:   # no log to show (unreadable, or removed meanwhile): the reason is said
                lines = []
            except UserError as e:   # a link or a FIFO planted under its name: not read
                _info(f"  (its log is not shown: {e})")
                lines = []
            for line in lines:
                _info(f"  | {terminal_text(line)}")   # task text: printable only
        return code


LOG_TAIL_WINDOW = 64 << 10   # bytes: the end of a failed task's log that its summary reads
EXIT_FILE_LIMIT = 64         # bytes: the most the batch script's exit_code file may hold


def write_batch_script(path: str, script: str) -> None:
    """Write the batch script ``path`` (``job.sbatch`` in the new run folder) as a new file,
    0600, through :func:`tfcluster.safe_files.create_new` (``O_CREAT | O_EXCL | O_NOFOLLOW``):
    a file or a link planted under its name is refused with one line, never written through."""
    try:
        safe_files.create_new(path, script.encode("utf-8"), 0o600)
    except FileExistsError:
        raise UserError(f"--backend slurm: {safe_files.shown(path)} exists already in the new run "
                        f"folder (a file or link planted there is not written through); is "
                        f"someone else writing to {safe_files.shown(os.path.dirname(path))}?")
    except OSError as e:
        raise UserError(f"--backend slurm: cannot write the batch script {safe_files.shown(path)} "
                        f"({e.strerror or e})")


def log_tail(path: str, n: int = 10, window: int = LOG_TAIL_WINDOW) -> List[str]:
    """The last ``n`` lines of a task's log, read from its last ``window`` bytes only (memory
    bounded by the window, whatever the log's size; the first line of the window, cut, is left
    out when others follow it). Opened through :func:`tfcluster.safe_files.open_regular`: no
    link followed, regular files only, not a hard link to another file (a UserError naming
    it); [] when there is no log."""
    f = safe_files.open_regular(path, what="a task's log is a plain file", single_link=True)
    if f is None:
        return []
    with f:
        start = max(0, os.fstat(f.fileno()).st_size - window)
        f.seek(start)
        data = f.read(window)
    lines = data.decode("utf-8", "replace").splitlines()
    if start > 0 and len(lines) > 1:
        lines = lines[1:]
    return lines[-n:]


def _read_exit_file(run_dir: str) -> Optional[int]:
    """The exit code the batch script left in the run folder (``exit_code``); None when it is
    missing, not a number, larger than :data:`EXIT_FILE_LIMIT` or not a plain file (a link
    planted there is not followed: Slurm's own exit code is used instead)."""
    try:
        data = safe_files.read_bytes(os.path.join(run_dir, "exit_code"), EXIT_FILE_LIMIT,
                                what="the job's exit_code is a plain file")
        return int(data.strip()) if data is not None else None
    except (OSError, UserError, ValueError):
        return None


def job_state(job_id: str) -> Tuple[Optional[str], Optional[int]]:
    """(JobState, exit code) from ``scontrol show job``; (None, None) once Slurm forgot the job."""
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "UNKNOWN", None
    if r.returncode != 0:
        if "Invalid job id" in (r.stderr + r.stdout):
            return None, None
        return "UNKNOWN", None
    state = re.search(r"\bJobState=(\S+)", r.stdout)
    code = re.search(r"\bExitCode=(\d+):(\d+)", r.stdout)
    exit_code = None
    if code:
        exit_code = int(code.group(1)) or (128 + int(code.group(2)) if int(code.group(2)) else 0)
    return (state.group(1) if state else "UNKNOWN"), exit_code


def job_nodes(job_id: str) -> List[str]:
    """The nodes of a running job (``scontrol show job``'s NodeList, expanded)."""
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    m = re.search(r"\bNodeList=(\S+)", r.stdout)
    if r.returncode != 0 or not m or m.group(1) in ("(null)", ""):
        return []
    return expand_hostlist(m.group(1))


def lost_nodes(nodes: Sequence[str]) -> List[Tuple[str, str]]:
    """(node, reason) of those of ``nodes`` that Slurm has down, failing or not responding."""
    if not nodes:
        return []
    try:
        r = subprocess.run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%t|%E"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in r.stdout.splitlines():
        node, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        if node in nodes and node not in [n for n, _ in out] and (
                state.startswith(("down", "fail")) or state.endswith("*")):
            out.append((node, printable(reason.strip()) if reason.strip() != "none" else ""))
    return out


class _Tail(safe_files.LineTail):
    """The job's ``slurm-JOB.out``, followed (:class:`tfcluster.safe_files.LineTail`);
    something other than a plain file under its name is not read, and said once."""

    def __init__(self, path: str, window: int = safe_files.WINDOW):
        super().__init__(path, window, what="the job's output file is a plain file")
        self.refused = False

    def read(self, final: bool = False) -> Iterator[str]:
        try:
            yield from super().read(final)
        except UserError as e:
            if not self.refused:
                self.refused = True
                _info(f"the job's output is not shown: {e}")


class _sigterm_as_interrupt:
    """While following a job, SIGTERM to the launcher cancels the job as Ctrl-C does."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():
            def handler(signum, frame):
                raise KeyboardInterrupt
            self.old = signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False
