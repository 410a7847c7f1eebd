"""Public import path for programs (``from tfcluster.keras import ProgressCallback``); the code
lives in :mod:`tfcluster.runtime.keras`, loaded on first use (it imports TensorFlow)."""


def __getattr__(name):
    if name == "ProgressCallback":
        from tfcluster.runtime.keras import ProgressCallback
        return ProgressCallback
    raise AttributeError(f"module 'tfcluster.keras' has no attribute {name!r}")
