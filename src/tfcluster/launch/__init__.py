"""``tfcluster launch``: supervise a run plan's tasks on a backend. See :mod:`.supervisor`.

The CLI (:mod:`tfcluster.cli`) is the composition root: it builds the plan
(:func:`tfcluster.plan.build_plan`), picks the backend (:mod:`tfcluster.backends`) and hands
both to a :class:`Supervisor`.
"""
from __future__ import annotations

import sys
import types

from .state import RunState, TaskState  # noqa: F401
from .launcher import SupervisedLauncher  # noqa: F401
from .supervisor import Supervisor, View  # noqa: F401


class _CallableModule(types.ModuleType):
    """Importing this subpackage makes it the attribute ``tfcluster.launch`` (Python's import
    system sets it), where the package's function :func:`tfcluster.launch` was: calling the
    subpackage calls that function, so ``tfcluster.launch(...)`` works before and after."""

    def __call__(self, *args, **kwargs):
        from .. import _launch_function
        return _launch_function(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
