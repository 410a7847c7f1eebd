"""The seed's task flags for absl programs: ``--ps_hosts --worker_hosts --job_name --task_index``.

``define_task_flags()`` defines them (plus ``--chief_hosts``) on absl's global FLAGS unless
they already exist; ``context_from_flags()`` builds the TaskContext: TF_CONFIG, overridden by
whichever of these flags were given on the command line.
"""
from __future__ import annotations

from typing import Optional

from tfcluster.runtime.context import TaskContext, task_context

TASK_FLAGS = ("ps_hosts", "worker_hosts", "chief_hosts", "job_name", "task_index")


def define_task_flags(flag_values=None) -> None:
    from absl import flags

    fv = flag_values or flags.FLAGS
    if "ps_hosts" not in fv:
        flags.DEFINE_string("ps_hosts", "", "Comma-separated list of hostname:port pairs (job ps)",
                            flag_values=fv)
    if "worker_hosts" not in fv:
        flags.DEFINE_string("worker_hosts", "", "Comma-separated list of hostname:port pairs "
                            "(job worker)", flag_values=fv)
    if "chief_hosts" not in fv:
        flags.DEFINE_string("chief_hosts", "", "Optional: hostname:port of the chief job",
                            flag_values=fv)
    if "job_name" not in fv:
        flags.DEFINE_string("job_name", "", "One of 'ps', 'worker', 'chief', 'evaluator'",
                            flag_values=fv)
    if "task_index" not in fv:
        flags.DEFINE_integer("task_index", 0, "Index of task within the job", flag_values=fv)


def context_from_flags(flag_values=None, environ=None) -> TaskContext:
    """The task context from TF_CONFIG and the task flags (flags win where given)."""
    from absl import flags

    fv = flag_values or flags.FLAGS

    def given(name: str) -> Optional[object]:
        if name not in fv:
            return None
        flag = fv[name]
        return flag.value if (flag.present or flag.value not in (None, "", flag.default)) else None

    return task_context(ps_hosts=given("ps_hosts") or None,
                        worker_hosts=given("worker_hosts") or None,
                        chief_hosts=given("chief_hosts") or None,
                        job_name=given("job_name") or None,
                        task_index=given("task_index"),
                        environ=environ)
