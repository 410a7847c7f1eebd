"""``python -m tfcluster.k8s.pod [OPTIONS] -- CMD ARGS``: the entry point of every rendered pod.

Each pod of ``tfcluster render k8s`` (TFJob), ``render jobset`` (JobSet) and ``render trainjob``
(Kubeflow Trainer v2) runs its program through this module, which gives the program the task
contract of :mod:`tfcluster.plan.contract` -- the same as a task started by ``tfcluster launch`` --
and then replaces itself with the program (``os.execvp``). It needs no Kubernetes client.

Where the task comes from
  *JobSet and TrainJob pods*: every pod gets the same cluster layout in ``TFCLUSTER_JOBSET``
  (JSON, written by :mod:`tfcluster.k8s.jobset`) and its own place in the JobSet through the
  downward API and the Job controller:

  ==================================  ==========================================================
  ``TFCLUSTER_JOBSET_NAME``           annotation ``jobset.sigs.k8s.io/jobset-name``
  ``TFCLUSTER_REPLICATED_JOB``        annotation ``jobset.sigs.k8s.io/replicatedjob-name``
  ``TFCLUSTER_JOB_INDEX``             annotation ``jobset.sigs.k8s.io/job-index`` (the Job's
                                      index within its replicated job)
  ``TFCLUSTER_JOBSET_RESTART``        annotation ``jobset.sigs.k8s.io/restart-attempt`` (how
                                      many times the JobSet has been restarted; 0 if unset)
  ``JOB_COMPLETION_INDEX``            set by the Job controller in every pod of an Indexed Job
  ==================================  ==========================================================

  JobSet gives the pod with those values the host name
  ``<jobset>-<replicated job>-<job index>-<pod index>`` in the subdomain of its headless
  service (the layout's ``subdomain``, else the JobSet's name, JobSet's default), so every
  task's address is known without asking the API server.

  *TFJob pods*: the training operator sets ``TF_CONFIG``; the task and cluster are read from it.

What the program gets (:func:`tfcluster.plan.contract.task_env`, :func:`~tfcluster.plan.contract.task_flags`)
  ``TF_CONFIG``, ``TFCLUSTER_TASK``, ``TFCLUSTER_RESTART_COUNT`` (the JobSet's restart attempt;
  left unset in a TFJob pod, whose operator does not say), ``TFCLUSTER_MAX_RESTARTS``
  (``--max-restarts``), ``TFCLUSTER_LOCAL_TASKS=1`` (one task per pod), ``PYTHONUNBUFFERED=1``,
  ``CUDA_VISIBLE_DEVICES=""`` with ``--no-gpus`` (a job without GPUs, :func:`contract.pod_gpus`),
  and with ``--task-flags`` the seed's ``--job_name --task_index --<job>_hosts`` flags.

Progress to a TrainJob's status
  Where Kubeflow Trainer gives the pod its status endpoint (``KUBEFLOW_TRAINER_SERVER_*``, a
  TrainJob's trainer pods with Trainer's ``TrainJobStatus`` gate on) and the pod is tfcluster's
  chief task, the program is not exec'd but run as a child (:func:`run_bridged`): its stdout
  passes through unchanged, SIGTERM/SIGINT/SIGHUP are forwarded to it, the pod exits with its
  exit code (128+N for signal N), and its ``@tfcluster progress`` lines are posted to
  ``status.trainerStatus`` (:mod:`tfcluster.k8s.trainer_progress`). Everywhere else the entry point
  execs the program as above.

Errors (a missing or malformed variable) are one line on stderr and exit 2.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from tfcluster.core.rules import EXIT_BAD_INPUT, signal_exit_code
from tfcluster.k8s import trainer_progress
from tfcluster.plan import contract

LAYOUT_ENV = "TFCLUSTER_JOBSET"
NAME_ENV = "TFCLUSTER_JOBSET_NAME"
RJOB_ENV = "TFCLUSTER_REPLICATED_JOB"
JOB_INDEX_ENV = "TFCLUSTER_JOB_INDEX"
RESTART_ENV = "TFCLUSTER_JOBSET_RESTART"
POD_INDEX_ENV = "JOB_COMPLETION_INDEX"
# JobSet's restart counter (kubernetes-sigs/jobset pkg/constants: RestartsKey), on every pod.
RESTART_ANNOTATION = "jobset.sigs.k8s.io/restart-attempt"
# Where the pod-specific values come from (pod annotations, read through the downward API).
DOWNWARD_ANNOTATIONS = {
    NAME_ENV: "jobset.sigs.k8s.io/jobset-name",
    RJOB_ENV: "jobset.sigs.k8s.io/replicatedjob-name",
    JOB_INDEX_ENV: "jobset.sigs.k8s.io/job-index",
    RESTART_ENV: RESTART_ANNOTATION,
}
EXIT_USAGE = EXIT_BAD_INPUT
USAGE = ("usage: python -m tfcluster.k8s.pod [--task-flags] [--no-gpus] [--max-restarts=N] "
         "-- PROGRAM [ARGS...]")


class PodError(Exception):
    """A pod that cannot work out its task (a missing or malformed variable)."""


def host_name(jobset: str, rjob: str, job_index: int, pod_index: int, subdomain: str) -> str:
    """JobSet's stable name for a pod: ``<jobset>-<rjob>-<job index>-<pod index>.<subdomain>``."""
    return f"{jobset}-{rjob}-{job_index}-{pod_index}.{subdomain}"


