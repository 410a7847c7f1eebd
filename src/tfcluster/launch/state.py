"""The life of a task and of a run, written down once."""
from __future__ import annotations

import enum

from ..rules import describe_exit  # noqa: F401 (re-exported: the launcher's word for an exit)


class TaskState(str, enum.Enum):
    """State of one task in a run.

    PENDING     not started yet
    RUNNING     its process is alive
    SUCCEEDED   it exited 0 by itself
    FAILED      it exited non-zero or died by a signal that tfcluster did not send
    RESTARTING  it failed and will be started again (restart policy), after a backoff
    STOPPING    tfcluster sent it SIGTERM (or SIGKILL) and waits for it to exit
    STOPPED     tfcluster ended it, or the run ended before it (re)started
    SKIPPED     it runs on another host; this launcher does not start it

    PENDING -> RUNNING | STOPPED;  RUNNING -> SUCCEEDED | FAILED | STOPPING;
    FAILED -> RESTARTING -> RUNNING | STOPPED;  STOPPING -> STOPPED.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SKIPPED = "skipped"

    @property
    def alive(self) -> bool:
        """A process exists for the task."""
        return self in (TaskState.RUNNING, TaskState.STOPPING)


ALLOWED = {
    TaskState.PENDING: {TaskState.RUNNING, TaskState.STOPPED},
    TaskState.RUNNING: {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPING},
    TaskState.FAILED: {TaskState.RESTARTING},
    TaskState.RESTARTING: {TaskState.RUNNING, TaskState.STOPPED},
    TaskState.STOPPING: {TaskState.STOPPED},
    TaskState.SUCCEEDED: set(),
    TaskState.STOPPED: set(),
    TaskState.SKIPPED: set(),
}


class TransitionError(RuntimeError):
    """A state change the task's life does not allow: a bug in tfcluster, not bad input."""


def check_transition(old: TaskState, new: TaskState, task: str = "") -> TaskState:
    """``new`` if ``old -> new`` is allowed, else TransitionError."""
    if new not in ALLOWED[old]:
        raise TransitionError(f"{task}: {old.value} -> {new.value} is not a transition of a task")
    return new


class RunState(str, enum.Enum):
    """The result of a run as run.json records it. ``lost`` is not written by a launcher: it is
    what ``tfcluster status`` calls a ``running`` record whose launcher is gone."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    LOST = "lost"
