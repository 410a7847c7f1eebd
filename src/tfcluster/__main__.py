"""``python -m tfcluster``: the ``tfcluster`` command (:func:`tfcluster.cli.main.console`)."""
from tfcluster.cli.main import console

console()
