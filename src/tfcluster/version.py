"""tfcluster's version, on the ground floor: the package's ``__init__`` and ``tfcluster
--version`` both read it here."""
__version__ = "0.1.0"
