"""tfcluster: run distributed TensorFlow from one YAML file.

Importing tfcluster does not import TensorFlow; the parts that need it import it inside
the functions that use it.
"""
__version__ = "0.1.0"

from .config import Cluster, Task, TaskId, load, loads, from_dict  # noqa: E402,F401
from .errors import ConfigError, UserError  # noqa: E402,F401
from .progress import report_progress  # noqa: E402,F401
# The subpackage tfcluster.launch is loaded first, so that the name ``tfcluster.launch`` below
# stays the function (``from tfcluster.launch import View`` still finds the subpackage).
from . import launch as _launch_package  # noqa: E402,F401
from .runindex import resolve_run  # noqa: E402,F401


def launch(path_or_cluster=None, options=None, view=None, dry_run: bool = False) -> int:
    """Run a cluster file (or a loaded :class:`Cluster`; default ./cluster.yaml) to the end and
    return the exit code, as ``tfcluster launch`` does: the same warnings, checks, dry run and
    records. ``options``: :class:`tfcluster.plan.LaunchOptions`; ``view``:
    :class:`tfcluster.launch.View`."""
    from .cli import launch as _launch
    return _launch(path_or_cluster, options=options, view=view, dry_run=dry_run)