def endpoints(layout: Mapping[str, Any], jobset: str) -> Dict[str, List[str]]:
    """job -> the ``host:port`` of each of its tasks in the JobSet (evaluator included)."""
    subdomain = layout.get("subdomain") or jobset
    return {job: [f"{host_name(jobset, spec['rjob'], i // spec['pods'], i % spec['pods'], subdomain)}"
                  f":{spec.get('port', layout['port'])}" for i in range(spec["replicas"] * spec["pods"])]
            for job, spec in layout["jobs"].items()}


def cluster_dict(layout: Mapping[str, Any], jobset: str) -> Dict[str, List[str]]:
    """TensorFlow's cluster dict for the JobSet (the contract's: evaluator left out)."""
    return contract.cluster_dict(endpoints(layout, jobset))


def task_of(layout: Mapping[str, Any], env: Mapping[str, str]) -> Tuple[str, int]:
    """(TensorFlow job, task index) of this pod."""
    rjob = _need(env, RJOB_ENV)
    found = next(((job, spec) for job, spec in layout["jobs"].items() if spec["rjob"] == rjob), None)
    if found is None:
        raise PodError(f"{RJOB_ENV}: replicated job '{rjob}' is not in {LAYOUT_ENV} "
                       f"(replicated jobs: {', '.join(s['rjob'] for s in layout['jobs'].values())})")
    job, spec = found
    job_index = _index(env, JOB_INDEX_ENV, spec["replicas"])
    pod_index = _index(env, POD_INDEX_ENV, spec["pods"])
    return job, job_index * spec["pods"] + pod_index


def jobset_restarts(env: Mapping[str, str]) -> int:
    """The JobSet's restart attempt from the downward API (0 when the annotation is absent)."""
    text = env.get(RESTART_ENV, "")
    if text == "":
        return 0
    if not text.isdigit():
        raise PodError(f"{RESTART_ENV}={text!r} is not a number (the pod annotation "
                       f"{RESTART_ANNOTATION}, through the downward API)")
    return int(text)


def read_layout(env: Mapping[str, str]) -> Dict[str, Any]:
    text = _need(env, LAYOUT_ENV)
    try:
        layout = json.loads(text)
        for spec in layout["jobs"].values():
            spec["rjob"], spec["replicas"], spec["pods"]  # presence check
        layout["port"]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PodError(f"{LAYOUT_ENV}: not a tfcluster JobSet layout ({type(e).__name__}: {e})")
    return layout


