"""tfcluster: run distributed TensorFlow from one YAML file.

The public API is the names of :data:`PUBLIC` (and ``__all__``), importable from here, and the
import paths ``tfcluster.progress``, ``tfcluster.contract``, ``tfcluster.keras`` and
``tfcluster.runtime`` (docs/RUNTIME.md); docs/API.md says what each takes, returns and raises.
Every other module is internal: its names may change between versions.

Importing tfcluster does not import TensorFlow; the parts that need it import it inside
the functions that use it.
"""
from tfcluster.version import __version__

# Every task that imports tfcluster.runtime (trainer.py, examples) runs this file first: keep
# it light. The names below load their modules on first use (PEP 562: the file model with
# pydantic, the errors, the progress protocol, the run index), and launch() imports the launcher
# only when it is called: that saves each task about a quarter of a second of CPU before its
# first step.

#: The public API: each name a program may import from tfcluster, and the module that holds it
#: (loaded on first use). ``launch`` is defined here.
PUBLIC = {
    # the launch call and its options (its result is the exit code)
    "LaunchOptions": "plan.launch_options",
    # the cluster file model
    "Cluster": "clusterfile.config", "Task": "clusterfile.config", "TaskId": "clusterfile.config",
    "load": "clusterfile.config", "loads": "clusterfile.config", "from_dict": "clusterfile.config",
    "ConfigError": "errors", "UserError": "errors",
    # what programs and trainers use at run time
    "report_progress": "plan.progress", "restart_count": "plan.contract",
    "supervised": "plan.contract", "resolve_run": "runs.index",
}

__all__ = ["__version__", "launch", *PUBLIC]


def __getattr__(name):
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'tfcluster' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def launch(path_or_cluster=None, options=None, dry_run: bool = False, quiet: bool = False) -> int:
    """Run a cluster to the end, as ``tfcluster launch`` does: the same warnings, checks, dry
    run and records (the run folder under the file's ``logdir``).

    Args:
        path_or_cluster: a cluster file's path, a :class:`Cluster` (from :func:`load`,
            :func:`loads` or :func:`from_dict`), or None for ``./cluster.yaml``.
        options: a :class:`LaunchOptions` (the command line's flags); None: the file's values.
        dry_run: print what would run (each task's command and TF_CONFIG) and start nothing.
        quiet: print only warnings, errors and the result (``--quiet``).

    Returns:
        The exit code: 0 when the run succeeded (or the dry run was made), 1 when it failed,
        128+N when signal N stopped it (130: Ctrl-C).

    Raises:
        ConfigError: the cluster file's problems, each naming its field.
        UserError: other bad input (a flag of ``options``, a taken port, no program), one
            line naming it; the command line prints it and exits 2.
        TypeError: ``options`` is not a :class:`LaunchOptions`.
    """
    from tfcluster.plan.launch_options import LaunchOptions
    if options is not None and not isinstance(options, LaunchOptions):
        raise TypeError(f"options: a tfcluster.LaunchOptions, not {type(options).__name__}")
    from tfcluster.cli.launching import launch as _launch
    return _launch(path_or_cluster, options=options, quiet=quiet, dry_run=dry_run)
