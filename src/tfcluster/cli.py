"""The ``tfcluster`` command. TensorFlow is imported only by the subcommands that run it
(``launch`` does not either: its tasks do)."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import List, Optional, Sequence

from . import __version__
from .errors import UserError

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
                       description="Start the cluster's tasks, stream their output, decide success "
                       "or failure, and stop every task at the end. Anything after '--' is the "
                       "program every task runs instead of the file's program.")
    s.add_argument("file", help="cluster file (cluster.yaml)")
    s.add_argument("--task-flags", action="store_true", default=None,
                   help="append --job_name, --task_index and --<job>_hosts to every task's argv")
    s.add_argument("--success", choices=["chief", "all-workers"],
                   help="when the run has succeeded (default: the file's success:, else chief)")
    s.add_argument("--grace", type=_seconds, metavar="SECONDS",
                   help="seconds other workers get to finish once the run has succeeded (default 5)")
    s.add_argument("--restart", choices=["never", "on-failure", "exit-code"],
                   help="restart policy for every job (default: the file's restart.policy)")
    s.add_argument("--max-restarts", type=_count, metavar="N", help="restarts per task")
    s.add_argument("--logdir", help="folder for run folders (default: the file's logdir:, else runs)")
    s.add_argument("--run-id", help="name of this run's folder (default: a timestamp)")
    s.add_argument("--dry-run", action="store_true",
                   help="print each task's argv, folder and environment additions; start nothing")
    s.add_argument("--quiet", "-q", action="store_true",
                   help="show only tfcluster's own lines and failures, not the tasks' output")
    s.add_argument("--no-live", action="store_true",
                   help="plain log lines even on a terminal (no live status display)")
    s.add_argument("--stop-timeout", type=_seconds, default=5.0, metavar="SECONDS",
                   help="how long a task gets between SIGTERM and SIGKILL when stopped (default 5)")
    s.add_argument("--backend", choices=["local", "ssh", "slurm"],
                   help="how tasks are started (default: local when every host is this machine, "
                   "else ssh)")
    s.add_argument("--host", action="append", metavar="NAME",
                   help="start only the tasks on host NAME, here (per-host mode; repeatable)")
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

    s = sub.add_parser("status", help="print the task table of a run (default: the latest run)")
    s.add_argument("run_dir", nargs="?", help="a run folder, or a logdir (its latest run)")
    s.add_argument("--file", help="cluster file whose logdir to look in (default: ./cluster.yaml)")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("hello", help="the guide's 'Hello distributed TensorFlow!' (imports TensorFlow)")
    s.add_argument("file", nargs="?",
                   help="a cluster file of local tasks: start them in-process and run an op on the "
                   "second task from a session on the first")
    s.set_defaults(func=cmd_hello)

    s = sub.add_parser("render", help="print a Kubernetes TFJob or a Slurm batch script for the file")
    s.add_argument("kind", choices=["k8s", "slurm"])
    s.add_argument("file")
    s.add_argument("--image", help="k8s: container image (required for k8s)")
    s.add_argument("--name", help="name of the TFJob / Slurm job (default: the file's name)")
    s.add_argument("--namespace", help="k8s: namespace")
    s.add_argument("--partition", help="slurm: partition")
    s.add_argument("--time", help="slurm: time limit (e.g. 01:00:00)")
    s.set_defaults(func=cmd_render)

    s = sub.add_parser("schema", help="print the JSON Schema of cluster.yaml")
    s.set_defaults(func=cmd_schema)

    s = sub.add_parser("serve", help="built-in task program: start this task's server (from TF_CONFIG) "
                       "and serve until stopped", add_help=False)
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_serve)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    program: List[str] = []
    if argv and argv[0] == "launch" and "--" in argv:
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.program = program
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        for line in e.message.splitlines():
            print(f"tfcluster: error: {line}", file=sys.stderr)
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
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"'{text}' must be 0 or more")
    return value


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
        cluster = assign_local_ports(cluster)
        print(f"tfcluster: note: {', '.join(cluster.count_jobs)} given as a count; "
              f"ports assigned as the local backend would (from {cluster.base_port})",
              file=sys.stderr)
    return cluster


def assign_local_ports(cluster):
    """Give count jobs consecutive free ports on localhost, from the file's base_port."""
    from .config import Endpoint
    from .hosts import free_port_run
    taken = {t.endpoint.port for t in cluster.tasks if t.endpoint is not None}
    missing = [t for t in cluster.tasks if t.endpoint is None]
    start = cluster.base_port
    while True:
        try:
            first = free_port_run(len(missing), start)
        except OSError as e:
            raise UserError(f"base_port: {e}")
        block = set(range(first, first + len(missing)))
        clash = sorted(block & taken)
        if not clash:
            break
        start = clash[-1] + 1
    ports = iter(range(first, first + len(missing)))
    assigned = {t.id: Endpoint("localhost", next(ports)) for t in missing}
    return cluster.with_endpoints(lambda t: assigned[t.id])


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

    cluster = _load(args.file, assign_counts=True)
    declared = cluster.secret_names
    for t in cluster.tasks:
        argv = cluster.argv(t.id, task_flags=args.task_flags) if (t.command or t.args) else \
            ["python", "my_trainer.py"] + (cluster.task_flag_args(t.id) if (
                args.task_flags or t.task_flags) else [])
        assigns = []
        for k, v in cluster.env(t.id).items():
            if v and secrets.is_secret(k, declared):
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                    assigns.append(f'"{k}=${{{k}:?set {k} (secret)}}"')
                else:  # not a shell variable name: it cannot be read from the shell
                    assigns.append(word(f"{k}={secrets.MASK}"))
            else:
                assigns.append(word(f"{k}={v}"))
        print(f"# {t.name} — on {t.endpoint.host}")
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
    if args.kind == "k8s":
        if not args.image:
            raise UserError("render k8s: --image IMAGE is required (the container that runs the program)")
        print(render.render_k8s(cluster, image=args.image, name=args.name, namespace=args.namespace), end="")
    else:
        print(render.render_slurm(cluster, partition=args.partition, time=args.time, name=args.name), end="")
    return 0


def cmd_launch(args) -> int:
    from .launch import launch_from_args
    return launch_from_args(args)


def cmd_status(args) -> int:
    from .runrecord import print_status
    return print_status(args.run_dir, args.file)
