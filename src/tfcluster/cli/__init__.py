"""The ``tfcluster`` command: the composition root."""
