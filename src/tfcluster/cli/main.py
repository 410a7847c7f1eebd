"""The ``tfcluster`` command. TensorFlow is imported only by the subcommands that run it
(``launch`` does not either: its tasks do)."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence, Tuple

from tfcluster import __version__
from tfcluster.core import messages, rules
from tfcluster.cli.parser_kit import RecordingParser
from tfcluster.errors import UserError, print_error
from tfcluster.terminal import printable
from tfcluster.plan.progress import PIPED_PROGRESS_EVERY

DESCRIPTION = """\
Run distributed TensorFlow (ps / worker / chief / evaluator tasks) from one YAML file.

  tfcluster launch cluster.yaml            start every task, watch them, end the cluster cleanly
  tfcluster launch cluster.yaml -- python my_trainer.py --lr=0.1
  tfcluster validate cluster.yaml          check the file; print the resolved cluster
  tfcluster tf-config cluster.yaml worker:1
  tfcluster commands cluster.yaml          the shell line that starts each task by hand
"""

EPILOG = "Exit codes: 0 success, 1 a task failed, 2 bad input (file, flag, port), 128+N stopped by signal N."


def build_parser() -> RecordingParser:
    p = RecordingParser(
        prog="tfcluster", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"tfcluster {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    s = sub.add_parser("launch", help="start every task of the file on this machine and watch them",
                       usage="tfcluster launch [options] [FILE] [-- CMD ARGS...]",
                       description="Start the cluster's tasks, stream their output, decide success "
                       "or failure, and stop every task at the end. Anything after '--' is the "
                       "program every task runs instead of the file's program. Without FILE: "
                       "./cluster.yaml, or with --ps/--workers a cluster on this machine.",
                       epilog="Task output goes to stdout, tfcluster's own lines to stderr. "
                       "The run plan, the task contract and the rules: docs/PLAN.md.")
    s.add_argument("file", nargs="?", help="cluster file (default: ./cluster.yaml)")
    q = s.add_argument_group("a cluster on this machine without a file (free ports; give the "
                             "program after '--')")
    q.add_argument("--ps", type=_count, metavar="N", help="parameter server tasks")
    q.add_argument("--workers", type=_count, metavar="N", help="worker tasks")
    q.add_argument("--chief", action="store_true", help="a chief task too (else worker:0 is chief)")
    q.add_argument("--evaluator", action="store_true", help="an evaluator task too")
    q.add_argument("--save", metavar="FILE", help="write the cluster file used to FILE (and run it)")
    s.add_argument("--detach", "-d", action="store_true",
                   help="start the run in the background (its own session, output in the run "
                   "folder's console.log); print the run id and how to follow, stop and inspect it")
    s.add_argument("--task-flags", action="store_true", default=None,
                   help="append --job_name, --task_index and --<job>_hosts to every task's argv")
    add_arg_flag(s)
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
                   help="show TensorFlow's known-harmless messages on the console (no GPU found, "
                   "oneDNN, absl, the coordination service's INFO lines, ...; they are always in "
                   "the task logs)")
    s.add_argument("--progress-interval", type=_seconds, default=PIPED_PROGRESS_EVERY,
                   metavar="SECONDS", help="without a live display (piped output, CI): seconds "
                   f"between progress lines (default {PIPED_PROGRESS_EVERY:g})")
    s.add_argument("--stop-timeout", type=_seconds, default=5.0, metavar="SECONDS",
                   help="how long a task gets between SIGTERM and SIGKILL when stopped (default 5)")
    s.add_argument("--backend", choices=list(rules.BACKENDS),
                   help="how tasks are started (default: the file's backend:, else local when "
                   "every host is this machine, else ssh; ray: RAY_ADDRESS or the file's ray:)")
    s.add_argument("--host", action="append", metavar="NAME",
                   help="start only the tasks on host NAME, here (per-host mode; repeatable)")
    o = s.add_argument_group("output")
    o.add_argument("--tasks", metavar="LIST",
                   help="show only these tasks' output, e.g. worker:0,chief (a job name means "
                   "all its tasks); every task's log is still written")
    o.add_argument("--timestamps", action="store_true", help="prefix task lines with the time")
    o.add_argument("--no-security-note", action="store_true",
                   help="do not print the network security note (also TFCLUSTER_NO_SECURITY_NOTE=1; "
                   "it is printed once per cluster file anyway)")
    s.add_argument("--doctor", action="store_true",
                   help="run `tfcluster doctor` first: launch only if every host agrees")
    add_slurm_flags(s)
    s.set_defaults(func=cmd_launch)

    s = sub.add_parser("doctor", help="check every host of the file before a launch: versions, "
                       "program file, GPUs, clock, ports",
                       description="Run a small probe on every host or node of the file (this "
                       "machine, ssh hosts, the nodes of a Slurm allocation) and print one table: "
                       "Python, TensorFlow and tfcluster versions, the program file's hash, "
                       "visible GPUs, the clock's offset from this machine, and each task's port "
                       "(free on its host, reachable from the other hosts). Exit 1 naming what "
                       "differs or fails.")
    s.add_argument("file", nargs="?", help="cluster file (default: ./cluster.yaml)")
    s.add_argument("--backend", choices=["local", "ssh", "slurm"],
                   help="how the hosts are reached (default: as launch would)")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("validate", help="check a cluster file and print the resolved cluster")
    s.add_argument("file", nargs="?", help="cluster file (default: ./cluster.yaml)")
    s.add_argument("--json", action="store_true", help="print the resolved cluster as JSON")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("tf-config", help="print one task's TF_CONFIG as JSON",
                       usage="tfcluster tf-config [FILE] TASK")
    s.add_argument("file", nargs="?", help="cluster file (default: ./cluster.yaml)")
    s.add_argument("task", nargs="?", help="JOB:INDEX, for example worker:1")
    s.set_defaults(func=cmd_tf_config)

    s = sub.add_parser("commands", help="print the shell line that starts each task by hand")
    s.add_argument("file", nargs="?", help="cluster file (default: ./cluster.yaml)")
    s.add_argument("--task-flags", action="store_true", default=None,
                   help="add --job_name/--task_index/--<job>_hosts even if the file does not ask")
    add_arg_flag(s)
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

    s = sub.add_parser("logs", help="print a run's task logs, or follow them (-f)",
                       usage="tfcluster logs [RUN] [TASK] [-f] [--attempt N]",
                       description="Print the logs of a run (RUN: a run id or run folder; default: "
                       "the latest run of ./cluster.yaml, else your latest run). TASK (worker:1) "
                       "picks one task; 'launcher' the launcher's own log; without TASK every "
                       "task's log, prefixed. -f follows until the run ends.")
    s.add_argument("run", nargs="?", help="run id or run folder")
    s.add_argument("task", nargs="?", help="a task (worker:1), or 'launcher'")
    s.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    s.add_argument("--raw", action="store_true",
                   help="every line as the task wrote it: TensorFlow's start-up noise and the "
                   "raw '@tfcluster progress' reports too (default: as the console shows them)")
    s.add_argument("--attempt", type=_count, metavar="N",
                   help="only attempt N of a restarted task (0: the first start)")
    s.set_defaults(func=cmd_logs)

    s = sub.add_parser("stop", help="stop a running run in order, through its launcher",
                       description="Send SIGTERM to the run's launcher (checked by pid and start "
                       "time), which stops the tasks as on Ctrl-C: chief and workers first, then "
                       "ps; wait for it and print the result. RUN: a run id or run folder "
                       "(default: the latest run of ./cluster.yaml, else your latest run).")
    s.add_argument("run", nargs="?", help="run id or run folder")
    s.add_argument("--timeout", type=_seconds, default=120.0, metavar="SECONDS",
                   help="how long to wait for the launcher to end (default 120)")
    s.set_defaults(func=cmd_stop)

    s = sub.add_parser("stack", help="print the Python stacks of a live run's tasks (py-spy)",
                       usage="tfcluster stack [RUN] [TASK ...] [--native]",
                       description="Where each task of a running run is: its Python stacks, "
                       "read with py-spy (pip install 'tfcluster[debug]'), for any Python "
                       "program. RUN: a run id or run folder (default: the latest run of "
                       "./cluster.yaml, else your latest run); TASK (worker:1, or a job) picks "
                       "tasks, default every running task. Only your own run's tasks, started "
                       "by its live launcher on this machine. Exit 1 when a stack could not be "
                       "read.")
    s.add_argument("run", nargs="?", help="run id or run folder")
    s.add_argument("tasks", nargs="*", metavar="task", help="a task (worker:1) or a job")
    s.add_argument("--native", action="store_true",
                   help="also the C/C++ frames (TensorFlow's kernels, gRPC waits), where py-spy "
                   "can unwind them")
    s.set_defaults(func=cmd_stack)

    s = sub.add_parser("attach", help="watch a running run from another terminal",
                       description="The live table of a running run (a --detach run, or one "
                       "in another terminal) and its launcher's lines, until it ends. Ctrl-C "
                       "detaches and the run goes on; tfcluster stop RUN stops it. Exit code "
                       "as status's once the run has ended. RUN: a run id or run folder "
                       "(default: the latest run of ./cluster.yaml, else your latest run).")
    s.add_argument("run", nargs="?", help="run id or run folder")
    s.set_defaults(func=cmd_attach)

    s = sub.add_parser("tensorboard", help="start TensorBoard on a run's summaries",
                       description="Run TensorBoard on the run's summaries folder (the chief's "
                       "--checkpoint_dir, --model_dir or --logdir), or print the command when "
                       "TensorBoard is not installed.")
    s.add_argument("run", nargs="?", help="run id or run folder")
    s.add_argument("--port", type=_count, help="TensorBoard's port (default: its own, 6006)")
    s.add_argument("--bind", metavar="HOST", help="TensorBoard's --host")
    s.add_argument("--print", dest="print_only", action="store_true",
                   help="print the command instead of running it")
    s.add_argument("--profile", action="store_true",
                   help="open the run's profiles (tfcluster profile) instead of its summaries")
    s.set_defaults(func=cmd_tensorboard)

    s = sub.add_parser("profile", help="trace every live task of a run with TensorFlow's profiler",
                       usage="tfcluster profile [RUN] [--seconds N] [--tasks TASK,...]",
                       description="Ask every running task of the run (your own) for a TensorFlow "
                       "profile of the same N seconds, through the profiler server the runtime "
                       "starts in each task (TFCLUSTER_PROFILER_PORT), and write them into "
                       "<run folder>/profile/<time>/, as TensorBoard's profile plugin reads them. "
                       "Open them with: tfcluster tensorboard RUN --profile.")
    s.add_argument("run", nargs="?", help="run id or run folder")
    s.add_argument("--seconds", type=_seconds, default=3.0, metavar="N",
                   help="how long to trace (default 3)")
    s.add_argument("--tasks", metavar="TASK,...", help="only these tasks (ps:0,worker:1)")
    s.set_defaults(func=cmd_profile)

    s = sub.add_parser("completion", help="print a shell completion script (bash, zsh)",
                       description="Print a completion script. Install: "
                       "eval \"$(tfcluster completion bash)\" in ~/.bashrc, or "
                       "eval \"$(tfcluster completion zsh)\" in ~/.zshrc (after compinit).")
    s.add_argument("shell", nargs="?", help="bash or zsh")
    s.add_argument("--values", choices=["tasks", "runs"], help=argparse.SUPPRESS)
    s.add_argument("--run", help=argparse.SUPPRESS)
    s.add_argument("file", nargs="?", help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_completion)

    s = sub.add_parser("help", help="help on a topic (security) or a command")
    s.add_argument("topic", nargs="?", help="security, or a command name")
    s.set_defaults(func=cmd_help)

    s = sub.add_parser("render", help="print a Kubernetes TFJob, JobSet or Kubeflow Trainer v2 "
                       "TrainJob, or a Slurm batch script for the file")
    s.add_argument("kind", choices=["k8s", "jobset", "trainjob", "slurm"],
                   help="k8s: Kubeflow TFJob; jobset: JobSet (jobset.x-k8s.io); trainjob: a Trainer v2 "
                   "TensorFlow runtime and a TrainJob; slurm: sbatch script")
    s.add_argument("file", nargs="?", help="the cluster file (default: ./cluster.yaml)")
    s.add_argument("--image", help="k8s, jobset, trainjob: container image of every pod (required "
                   "unless the file gives each job its kubernetes.image)")
    s.add_argument("--name", help="name of the TFJob / JobSet / TrainJob / Slurm job (default: the "
                   "file's name)")
    s.add_argument("--namespace", help="k8s, jobset, trainjob: namespace")
    s.add_argument("--runtime-name", help="trainjob: name of the runtime (default: tensorflow-NAME)")
    s.add_argument("--namespaced", action="store_true",
                   help="trainjob: a namespaced TrainingRuntime instead of a ClusterTrainingRuntime")
    add_arg_flag(s, "render slurm: ")
    add_slurm_flags(s)
    s.set_defaults(func=cmd_render)

    s = sub.add_parser("import", help="write a cluster file from a Kubeflow TFJob manifest",
                       description="Read a TFJob (kubeflow.org/v1 or v1beta2; several documents or "
                       "'kubectl get tfjob -o yaml' output) and print the cluster file that holds it. "
                       "What a cluster file cannot carry is listed on stderr and in the file.")
    s.add_argument("tfjob", metavar="TFJOB.yaml", help="the manifest ('-': standard input)")
    s.add_argument("-o", "--output", metavar="FILE", help="write the cluster file here (default: stdout)")
    s.add_argument("--name", help="the TFJob to import when the file holds several")
    s.set_defaults(func=cmd_import)
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


SLURM_FLAGS = ("partition", "time", "account", "qos", "constraint", "gpus_per_task", "gres", "sbatch",
               "signal_lead", "requeue", "max_segments")


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
    g.add_argument("--signal-lead", type=_count, metavar="SECONDS",
                   help="with a time limit: stop in order this long before it (default 120)")
    g.add_argument("--requeue", action=argparse.BooleanOptionalAction, default=None,
                   help="after a stop before the time limit, requeue the job (the next segment "
                   "resumes from the checkpoint)")
    g.add_argument("--max-segments", type=_count, metavar="N",
                   help="with --requeue: at most N job runs in all (default 10)")


def add_arg_flag(parser, which: str = "") -> None:
    parser.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                        help=which + "change one argument of the program: replaces the flag --NAME (its "
                        "--NAME=V or --NAME V form), else appends --NAME=VALUE; repeatable; "
                        "--arg --NAME=VALUE works too")


def _glue_arg_values(argv: List[str]) -> List[str]:
    """``--arg --f=v`` as ``--arg=--f=v``: argparse would read a value that starts with '-' as
    a flag of its own."""
    out: List[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--arg" and i + 1 < len(argv) and argv[i + 1].startswith("-") \
                and argv[i + 1] != "--":
            out.append("--arg=" + argv[i + 1])
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def slurm_options_from_args(cluster, args):
    """The run's :class:`~tfcluster.clusterfile.slurm.SlurmSpec`: the file's ``slurm:`` with the flags
    of :func:`add_slurm_flags` over it. Raises UserError naming the flag (exit 2)."""
    from tfcluster.clusterfile.slurm import from_flags
    return from_flags(cluster.spec.slurm, partition=args.partition, time=args.time,
                      account=args.account, qos=args.qos, constraint=args.constraint,
                      gpus_per_task=args.gpus_per_task, gres=args.gres, sbatch=args.sbatch,
                      signal_lead=args.signal_lead, requeue=args.requeue,
                      max_segments=args.max_segments)


def console() -> None:
    """The ``tfcluster`` command (the console script, ``python -m tfcluster``): :func:`main`,
    then the process ends without the interpreter's teardown of every module and object, which
    took 0.1-0.25 s after a launch here (the launcher's exit is the run's end for whoever waits
    on it). What an exit must do is done first: other threads that are not daemons are joined,
    the ``atexit`` functions run, stdout and stderr are flushed. An exception ends it the
    usual way (its traceback)."""
    code = main()
    import atexit
    import threading
    # what the interpreter's exit does first: its exit hooks (concurrent.futures), then join the
    # non-daemon threads, then the atexit functions. These are not public names of threading and
    # atexit: where a Python release lacks them, the interpreter's own (slower) exit does it all.
    shutdown = getattr(threading, "_shutdown", None)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exitfuncs is None:
        sys.exit(code)
    shutdown()
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe (`tfcluster ... | head`)
            pass
    os._exit(code if isinstance(code, int) else 1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    program: List[str] = []
    if argv and argv[0] == "launch" and "--" in argv:
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    argv = _glue_arg_values(argv)
    parser = build_parser()
    try:
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
    except SystemExit as e:
        hint = messages.sbatch_hint(argv) if e.code == 2 else None
        if hint:
            print(f"tfcluster: hint: {hint}", file=sys.stderr)
        raise
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if args.func is cmd_launch:
            return int(run_launch(launch_request(args, program, argv)) or 0)
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
        except OSError:   # no /dev/null: Python's own flush at exit may complain, once
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

DEFAULT_FILE = "cluster.yaml"


def cluster_file(path: Optional[str]) -> str:
    """The cluster file a subcommand reads: FILE, else ./cluster.yaml when it exists; else a
    one-line UserError saying where it looked (exit 2)."""
    if path:
        return path
    if os.path.isfile(DEFAULT_FILE):
        return DEFAULT_FILE
    raise UserError(f"no FILE given and no {DEFAULT_FILE} in {os.getcwd()}; give a cluster file "
                    f"(tfcluster launch also takes --ps N --workers N for a cluster on this machine)")


def _load(path: Optional[str], assign_counts: bool = False):
    from tfcluster.clusterfile import config
    cluster = config.load(cluster_file(path))
    if assign_counts and not cluster.resolved:
        from tfcluster.plan.runplan import assign_local_ports
        cluster = assign_local_ports(cluster)
        print(f"tfcluster: note: {', '.join(cluster.count_jobs)} given as a count; "
              f"ports assigned as the local backend would (from {cluster.base_port})",
              file=sys.stderr)
    return cluster


def cmd_validate(args) -> int:
    from tfcluster.terminal import printable
    from tfcluster.net.addresses import is_local
    from tfcluster.clusterfile import secrets
    cluster = _load(args.file)
    declared = cluster.secret_names
    for w in cluster.warnings:
        print(f"tfcluster: warning: {printable(cluster.source)}: {w}", file=sys.stderr)
    refused = _launch_checks(cluster)
    if refused:   # the file is valid; launching it here is not (yet): say so, not "ok" alone
        for line in refused.splitlines():
            print(printable(f"tfcluster: warning: launch would refuse this file here: {line}"),
                  file=sys.stderr)
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
    verdict = "valid, but launch would refuse it here (see the warning)" if refused else "ok"
    print(printable(f"{cluster.source}: {verdict} — {n} task{'s' if n != 1 else ''} in "
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


def _launch_checks(cluster) -> Optional[str]:
    """What ``launch FILE`` would refuse here before starting anything (None: nothing), so that
    validate does not say a bare ok for it: the plan's checks (a count job on ssh, no task on
    this machine, the file's slurm: options) and, when the file has a program, the program
    checks on this machine's tasks (a missing program, script or folder; legacy Keras without
    tf_keras)."""
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    try:
        slurm = slurm_options_from_args(cluster, argparse.Namespace(
            **{k: [] if k == "sbatch" else None for k in SLURM_FLAGS}))
        plan = build_plan(cluster, LaunchOptions(run_id="validate", slurm=slurm), need_program=False)
    except UserError as e:
        return e.message
    if plan.backend != "local" or any(not t.argv for t in plan.tasks):
        return None
    from tfcluster.backends.local import LocalBackend
    from tfcluster.drivers.preflight import program_problems
    return "\n".join(program_problems(plan, LocalBackend())) or None


def cmd_tf_config(args) -> int:
    file, task = args.file, args.task
    if task is None and file is not None and ":" in file and not os.path.exists(file):
        file, task = None, file        # tfcluster tf-config worker:1 (./cluster.yaml)
    if task is None:
        raise UserError("tf-config: give a task, JOB:INDEX, for example: tfcluster tf-config worker:1")
    cluster = _load(file, assign_counts=True)
    print(json.dumps(cluster.tf_config(task), indent=2))
    return 0


def cmd_commands(args) -> int:
    """One shell line per task. Every word is quoted (keys too: ``'K=V'``); a word with a control
    character (a newline, ESC) is written in bash's ``$'...'`` form, so that each task stays one
    line and nothing raw reaches the terminal; a secret variable is read from the environment of
    the shell the line is pasted into (``"K=${K:?set K}"``) instead of printing its value."""
    import re
    from tfcluster.clusterfile import secrets
    from tfcluster.terminal import printable

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

    from tfcluster.plan import contract
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    cluster = _load(args.file, assign_counts=True)
    declared = cluster.secret_names
    plan = build_plan(cluster, LaunchOptions(task_flags=args.task_flags, args=tuple(args.arg)),
                      need_program=False)
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
    from tfcluster.clusterfile.models import json_schema
    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_import(args) -> int:
    from tfcluster.clusterfile import config
    from tfcluster.k8s.tfjob_import import MAX_BYTES, import_tfjob, render_file
    source = "<stdin>" if args.tfjob == "-" else args.tfjob
    try:
        if args.tfjob == "-":
            text = sys.stdin.read(MAX_BYTES + 1)
        else:
            with open(args.tfjob, "r", encoding="utf-8") as f:
                text = f.read(MAX_BYTES + 1)
    except UnicodeDecodeError as e:
        raise UserError(f"{printable(source)}: not a text file ({e.reason} at byte {e.start})")
    except OSError as e:
        raise UserError(f"{printable(source)}: cannot be read ({e.strerror or e})")
    data, left_out, meta = import_tfjob(text, source, name=args.name)
    config.from_dict(data, source=f"{source} (imported)")      # the result must validate
    out = render_file(data, left_out, meta, source)
    for item in left_out:
        print(f"tfcluster import: left out: {printable(item)}", file=sys.stderr)
    if args.output:
        try:
            fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise UserError(f"{printable(args.output)}: cannot be written ({e.strerror or e})")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(out)
    else:
        print(out, end="")
    return 0


def cmd_hello(args) -> int:
    from tfcluster.cli.hello import hello
    return hello(args.file)


def cmd_serve(args) -> int:
    from tfcluster.runtime import exit_now
    from tfcluster.runtime.serve import main as serve_main
    # A live TensorFlow server makes interpreter teardown slow: end the process at once.
    exit_now(int(serve_main(args.rest) or 0))
    return 0


def cmd_render(args) -> int:
    from tfcluster.clusterfile import config
    from tfcluster.k8s import render
    cluster = config.load(cluster_file(args.file))
    if args.kind != "slurm":
        if args.arg:
            raise UserError(f"render {args.kind}: --arg is for render slurm and launch only; edit "
                            f"program.args in the file (the pods run the file's program)")
        if (args.runtime_name or args.namespaced) and args.kind != "trainjob":
            flag = "--runtime-name" if args.runtime_name else "--namespaced"
            raise UserError(f"render {args.kind}: {flag} is for render trainjob only")
        if args.kind == "k8s":
            text = render.render_k8s(cluster, image=args.image, name=args.name, namespace=args.namespace)
        elif args.kind == "jobset":
            from tfcluster.k8s.jobset import render_jobset
            text = render_jobset(cluster, image=args.image, name=args.name, namespace=args.namespace)
        else:
            from tfcluster.k8s.trainjob import render_trainjob
            text = render_trainjob(cluster, image=args.image, name=args.name, namespace=args.namespace,
                                   runtime_name=args.runtime_name, namespaced=args.namespaced)
        print(text, end="")
    else:
        options = slurm_options_from_args(cluster, args)
        print(render.render_slurm(cluster, name=args.name, slurm=options, args=args.arg), end="")
    return 0


@dataclass(frozen=True)
class QuickCluster:
    """``launch --ps N --workers N [--chief] [--evaluator]``: a cluster on this machine."""

    ps: int = 0
    workers: int = 0
    chief: bool = False
    evaluator: bool = False
    save: Optional[str] = None

    def text(self, program: Sequence[str], ports: Sequence[int] = ()) -> str:
        """The cluster file this stands for: free ports on localhost, or without ``ports`` task
        counts (the file ``--save`` writes: each launch of it takes free ports then, not the
        ones this run happened to get)."""
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
    cluster: object = None                     # a loaded Cluster instead of a file (Python API)
    options: object = None                     # tfcluster.plan.runplan.LaunchOptions (slurm filled later)
    slurm_flags: Tuple[Tuple[str, object], ...] = ()   # the Slurm flags given: (attr, value)
    view: object = None                        # tfcluster.drivers.display.View
    dry_run: bool = False
    detach: bool = False
    quick: Optional[QuickCluster] = None
    argv: Tuple[str, ...] = ()                 # the launch command line, for --detach
    doctor: bool = False                       # run tfcluster doctor first


def launch_request(args, program: Sequence[str] = (), argv: Sequence[str] = ()) -> LaunchRequest:
    """The command line of ``launch`` as a :class:`LaunchRequest`: the only reader of its argparse."""
    from tfcluster.drivers.display import OutputOptions, View
    from tfcluster.plan.runplan import LaunchOptions
    options = LaunchOptions(
        command=tuple(program or ()), command_cwd=os.getcwd(), task_flags=args.task_flags,
        args=tuple(args.arg or ()),
        success=args.success, grace=args.grace, restart=args.restart,
        max_restarts=args.max_restarts, logdir=args.logdir, run_id=args.run_id,
        stop_timeout=args.stop_timeout, backend=args.backend, hosts=tuple(args.host or ()))
    view = View(quiet=args.quiet, live=False if args.no_live else None,
                progress_every=args.progress_interval, echo_progress=args.echo_progress,
                show_tf_noise=args.show_tf_noise,
                output=OutputOptions.parse(tasks=args.tasks, timestamps=args.timestamps,
                                           security_note=not args.no_security_note))
    slurm_flags = tuple((k, getattr(args, k)) for k in SLURM_FLAGS if getattr(args, k))
    quick = None
    if args.ps is not None or args.workers is not None or args.chief or args.evaluator or args.save:
        quick = QuickCluster(ps=args.ps or 0, workers=args.workers or 0, chief=args.chief,
                             evaluator=args.evaluator, save=args.save)
    return LaunchRequest(file=args.file, options=options, slurm_flags=slurm_flags, view=view,
                         dry_run=args.dry_run, detach=args.detach, quick=quick, argv=tuple(argv),
                         doctor=getattr(args, "doctor", False))


def _quick_cluster(request: LaunchRequest):
    """The cluster of ``--ps/--workers`` (written to ``--save`` when given) and its text."""
    from tfcluster.clusterfile import config
    from tfcluster.net.ports import free_ports
    q = request.quick
    if request.file:
        raise UserError(f"{request.file}: give a cluster file or --ps/--workers, not both")
    if not q.workers and not q.chief:
        raise UserError("--workers: a cluster on this machine needs at least one worker (--workers N)")
    program = request.options.command
    if not program:
        raise UserError("--ps/--workers: give the program after '--': tfcluster launch --ps 1 "
                        "--workers 2 -- python train.py")
    for flag, n in (("--ps", q.ps), ("--workers", q.workers)):
        if n < 0 or n > config.MAX_JOB_TASKS:
            raise UserError(f"{flag}: {n} tasks; give 0 to {config.MAX_JOB_TASKS}")
    if q.save:
        text = q.text(program)      # task counts: the file picks free ports each time it runs
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
        return config.loads(text, source=q.save,
                            base_dir=os.path.dirname(os.path.abspath(q.save))), text
    try:
        text = q.text(program, free_ports(q.tasks))
    except OSError as e:
        raise UserError(f"--ps/--workers: {e}")
    return config.loads(text, source="", base_dir=os.getcwd()), text


def _supervised(plan, cluster):
    from tfcluster.drivers.launcher import SupervisedLauncher
    if plan.backend == "ssh":
        from tfcluster.backends.ssh import SshBackend
        return SupervisedLauncher(plan, SshBackend(cluster, stop_timeout=plan.stop_timeout))
    from tfcluster.backends.local import LocalBackend
    return SupervisedLauncher(plan, LocalBackend())


def _slurm(plan, cluster):
    from tfcluster.backends.slurm.launcher import SlurmLauncher
    return SlurmLauncher(plan)


def _ray(plan, cluster):
    from tfcluster.drivers.ray_launcher import RayLauncher
    return RayLauncher(plan, cluster)


#: the composition root's one choice: which launcher runs a plan of each backend
LAUNCHERS = {"local": _supervised, "ssh": _supervised, "slurm": _slurm, "ray": _ray}


def make_launcher(plan, cluster):
    return LAUNCHERS[plan.backend](plan, cluster)


def run_launch(request: LaunchRequest) -> int:
    """Carry out a launch request: load, check, plan, then dry run, detach, or run to the end.
    The CLI and :func:`tfcluster.launch` both come here; every backend behind one seam
    (:class:`tfcluster.backends.base.Launcher`)."""
    from tfcluster.clusterfile import config
    from tfcluster.drivers.display import View
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    quick_text = None
    if request.cluster is not None:
        cluster = request.cluster
    elif request.quick is not None:
        cluster, quick_text = _quick_cluster(request)
    else:
        cluster = config.load(cluster_file(request.file))
    for w in cluster.warnings:
        print(f"tfcluster: warning: {printable(cluster.source)}: {w}", file=sys.stderr)
    options = request.options or LaunchOptions()
    flags = dict(request.slurm_flags)
    if flags:   # else the plan reads the file's slurm: itself (only --backend slurm needs it)
        slurm = slurm_options_from_args(cluster, argparse.Namespace(
            **{k: flags.get(k, [] if k == "sbatch" else None) for k in SLURM_FLAGS}))
        options = replace(options, slurm=slurm)
    _check_script(cluster, options)
    plan = build_plan(cluster, options)
    launcher = make_launcher(plan, cluster)
    if flags and not launcher.takes_slurm_options:
        first = next(iter(flags))
        raise UserError(f"--{first.replace('_', '-')}: Slurm options apply to --backend slurm only, "
                        f"not --backend {plan.backend}")
    view = request.view or View()
    if request.detach and launcher.no_detach:
        raise UserError(f"--detach: {launcher.no_detach}")
    if getattr(view, "output", None) is not None:
        view.output.check(t.name for t in plan.selected_tasks)
    if request.dry_run:
        print(launcher.describe(), end="")
        return 0
    if request.detach:
        from tfcluster.runs.control import detach
        saved = request.quick is not None and request.quick.save
        return detach(request.argv, options.command, plan.run_dir, plan.run_id,
                      saved_text=quick_text if saved else None,
                      explicit=plan.run_id_given)
    for w in launcher.warnings():
        print(f"tfcluster: warning: {w}", file=sys.stderr)
    if request.doctor:
        from tfcluster.drivers import doctor
        if doctor.run(plan, cluster, out=sys.stderr) != 0:
            print("tfcluster: launch not started: tfcluster doctor found problems (above)",
                  file=sys.stderr)
            return 1
    return launcher.run(view)


def _check_script(cluster, options) -> None:
    """A relative script after '--' that is beside the cluster file but not here: did you mean."""
    if not options.command:
        return
    cwd = options.command_cwd or os.getcwd()
    hint = messages.script_hint(options.command, cluster.base_dir if cluster.source else None, cwd)
    if hint:
        raise UserError(hint)


def launch(path_or_cluster=None, options=None, view=None, dry_run: bool = False) -> int:
    """Run a cluster file (or a loaded Cluster; default ./cluster.yaml) to the end; returns the
    exit code. The Python API of ``tfcluster launch`` (``options``:
    :class:`tfcluster.plan.runplan.LaunchOptions`, ``view``:
    :class:`tfcluster.drivers.display.View`): the same checks, warnings and dry run as the
    command line."""
    if path_or_cluster is None or isinstance(path_or_cluster, str):
        request = LaunchRequest(file=path_or_cluster, options=options, view=view, dry_run=dry_run)
    else:
        request = LaunchRequest(cluster=path_or_cluster, options=options, view=view, dry_run=dry_run)
    return run_launch(request)


def cmd_doctor(args) -> int:
    """``tfcluster doctor [FILE]``: every host of the file checked the way the tasks meet it."""
    from tfcluster.drivers import doctor
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    cluster = _load(args.file)
    return doctor.run(build_plan(cluster, LaunchOptions(backend=args.backend)), cluster)


def cmd_launch(args) -> int:
    """``tfcluster launch`` (main passes the program after '--' through :func:`launch_request`)."""
    return run_launch(launch_request(args))


# ------------------------------------------------------------------ runs from anywhere
def _run_record(run: Optional[str]):
    from tfcluster.runs.index import resolve_run
    from tfcluster.runs.status import read_run
    run_dir = resolve_run(run)
    return run_dir, read_run(run_dir)


def cmd_logs(args) -> int:
    from tfcluster.runs import logs
    run, task = args.run, args.task
    if task is None and run is not None and logs.looks_like_task(run):
        from tfcluster.runs.index import is_run_dir, lookup
        if not is_run_dir(run) and lookup(run) is None:
            run, task = None, run          # tfcluster logs worker:1 (the latest run)
    from tfcluster.runs.index import choose_run
    from tfcluster.runs.status import read_run
    run_dir, how = choose_run(run)
    record = read_run(run_dir)
    if how:       # without RUN: say which run this is (the index holds every folder's runs)
        from tfcluster.terminal import printable
        print(printable(f"tfcluster: logs of run {record.get('run_id') or os.path.basename(run_dir)} "
                        f"({how}): {run_dir}"), file=sys.stderr)
    if args.follow:
        if args.attempt is not None:
            raise UserError("--attempt: -f follows the current attempt; give one or the other")
        from tfcluster.runs.status import derive_result, read_run

        def running() -> bool:
            return derive_result(read_run(run_dir)) == "running"
        return logs.follow(run_dir, record, task, running, raw=args.raw)
    return logs.show(run_dir, record, task, args.attempt, raw=args.raw)


def cmd_stop(args) -> int:
    from tfcluster.runs.control import stop_run
    from tfcluster.runs.index import resolve_run
    return stop_run(resolve_run(args.run), timeout=args.timeout)


def cmd_stack(args) -> int:
    from tfcluster.runs import logs
    from tfcluster.runs.index import is_run_dir, lookup, resolve_run
    from tfcluster.runs.stack import show_stacks
    run, tasks = args.run, list(args.tasks)
    if run is not None and logs.looks_like_task(run) and not is_run_dir(run) and lookup(run) is None:
        run, tasks = None, [run] + tasks        # tfcluster stack worker:1 (the latest run)
    return show_stacks(resolve_run(run), tasks, native=args.native)


def cmd_attach(args) -> int:
    from tfcluster.runs.attach import attach
    from tfcluster.runs.index import resolve_run
    return attach(resolve_run(args.run))


def cmd_tensorboard(args) -> int:
    from tfcluster.runs.control import tensorboard
    run_dir, record = _run_record(args.run)
    return tensorboard(run_dir, record, port=args.port, host=args.bind, print_only=args.print_only,
                       profile=args.profile)


def cmd_profile(args) -> int:
    from tfcluster.runs.profile import profile_run
    run_dir, record = _run_record(args.run)
    tasks = [t.strip() for t in (args.tasks or "").split(",") if t.strip()]
    return profile_run(run_dir, record, seconds=args.seconds, tasks=tasks, run_arg=args.run)


def cmd_completion(args) -> int:
    from tfcluster.cli import completion
    if args.values:
        print("\n".join(completion.values(args.values, file=args.file or args.shell, run=args.run)))
        return 0
    if args.shell not in ("bash", "zsh"):
        raise UserError("completion: give a shell, bash or zsh: eval \"$(tfcluster completion bash)\"")
    script = completion.bash_script if args.shell == "bash" else completion.zsh_script
    print(script(build_parser()), end="")
    return 0


def cmd_help(args) -> int:
    parser = build_parser()
    if not args.topic:
        parser.print_help()
        print("\nTopics: tfcluster help security")
        return 0
    if args.topic in messages.TOPICS:
        print(messages.TOPICS[args.topic], end="")
        return 0
    subs = parser.subcommands
    if args.topic in subs:
        subs[args.topic].print_help()
        return 0
    raise UserError(f"help: no topic or command '{args.topic}' (topics: {', '.join(messages.TOPICS)}; "
                    f"commands: {', '.join(n for n in subs if n != 'serve')})")


def _run_arg(run: Optional[str]) -> Optional[str]:
    """A run folder or logdir as given, else a run id from the user's run index."""
    if run and not os.path.exists(run):
        from tfcluster.runs.index import lookup
        return lookup(run) or run
    return run


def cmd_status(args) -> int:
    from tfcluster.runs.status import print_status
    return print_status(_run_arg(args.run_dir), args.file, as_json=args.json)


def cmd_runs(args) -> int:
    from tfcluster.runs.index import here_first, index_path, runs
    from tfcluster.runs.status import print_runs

    def indexed():
        found, here = here_first(runs())
        return [d for d, _ in found], (f"runs of this folder in your run index, {index_path()}"
                                       if here else f"runs of every folder in your run index, "
                                       f"{index_path()} (none of this folder)")
    return print_runs(args.logdir, args.file, as_json=args.json, indexed=indexed)


def cmd_report(args) -> int:
    from tfcluster.runs.report import write_report
    from tfcluster.runs.status import find_run
    run_dir, _ = find_run(_run_arg(args.run_dir), args.file)
    print(write_report(run_dir, args.output))
    return 0
