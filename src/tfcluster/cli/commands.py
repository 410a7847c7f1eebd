"""The handlers of the ``tfcluster`` subcommands, one ``cmd_*`` function each, taking the parsed
command line and returning the exit code (a UserError is exit 2); :data:`COMMANDS` names them.
``launch`` is carried out by :mod:`tfcluster.cli.launching`; TensorFlow is imported only by the
subcommands that run it (``hello``, ``serve``)."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from tfcluster.cli.launching import cluster_file, launch_request, run_launch
from tfcluster.cli.parser import build_parser
from tfcluster.cli.slurm_flags import SlurmFlags
from tfcluster.core import messages
from tfcluster.errors import UserError
from tfcluster.terminal import printable

if TYPE_CHECKING:
    from tfcluster.clusterfile.config import Cluster


# ------------------------------------------------------------------ launch
def cmd_launch(args: argparse.Namespace) -> int:
    """``tfcluster launch`` (main passes the program after '--' through :func:`launch_request`)."""
    request = launch_request(args)
    return run_launch(request)


def cmd_doctor(args: argparse.Namespace) -> int:
    """``tfcluster doctor [FILE]``: every host of the file checked the way the tasks meet it."""
    from tfcluster.backends import doctor
    from tfcluster.clusterfile import config
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    cluster = config.load(cluster_file(args.file, runs=True))     # doctor runs ssh: as launch
    return doctor.run(build_plan(cluster, LaunchOptions(backend=args.backend, network=args.network)),
                      cluster)


# ------------------------------------------------------------------ the cluster file
def _load(path: Optional[str], assign_counts: bool = False) -> Cluster:
    """The cluster file (:func:`~tfcluster.cli.launching.cluster_file`), loaded; with
    ``assign_counts``, a job given as a count gets the ports the local backend would give it."""
    from tfcluster.clusterfile import config
    cluster = config.load(cluster_file(path))
    if assign_counts and not cluster.resolved:
        placed = _placed(cluster)
        if placed:     # ssh: on the hosts' slots; a launch chooses free ports there at the start
            from tfcluster.plan.runplan import assign_placed_ports
            cluster = assign_placed_ports(cluster, placed)
            print(f"tfcluster: note: {', '.join(cluster.count_jobs)} given as a count, placed on the "
                  f"slots of hosts:; ports here from {cluster.base_port} on each host, where a launch "
                  f"chooses free ones on each host at the start", file=sys.stderr)
            return cluster
        from tfcluster.plan.runplan import assign_local_ports
        cluster = assign_local_ports(cluster)
        print(f"tfcluster: note: {', '.join(cluster.count_jobs)} given as a count; "
              f"ports assigned as the local backend would (from {cluster.base_port})",
              file=sys.stderr)
    return cluster


def cmd_validate(args: argparse.Namespace) -> int:
    from tfcluster.clusterfile import secrets
    from tfcluster.net.addresses import is_local
    cluster = _load(args.file)
    declared = cluster.secret_names
    for w in cluster.warnings:
        print(f"tfcluster: warning: {printable(cluster.source)}: {w}", file=sys.stderr)
    refused = None if args.file_only else _launch_checks(cluster)
    if refused:   # the file is valid; launching it here is not (yet): say so, and exit 2 below
        for line in refused.splitlines():
            print(printable(f"tfcluster: error: launch would refuse this file here: {line}"),
                  file=sys.stderr)
    if args.json:
        out = {"source": cluster.source, "success": cluster.success, "chief": str(cluster.chief),
               "logdir": cluster.logdir, "secrets": sorted(declared),
               "warnings": list(cluster.warnings), "tasks": []}
        for t in cluster.tasks:
            env = dict(t.env)
            hidden = (secrets.argv_secret_values(list(t.command) + list(t.args), declared)
                      + secrets.secret_values(env, declared=declared))
            out["tasks"].append({
                "task": t.name, "endpoint": str(t.endpoint) if t.endpoint else None,
                "local": bool(t.endpoint and is_local(t.endpoint.host)),
                "argv": secrets.mask_argv(list(t.command) + list(t.args), declared,
                                          secrets.secret_values(env, declared=declared)),
                "cwd": t.cwd, "task_flags": t.task_flags,
                "gpus": t.gpus, "env": secrets.mask_env(env, declared, hidden), "restart": t.restart.policy})
        if cluster.resolved:
            out["cluster_spec"] = cluster.cluster_spec_dict()
        out["ssh"] = {h: argv for h, argv in _ssh_commands(cluster)}
        out["launch_refused"] = refused
        print(json.dumps(out, indent=2))
        return 2 if refused else 0
    n = len(cluster.tasks)
    verdict = ("valid as a file, but launch would refuse it here (see the error; --file-only "
               "checks the file alone)") if refused else "ok"
    print(printable(f"{cluster.source}: {verdict} — {n} task{'s' if n != 1 else ''} in "
                    f"{len(cluster.jobs)} job{'s' if len(cluster.jobs) != 1 else ''}; "
                    f"chief: {cluster.chief}; success: {cluster.success}; "
                    f"restart: {cluster.restart.policy}; logdir: {os.path.relpath(cluster.logdir)}"))
    elastic = getattr(cluster.spec, "elastic", None)
    if elastic is not None:
        from tfcluster.core.messages import elastic_line
        from tfcluster.plan.backend_kind import recorded_kind
        kind = recorded_kind(getattr(args, "backend", None) or getattr(cluster.spec, "backend", None))
        n = sum(1 for t in cluster.tasks if t.job == "worker")
        top = getattr(elastic, "max_workers", None)
        top = top if top is not None and top >= n else None   # (fewer: the plan's error says so)
        print(elastic_line(elastic.min_workers, top or n, elastic.on_change,
                           kind.name if kind.rejoins_at_new_address else "", cluster.jobs,
                           start=n if top else None))
    width = max(len(t.name) for t in cluster.tasks)
    placed = _placed(cluster)
    for t in cluster.tasks:
        ep = str(t.endpoint) if t.endpoint else (f"{placed[t.name]}, port chosen at the start"
                                                  if t.name in placed else "(assigned at launch)")
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
    for host, argv in _ssh_commands(cluster):
        print(printable(f"  ssh to {host}: {' '.join(shlex.quote(w) for w in argv)}"))
    return 2 if refused else 0


def _placed(cluster: Cluster) -> Dict[str, str]:
    """task -> host of an ssh file's count jobs on its hosts' slots (as launch places them)."""
    from tfcluster.plan.backend_kind import HOST_SLOTS, backend_kind
    from tfcluster.plan.runplan import default_backend, place_on_hosts
    kind = backend_kind(cluster.spec.backend or default_backend(cluster))
    if cluster.resolved or kind.count_layout != HOST_SLOTS:
        return {}
    try:
        return place_on_hosts(cluster)
    except UserError:           # the launch checks say why (below)
        return {}


def _ssh_commands(cluster: Cluster) -> List[Tuple[str, List[str]]]:
    """(host, the ssh client's argv) for every remote host of an ssh file: every option shows."""
    from tfcluster.plan.backend_kind import backend_kind
    from tfcluster.plan.runplan import default_backend
    if not backend_kind(cluster.spec.backend or default_backend(cluster)).over_ssh:
        return []
    from tfcluster.backends.ssh import remote_settings, ssh_argv
    from tfcluster.net.addresses import is_local
    hosts = []
    placed = _placed(cluster)
    for t in cluster.tasks:
        h = t.endpoint.host if t.endpoint else placed.get(t.name)
        if h and h not in hosts and (h in cluster.spec.hosts or not is_local(h)):
            hosts.append(h)
    return [(h, ssh_argv(remote_settings(cluster, h), h)) for h in hosts]


def _launch_checks(cluster: Cluster) -> Optional[str]:
    """What ``launch FILE`` would refuse here before starting anything (None: nothing), so that
    validate does not say a bare ok for it: the plan's checks (a count job on ssh, no task on
    this machine, the file's slurm: options) and, when the file has a program, the program
    checks on this machine's tasks (a missing program, script or folder; legacy Keras without
    tf_keras)."""
    from tfcluster.plan.runplan import LaunchOptions, build_plan
    try:
        slurm = SlurmFlags().over(cluster.spec.slurm)     # the file's slurm:, checked
        plan = build_plan(cluster, LaunchOptions(run_id="validate", slurm=slurm), need_program=False)
    except UserError as e:
        return e.message
    from tfcluster.drivers.preflight import port_problems
    problems = port_problems(plan)
    if plan.kind.reaches_other_hosts or any(not t.argv for t in plan.tasks):
        return "\n".join(problems) or None
    from tfcluster.backends.local import LocalBackend
    from tfcluster.drivers.preflight import program_problems
    return "\n".join(problems + program_problems(plan, LocalBackend())) or None


def cmd_tf_config(args: argparse.Namespace) -> int:
    file, task = args.file, args.task
    if task is None and file is not None and ":" in file and not os.path.exists(file):
        file, task = None, file        # tfcluster tf-config worker:1 (./cluster.yaml)
    if task is None:
        raise UserError("tf-config: give a task, JOB:INDEX, for example: tfcluster tf-config worker:1")
    cluster = _load(file, assign_counts=True)
    print(json.dumps(cluster.tf_config(task), indent=2))
    return 0


def cmd_commands(args: argparse.Namespace) -> int:
    """One shell line per task. Every word is quoted (keys too: ``'K=V'``); a word with a control
    character (a newline, ESC) is written in bash's ``$'...'`` form, so that each task stays one
    line and nothing raw reaches the terminal; a secret variable is read from the environment of
    the shell the line is pasted into (``"K=${K:?set K}"``) instead of printing its value."""
    import re

    from tfcluster.clusterfile import secrets

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


def cmd_schema(args: argparse.Namespace) -> int:
    from tfcluster.clusterfile.models import json_schema
    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from tfcluster.clusterfile import config
    from tfcluster.k8s.tfjob_import import MAX_BYTES, import_tfjob, render_file
    source = "<stdin>" if args.tfjob == "-" else args.tfjob
    try:
        if args.tfjob == "-":
            text = sys.stdin.read(MAX_BYTES + 1)
        else:   # a regular file only: a FIFO or a device is refused at once, never waited on
            from tfcluster import safe_files
            data_bytes = safe_files.read_bytes(args.tfjob, MAX_BYTES, follow=True,
                                               what="give a manifest file, or - for stdin")
            if data_bytes is None:
                raise UserError(f"{printable(source)}: no such file")
            text = data_bytes.decode("utf-8")
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
        # a new file of the caller's: one that exists (another user's 0666 file made first, a
        # FIFO, a link) is never written into
        try:
            fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            raise UserError(f"-o: {printable(args.output)} exists already; choose another name, "
                            f"or remove it first")
        except OSError as e:
            raise UserError(f"{printable(args.output)}: cannot be written ({e.strerror or e})")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(out)
    else:
        print(out, end="")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
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
        slurm = SlurmFlags.from_args(args).over(cluster.spec.slurm)
        print(render.render_slurm(cluster, name=args.name, slurm=slurm, args=args.arg), end="")
    return 0


# ------------------------------------------------------------------ runs from anywhere
def _run_record(run: Optional[str]) -> Tuple[str, dict]:
    from tfcluster.runs.index import resolve_run
    from tfcluster.runs.run_file import read_run
    run_dir = resolve_run(run)
    return run_dir, read_run(run_dir)


def cmd_logs(args: argparse.Namespace) -> int:
    from tfcluster.runs import logs
    run, task = args.run, args.task
    if task is None and run is not None and logs.looks_like_task(run):
        from tfcluster.runs.index import is_run_dir, lookup
        if not is_run_dir(run) and lookup(run) is None:
            run, task = None, run          # tfcluster logs worker:1 (the latest run)
    from tfcluster.runs.index import choose_run
    from tfcluster.runs.run_file import read_run
    run_dir, how = choose_run(run)
    record = read_run(run_dir)
    if how:       # without RUN: say which run this is (the index holds every folder's runs)
        print(printable(f"tfcluster: logs of run {record.get('run_id') or os.path.basename(run_dir)} "
                        f"({how}): {run_dir}"), file=sys.stderr)
    if args.follow:
        if args.attempt is not None:
            raise UserError("--attempt: -f follows the current attempt; give one or the other")
        from tfcluster.runs.result import derive_result
        from tfcluster.runs.run_file import read_run

        def running() -> bool:
            return derive_result(read_run(run_dir)) == "running"
        return logs.follow(run_dir, record, task, running, raw=args.raw)
    return logs.show(run_dir, record, task, args.attempt, raw=args.raw)


def cmd_stop(args: argparse.Namespace) -> int:
    from tfcluster.runs.control import stop_run
    from tfcluster.runs.index import resolve_run
    return stop_run(resolve_run(args.run), timeout=args.timeout)


def cmd_exec(args: argparse.Namespace) -> int:
    from tfcluster.runs.index import resolve_run
    from tfcluster.runs.inside import exec_in_run
    return exec_in_run(resolve_run(args.run), args.command)


def cmd_stack(args: argparse.Namespace) -> int:
    from tfcluster.runs import logs
    from tfcluster.runs.index import is_run_dir, lookup, resolve_run
    from tfcluster.runs.stack import show_stacks
    run, tasks = args.run, list(args.tasks)
    if run is not None and logs.looks_like_task(run) and not is_run_dir(run) and lookup(run) is None:
        run, tasks = None, [run] + tasks        # tfcluster stack worker:1 (the latest run)
    return show_stacks(resolve_run(run), tasks, native=args.native)


def cmd_attach(args: argparse.Namespace) -> int:
    from tfcluster.runs.attach import attach
    from tfcluster.runs.index import resolve_run
    return attach(resolve_run(args.run))


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from tfcluster.runs.control import tensorboard
    run_dir, record = _run_record(args.run)
    return tensorboard(run_dir, record, port=args.port, host=args.bind, print_only=args.print_only,
                       profile=args.profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from tfcluster.runs.profile import profile_run
    run_dir, record = _run_record(args.run)
    tasks = [t.strip() for t in (args.tasks or "").split(",") if t.strip()]
    return profile_run(run_dir, record, seconds=args.seconds, tasks=tasks, run_arg=args.run)


def _run_arg(run: Optional[str]) -> Optional[str]:
    """A run folder or logdir as given, else a run id from the user's run index."""
    if run and not os.path.exists(run):
        from tfcluster.runs.index import lookup
        return lookup(run) or run
    return run


def cmd_status(args: argparse.Namespace) -> int:
    from tfcluster.runs.status import print_status
    return print_status(_run_arg(args.run_dir), args.file, as_json=args.json)


def cmd_runs(args: argparse.Namespace) -> int:
    from tfcluster.runs.index import here_first, index_path, runs
    from tfcluster.runs.status import print_runs

    def indexed():
        found, here = here_first(runs())
        return [d for d, _ in found], (f"runs of this folder in your run index, {index_path()}"
                                       if here else f"runs of every folder in your run index, "
                                       f"{index_path()} (none of this folder)")
    return print_runs(args.logdir, args.file, as_json=args.json, indexed=indexed)


def cmd_report(args: argparse.Namespace) -> int:
    from tfcluster.runs.find import find_run
    from tfcluster.runs.report import write_report
    run_dir, _ = find_run(_run_arg(args.run_dir), args.file)
    print(write_report(run_dir, args.output))
    return 0


# ------------------------------------------------------------------ help, completion, built-in programs
def cmd_help(args: argparse.Namespace) -> int:
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


def cmd_completion(args: argparse.Namespace) -> int:
    from tfcluster.cli import completion
    if args.values:
        print("\n".join(completion.values(args.values, file=args.file or args.shell, run=args.run)))
        return 0
    if args.shell not in ("bash", "zsh"):
        raise UserError("completion: give a shell, bash or zsh: eval \"$(tfcluster completion bash)\"")
    script = completion.bash_script if args.shell == "bash" else completion.zsh_script
    print(script(build_parser()), end="")
    return 0


def cmd_hello(args: argparse.Namespace) -> int:
    from tfcluster.cli.hello import hello
    return hello(args.file)


def cmd_serve(args: argparse.Namespace) -> int:
    from tfcluster.runtime import exit_now
    from tfcluster.runtime.serve import main as serve_main
    # A live TensorFlow server makes interpreter teardown slow: end the process at once.
    exit_now(int(serve_main(args.rest) or 0))
    return 0


#: each subcommand's handler, by name (:func:`tfcluster.cli.main.build_parser` binds them)
COMMANDS: Dict[str, Callable[[argparse.Namespace], int]] = {
    "launch": cmd_launch, "doctor": cmd_doctor, "validate": cmd_validate, "tf-config": cmd_tf_config,
    "commands": cmd_commands, "status": cmd_status, "runs": cmd_runs, "report": cmd_report,
    "hello": cmd_hello, "logs": cmd_logs, "stop": cmd_stop, "stack": cmd_stack, "attach": cmd_attach,
    "tensorboard": cmd_tensorboard, "profile": cmd_profile, "completion": cmd_completion,
    "help": cmd_help, "render": cmd_render, "import": cmd_import, "schema": cmd_schema, "exec": cmd_exec,
    "serve": cmd_serve,
}
