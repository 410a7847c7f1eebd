"""tfcluster: run distributed TensorFlow from one YAML file.

Importing tfcluster does not import TensorFlow; the parts that need it import it inside
the functions that use it.
"""
__version__ = "0.1.0"

from .config import Cluster, Task, TaskId, load, loads, from_dict  # noqa: E402,F401
from .errors import ConfigError, UserError  # noqa: E402,F401
from .progress import report_progress  # noqa: E402,F401
