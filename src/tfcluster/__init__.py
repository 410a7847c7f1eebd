"""tfcluster: run distributed TensorFlow from one YAML file.

Importing tfcluster does not import TensorFlow; the parts that need it import it inside
the functions that use it.
"""
from tfcluster.version import __version__  # noqa: F401 (tfcluster.__version__)

# Every task that imports tfcluster.runtime (trainer.py, examples) runs this file first: keep
# it light. The names below load their modules on first use (PEP 562: the file model with
# pydantic, the errors, the progress protocol, the run index), and launch() imports the launcher
# only when it is called: that saves each task about a quarter of a second of CPU before its
# first step.
_LAZY = {
    "Cluster": "clusterfile.config", "Task": "clusterfile.config", "TaskId": "clusterfile.config",
    "load": "clusterfile.config",
    "loads": "clusterfile.config", "from_dict": "clusterfile.config", "ConfigError": "errors", "UserError": "errors",
    "report_progress": "plan.progress", "resolve_run": "runs.index",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfcluster' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


def launch(path_or_cluster=None, options=None, view=None, dry_run: bool = False) -> int:
    """Run a cluster file (or a loaded :class:`Cluster`; default ./cluster.yaml) to the end and
    return the exit code, as ``tfcluster launch`` does: the same warnings, checks, dry run and
    records. ``options``: :class:`tfcluster.plan.runplan.LaunchOptions`; ``view``:
    :class:`tfcluster.drivers.display.View`."""
    from tfcluster.cli.launching import launch as _launch
    return _launch(path_or_cluster, options=options, view=view, dry_run=dry_run)
