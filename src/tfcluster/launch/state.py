"""The life of a task and of a run: written down once, in :mod:`tfcluster.machine`."""
from __future__ import annotations

from ..machine import (ALLOWED, RunState, TaskState, TransitionError,  # noqa: F401 (re-exported)
                       check_transition)
from ..rules import describe_exit  # noqa: F401 (re-exported: the launcher's word for an exit)
