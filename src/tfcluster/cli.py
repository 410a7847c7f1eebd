"""The ``tfcluster`` command. TensorFlow is imported only by the subcommands that run it
(``launch`` does not either: its tasks do)."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import replace
from typing import List, Optional, Sequence

from . import __version__, rules
from .errors import UserError, print_error

DESCRIPTION = """\
Run distributed TensorFlow (ps / worker / chief / evaluator tasks) from one YAML file.

  tfcluster launch cluster.yaml            start every task, watch them, end the cluster cleanly
  tfcluster launch cluster.yaml -- python my_trainer.py --lr=0.1
  tfcluster validate cluster.yaml          check the file; print the resolved cluster
  tfcluster tf-config cluster.yaml worker:1
  tfcluster commands cluster.yaml          the shell line that starts each task by hand
"""

EPILOG = "Exit codes: 0 success, 1 a task failed, 2 bad input (file, flag, port), 128+N stopped by signal N."


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfcluster", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"tfcluster {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    s = sub.add_parser("launch", help="start every task of the file on this machine and watch them",
                       usage="tfcluster launch [options] FILE [-- CMD ARGS...]",
                       description="Start the cluster's tasks, stream their output, decide success "
                       "or failure, and stop every task at the end. Anything after '--' is the "
                       "program every task runs instead of the file's program.",
                       epilog="Task output goes to stdout, tfcluster's own lines to stderr. "
                       "The run plan, the task contract and the rules: docs/PLAN.md.")
    s.add_argument("file", help="cluster file (cluster.yaml)")
    s.add_argument("--task-flags", action="store_true", default=None,
                   help="append --job_name, --task_index and --<job>_hosts to every task's argv")
    s.add_argument("--success", choices=list(rules.SUCCESS_RULES),
                   help="when the run has succeeded (default: the file's success:, else chief)")
    s.add_argument("--grace", type=_seconds, metavar="SECONDS",
                   help="seconds other workers get to finish once the run has succeeded (default 5)")
    s.add_argument("--restart", choices=list(rules.RESTART_POLICIES),
                   help="restart policy for every job (default: the file's restart.policy)")
    s.add_argument("--max-restarts", type=_count, metavar="N", help="restarts per task")
    s.add_argument("--logdir", help="folder for run folders (default: the file's logdir:, else runs)")
    s.add_argument("--run-id", help="name of this run's folder (default: a timestamp)")
    s.add_argument("--dry-run", action="store_true",
                   help="print each task's argv, folder and environment additions as the backend "
                   "will run them; start nothing")
    s.add_argument("--quiet", "-q", action="store_true",
                   help="show only tfcluster's own lines and failures, not the tasks' output")
    s.add_argument("--no-live", action="store_true",
                   help="plain log lines even on a terminal (no live status display)")
    s.add_argument("--echo-progress", action="store_true",
                   help="also print the tasks' '@tfcluster progress' lines (for tools that parse "
                   "them; they are consumed by default)")
    s.add_argument("--show-tf-noise", action="store_true",
                   help="show TensorFlow's known-harmless start-up messages on the console (no "
                   "GPU found, oneDNN, absl; they are always in the task logs)")
    s.add_argument("--progress-interval", type=_seconds, default=15.0, metavar="SECONDS",
                   help="without a live display: seconds between progress lines (default 15)")
    s.add_argument("--stop-timeout", type=_seconds, default=5.0, metavar="SECONDS",
                   help="how long a task gets between SIGTERM and SIGKILL when stopped (default 5)")
    s.add_argument("--backend", choices=list(rules.BACKENDS),
                   help="how tasks are started (default: local when every host is this machine, "
                   "else ssh)")
    s.add_argument("--host", action="append", metavar="NAME",
                   help="start only the tasks on host NAME, here (per-host mode; repeatable)")
    add_slurm_flags(s)
    s.set_defaults(func=cmd_launch)

    s = sub.add_parser("validate", help="check a cluster file and print the resolved cluster")
    s.add_argument("file")
    s.add_argument("--json", action="store_true", help="print the resolved cluster as JSON")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("tf-config", help="print one task's TF_CONFIG as JSON")
    s.add_argument("file")
    s.add_argument("task", help="JOB:INDEX, for example worker:1")
    s.set_defaults(func=cmd_tf_config)

    s = sub.add_parser("commands", help="print the shell line that starts each task by hand")
    s.add_argument("file")
    s.add_argument("--task-flags", action="store_true", default=None,
                   help="add --job_name/--task_index/--<job>_hosts even if the file does not ask")
    s.set_defaults(func=cmd_commands)

    s = sub.add_parser("status", help="the result and task table of a run (default: the latest "
                       "run of ./cluster.yaml)",
                       description="Print a run's result (running, succeeded, failed, interrupted, "
                       "or lost when its launcher died without closing the record; for a Slurm "
                       "run whose launcher died, what squeue/sacct say of its job, or unknown) "
                       "and its task table; for a running run, its launcher's pid and how to stop "
                       "it. Exit code: 0 succeeded, 1 failed, 2 bad input, 3 running, "
                       "4 interrupted, 5 lost, 6 unknown.")
    _run_choice(s)
    s.add_argument("--json", action="store_true", help="print the run record as JSON")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("runs", help="list past runs, newest first",
                       description="List the runs of a cluster file (default: ./cluster.yaml) in "
                       "its logdir, or every run in LOGDIR: id, result, exit code, start, "
                       "duration, tasks, restarts, file, cause. A run whose run.json cannot be "
                       "read is named on stderr and left out.")
    s.add_argument("logdir", nargs="?", help="a folder of run folders (default: the file's logdir)")
    s.add_argument("--file", help="only runs of this cluster file (default: ./cluster.yaml)")
    s.add_argument("--json", action="store_true", help="print the list as JSON")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("report", help="write <run_dir>/report.html, a picture of a run",
                       description="Write one self-contained HTML file (opens offline) with a "
                       "timeline of every task, the global step over time per worker, and the "
                       "run's events. Prints its path.")
    _run_choice(s)
    s.add_argument("--output", "-o", help="where to write the HTML (default: <run_dir>/report.html)")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("hello", help="the guide's 'Hello distributed TensorFlow!' (imports TensorFlow)")
    s.add_argument("file", nargs="?",
                   help="a cluster file of local tasks: start them in-process and run an op on the "
                   "second task from a session on the first")
    s.set_defaults(func=cmd_hello)

    s = sub.add_parser("render", help="print a Kubernetes TFJob, JobSet or Kubeflow Trainer v2 "
                       "TrainJob, or a Slurm batch script for the file")
    s.add_argument("kind", choices=["k8s", "jobset", "trainjob", "slurm"],
                   help="k8s: Kubeflow TFJob; jobset: JobSet (jobset.x-k8s.io); trainjob: a Trainer v2 "
                   "TensorFlow runtime and a TrainJob; slurm: sbatch script")
    s.add_argument("file")
    s.add_argument("--image", help="k8s, jobset, trainjob: container image (required)")
    s.add_argument("--name", help="name of the TFJob / JobSet / TrainJob / Slurm job (default: the "
                   "file's name)")
    s.add_argument("--namespace", help="k8s, jobset, trainjob: namespace")
    s.add_argument("--runtime-name", help="trainjob: name of the runtime (default: tensorflow-NAME)")
    s.add_argument("--namespaced", action="store_true",
                   help="trainjob: a namespaced TrainingRuntime instead of a ClusterTrainingRuntime")
    add_slurm_flags(s)
    s.set_defaults(func=cmd_render)

    s = sub.add_parser("schema", help="print the JSON Schema of cluster.yaml")
    s.set_defaults(func=cmd_schema)

    s = sub.add_parser("serve", help="built-in task program: start this task's server (from TF_CONFIG) "
                       "and serve until stopped", add_help=False)
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_serve)
    return p


def _run_choice(s: argparse.ArgumentParser) -> None:
    """RUN_DIR and --file: which run status and report look at."""
    s.add_argument("run_dir", nargs="?", help="a run folder, or a logdir (its latest run)")
    s.add_argument("--file", help="cluster file: its latest run, in its logdir (default: ./cluster.yaml)")


SLURM_FLAGS = ("partition", "time", "account", "qos", "constraint", "gpus_per_task", "gres", "sbatch")


def add_slurm_flags(parser: argparse.ArgumentParser) -> None:
    """Slurm scheduler flags (``render slurm``; ``launch --backend slurm`` can add the same);
    :func:`slurm_options_from_args` validates them over the file's ``slurm:`` section."""
    g = parser.add_argument_group("slurm options (override the file's slurm: section)")
    g.add_argument("--partition", help="partition(s)")
    g.add_argument("--time", help="time limit: minutes, [days-]hours:minutes:seconds, ..., UNLIMITED")
    g.add_argument("--account", help="account to charge")
    g.add_argument("--qos", help="quality of service")
    g.add_argument("--constraint", help="node features, e.g. 'intel&gpu'")
    g.add_argument("--gpus-per-task", type=_count, metavar="N",
                   help="GPUs per task (default: from jobs.<job>.gpus; ps on CPU)")
    g.add_argument("--gres", help="generic resources per node, e.g. gpu:2 (instead of --gpus-per-task)")
    g.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                   help="any other sbatch option, as --name=value (repeatable), e.g. --sbatch=--mem=8G")


