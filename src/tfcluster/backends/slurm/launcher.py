"""Slurm: run the cluster as one Slurm job step, one Slurm task per TensorFlow task.

What runs where
  * ``tfcluster launch FILE --backend slurm`` (:class:`SlurmLauncher`, :func:`launch`) submits
    a batch script with ``sbatch`` (:mod:`.batch`) -- or, inside an allocation (``SLURM_JOB_ID``
    set), runs ``srun`` directly -- then follows the job, streams its output and returns its
    result (:mod:`.follower`), and writes run.json.
  * The job runs ``srun ... python -c <TASK_COMMAND>``, which runs the node agent
    (:mod:`tfcluster.backends.agent.node`), one Slurm task per TensorFlow task. Each works out
    its job and index from ``SLURM_PROCID`` (:mod:`.layout`), sets ``TF_CONFIG`` and runs the
    program as a child in its own process group.

How the job ends
  ps tasks never end by themselves. When the chief (or ``worker:0``) exits 0 (or, with
  ``success: all-workers``, when every worker has), its agent sends ``SIGURG`` to the job step
  (``scancel --signal=URG JOB.STEP``); SIGURG is ignored by default, so only the agents act on
  it: ps tasks are stopped at once, workers get ``grace`` seconds to finish, then are stopped,
  and all exit 0. A task that fails beyond its restart budget does the same and exits with its
  own code. ``srun`` exits with the highest task exit code, so the job's exit code is the
  chief's result (or the first failure's). ``scancel JOB`` sends SIGTERM: the agents stop their
  programs in order (SIGTERM to the group, then SIGKILL) and exit 143. Ctrl-C in the launcher
  asks for an ordered stop through the folder channel first (:mod:`.follower`).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, Dict, Optional, Sequence

from tfcluster import safe_files
from tfcluster.backends.agent.folder import FolderChannel
from tfcluster.backends.base import Launcher
from tfcluster.backends.slurm.batch import dry_run_text, plan_data
from tfcluster.backends.slurm.follower import Follower, info
from tfcluster.backends.slurm.held_secrets import hold_back_secrets
from tfcluster.backends.slurm.layout import job_order, ntasks
from tfcluster.core import rules
from tfcluster.errors import UserError
from tfcluster.plan.runplan import RunPlan


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
        return rules.EXIT_OK
    tool = "srun" if inside else "sbatch"
    if not shutil.which(tool):
        raise UserError(f"--backend slurm: '{tool}' not found on PATH (is Slurm installed here?)")
    # the logdir checked, the run folder made without following links
    folder = safe_files.make_run_folder(plan.logdir, plan.run_id, plan.run_id_given)
    if folder.path != run_dir:   # a default run id taken meanwhile: the next free one
        plan, run_dir = plan.with_run_dir(folder.path), folder.path
        data = plan_data(plan)
        carried = hold_back_secrets(data)
    from tfcluster.runs import index  # tfcluster status/logs/stop find it from any folder
    why = index.register(run_dir, plan.run_id, plan.source)
    if why:
        info(f"warning: {why}")
    listed = [j for j in plan.jobs if j not in plan.count_jobs]
    counts = ", ".join(f"{j}: {data['jobs'][j]['count']}" for j in job_order(data))
    info(f"run {plan.run_id}: {ntasks(data)} Slurm task(s) ({counts}); "
         f"logs in {run_dir}" + (f"; hosts listed for {', '.join(listed)} are not used, Slurm "
                                 f"chooses the nodes" if listed else ""))
    follower = Follower(data, run_dir, quiet=quiet, carried=carried,
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


class SlurmLauncher(Launcher):
    """The Slurm side of the launcher seam: one batch job (or an srun step inside an
    allocation) whose node agents drive the run machine; the launcher follows it."""

    no_detach = "with --backend slurm the job runs under Slurm already; leave --detach out"
    scheduler_flags = ("slurm",)     # the Slurm flags (--partition, --time, ...) are its own

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
        self.write(result, rules.EXIT_FAILED if code is None else code, job_id, ended=time.time())

    def write(self, result: str, code: Optional[int], job_id: Optional[str],
              ended: Optional[float] = None) -> None:
        from tfcluster.runs.record import run_record, task_row, write_record
        ends = self.channel.exits()
        shrunk = self._shrunk()
        tasks = []
        for t in self.plan.tasks:
            rec = ends.get(t.name) or {}
            # "note": the end record's (and run.json's) field for the task's reason (TaskState.why)
            if not rec and t.name in shrunk:    # left the run with its node: no end of its own
                rec = {"state": "left", "note": f"left the run: {shrunk[t.name].get('reason') or ''}"}
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
                profiler_port=rec.get("profiler_port") if isinstance(rec.get("profiler_port"), int) else None))
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
        kept = bool(lost) and all(n.get("slurm") == "kept" for n in lost)   # elastic: --no-kill
        if lost and (root is None or result == "failed") and not (kept and result != "failed"):
            first = lost[0]
            root = (f"node {first['node']} lost ({first['reason'] or 'down'})"
                    + (f" with {', '.join(first['tasks'])}" if first["tasks"] else "")
                    + (f"; then {root}" if root else ""))
        data = run_record(
            self.plan, backend="slurm", started=self.started, ended=ended, result=result,
            exit_code=code, decision=decided[0]["decision"] if decided else None, root_cause=root,
            total_restarts=self.channel.restarts_claimed() or sum(t["restarts"] for t in tasks),
            tasks=tasks, slurm_job=job_id, segments=getattr(self, "segments", 0) or None,
            lost_nodes=lost or None,
            **({"workers": self._workers_fields(shrunk)} if self.plan.min_workers is not None else {}))
        try:
            write_record(self.plan.run_dir, data)
        except OSError as e:
            info(f"cannot write run.json: {e}")

    def _shrunk(self) -> Dict[str, Dict[str, Any]]:
        """Elastic runs: the workers that left the run, as the nodes' run machines logged it
        (``run_shrunk``; every node that heard of a lost worker logs it): task -> its first row."""
        if self.plan.min_workers is None:
            return {}
        out: Dict[str, Dict[str, Any]] = {}
        for ev in self.channel.task_events():
            if ev.get("event") == "run_shrunk" and isinstance(ev.get("task"), str):
                out.setdefault(ev["task"], ev)
        return out

    def _workers_fields(self, shrunk: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
        from tfcluster.runs.record import workers_fields
        of = sum(1 for t in self.plan.tasks if t.job == "worker")
        return workers_fields(of - len(shrunk), of, self.plan.min_workers,
                              {t: str(ev.get("reason") or "") for t, ev in shrunk.items()})

    def _merge_events(self) -> None:
        """The tasks' events (written on their nodes) into the run's events.jsonl; a shrink that
        every node logged (``run_shrunk`` of a worker elsewhere) once."""
        events, seen = [], set()
        for ev in self.channel.task_events():
            if ev.get("event") == "run_shrunk":
                if ev.get("task") in seen:
                    continue
                seen.add(ev.get("task"))
            events.append(ev)
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
            info(f"cannot merge the tasks' events: {e}")

