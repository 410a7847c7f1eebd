"""``tfcluster launch``: supervise a run plan's tasks on a backend. See :mod:`.supervisor`.

The CLI (:mod:`tfcluster.cli`) is the composition root: it builds the plan
(:func:`tfcluster.plan.build_plan`), picks the backend (:mod:`tfcluster.backends`) and hands
both to a :class:`Supervisor`.
"""
from __future__ import annotations

from .state import RunState, TaskState  # noqa: F401
from .launcher import SupervisedLauncher  # noqa: F401
from .supervisor import Supervisor, View  # noqa: F401