def slurm_options_from_args(cluster, args):
    """The run's :class:`~tfcluster.slurm_options.SlurmSpec`: the file's ``slurm:`` with the flags
    of :func:`add_slurm_flags` over it. Raises UserError naming the flag (exit 2)."""
    from .slurm_options import from_flags
    return from_flags(cluster.spec.slurm, partition=args.partition, time=args.time,
                      account=args.account, qos=args.qos, constraint=args.constraint,
                      gpus_per_task=args.gpus_per_task, gres=args.gres, sbatch=args.sbatch)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    program: List[str] = []
    if argv and argv[0] == "launch" and "--" in argv:
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    if argv and argv[0] == "serve":
        # every word after "serve" is the serve program's own (its flags, --help): argparse's
        # REMAINDER would refuse a first word that starts with "-"
        args = argparse.Namespace(func=cmd_serve, rest=argv[1:])
    elif argv and argv[0] == "launch" and not program:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            print(f"tfcluster launch: error: unrecognized arguments: {' '.join(unknown)}\n"
                  f"tfcluster launch: hint: put the program after '--': tfcluster launch FILE -- "
                  f"{' '.join(unknown)}", file=sys.stderr)
            return 2
    else:
        args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.program = program
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print_error(e)
        return e.exit_code
    except KeyboardInterrupt:
        print("tfcluster: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tfcluster ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds")
    try:
        return rules.check_seconds(value, "seconds")
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' must be a finite number, 0 or more")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}' must be 0 or more")
    return value


