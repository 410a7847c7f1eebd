"""Public import path for programs (``from tfcluster.progress import report_progress``); the code
lives in :mod:`tfcluster.plan.progress`."""
from tfcluster.plan.progress import report_progress  # noqa: F401
