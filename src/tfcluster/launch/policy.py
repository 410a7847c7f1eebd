"""Restart policies: should a failed task be started again? Pure logic, no processes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

POLICIES = ("never", "on-failure", "exit-code")


@dataclass(frozen=True)
class Decision:
    restart: bool
    reason: str
    delay: float = 0.0


def decide(policy: str, returncode: int, restarts: int, max_restarts: int,
           total_restarts: int = 0, max_total_restarts: Optional[int] = None,
           backoff: float = 1.0) -> Decision:
    """Whether a task that ended with ``returncode`` (negative: killed by signal -returncode)
    is restarted, having been restarted ``restarts`` times (the run: ``total_restarts``).

    never       never restart.
    on-failure  restart after any non-zero exit or signal.
    exit-code   Kubeflow TFJob's rule: exit codes 1-127 are permanent errors (no restart);
                128-255 and deaths by signal are retryable.
    The delay doubles with each restart of the task: backoff, 2*backoff, 4*backoff, ... (max 30 s).
    """
    if returncode == 0:
        return Decision(False, "exited 0")
    if policy == "never":
        return Decision(False, "restart policy is never")
    if policy == "exit-code":
        if 1 <= returncode <= 127:
            return Decision(False, f"exit code {returncode} is a permanent error (exit-code policy: "
                                   f"1-127 are not retried)")
    elif policy != "on-failure":
        raise ValueError(f"unknown restart policy {policy!r}")
    if restarts >= max_restarts:
        return Decision(False, f"restart budget spent ({restarts} of {max_restarts})")
    if max_total_restarts is not None and total_restarts >= max_total_restarts:
        return Decision(False, f"the run's restart budget is spent ({total_restarts} of "
                               f"{max_total_restarts})")
    return Decision(True, f"restart {restarts + 1} of {max_restarts}",
                    delay=min(30.0, backoff * (2 ** restarts)))