# --------------------------------------------------------------------------------------

def _load(path: str, assign_counts: bool = False):
    from . import config
    cluster = config.load(path)
    if assign_counts and not cluster.resolved:
        from .plan import assign_local_ports
        cluster = assign_local_ports(cluster)
        print(f"tfcluster: note: {', '.join(cluster.count_jobs)} given as a count; "
              f"ports assigned as the local backend would (from {cluster.base_port})",
              file=sys.stderr)
    return cluster


def cmd_validate(args) -> int:
    from .config import printable
    from .hosts import is_local
    from . import secrets
    cluster = _load(args.file)
    declared = cluster.secret_names
    for w in cluster.warnings:
        print(f"tfcluster: warning: {printable(cluster.source)}: {w}", file=sys.stderr)
    if args.json:
        out = {"source": cluster.source, "success": cluster.success, "chief": str(cluster.chief),
               "logdir": cluster.logdir, "secrets": sorted(declared),
               "warnings": list(cluster.warnings), "tasks": []}
        for t in cluster.tasks:
            env = dict(t.env)
            out["tasks"].append({
                "task": t.name, "endpoint": str(t.endpoint) if t.endpoint else None,
                "local": bool(t.endpoint and is_local(t.endpoint.host)),
                "argv": secrets.mask_argv(list(t.command) + list(t.args), declared,
                                          secrets.secret_values(env, declared=declared)),
                "cwd": t.cwd, "task_flags": t.task_flags,
                "gpus": t.gpus, "env": secrets.mask_env(env, declared), "restart": t.restart.policy})
        if cluster.resolved:
            out["cluster_spec"] = cluster.cluster_spec_dict()
        print(json.dumps(out, indent=2))
        return 0
    n = len(cluster.tasks)
    print(printable(f"{cluster.source}: ok — {n} task{'s' if n != 1 else ''} in "
                    f"{len(cluster.jobs)} job{'s' if len(cluster.jobs) != 1 else ''}; "
                    f"chief: {cluster.chief}; success: {cluster.success}; "
                    f"restart: {cluster.restart.policy}; logdir: {os.path.relpath(cluster.logdir)}"))
    width = max(len(t.name) for t in cluster.tasks)
    for t in cluster.tasks:
        ep = str(t.endpoint) if t.endpoint else "(assigned at launch)"
        where = "" if not t.endpoint else ("" if is_local(t.endpoint.host) else "  [remote]")
        argv = secrets.mask_argv(list(t.command) + list(t.args), declared,
                                 secrets.secret_values(dict(t.env), declared=declared))
        run = " ".join(shlex.quote(w) for w in argv) if argv else "(no program: give one after --)"
        if t.task_flags:
            run += " + task flags"
        extra = []
        if t.gpus is not None:
            extra.append(f"CUDA_VISIBLE_DEVICES={t.gpus!r}")
        if t.env:
            extra.append("env: " + ", ".join(k + (" (secret)" if secrets.is_secret(k, declared) else "")
                                             for k, _ in t.env))
        print(printable(f"  {t.name:<{width}}  {ep:<22}{where}  {run}"
                        + (f"  ({'; '.join(extra)})" if extra else "")))
    if "evaluator" in cluster.jobs:
        print("  (evaluator gets TF_CONFIG but is left out of the ClusterSpec, TensorFlow's rule)")
    return 0


