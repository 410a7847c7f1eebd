"""Public import path for programs (``from tfcluster.contract import restart_count, supervised``); the code
lives in :mod:`tfcluster.plan.contract`."""
from tfcluster.plan.contract import restart_count, supervised  # noqa: F401