def read_tf_config(env: Mapping[str, str]) -> Tuple[Dict[str, List[str]], str, int]:
    """(cluster, job, index) from a TF_CONFIG set by someone else (the TFJob operator)."""
    text = _need(env, contract.TF_CONFIG)
    try:
        config = json.loads(text)
        cluster = {str(j): [str(h) for h in hosts] for j, hosts in config["cluster"].items()}
        job, index = str(config["task"]["type"]), int(config["task"]["index"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PodError(f"{contract.TF_CONFIG}: not TensorFlow's format ({type(e).__name__}: {e})")
    return contract.cluster_dict(cluster), job, index


def task_setup(env: Mapping[str, str], *, task_flags: bool = False, no_gpus: bool = False,
               max_restarts: int = 0) -> Tuple[Dict[str, str], List[str], List[str]]:
    """What this pod's program gets: (environment additions, names to remove, extra flags).

    Pure: ``env`` is the pod's environment; nothing is set here."""
    remove: List[str] = []
    if env.get(LAYOUT_ENV):
        layout = read_layout(env)
        job, index = task_of(layout, env)
        cluster = cluster_dict(layout, _need(env, NAME_ENV))
        restarts: Optional[int] = jobset_restarts(env)
    else:
        if not env.get(contract.TF_CONFIG):
            raise PodError(f"neither {LAYOUT_ENV} (a JobSet or TrainJob pod) nor "
                           f"{contract.TF_CONFIG} (a TFJob pod) is set")
        cluster, job, index = read_tf_config(env)
        restarts = None
    add = contract.task_env(job, index, cluster, gpus="" if no_gpus else None, local_tasks=1,
                            restart_count=restarts or 0, max_restarts=max_restarts)
    if restarts is None:    # a TFJob pod: the operator does not say how often it restarted
        del add[contract.RESTART_COUNT]
        remove.append(contract.RESTART_COUNT)
    flags = contract.task_flags(cluster, job, index) if task_flags else []
    return add, remove, flags


def tf_config(layout: Mapping[str, Any], env: Mapping[str, str]) -> Dict[str, Any]:
    """The TF_CONFIG dict of a JobSet pod (the contract's)."""
    job, index = task_of(layout, env)
    return contract.tf_config(cluster_dict(layout, _need(env, NAME_ENV)), job, index)


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


def parse_args(argv: List[str]) -> Tuple[Dict[str, Any], List[str]]:
    """(options, program argv); raises PodError on a bad option."""
    opts: Dict[str, Any] = {"task_flags": False, "no_gpus": False, "max_restarts": 0}
    while argv and argv[0] != "--" and argv[0].startswith("--"):
        word, argv = argv[0], argv[1:]
        if word == "--task-flags":
            opts["task_flags"] = True
        elif word == "--no-gpus":
            opts["no_gpus"] = True
        elif word.startswith("--max-restarts="):
            value = word.split("=", 1)[1]
            if not value.isdigit():
                raise PodError(f"--max-restarts={value!r} is not a number")
            opts["max_restarts"] = int(value)
        else:
            raise PodError(f"unknown option {word!r}; {USAGE}")
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise PodError(USAGE)
    return opts, argv


def run_bridged(program: List[str], bridge: "trainer_progress.Bridge") -> int:
    """Run ``program`` as a child, copying its stdout through and feeding its lines to
    ``bridge``; signals are forwarded. Returns the exit code the pod should end with."""
    import re
    import signal
    import subprocess

    try:
        proc = subprocess.Popen(program, stdout=subprocess.PIPE)
    except OSError as e:
        print(f"tfcluster.k8s.pod: error: cannot run {program[0]!r}: {e.strerror or e}", file=sys.stderr)
        return 127

    def forward(signum, _frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    out = sys.stdout.buffer
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    partial, skipping = b"", False
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        out.write(chunk)
        out.flush()
        *lines, rest = re.split(rb"[\r\n]", partial + chunk)
        for line in lines:
            if not skipping:
                bridge.line(line.decode("utf-8", "replace"))
            skipping = False
        partial = rest
        if len(partial) > trainer_progress.MAX_LINE:   # a line that never ends: pass it, skip parsing
            partial, skipping = b"", True
    if partial and not skipping:
        bridge.line(partial.decode("utf-8", "replace"))
    returncode = proc.wait()
    bridge.close()
    return returncode if returncode >= 0 else signal_exit_code(-returncode)


def main(argv: List[str]) -> int:
    try:
        opts, program = parse_args(list(argv))
        add, remove, flags = task_setup(os.environ, **opts)
    except PodError as e:
        print(f"tfcluster.k8s.pod: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    for name in remove:
        os.environ.pop(name, None)
    os.environ.update(add)
    program = program + flags
    where = trainer_progress.endpoint(os.environ)
    task = add[contract.TASK]
    if where is not None and task == contract.chief_task(json.loads(add[contract.TF_CONFIG])["cluster"]):
        return run_bridged(program, trainer_progress.Bridge(where))
    sys.stdout.flush()
    try:
        os.execvp(program[0], program)
    except OSError as e:
        print(f"tfcluster.k8s.pod: error: cannot run {program[0]!r}: {e.strerror or e}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