def cmd_tf_config(args) -> int:
    cluster = _load(args.file, assign_counts=True)
    print(json.dumps(cluster.tf_config(args.task), indent=2))
    return 0


def cmd_commands(args) -> int:
    """One shell line per task. Every word is quoted (keys too: ``'K=V'``); a word with a control
    character (a newline, ESC) is written in bash's ``$'...'`` form, so that each task stays one
    line and nothing raw reaches the terminal; a secret variable is read from the environment of
    the shell the line is pasted into (``"K=${K:?set K}"``) instead of printing its value."""
    import re
    from . import secrets
    from .config import printable

    def word(w: str) -> str:
        if printable(w) == w:
            return shlex.quote(w)
        out = []
        for ch in w:
            if printable(ch) != ch:
                out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
            else:
                out.append("\\" + ch if ch in "\\'" else ch)
        return "$'" + "".join(out) + "'"

    from . import contract
    from .plan import LaunchOptions, build_plan
    cluster = _load(args.file, assign_counts=True)
    declared = cluster.secret_names
    plan = build_plan(cluster, LaunchOptions(task_flags=args.task_flags), need_program=False)
    for t in plan.tasks:
        task = t if t.argv else replace(t, argv=(contract.PYTHON, "my_trainer.py"))
        argv = contract.display_argv(plan.argv(task))
        env = plan.env(task)
        env.pop(contract.RUN_DIR, None)   # a run by hand has no run folder
        assigns = []
        for k, v in env.items():
            if v and secrets.is_secret(k, declared):
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                    assigns.append(f'"{k}=${{{k}:?set {k} (secret)}}"')
                else:  # not a shell variable name: it cannot be read from the shell
                    assigns.append(word(f"{k}={secrets.MASK}"))
            else:
                assigns.append(word(f"{k}={v}"))
        print(f"# {t.name} — on {t.host}")
        print(f"cd {word(t.cwd)} && env " + " ".join(assigns) + " " + " ".join(word(w) for w in argv))
    return 0


def cmd_schema(args) -> int:
    from .config import json_schema
    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_hello(args) -> int:
    from .hello import hello
    return hello(args.file)


def cmd_serve(args) -> int:
    from .runtime import exit_now
    from .runtime.serve import main as serve_main
    # A live TensorFlow server makes interpreter teardown slow: end the process at once.
    exit_now(int(serve_main(args.rest) or 0))
    return 0


