"""Following a Slurm job of a run from the launcher: ``sbatch`` and the job's output file
followed, or ``srun`` run here inside an allocation; the tasks' lines shown as a local run
shows them, progress on stderr, Ctrl-C turned into an ordered stop, lost nodes named, and the
run's result with its first failure.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any, Dict, Iterator, List, Optional, Tuple

from tfcluster import safe_files
from tfcluster.backends.agent.folder import FolderChannel
from tfcluster.backends.base import start_child, stop_group
from tfcluster.backends.slurm.batch import PLAN_ENV, batch_script, elastic, srun_argv, write_batch_script
from tfcluster.backends.slurm.layout import rank_table
from tfcluster.backends.slurm.nodes import job_nodes, lost_nodes
from tfcluster.core import rules
from tfcluster.core.task_output import NoiseFold
from tfcluster.errors import UserError
from tfcluster.plan.progress import split_progress
from tfcluster.runs.slurm_job import ENDED, FOLLOW_TOOLS, JobState, job_state
from tfcluster.terminal import terminal_text

EXIT_INTERRUPTED = rules.signal_exit_code(signal.SIGINT)
ELASTIC_LOOK = 2.0    # seconds between looks for lost nodes while an elastic run's job runs
_TASK_LINE = re.compile(r"^\[([A-Za-z][A-Za-z0-9_]*:\d+)\] (.*)$")


def info(line: str, stream: IO[str] = sys.stderr) -> None:
    """A ``tfcluster:`` line on the launcher's stderr."""
    try:
        stream.write(f"tfcluster: {line}\n")
        stream.flush()
    except (BrokenPipeError, ValueError):   # stderr closed (`... 2>&- `): the record keeps it
        pass


