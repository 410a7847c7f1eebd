"""One launch, from request to exit code: the command line of ``launch`` read once into a
:class:`LaunchRequest` (:func:`launch_request`), and :func:`run_launch`, which carries a request
out for the CLI and for the Python API (:func:`launch`, ``tfcluster.launch``) alike: load the
file (or make the ``--ps/--workers`` cluster), plan, pick the launcher of the plan's backend
(:data:`LAUNCHERS`), then dry run, detach, or run to the end. No TensorFlow: the tasks import it."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Optional, Sequence, Tuple, Union

from tfcluster.cli.slurm_flags import GROUP as SLURM_GROUP
from tfcluster.cli.slurm_flags import SlurmFlags
from tfcluster.core import messages
from tfcluster.errors import UserError
from tfcluster.terminal import printable

if TYPE_CHECKING:
    from tfcluster.backends.base import Launcher
    from tfcluster.clusterfile.config import Cluster
    from tfcluster.drivers.display import View
    from tfcluster.plan.runplan import LaunchOptions, RunPlan

DEFAULT_FILE = "cluster.yaml"


def cluster_file(path: Optional[str], runs: bool = False) -> str:
    """The cluster file a subcommand reads: FILE, else ./cluster.yaml when it exists; else a
    one-line UserError saying where it looked (exit 2). ``runs``: the command runs what the file
    says (launch, doctor), so a ./cluster.yaml that another user owns or can write (a shared
    folder: anyone may plant one) is refused unless named (:func:`foreign_file`)."""
    if path:
        return path
    if os.path.isfile(DEFAULT_FILE):
        why = foreign_file(DEFAULT_FILE) if runs else None
        if why:
            raise UserError(f"./{DEFAULT_FILE} {why}: it is not run unless you name it "
                            f"(tfcluster launch ./{DEFAULT_FILE})")
        return DEFAULT_FILE
    raise UserError(f"no FILE given and no {DEFAULT_FILE} in {os.getcwd()}; give a cluster file "
                    f"(tfcluster launch also takes --ps N --workers N for a cluster on this machine)")


def foreign_file(path: str) -> Optional[str]:
    """Why another user could have chosen what ``path`` says (None: only the caller or root):
    it, or the link at its name, belongs to another user, or another user can write it (group
    write counts unless the group is the caller's own private group)."""
    import grp
    import pwd
    import stat
    try:
        link, st = os.lstat(path), os.stat(path)
    except OSError:
        return None
    me = os.geteuid()
    for s in (link, st):
        if s.st_uid not in (me, 0):
            return f"belongs to another user (uid {s.st_uid})"
    if st.st_mode & stat.S_IWOTH:
        return f"can be written by every user (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_mode & stat.S_IWGRP:
        try:
            members = set(grp.getgrgid(st.st_gid).gr_mem)
            mine = pwd.getpwuid(me).pw_name
            private = st.st_gid == os.getegid() and members <= {mine}
        except KeyError:
            private = False
        if not private:
            return f"can be written by its group (gid {st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o})"
    return None


@dataclass(frozen=True)
class QuickCluster:
    """``launch --ps N --workers N [--chief] [--evaluator]``: a cluster on this machine."""

    ps: int = 0
    workers: int = 0
    chief: bool = False
    evaluator: bool = False
    save: Optional[str] = None

    def text(self, program: Sequence[str], free: bool = False) -> str:
        """The cluster file this stands for: with ``free``, free ports on localhost, else task
        counts (the file ``--save`` writes: each launch of it takes free ports then, not the
        ones this run happened to get). UserError when no free ports are found."""
        from tfcluster.net.ports import free_ports
        try:
            ports = free_ports(self.tasks) if free else ()
        except OSError as e:
            raise UserError(f"--ps/--workers: {e}")
        it = iter(ports)
        lines = ["# written by tfcluster launch --ps/--workers", "version: 1", "cluster:"]
        for job, n in (("chief", int(self.chief)), ("ps", self.ps), ("worker", self.workers),
                       ("evaluator", int(self.evaluator))):
            if n and not ports:
                lines.append(f"  {job}: {n}")
            elif n:
                lines.append(f"  {job}: [{', '.join(f'localhost:{next(it)}' for _ in range(n))}]")
        lines.append("program:")
        lines.append(f"  command: {json.dumps(list(program))}")
        lines.append("logdir: runs")
        return "\n".join(lines) + "\n"

    @property
    def tasks(self) -> int:
        return self.ps + self.workers + int(self.chief) + int(self.evaluator)


@dataclass(frozen=True)
class LaunchRequest:
    """Everything the command line says about one launch, read from argparse once
    (:func:`launch_request`); :func:`run_launch` carries it out for the CLI and the Python API."""

    file: Optional[str] = None                 # cluster file (None: ./cluster.yaml or ``quick``)
    cluster: Optional[Cluster] = None          # a loaded Cluster instead of a file (Python API)
    options: Optional[LaunchOptions] = None    # None: the defaults; its slurm is filled by run_launch
    slurm_flags: SlurmFlags = SlurmFlags()     # the Slurm flags given (none: the file's slurm:)
    view: Optional[View] = None                # None: the default View
    dry_run: bool = False
    detach: bool = False
    quick: Optional[QuickCluster] = None       # a cluster on this machine instead of a file
    argv: Tuple[str, ...] = ()                 # the launch command line, for --detach
    doctor: bool = False                       # run tfcluster doctor first


def launch_request(args: argparse.Namespace, program: Sequence[str] = (),
                   argv: Sequence[str] = ()) -> LaunchRequest:
    """The command line of ``launch`` as a :class:`LaunchRequest`: the only reader of its argparse."""
    from tfcluster.drivers.display import OutputOptions, View
    from tfcluster.plan.runplan import LaunchOptions
    slurm_flags = SlurmFlags.from_args(args)
    options = LaunchOptions(
        command=tuple(program or ()), command_cwd=os.getcwd(), task_flags=args.task_flags,
        args=tuple(args.arg or ()),
        success=args.success, grace=args.grace, restart=args.restart,
        max_restarts=args.max_restarts, logdir=args.logdir, run_id=args.run_id,
        stop_timeout=args.stop_timeout, backend=args.backend, hosts=tuple(args.host or ()),
        network=args.network, profiler=args.profiler)
    view = View(quiet=args.quiet, live=False if args.no_live else None,
                progress_every=args.progress_interval, echo_progress=args.echo_progress,
                show_tf_noise=args.show_tf_noise,
                output=OutputOptions(tasks=tasks_flag(args.tasks), timestamps=args.timestamps,
                                     security_note=not args.no_security_note))
    quick = None
    if args.ps is not None or args.workers is not None or args.chief or args.evaluator or args.save:
        quick = QuickCluster(ps=args.ps or 0, workers=args.workers or 0, chief=args.chief,
                             evaluator=args.evaluator, save=args.save)
    return LaunchRequest(file=args.file, options=options, slurm_flags=slurm_flags,
                         view=view, dry_run=args.dry_run, detach=args.detach, quick=quick,
                         argv=tuple(argv), doctor=getattr(args, "doctor", False))


def tasks_flag(text: Optional[str]) -> Optional[FrozenSet[str]]:
    """``--tasks worker:0,chief``: the tasks and jobs whose lines are shown (None: every task).
    UserError (exit 2) for a word that is not a task or a job name."""
    if text is None:
        return None
    words = [w.strip() for w in text.split(",")]
    bad = [w for w in words if not w or not all(
               part.replace("_", "").replace("-", "").isalnum() for part in w.split(":", 1))
           or (":" in w and not w.split(":", 1)[1].isdigit())]
    if bad or not words:
        raise UserError(f"--tasks: '{text}' is not a list of tasks or jobs, e.g. "
                        f"--tasks worker:0,chief")
    return frozenset(words)


def _quick_cluster(request: LaunchRequest) -> Tuple[Cluster, str]:
    """The cluster of ``--ps/--workers`` (written to ``--save`` when given) and its text."""
    from tfcluster.clusterfile import config
    from tfcluster.clusterfile.checks import MAX_JOB_TASKS
    q = request.quick
    if request.file:
        raise UserError(f"{request.file}: give a cluster file or --ps/--workers, not both")
    if not q.workers and not q.chief:
        raise UserError("--workers: a cluster on this machine needs at least one worker (--workers N)")
    program = request.options.command if request.options else ()
    if not program:
        raise UserError("--ps/--workers: give the program after '--': tfcluster launch --ps 1 "
                        "--workers 2 -- python train.py")
    for flag, n in (("--ps", q.ps), ("--workers", q.workers)):
        if n < 0 or n > MAX_JOB_TASKS:
            raise UserError(f"{flag}: {n} tasks; give 0 to {MAX_JOB_TASKS}")
    # saved: task counts (the file picks free ports each time it runs); else free ports here
    text = q.text(program, free=not q.save)
    source, base_dir = "", os.getcwd()
    if q.save:
        from tfcluster.safe_files import create_new
        try:   # O_EXCL | O_NOFOLLOW: an existing name or a planted (dangling) link is refused
            create_new(q.save, text.encode("utf-8"))
        except FileExistsError:
            raise UserError(f"--save: {printable(q.save)} exists already; choose another "
                            f"file name")
        except OSError as e:
            raise UserError(f"--save: cannot write {printable(q.save)} ({e.strerror or e})")
        print(f"tfcluster: wrote {printable(q.save)}; run it again with: tfcluster launch "
              f"{printable(shlex.quote(q.save))}", file=sys.stderr)
        # the text written, not the file read back: someone could swap it in a shared folder
        source, base_dir = q.save, os.path.dirname(os.path.abspath(q.save))
    return config.loads(text, source=source, base_dir=base_dir), text


def _supervised(plan: RunPlan, cluster: Cluster) -> Launcher:
    from tfcluster.drivers.launcher import SupervisedLauncher
    if plan.kind.over_ssh:
        from tfcluster.backends.ssh import SshBackend
        return SupervisedLauncher(plan, SshBackend(cluster, stop_timeout=plan.stop_timeout))
    from tfcluster.backends.local import LocalBackend
    return SupervisedLauncher(plan, LocalBackend())


def _slurm(plan: RunPlan, cluster: Cluster) -> Launcher:
    from tfcluster.backends.slurm.launcher import SlurmLauncher
    return SlurmLauncher(plan)


def _ray(plan: RunPlan, cluster: Cluster) -> Launcher:
    from tfcluster.drivers.ray_launcher import RayLauncher
    return RayLauncher(plan, cluster)


#: the composition root's one choice: which launcher runs a plan of each backend
LAUNCHERS: Dict[str, Callable[[RunPlan, Cluster], Launcher]] = {
    "local": _supervised, "ssh": _supervised, "slurm": _slurm, "ray": _ray}


def make_launcher(plan: RunPlan, cluster: Cluster) -> Launcher:
    return LAUNCHERS[plan.backend](plan, cluster)


def run_launch(request: LaunchRequest) -> int:
    """Carry out a launch request: load, check, plan, then dry run, detach, or run to the end.
    The CLI and :func:`tfcluster.launch` both come here; every backend behind one seam
    (:class:`tfcluster.backends.base.Launcher`)."""
    from tfcluster.drivers.display import View
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    slurm_flags = request.slurm_flags.given()
    cluster, quick_text = _cluster_of(request)
    options = request.options or LaunchOptions()
    if slurm_flags:   # else the plan reads the file's slurm: itself (only --backend slurm needs it)
        options = replace(options, slurm=request.slurm_flags.over(cluster.spec.slurm))
    _check_script(cluster, options)
    plan = build_plan(cluster, options)
    launcher = make_launcher(plan, cluster)
    if slurm_flags and SLURM_GROUP not in launcher.scheduler_flags:
        raise UserError(f"{slurm_flags[0]}: Slurm options apply to --backend slurm only, "
                        f"not --backend {plan.backend}")
    if request.detach and launcher.no_detach:
        raise UserError(f"--detach: {launcher.no_detach}")
    return _start(request, plan, cluster, launcher, request.view or View(), quick_text)


def _cluster_of(request: LaunchRequest) -> Tuple[Cluster, Optional[str]]:
    """The request's cluster (its file, the ``--ps/--workers`` cluster, or the loaded one), with
    its warnings said, and the text of a ``--ps/--workers`` cluster (None for a file or a loaded
    Cluster)."""
    from tfcluster.clusterfile import config
    quick_text = None
    path = cluster_file(request.file, runs=True) if request.cluster is None and request.quick is None else None
    if request.cluster is not None:
        cluster = request.cluster
    elif request.quick is not None:
        cluster, quick_text = _quick_cluster(request)
    else:
        cluster = config.load(path)
    for w in cluster.warnings:
        print(f"tfcluster: warning: {printable(cluster.source)}: {w}", file=sys.stderr)
    return cluster, quick_text


def _start(request: LaunchRequest, plan: RunPlan, cluster: Cluster, launcher: Launcher, view: View,
           quick_text: Optional[str]) -> int:
    """The planned run described (``--dry-run``), or started: the network checked and its note
    said, then detached, or the doctor's checks (``--doctor``) and the run to its end."""
    out = getattr(view, "output", None)
    if out is not None:
        out.check_tasks(t.name for t in plan.selected_tasks)
    if request.dry_run:
        print(launcher.describe(), end="")
        return 0
    from tfcluster.drivers import network
    network.check_private(plan)      # fails closed: never the host network unseen
    notice = network.exposure_note(plan, silenced=out is not None and not out.security_note)
    if notice:            # on the terminal before the first task starts, detached or not
        print(f"tfcluster: {notice}", file=sys.stderr)
    if not request.detach:
        for w in launcher.warnings():
            print(f"tfcluster: warning: {w}", file=sys.stderr)
        if request.doctor:
            from tfcluster.backends import doctor
            if doctor.run(plan, cluster, out=sys.stderr) != 0:
                print("tfcluster: launch not started: tfcluster doctor found problems (above)",
                      file=sys.stderr)
                return 1
        return launcher.run(view)
    from tfcluster.runs.control import detach
    saved = request.quick is not None and request.quick.save
    program = request.options.command if request.options else ()
    return detach(request.argv, program, plan.run_dir, plan.run_id,
                  saved_text=quick_text if saved else None, explicit=plan.run_id_given)


def _check_script(cluster: Cluster, options: LaunchOptions) -> None:
    """A relative script after '--' that is beside the cluster file but not here: did you mean."""
    if not options.command:
        return
    cwd = options.command_cwd or os.getcwd()
    hint = messages.script_hint(options.command, cluster.base_dir if cluster.source else None, cwd)
    if hint:
        raise UserError(hint)


def launch(path_or_cluster: Union[str, Cluster, None] = None, options: Optional[LaunchOptions] = None,
           quiet: bool = False, dry_run: bool = False) -> int:
    """Run a cluster file (or a loaded Cluster; default ./cluster.yaml) to the end; returns the
    exit code. What :func:`tfcluster.launch` (the public API, docs/API.md) calls: the same
    checks, warnings and dry run as the command line."""
    from tfcluster.drivers.display import View
    view = View(quiet=quiet)
    if path_or_cluster is None or isinstance(path_or_cluster, str):
        request = LaunchRequest(file=path_or_cluster, options=options, view=view, dry_run=dry_run)
    else:
        request = LaunchRequest(cluster=path_or_cluster, options=options, view=view, dry_run=dry_run)
    return run_launch(request)
