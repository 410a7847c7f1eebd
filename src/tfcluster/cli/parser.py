"""The ``tfcluster`` command line's grammar: the argparse parser of every subcommand, its flags
and their value types. It parses and names no handler (:func:`tfcluster.cli.main.build_parser`
gives each subcommand its own); completion and ``help COMMAND`` read it too."""
from __future__ import annotations

import argparse
from typing import List

from tfcluster.cli.parser_kit import RecordingParser
from tfcluster.core import rules
from tfcluster.plan.progress import PIPED_PROGRESS_EVERY
from tfcluster.version import __version__

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
    """The parser of ``tfcluster`` and of each subcommand (``.subcommands``, by name)."""
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
    s.add_argument("--network", choices=["private", "host"],
                   help="private: the run gets a network of its own that only its processes reach "
                   "(the default; where the kernel refuses it, the launch starts nothing and says "
                   "so); host: this machine's network, where "
                   "every local user can connect to the tasks (default: the file's network:)")
    s.add_argument("--profiler", action="store_true", default=None,
                   help="start TensorFlow's profiler server in every task, on a port chosen with "
                   "the task ports (tfcluster profile RUN traces it; default: the file's profiler:)")
    o = s.add_argument_group("output")
    o.add_argument("--tasks", metavar="LIST",
                   help="show only these tasks' output, e.g. worker:0,chief (a job name means "
                   "all its tasks); every task's log is still written")
    o.add_argument("--timestamps", action="store_true",
                   help="prefix task lines and tfcluster's own lines with the time")
    o.add_argument("--no-security-note", action="store_true",
                   help="do not print the network security note (also TFCLUSTER_NO_SECURITY_NOTE=1; "
                   "it is printed once per cluster file anyway)")
    s.add_argument("--doctor", action="store_true",
                   help="run `tfcluster doctor` first: launch only if every host agrees")
    add_slurm_flags(s)

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
    s.add_argument("--network", choices=["private", "host"],
                   help="the network the run would use (default: as launch would); in a private "
                   "network this machine's ports do not matter")

    s = sub.add_parser("validate", help="check a cluster file and print the resolved cluster",
                       epilog="Exit codes: 0 the file is valid and launch would start it here; "
                       "2 the file is not valid, or launch would refuse it on this machine (a "
                       "missing program or script, a taken port): --file-only checks the file alone.")
    s.add_argument("file", nargs="?", help="cluster file (default: ./cluster.yaml)")
    s.add_argument("--json", action="store_true", help="print the resolved cluster as JSON")
    s.add_argument("--file-only", action="store_true",
                   help="check the file alone, not what launch would meet on this machine")

    s = sub.add_parser("tf-config", help="print one task's TF_CONFIG as JSON",
                       usage="tfcluster tf-config [FILE] TASK")
    s.add_argument("file", nargs="?", help="cluster file (default: ./cluster.yaml)")
    s.add_argument("task", nargs="?", help="JOB:INDEX, for example worker:1")

    s = sub.add_parser("commands", help="print the shell line that starts each task by hand")
    s.add_argument("file", nargs="?", help="cluster file (default: ./cluster.yaml)")
    s.add_argument("--task-flags", action="store_true", default=None,
                   help="add --job_name/--task_index/--<job>_hosts even if the file does not ask")
    add_arg_flag(s)

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

    s = sub.add_parser("runs", help="list past runs, newest first",
                       description="List the runs of a cluster file (default: ./cluster.yaml) in "
                       "its logdir, or every run in LOGDIR: id, result, exit code, start, "
                       "duration, tasks, restarts, file, cause. A run whose run.json cannot be "
                       "read is named on stderr and left out.")
    s.add_argument("logdir", nargs="?", help="a folder of run folders (default: the file's logdir)")
    s.add_argument("--file", help="only runs of this cluster file (default: ./cluster.yaml)")
    s.add_argument("--json", action="store_true", help="print the list as JSON")

    s = sub.add_parser("report", help="write report.html in the run folder, a picture of a run",
                       description="Write one self-contained HTML file (opens offline) with a "
                       "timeline of every task, the global step over time per worker, and the "
                       "run's events. Prints its path.")
    _run_choice(s)
    s.add_argument("--output", "-o", help="where to write the HTML (default: report.html in the run folder)")

    s = sub.add_parser("hello", help="the guide's 'Hello distributed TensorFlow!' (imports TensorFlow)")
    s.add_argument("file", nargs="?",
                   help="a cluster file of local tasks: start them in-process and run an op on the "
                   "second task from a session on the first")

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

    s = sub.add_parser("stop", help="stop a running run in order, through its launcher",
                       description="Send SIGTERM to the run's launcher (checked by pid and start "
                       "time), which stops the tasks as on Ctrl-C: chief and workers first, then "
                       "ps; wait for it and print the result. RUN: a run id or run folder "
                       "(default: the latest run of ./cluster.yaml, else your latest run).")
    s.add_argument("run", nargs="?", help="run id or run folder")
    s.add_argument("--timeout", type=_seconds, default=120.0, metavar="SECONDS",
                   help="how long to wait for the launcher to end (default 120)")

    s = sub.add_parser("exec", help="run a command inside a live run's private network",
                       usage="tfcluster exec [RUN] -- CMD [ARGS...]",
                       description="Run CMD (a TF1 client of the ps, curl, a notebook kernel) inside "
                       "the network of a run launched with network: private, where only the run "
                       "reaches its tasks; TFCLUSTER_CLUSTER holds the run's ClusterSpec as JSON. "
                       "A run in the host network: CMD runs as it is. RUN: a run id or run folder "
                       "(default: the latest run of ./cluster.yaml, else your latest run).")
    s.add_argument("run", nargs="?", help="run id or run folder")

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

    s = sub.add_parser("attach", help="watch a running run from another terminal",
                       description="The live table of a running run (a --detach run, or one "
                       "in another terminal) and its launcher's lines, until it ends. Ctrl-C "
                       "detaches and the run goes on; tfcluster stop RUN stops it. Exit code "
                       "as status's once the run has ended. RUN: a run id or run folder "
                       "(default: the latest run of ./cluster.yaml, else your latest run).")
    s.add_argument("run", nargs="?", help="run id or run folder")

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

    s = sub.add_parser("completion", help="print a shell completion script (bash, zsh)",
                       description="Print a completion script. Install: "
                       "eval \"$(tfcluster completion bash)\" in ~/.bashrc, or "
                       "eval \"$(tfcluster completion zsh)\" in ~/.zshrc (after compinit).")
    s.add_argument("shell", nargs="?", help="bash or zsh")
    s.add_argument("--values", choices=["tasks", "runs"], help=argparse.SUPPRESS)
    s.add_argument("--run", help=argparse.SUPPRESS)
    s.add_argument("file", nargs="?", help=argparse.SUPPRESS)

    s = sub.add_parser("help", help="help on a topic (security) or a command")
    s.add_argument("topic", nargs="?", help="security, or a command name")

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

    s = sub.add_parser("import", help="write a cluster file from a Kubeflow TFJob manifest",
                       description="Read a TFJob (kubeflow.org/v1 or v1beta2; several documents or "
                       "'kubectl get tfjob -o yaml' output) and print the cluster file that holds it. "
                       "What a cluster file cannot carry is listed on stderr and in the file.")
    s.add_argument("tfjob", metavar="TFJOB.yaml", help="the manifest ('-': standard input)")
    s.add_argument("-o", "--output", metavar="FILE", help="write the cluster file here (default: stdout)")
    s.add_argument("--name", help="the TFJob to import when the file holds several")

    s = sub.add_parser("schema", help="print the JSON Schema of cluster.yaml")

    s = sub.add_parser("serve", help="built-in task program: start this task's server (from TF_CONFIG) "
                       "and serve until stopped", add_help=False)
    s.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def _run_choice(s: argparse.ArgumentParser) -> None:
    """RUN_DIR and --file: which run status and report look at."""
    s.add_argument("run_dir", nargs="?", help="a run folder, or a logdir (its latest run)")
    s.add_argument("--file", help="cluster file: its latest run, in its logdir (default: ./cluster.yaml)")


def add_slurm_flags(parser: argparse.ArgumentParser) -> None:
    """Slurm scheduler flags (``render slurm``; ``launch --backend slurm`` can add the same),
    one dest per field of :class:`tfcluster.cli.slurm_flags.SlurmFlags`, which reads them."""
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


def add_arg_flag(parser: argparse.ArgumentParser, which: str = "") -> None:
    """``--arg NAME=VALUE`` (launch, commands, render slurm): one argument of the program changed."""
    parser.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                        help=which + "change one argument of the program: replaces the flag --NAME (its "
                        "--NAME=V or --NAME V form), else appends --NAME=VALUE; repeatable; "
                        "--arg --NAME=VALUE works too")


def glue_arg_values(argv: List[str]) -> List[str]:
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


def _seconds(text: str) -> float:
    """A flag's value in seconds: a finite number, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds")
    try:
        return rules.check_seconds(value, "seconds")
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' must be a finite number, 0 or more")


def _count(text: str) -> int:
    """A flag's value as a count: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}' must be 0 or more")
    return value

