"""The task contract: everything a task is given, in one place.

Whatever starts a task -- the local launcher, ssh, a per-host agent, the Slurm node agent,
a JobSet pod's entry point, or a person pasting ``tfcluster commands`` -- gives it exactly
this (documented in docs/PLAN.md):

``TF_CONFIG``
    TensorFlow's format: ``{"cluster": {job: [host:port, ...]}, "task": {"type": job,
    "index": i}}``; an ``evaluator`` gets a TF_CONFIG but is left out of ``cluster``.
task flags (opt-in)
    ``--job_name=J --task_index=I`` and ``--J_hosts=h1:p1,h2:p2`` for every job of the cluster.
``CUDA_VISIBLE_DEVICES``
    from ``jobs.<job>.gpus``; ``""`` for ps unless given.
``TFCLUSTER_TASK``            the task's name, ``worker:1``
``TFCLUSTER_RUN_DIR``         the run's folder (logs, run.json)
``TFCLUSTER_LOCAL_TASKS``     how many tasks share this task's host (thread pools are sized by it)
``TFCLUSTER_RESTART_COUNT``   0 on the first start, N on the N-th restart
``TFCLUSTER_MAX_RESTARTS``    the task's restart budget (0 when its policy is never)
``TFCLUSTER_PROFILER_PORT``   the port of the task's TensorFlow profiler server, only when the
                              run's profiler is on (``profiler: true``, ``launch --profiler``): a
                              port chosen with the task ports (the plan's); the runtime starts the
                              server there (``tfcluster.runtime.start_profiler``), and
                              ``tfcluster profile RUN`` traces every task through it
``PYTHONUNBUFFERED=1``        so output and progress lines arrive as they are printed
``TFCLUSTER_LIVE_WORKERS``    elastic runs, workers: how many workers were in the run when this
                              attempt started (shard input by it)
``TFCLUSTER_WORKER_RANK``     ... and this worker's place among them, 0..LIVE_WORKERS-1
``TFCLUSTER_DATA_SERVICE``    ``grpc://host:port`` of the tf.data service's dispatcher, when the
                              file has a ``data_service:`` (its jobs ``tfdata_dispatcher`` and
                              ``tfdata_worker`` are left out of the other tasks' TF_CONFIG)

Set only by a launcher that supervises the task (never by ``commands``, ``render`` or pod
entry points, whose tasks must end by themselves):

``TFCLUSTER_PROGRESS_FD``     ``FD:INODE``: a pipe to the launcher for progress reports (the
                              local backend); :func:`tfcluster.plan.progress.report_progress` writes
                              there when the descriptor is still that pipe, else to stdout
``TFCLUSTER_LAUNCHER_PID``    the pid of the launcher that will stop the ps tasks at the end
                              (what does it for the launcher: on ssh hosts the host's node agent, on
                              Slurm the node agent, on Ray the task's actor), the program's parent; the
                              runtime trusts it only when that process started the task's
                              process group and is a tfcluster supervisor (:func:`supervised`)

and the file's (and job's) ``env``. ``python``/``python3`` as a task's command means "the
interpreter that runs tfcluster" locally and the host's configured interpreter remotely:
plans carry the symbolic :data:`PYTHON` and each backend resolves it (:func:`resolve_argv`).
Nothing here imports TensorFlow.
"""
from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

