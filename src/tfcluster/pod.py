"""``python -m tfcluster.pod [--task-flags] -- CMD ARGS``: the entry point of a JobSet pod.

It needs no Kubernetes client: every pod of a ``tfcluster render jobset`` JobSet gets the same
cluster layout in ``TFCLUSTER_JOBSET`` (JSON, written by :mod:`tfcluster.jobset`) and its own
place in the JobSet through the downward API and the Job controller:

==============================  ===============================================================
``TFCLUSTER_JOBSET_NAME``       annotation ``jobset.sigs.k8s.io/jobset-name``
``TFCLUSTER_REPLICATED_JOB``    annotation ``jobset.sigs.k8s.io/replicatedjob-name``
``TFCLUSTER_JOB_INDEX``         annotation ``jobset.sigs.k8s.io/job-index`` (the Job's index
                                within its replicated job)
``JOB_COMPLETION_INDEX``        set by the Job controller in every pod of an Indexed Job
==============================  ===============================================================

JobSet gives the pod with those values the host name
``<jobset>-<replicated job>-<job index>-<pod index>`` in the subdomain of its headless service,
so every task's address is known without asking the API server. From these the entry point
builds TensorFlow's cluster dict (the ``evaluator`` left out, TensorFlow's rule), sets
``TF_CONFIG`` (and, with ``--task-flags``, appends ``--job_name --task_index --<job>_hosts``)
and replaces itself with the program (``os.execvp``).

Only the standard library is used here (the module is run in the pod's image).
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Mapping, Tuple

from .rules import EXIT_BAD_INPUT

LAYOUT_ENV = "TFCLUSTER_JOBSET"
NAME_ENV = "TFCLUSTER_JOBSET_NAME"
RJOB_ENV = "TFCLUSTER_REPLICATED_JOB"
JOB_INDEX_ENV = "TFCLUSTER_JOB_INDEX"
POD_INDEX_ENV = "JOB_COMPLETION_INDEX"
# Where the pod-specific values come from (pod annotations, read through the downward API).
DOWNWARD_ANNOTATIONS = {
    NAME_ENV: "jobset.sigs.k8s.io/jobset-name",
    RJOB_ENV: "jobset.sigs.k8s.io/replicatedjob-name",
    JOB_INDEX_ENV: "jobset.sigs.k8s.io/job-index",
}
EXIT_USAGE = EXIT_BAD_INPUT


class PodError(Exception):
    """A pod that cannot work out its task (a missing or malformed variable)."""


def host_name(jobset: str, rjob: str, job_index: int, pod_index: int, subdomain: str) -> str:
    """JobSet's stable name for a pod: ``<jobset>-<rjob>-<job index>-<pod index>.<subdomain>``."""
    return f"{jobset}-{rjob}-{job_index}-{pod_index}.{subdomain}"


def cluster_dict(layout: Mapping[str, Any], jobset: str) -> Dict[str, List[str]]:
    """TensorFlow's cluster dict for the JobSet (evaluator left out)."""
    out: Dict[str, List[str]] = {}
    for job, spec in layout["jobs"].items():
        if job == "evaluator":
            continue
        out[job] = [f"{host_name(jobset, spec['rjob'], i // spec['pods'], i % spec['pods'], layout['subdomain'])}"
                    f":{layout['port']}" for i in range(spec["replicas"] * spec["pods"])]
    return out


def task_of(layout: Mapping[str, Any], env: Mapping[str, str]) -> Tuple[str, int]:
    """(TensorFlow job, task index) of this pod."""
    rjob = _need(env, RJOB_ENV)
    for job, spec in layout["jobs"].items():
        if spec["rjob"] == rjob:
            break
    else:
        raise PodError(f"{RJOB_ENV}: replicated job '{rjob}' is not in {LAYOUT_ENV} "
                       f"(replicated jobs: {', '.join(s['rjob'] for s in layout['jobs'].values())})")
    job_index = _index(env, JOB_INDEX_ENV, spec["replicas"])
    pod_index = _index(env, POD_INDEX_ENV, spec["pods"])
    return job, job_index * spec["pods"] + pod_index


def tf_config(layout: Mapping[str, Any], env: Mapping[str, str]) -> Dict[str, Any]:
    job, index = task_of(layout, env)
    return {"cluster": cluster_dict(layout, _need(env, NAME_ENV)), "task": {"type": job, "index": index}}


def task_flags(config: Mapping[str, Any]) -> List[str]:
    """The seed's flags for the task in ``config`` (a TF_CONFIG dict)."""
    task = config["task"]
    return ([f"--job_name={task['type']}", f"--task_index={task['index']}"]
            + [f"--{job}_hosts={','.join(hosts)}" for job, hosts in config["cluster"].items()])


def read_layout(env: Mapping[str, str]) -> Dict[str, Any]:
    text = _need(env, LAYOUT_ENV)
    try:
        layout = json.loads(text)
        for spec in layout["jobs"].values():
            spec["rjob"], spec["replicas"], spec["pods"]  # noqa: B018 - presence check
        layout["subdomain"], layout["port"]  # noqa: B018
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PodError(f"{LAYOUT_ENV}: not a tfcluster JobSet layout ({type(e).__name__}: {e})")
    return layout


def _need(env: Mapping[str, str], key: str) -> str:
    value = env.get(key, "")
    if not value:
        where = DOWNWARD_ANNOTATIONS.get(key)
        raise PodError(f"{key} is not set" + (f" (the pod annotation {where}, through the downward API)"
                                              if where else ""))
    return value


def _index(env: Mapping[str, str], key: str, count: int) -> int:
    text = _need(env, key)
    if not text.isdigit() or int(text) >= count:
        raise PodError(f"{key}={text!r} is not an index below {count}")
    return int(text)


def main(argv: List[str]) -> int:
    flags = False
    if argv and argv[0] == "--task-flags":
        flags, argv = True, argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m tfcluster.pod [--task-flags] -- PROGRAM [ARGS...]", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = tf_config(read_layout(os.environ), os.environ)
    except PodError as e:
        print(f"tfcluster.pod: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    os.environ["TF_CONFIG"] = json.dumps(config, separators=(",", ":"))
    os.environ["TFCLUSTER_TASK"] = f"{config['task']['type']}:{config['task']['index']}"
    if flags:
        argv = argv + task_flags(config)
    sys.stdout.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"tfcluster.pod: error: cannot run {argv[0]!r}: {e.strerror or e}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
