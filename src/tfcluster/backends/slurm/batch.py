"""What a Slurm job of a run is: the run plan as the batch script exports it, the ``srun``
line that starts one node agent per TensorFlow task, and the batch script around it (the text
``tfcluster render slurm`` prints and ``launch --backend slurm`` submits).

The script's secrets are held back (:mod:`.held_secrets`); which rank runs which task is
:mod:`.layout`'s; how the job stops in order is written here (:func:`batch_script`).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from typing import Any, Dict, List, Optional

from tfcluster import safe_files
from tfcluster.backends.slurm.held_secrets import held_variables, hold_back_secrets
from tfcluster.backends.slurm.layout import job_order, ntasks
from tfcluster.clusterfile.checks import check_text
from tfcluster.errors import UserError
from tfcluster.plan.runplan import RunPlan
from tfcluster.terminal import printable

#: the variable the batch script (or the launcher, inside an allocation) passes the plan in
PLAN_ENV = "TFCLUSTER_SLURM_PLAN"
TASK_MODULE = "tfcluster.backends.agent.node"
# The node's Python runs the agent with the current folder off its module path (what -P does
# on 3.11+, for any Python 3): a tfcluster.py or runpy.py planted in the job's folder is never
# imported. PYTHONPATH (an HPC module's TensorFlow) still counts, unlike with -I.
TASK_COMMAND = (f"import sys; del sys.path[0]; import runpy; "
                f"runpy.run_module({TASK_MODULE!r}, run_name='__main__', alter_sys=True)")


# The plan: the run plan as JSON (:meth:`tfcluster.plan.runplan.RunPlan.to_dict`), with the
# interpreter that runs the node agent; no cluster file is needed on the nodes.

def plan_data(plan: RunPlan) -> Dict[str, Any]:
    """The run plan as the batch script exports it and the node agent reads it."""
    d = plan.to_dict()
    d["extra"]["python"] = sys.executable
    return d


def elastic(plan: Dict[str, Any]) -> bool:
    """An elastic run (``elastic: {min_workers: N}``): its job is submitted with ``--no-kill``,
    so that a lost node shrinks the run (the run machine's rule) instead of ending the job."""
    return plan.get("min_workers") is not None


def srun_argv(plan: Dict[str, Any], name: Optional[str] = None, overcommit: bool = True) -> List[str]:
    """The ``srun`` line that starts one node agent per TensorFlow task."""
    argv = ["srun", f"--ntasks={ntasks(plan)}", "--distribution=block", "--kill-on-bad-exit=0"]
    if elastic(plan):     # a lost node ends neither the step nor its tasks on the other nodes
        argv.append("--no-kill")
    if overcommit:
        argv.append("--overcommit")
    if name:
        argv.append(f"--job-name={name}")
    gpus = (plan["extra"].get("slurm") or {}).get("gpus_per_task") or 0
    if gpus:
        argv.append(f"--gpus-per-task={gpus}")
    return argv + [plan["extra"].get("python", "python3"), "-c", TASK_COMMAND]


def _check_options(plan: Dict[str, Any], *, partition: Optional[str], time: Optional[str],
                   name: Optional[str], output: Optional[str]) -> None:
    """The script's options checked (UserError naming the flag): printable text, and what an
    #SBATCH line can hold (sbatch splits one at spaces: a value with one would add options of
    its own)."""
    for where, value in (("--name", name), ("--partition", partition), ("--time", time),
                         ("--output", output), ("the run folder", plan.get("run_dir"))):
        check_text(where, value)
    for where, value, pattern, what in (
            ("--name", name, _SBATCH_NAME, "a Slurm job name (letters, digits, '.', '_', '+', "
                                            "'-'; up to 128 characters)"),
            ("--partition", partition, _SBATCH_NAME, "a Slurm partition name"),
            ("--time", time, _SBATCH_TIME, "a Slurm time limit (e.g. 1:00:00, 2-00:00:00)"),
            ("--output", output, _SBATCH_PATH, "a path an #SBATCH line can hold (no spaces, "
                                                "quotes or '#')")):
        if value is not None and not pattern.fullmatch(str(value)):
            raise UserError(f"{where}: {_short_word(value)} is not {what}")


def _rank_lines(plan: Dict[str, Any]) -> List[str]:
    """The comment lines that map each Slurm task (SLURM_PROCID) to its TensorFlow task."""
    lines, rank = [], 0
    for job in job_order(plan):
        c = plan["jobs"][job]["count"]
        span = f"{rank}" if c == 1 else f"{rank}-{rank + c - 1}"
        tasks = f"{job}:0" if c == 1 else f"{job}:0..{job}:{c - 1}"
        lines.append(f"#   {span:<8} {tasks}")
        rank += c
    return lines


def batch_script(plan: Dict[str, Any], partition: Optional[str] = None, time: Optional[str] = None,
                 name: Optional[str] = None, overcommit: bool = True,
                 output: Optional[str] = None) -> str:
    """An sbatch script that runs the plan (the text ``tfcluster render slurm`` prints)."""
    n = ntasks(plan)
    _check_options(plan, partition=partition, time=time, name=name, output=output)
    lines = ["#!/bin/bash",
             f"# Generated by tfcluster{' from ' + printable(plan['source']) if plan.get('source') else ''}; "
             f"submit with: sbatch THIS_FILE"]
    if name:
        lines.append(f"#SBATCH --job-name={name}")
    lines.append(f"#SBATCH --ntasks={n}")
    if elastic(plan):
        lines.append("#SBATCH --no-kill")     # elastic: a lost node shrinks the run, not the job
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
    lines.extend(_rank_lines(plan))
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
        lines.extend(_ordered_stop_lines(srun, slurm_extra, elastic(plan)))
    else:
        lines.append(srun)
        lines.append("rc=$?")
    if run_dir:
        lines.append('echo $rc > "$RUN_DIR/exit_code"')
    lines.append("exit $rc")
    return "\n".join(lines) + "\n"


def _ordered_stop_lines(srun: str, extra: Dict[str, Any], elastic: bool = False) -> List[str]:
    """The batch script's ordered stop: SIGUSR1 to this shell only -- Slurm's warning before the
    time limit (``--signal=B:USR1@LEAD``), or ``scancel --batch --signal=USR1 JOB`` -- becomes an
    ordered stop through the folder channel (its ``stop-S`` file: chief and workers first, the
    ps after them; :mod:`tfcluster.backends.agent.folder`); then, with ``requeue``, the job is
    requeued and its next segment resumes from the checkpoint. A plain ``scancel JOB``, a
    preemption or a time limit without ``--signal`` sends SIGTERM to every process of the job at
    once: the shell waits on for srun (a trap, not an ignore: srun gets the default back), and
    the nodes keep the order themselves (a ps ignores SIGTERM until its chief has ended:
    :func:`tfcluster.core.rules.shielded_from_step_signals`). With ``requeue``, a job preempted
    under a partition's GraceTime that stopped in order within it is requeued by this script
    (Slurm requeues only a job still running when the grace ends).

    An elastic run's srun (``--no-kill``) waits on for the tasks of a lost node, which never
    report: once every other task has ended, the launcher writes the step's exit code to
    ``step_over-S`` (:meth:`tfcluster.backends.agent.folder.FolderChannel.step_over`) and a
    watcher here ends srun; that code is the job's."""
    sig = extra.get("lead_signal") or "USR1"
    out = ['SEG=${SLURM_RESTART_COUNT:-0}   # a requeued job is the next segment of the same run',
           'STOPPED=0',
           f'trap \'STOPPED=1; : > "$RUN_DIR/stop-$SEG"\' {sig}   # stop in order, ps last',
           "trap : TERM   # scancel, preemption: the nodes stop in order; wait for srun's end",
           f"{srun} &",
           "SRUN=$!"]
    if elastic:
        out.append('( while kill -0 $SRUN 2>/dev/null; do if [ -s "$RUN_DIR/step_over-$SEG" ]; '
                   'then kill -KILL $SRUN; break; fi; sleep 1; done ) &   # srun waits on a lost node')
    out.append("while :; do wait $SRUN; rc=$?; kill -0 $SRUN 2>/dev/null || break; done")
    if elastic:
        out.append('if [ -s "$RUN_DIR/step_over-$SEG" ]; then '
                   'rc=$(head -c 8 "$RUN_DIR/step_over-$SEG" | tr -cd 0-9); rc=${rc:-1}; fi')
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
                f'if [ "$STOPPED" = 0 ] && [ "$rc" != 0 ] && [ $((SEG + 1)) -lt {n} ]'
                ' && scontrol show job "$SLURM_JOB_ID" 2>/dev/null'
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