TF_CONFIG = "TF_CONFIG"
TASK = "TFCLUSTER_TASK"
RUN_DIR = "TFCLUSTER_RUN_DIR"
#: one random word per run, the same for every task of it: tfcluster's runtime checks it on
#: ps:0 before training, so a task never trains against another run's ps
RUN_TOKEN = "TFCLUSTER_RUN_TOKEN"
LOCAL_TASKS = "TFCLUSTER_LOCAL_TASKS"
RESTART_COUNT = "TFCLUSTER_RESTART_COUNT"
MAX_RESTARTS = "TFCLUSTER_MAX_RESTARTS"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
PROGRESS_FD = "TFCLUSTER_PROGRESS_FD"
LAUNCHER_PID = "TFCLUSTER_LAUNCHER_PID"
PROFILER_PORT = "TFCLUSTER_PROFILER_PORT"
DATA_SERVICE = "TFCLUSTER_DATA_SERVICE"
#: elastic runs (``elastic: {min_workers: N}``), workers only: the workers in the run when the
#: attempt started, and this worker's place among them
LIVE_WORKERS = "TFCLUSTER_LIVE_WORKERS"
WORKER_RANK = "TFCLUSTER_WORKER_RANK"
# TensorFlow's own shapes (the ClusterSpec dict, TF_CONFIG, its chief) live with the cluster
# file (tfcluster.clusterfile.clusterspec); the contract hands them to every task
from tfcluster.clusterfile.clusterspec import chief_task, cluster_dict, tf_cluster, tf_config, tf_config_json  # noqa: E402,F401
from tfcluster.clusterfile.vocabulary import DATA_DISPATCHER  # noqa: E402 (the tf.data service's jobs)

#: the symbolic interpreter in a plan's argv: "the Python of wherever the task runs"
PYTHON = "{python}"
PYTHON_WORDS = ("python", "python3")


def symbolic_argv(argv: Sequence[str]) -> List[str]:
    """``argv`` with a leading ``python``/``python3`` replaced by :data:`PYTHON`."""
    argv = list(argv)
    if argv and argv[0] in PYTHON_WORDS:
        argv[0] = PYTHON
    return argv


def resolve_argv(argv: Sequence[str], python: Sequence[str]) -> List[str]:
    """``argv`` with :data:`PYTHON` replaced by ``python`` (one or more words)."""
    argv = list(argv)
    if argv and argv[0] == PYTHON:
        return list(python) + argv[1:]
    return argv


def display_argv(argv: Sequence[str]) -> List[str]:
    """``argv`` as a person would type it (``python`` for the symbolic interpreter)."""
    return resolve_argv(argv, ["python"])


def data_service_address(cluster: Optional[Mapping[str, Sequence[str]]]) -> Optional[str]:
    """``grpc://host:port`` of the tf.data service's dispatcher in ``cluster``, or None."""
    eps = (cluster or {}).get(DATA_DISPATCHER)
    return f"grpc://{eps[0]}" if eps else None


def task_flags(cluster: Mapping[str, Sequence[str]], job: str, index: int) -> List[str]:
    """The seed's flags: ``--job_name --task_index`` and ``--<job>_hosts`` for every job."""
    flags = [f"--job_name={job}", f"--task_index={int(index)}"]
    for j, eps in tf_cluster(cluster, job).items():
        flags.append(f"--{j}_hosts={','.join(eps)}")
    return flags


def task_argv(argv: Sequence[str], cluster: Mapping[str, Sequence[str]], job: str, index: int,
              with_flags: bool) -> List[str]:
    """A task's argv: its program, plus the task flags when asked for."""
    return list(argv) + (task_flags(cluster, job, index) if with_flags else [])


def task_env(job: str, index: int, cluster: Optional[Mapping[str, Sequence[str]]], *,
             file_env: Mapping[str, str] = (), gpus: Optional[str] = None,
             run_dir: Optional[str] = None, local_tasks: Optional[int] = None,
             restart_count: int = 0, max_restarts: int = 0,
             profiler: Optional[int] = None, run_token: Optional[str] = None,
             live: Optional[Tuple[int, int]] = None) -> Dict[str, str]:
    """The environment additions of one task (over the environment it is started in).

    ``cluster`` None leaves TF_CONFIG out (a backend that learns the endpoints only where
    the task runs, as Slurm does, adds it there with the same function)."""
    env: Dict[str, str] = dict(file_env)
    if gpus is not None:
        env[CUDA_VISIBLE_DEVICES] = gpus
    if cluster is not None:
        env[TF_CONFIG] = tf_config_json(cluster, job, index)
        address = data_service_address(cluster)
        if address:
            env[DATA_SERVICE] = address
    env["PYTHONUNBUFFERED"] = "1"
    env[TASK] = f"{job}:{index}"
    if local_tasks is not None:
        env[LOCAL_TASKS] = str(max(1, int(local_tasks)))
    if run_dir:
        env[RUN_DIR] = run_dir
    if run_token:
        env[RUN_TOKEN] = run_token
    env[RESTART_COUNT] = str(int(restart_count))
    env[MAX_RESTARTS] = str(int(max_restarts))
    if profiler:
        env[PROFILER_PORT] = str(int(profiler))
    if live is not None:
        env[LIVE_WORKERS], env[WORKER_RANK] = str(int(live[0])), str(int(live[1]))
    return env