def cmd_render(args) -> int:
    from . import config, render
    cluster = config.load(args.file)
    if args.kind != "slurm":
        if not args.image:
            raise UserError(f"render {args.kind}: --image IMAGE is required (the container that runs "
                            f"the program)")
        if (args.runtime_name or args.namespaced) and args.kind != "trainjob":
            flag = "--runtime-name" if args.runtime_name else "--namespaced"
            raise UserError(f"render {args.kind}: {flag} is for render trainjob only")
        if args.kind == "k8s":
            text = render.render_k8s(cluster, image=args.image, name=args.name, namespace=args.namespace)
        elif args.kind == "jobset":
            from .jobset import render_jobset
            text = render_jobset(cluster, image=args.image, name=args.name, namespace=args.namespace)
        else:
            from .trainjob import render_trainjob
            text = render_trainjob(cluster, image=args.image, name=args.name, namespace=args.namespace,
                                   runtime_name=args.runtime_name, namespaced=args.namespaced)
        print(text, end="")
    else:
        options = slurm_options_from_args(cluster, args)
        print(render.render_slurm(cluster, name=args.name, slurm=options), end="")
    return 0


def launch_options(args, cluster):
    """The command line of ``launch`` as plain options: the only reader of its argparse."""
    from .plan import LaunchOptions
    return LaunchOptions(
        command=tuple(args.program or ()), command_cwd=os.getcwd(), task_flags=args.task_flags,
        success=args.success, grace=args.grace, restart=args.restart,
        max_restarts=args.max_restarts, logdir=args.logdir, run_id=args.run_id,
        stop_timeout=args.stop_timeout, backend=args.backend, hosts=tuple(args.host or ()),
        slurm=slurm_options_from_args(cluster, args))


def make_backend(plan, cluster):
    """The composition root's one choice: which backend starts the plan's tasks."""
    if plan.backend == "ssh":
        from .backends.ssh import SshBackend
        return SshBackend(cluster, stop_timeout=plan.stop_timeout)
    from .backends.local import LocalBackend
    return LocalBackend()


def launch(path_or_cluster, options=None, view=None) -> int:
    """Run a cluster file (or a loaded Cluster) to the end; returns the exit code. The Python
    API of ``tfcluster launch`` (``options``: :class:`tfcluster.plan.LaunchOptions`,
    ``view``: :class:`tfcluster.launch.View`)."""
    from . import config
    from .launch import Supervisor
    from .plan import build_plan
    cluster = config.load(path_or_cluster) if isinstance(path_or_cluster, str) else path_or_cluster
    plan = build_plan(cluster, options)
    if plan.backend == "slurm":
        from .backends import slurm
        return slurm.launch(plan)
    backend = make_backend(plan, cluster)
    from .launch.preflight import preflight
    for w in preflight(plan, backend):
        print(f"tfcluster: warning: {w}", file=sys.stderr)
    return Supervisor(plan, backend, view).run()


def cmd_launch(args) -> int:
    from . import config
    from .launch import View
    from .plan import build_plan
    cluster = config.load(args.file)
    for w in cluster.warnings:
        print(f"tfcluster: warning: {config.printable(cluster.source)}: {w}", file=sys.stderr)
    plan = build_plan(cluster, launch_options(args, cluster))
    flags = [f"--{k.replace('_', '-')}" for k in SLURM_FLAGS if getattr(args, k)]
    if flags and plan.backend != "slurm":
        raise UserError(f"{flags[0]}: Slurm options apply to --backend slurm only, not "
                        f"--backend {plan.backend}")
    if plan.backend == "slurm":
        from .backends import slurm
        return slurm.launch(plan, dry_run=args.dry_run, quiet=args.quiet,
                            progress_every=args.progress_interval, echo_progress=args.echo_progress)
    backend = make_backend(plan, cluster)
    if args.dry_run:
        from .launch.describe import describe
        print(describe(plan, backend))
        return 0
    from .launch import Supervisor
    from .launch.preflight import preflight
    for w in preflight(plan, backend):
        print(f"tfcluster: warning: {w}", file=sys.stderr)
    view = View(quiet=args.quiet, live=False if args.no_live else None,
                progress_every=args.progress_interval, echo_progress=args.echo_progress,
                show_tf_noise=args.show_tf_noise)
    return Supervisor(plan, backend, view).run()


def cmd_status(args) -> int:
    from .runrecord import print_status
    return print_status(args.run_dir, args.file, as_json=args.json)


def cmd_runs(args) -> int:
    from .runrecord import print_runs
    return print_runs(args.logdir, args.file, as_json=args.json)


def cmd_report(args) -> int:
    from .report import write_report
    from .runrecord import find_run
    run_dir, _ = find_run(args.run_dir, args.file)
    print(write_report(run_dir, args.output))
    return 0
