"""The life of a task, written down once."""
from __future__ import annotations

import enum
import signal
from typing import Optional


class TaskState(str, enum.Enum):
    """State of one task in a run.

    PENDING     not started yet (or waiting out a restart backoff)
    RUNNING     its process is alive
    SUCCEEDED   it exited 0 by itself
    FAILED      it exited non-zero or died by a signal that tfcluster did not send
    RESTARTING  it failed and will be started again (restart policy), after a backoff
    STOPPING    tfcluster sent it SIGTERM and waits for it to exit
    STOPPED     tfcluster ended it (SIGTERM, then SIGKILL after the stop timeout)
    SKIPPED     its host is not this machine; the local backend does not start it

    PENDING -> RUNNING -> SUCCEEDED | FAILED | STOPPING -> STOPPED;
    FAILED -> RESTARTING -> RUNNING (while the restart budget lasts).
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
    def done(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.SKIPPED)


def describe_exit(returncode: Optional[int]) -> str:
    """'exit 7', 'SIGKILL', or '' while running."""
    if returncode is None:
        return ""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit {returncode}"