def endpoint_port(endpoint: str) -> Optional[int]:
    """The port of ``host:port`` (``[v6]:port``), or None."""
    _, _, port = str(endpoint).rpartition(":")
    return int(port) if port.isdigit() else None


def pod_gpus(gpus: Optional[str]) -> Optional[str]:
    """``CUDA_VISIBLE_DEVICES`` for a task that runs in a Kubernetes pod, from its ``gpus``.

    The device plugin gives a pod the GPUs of its ``nvidia.com/gpu`` limit and numbers them
    from 0, so the file's ids (this machine's) mean nothing there: a task with ids keeps what
    the plugin set (None). A task with no GPUs (``""``, a ps unless given) keeps ``""``: some
    node images expose every GPU to a pod that asked for none."""
    if gpus is None:
        return None
    return None if any(g.strip() for g in gpus.split(",")) else ""


def restart_count() -> int:
    """For a program: how many times this task has been restarted (0 on its first start).

    Returns:
        The count from ``TFCLUSTER_RESTART_COUNT``; 0 when it is not set or not a number.

    Raises:
        Nothing.
    """
    value = os.environ.get(RESTART_COUNT, "0")
    return int(value) if value.isdigit() else 0


def proc_stat(pid: object = "self") -> List[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name: index 0 is field 3 (state),
    1 the parent's pid, 19 the start time in clock ticks after boot. Raises OSError."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def _parent_of(pid: int) -> Optional[int]:
    try:
        return int(proc_stat(pid)[1])
    except (OSError, ValueError, IndexError):
        return None


def supervised(env: Optional[Mapping[str, str]] = None, pid: Optional[int] = None) -> bool:
    """For a program: is this task supervised by a tfcluster launcher that will stop the ps
    tasks at the end? True only when ``TFCLUSTER_LAUNCHER_PID`` names the process that started
    this task -- the parent of this process group's leader (the task's process, or the
    ``bash -c`` wrapper around it; every task gets a group of its own) -- and that process is a
    tfcluster supervisor (:func:`_is_supervisor`). A copied environment, a line from ``tfcluster
    commands`` or ``TFCLUSTER_LAUNCHER_PID=$$`` in a shell does not count: ``TFCLUSTER_TASK``
    only says "a task of a tfcluster cluster".

    Args:
        env: the environment to read (default: this process's).
        pid: the process to ask about (default: this one).

    Returns:
        True when a tfcluster launcher started this task and will stop it.

    Raises:
        Nothing: what cannot be read counts as not supervised.
    """
    env = os.environ if env is None else env
    value = env.get(LAUNCHER_PID, "")
    if not value.isdigit() or int(value) <= 1:
        return False
    launcher = int(value)
    current = os.getpid() if pid is None else pid
    try:
        leader = int(proc_stat(current)[2])       # this process group's leader: what was started
    except (OSError, ValueError, IndexError):
        return False
    return _parent_of(leader) == launcher and _is_supervisor(launcher, env)


def _cmdline(pid: int) -> List[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(1 << 16).split(b"\0")
    except OSError:
        return []


def _is_supervisor(pid: int, env: Mapping[str, str]) -> bool:
    """Whether process ``pid`` is a tfcluster supervisor: its command line runs tfcluster (the
    ``tfcluster`` command, ``python -m tfcluster``, the Slurm and ssh node agents), or it
    holds the run folder ``TFCLUSTER_RUN_DIR`` open (a launcher started through the Python API
    keeps its run folder open for the whole run; tfcluster.safe_files)."""
    if any(b"tfcluster" in a for a in _cmdline(pid)[:4]):
        return True
    run_dir = env.get(RUN_DIR)
    if not run_dir:
        return False
    try:
        folder = os.stat(run_dir)
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (folder.st_dev, folder.st_ino):
            return True
    return False
