"""``tfcluster launch``: run a cluster, watch it, end it cleanly. See :mod:`.runner`."""
from __future__ import annotations

import os
from typing import Optional

from ..errors import UserError
from .backend import Backend, LocalBackend, ProcessSpec  # noqa: F401
from .runner import Options, Run
from .state import TaskState  # noqa: F401


def launch(path_or_cluster, options: Optional[Options] = None, backend: Optional[Backend] = None) -> int:
    """Run a cluster file (or a loaded Cluster) to the end; returns the exit code."""
    from .. import config
    cluster = config.load(path_or_cluster) if isinstance(path_or_cluster, str) else path_or_cluster
    if not cluster.resolved:
        from ..cli import assign_local_ports
        cluster = assign_local_ports(cluster)
    return Run(cluster, options or Options(), backend=backend).run()


def launch_from_args(args) -> int:
    from .. import config
    cluster = config.load(args.file)
    backend_name = args.backend or _default_backend(cluster, args)
    if backend_name == "slurm":
        from ..backends import slurm
        return slurm.launch(cluster, args)
    if not cluster.resolved:
        if backend_name != "local":
            raise UserError(f"cluster.{cluster.count_jobs[0]}: a task count needs the local or slurm "
                            f"backend; list host:port entries for --backend {backend_name}")
        from ..cli import assign_local_ports
        cluster = assign_local_ports(cluster)
    backend: Backend
    if backend_name == "ssh":
        from ..backends.ssh import SshBackend
        backend = SshBackend(cluster, stop_timeout=args.stop_timeout)
    else:
        backend = LocalBackend()
    opts = Options(
        command=list(args.program or []), command_cwd=os.getcwd(), task_flags=args.task_flags,
        success=args.success, grace=args.grace, restart=args.restart, max_restarts=args.max_restarts,
        logdir=args.logdir, run_id=args.run_id, dry_run=args.dry_run, quiet=args.quiet,
        live=False if args.no_live else None, hosts=args.host or None,
        stop_timeout=args.stop_timeout)
    if backend_name == "ssh" and not args.host:
        opts.hosts = sorted({t.endpoint.host for t in cluster.tasks})
    return Run(cluster, opts, backend=backend).run()


def _default_backend(cluster, args) -> str:
    from ..hosts import is_local
    if args.host:
        return "local"
    if cluster.resolved and not all(is_local(t.endpoint.host) for t in cluster.tasks):
        return "ssh"
    return "local"