class Follower:
    """The launcher's side of a running Slurm job: it submits (or runs srun), shows the job's
    output and returns the run's exit code; ``job_id``, ``segments`` and ``lost`` are what the
    record needs."""

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
        self.elastic = elastic(plan)      # --no-kill: a lost node is told to the nodes' agents
        self.elastic_at = 0.0             # ... looked for every ELASTIC_LOOK seconds
        self.step_over_sent = False

    # ---- output
    def _line(self, text: str) -> None:
        """A line of the job's output: the tasks' lines to stdout (prefixed by their agents);
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
                    info(f"{task}: step {q.step}" + (f"/{q.total}" if q.total else "")
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
                hide, note = self.noise.fold(visible, task)
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
        info(f"inside Slurm job {os.environ['SLURM_JOB_ID']}: " + " ".join(argv[:-3]))
        # srun ends the step (its tasks with it) on SIGTERM: it gets one when the launcher dies
        proc = start_child(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True, death_signal=signal.SIGTERM)
        reader = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        reader.start()
        try:
            with _SignalsAsInterrupt():
                rc = proc.wait()
        except KeyboardInterrupt:
            info("interrupted: cancelling the job step")
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
        # else SIGTERM to srun (a session of its own), which forwards it to the tasks;
        # SIGKILL after 60 s either way
        stop_group(proc, timeout=60.0, ask=None if step else signal.SIGTERM)

    # ---- outside: sbatch and follow
    def _submit(self, name: str) -> Tuple[str, str]:
        """The batch script written into the run folder and submitted: (job id, its output file)."""
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
        info(f"submitted Slurm job {job_id} ({name}); output: {out_path}; stop it with: scancel {job_id}")
        return job_id, out_path

    def _interrupted(self, job_id: str, tail: "_Tail") -> int:
        """Ctrl-C (or SIGTERM): the run stopped in order where it can be, else the job cancelled
        and waited for (a minute at most), its last output shown."""
        if self._ordered_stop(job_id, tail):
            return EXIT_INTERRUPTED
        info(f"interrupted: cancelling Slurm job {job_id}")
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
        deadline = time.time() + 60
        while time.time() < deadline:
            if follow_state(job_id).over:
                break
            time.sleep(0.5)
        for line in tail.read(final=True):
            self._line(line)
        return EXIT_INTERRUPTED

    def run_sbatch(self, name: str) -> int:
        job_id, out_path = self._submit(name)
        tail = _Tail(out_path)
        st = JobState("PENDING")
        try:
            with _SignalsAsInterrupt():
                last = ""
                while True:
                    for line in tail.read():
                        self._line(line)
                    st = follow_state(job_id)
                    state = st.word
                    if last == "RUNNING" and state not in ("RUNNING", "COMPLETING", None):
                        self._mark_lost_nodes(job_id, state)   # the segment has ended
                    if state != last and state in ("PENDING", "RUNNING", "REQUEUED"):
                        if state == "RUNNING":
                            self.segments += 1
                            self.nodes = job_nodes(job_id)
                        if last == "RUNNING" and state != "RUNNING":
                            info(f"job {job_id} was requeued: its next segment resumes from the "
                                 f"checkpoint")
                        info(f"job {job_id} is {state.lower()}"
                             + (f" (segment {self.segments})" if self.segments > 1 and state == "RUNNING" else ""))
                        last = state
                    if st.over:
                        break
                    if self.elastic and state == "RUNNING":
                        self._watch_elastic(job_id)
                    time.sleep(0.5)
        except KeyboardInterrupt:
            return self._interrupted(job_id, tail)
        # the output file may lag behind the job's end by a moment
        state, exit_code = st
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

    def _watch_elastic(self, job_id: str) -> None:
        """An elastic run (``--no-kill``) while its job runs: a node of the segment that Slurm has
        down is named, and each task that ran there is told to the other nodes' agents through
        the run folder (:meth:`FolderChannel.mark_lost`): their run machines shrink the run or
        fail it (:class:`tfcluster.core.machine.PeerLost`). Once every other task has ended, srun
        (which waits on for the lost node's tasks) is ended with their highest exit code, as
        srun's own would have been."""
        now = time.time()
        if now - self.elastic_at < ELASTIC_LOOK:
            return
        self.elastic_at = now
        seg = max(self.segments - 1, 0)
        channel = FolderChannel(self.run_dir, seg)
        known = {n["node"] for n in self.lost if n.get("segment") == seg}
        down = [(node, reason) for node, reason in lost_nodes(self.nodes, down_only=True)
                if node not in known]
        if down:
            hosts = {t: r["host"] for t, r in channel.ports().items()}
            for node, reason in down:
                tasks = sorted(t for t, h in hosts.items() if h == node)
                self.lost.append({"node": node, "reason": reason, "tasks": tasks, "segment": seg,
                                  "time": now, "slurm": "kept", "job_state": "RUNNING"})
                info(f"node {node} was lost mid-run ({reason or 'down'})"
                     + (f"; it ran {', '.join(tasks)}" if tasks else "")
                     + ": Slurm kept the job (--no-kill); the run's agents decide")
                for t in tasks:
                    err = channel.mark_lost(t, node, reason, now)
                    if err:
                        info(f"cannot tell the other nodes that {t} was lost: {err}")
        lost_tasks = {t for n in self.lost if n.get("segment") == seg for t in n["tasks"]}
        if not lost_tasks or self.step_over_sent:
            return
        ends = channel.exits(seg)
        rest = [t for t in self.plan_tasks() if t not in lost_tasks]
        if all(ends.get(t, {}).get("final") for t in rest):
            codes = [ends[t].get("exit_code") for t in rest]
            code = max([c for c in codes if isinstance(c, int)] or [rules.EXIT_FAILED])
            self.step_over_sent = True
            err = channel.step_over(code)
            if err:
                info(f"cannot end srun, which waits for the lost node's tasks: {err}")

    def plan_tasks(self) -> List[str]:
        """Every task of the run, by name (job:index), in rank order."""
        return [f"{job}:{i}" for job, i in rank_table(self.plan)]

    def _mark_lost_nodes(self, job_id: str, state: str) -> None:
        """The segment just ended: name its nodes that Slurm now has down (a node lost mid-run:
        its slurmd stopped answering), the tasks that ran there, and what Slurm did with the
        job -- requeued it (``--requeue``: ``slurm.requeue``, or the cluster's JobRequeue) or
        ended it (NODE_FAIL)."""
        known = {n["node"] for n in self.lost if n.get("segment") == max(self.segments - 1, 0)}
        down = [(n, r) for n, r in lost_nodes(self.nodes) if n not in known]
        if not down:
            return
        where = {}
        for ev in FolderChannel(self.run_dir).task_events():
            if ev.get("event") == "task_started" and isinstance(ev.get("host"), str):
                where[ev.get("task")] = ev["host"]
        action = "failed the job" if state in ENDED else "requeued the job"
        for node, reason in down:
            tasks = sorted(str(t) for t, h in where.items() if h == node)
            self.lost.append({"node": node, "reason": reason, "tasks": tasks,
                              "segment": max(self.segments - 1, 0), "time": time.time(),
                              "slurm": action.split()[0], "job_state": state or None})
            info(f"node {node} was lost mid-run ({reason or 'down'})"
                 + (f"; it ran {', '.join(tasks)}" if tasks else "")
                 + f": Slurm {action} ({(state or 'gone').lower()})")

    def _ordered_stop(self, job_id: str, tail: "_Tail") -> bool:
        """Ctrl-C (or SIGTERM, ``tfcluster stop``) on the launcher: ask the running job to stop in
        order through the run folder (chief and workers first, ps last), as Slurm's time-limit
        warning does; True once the job has ended, False to cancel it outright."""
        if follow_state(job_id).word != "RUNNING":
            return False
        wait = rules.ordered_stop_wait(float(self.plan.get("grace", 5.0)),
                                       float(self.plan.get("stop_timeout", 5.0)))
        info(f"interrupted: stopping Slurm job {job_id} in order (chief first, ps last; up to "
             f"{wait:g}s; Ctrl-C again cancels it at once)")
        for seg in range(max(1, self.segments)):
            err = FolderChannel(self.run_dir, seg).request_stop()
            if err:
                info(f"cannot ask segment {seg} to stop in order ({err}); waiting, then cancelling")
        deadline = time.time() + wait
        try:
            while time.time() < deadline:
                for line in tail.read():
                    self._line(line)
                if follow_state(job_id).over:
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
        info(f"run {verdict}: {what}")
        if verdict != "failed":
            return code
        for lost in self.lost[:1]:
            info(f"lost node: {lost['node']} ({lost['reason'] or 'down'})"
                 + (f", with {', '.join(lost['tasks'])}" if lost["tasks"] else ""))
        for name, rec in failed[:1]:
            info(f"first failure: {name} on {rec.get('host', '?')}: {rec.get('reason', '?')}")
            log = os.path.join(self.run_dir, f"{name.replace(':', '-')}.log")
            try:
                lines = log_tail(log, 10)
            except OSError:   # no log to show (unreadable, or removed meanwhile): the reason is said
                lines = []
            except UserError as e:   # a link or a FIFO planted under its name: not read
                info(f"  (its log is not shown: {e})")
                lines = []
            for line in lines:
                info(f"  | {terminal_text(line)}")   # task text: printable only
        return code


LOG_TAIL_WINDOW = 64 << 10   # bytes: the end of a failed task's log that its summary reads
EXIT_FILE_LIMIT = 64         # bytes: the most the batch script's exit_code file may hold


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


def follow_state(job_id: str) -> JobState:
    """What Slurm says of the job being followed (scontrol, which also gives its exit code)."""
    return job_state(job_id, ask=FOLLOW_TOOLS, timeout=30.0)


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
                info(f"the job's output is not shown: {e}")


class _SignalsAsInterrupt:
    """While following a job, SIGTERM to the launcher cancels the job as Ctrl-C does; and
    Ctrl-C does so even where the launcher was started with SIGINT ignored (a background job
    of a shell without job control), as a local run's launcher does (drivers.supervisor)."""

    def __enter__(self):
        self.old = {}
        if threading.current_thread() is threading.main_thread():
            def handler(signum, frame):
                raise KeyboardInterrupt
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, handler)
        return self

    def __exit__(self, *exc):
        for sig, old in self.old.items():
            signal.signal(sig, old)
        return False
