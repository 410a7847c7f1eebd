"""Words the launcher and the CLI say to people, kept in one place: the security note (who
can connect to a run's ports; silenceable), ``tfcluster help security``, hints for common command-line
slips, and "nothing was trained". Pure functions (the security note remembers files in the
user's state folder through :mod:`tfcluster.runs.index`). No TensorFlow.
"""
from __future__ import annotations

import os
import shlex
from typing import Callable, Iterable, Optional, Sequence

SILENCE_ENV = "TFCLUSTER_NO_SECURITY_NOTE"

SECURITY = """\
Security: TensorFlow's servers and what tfcluster does about them

- Every TensorFlow task (tf.compat.v1.train.Server and the servers behind tf.distribute), and
  TensorFlow's profiler server, is a gRPC server with no authentication and no encryption.
  Anyone who reaches its port can run any TensorFlow op in the task's process (read and write
  files, change the model) or write a trace where they choose, as the task's user.
- It listens on every address, IPv4 and IPv6, whatever host the cluster file names:
  localhost:2222 does not keep the port on loopback, and every user of the machine reaches
  loopback.

Who can connect, by how a run is launched:
- On this machine (backend local), by default: nobody but the run. The launcher and its tasks
  run in a network of the run's own (a Linux network namespace; no setuid helper: user
  namespaces), so other users, and other hosts, reach none of its ports. Tasks keep your uid;
  slirp4netns, when installed, gives them outbound connections (no port is forwarded in, the
  host's loopback is not reachable). `tfcluster exec RUN -- CMD` runs your own client inside.
- network: host (--network host): every user of this machine can connect to the run's
  ports; the launch says so before its first task. Where the kernel refuses user namespaces,
  a default launch starts nothing and says so (--network host runs it exposed).
- Across hosts (ssh, Slurm, Ray): every user of those hosts, and whoever reaches them. Fence
  the ports: a private network only the cluster's machines reach, and a firewall that admits
  the cluster's hosts and, on each host, only your own processes (nftables: 'meta skuid' on
  the output hook; docs/SECURITY.md has a recipe). `tfcluster doctor FILE` says which ports of
  a run who can reach.
- The profiler server is off unless asked for (profiler: true, --profiler); then its ports
  are chosen with the task ports and fenced the same way.
- Run tasks as an unprivileged user, never root. Keep secrets out of the file's env: name
  variables of the launcher's environment in 'secrets:'; values are masked in every output.
- tfcluster opens no port of its own; run folders are readable by their owner only
  (folder 0700, files 0600).

--no-security-note or TFCLUSTER_NO_SECURITY_NOTE=1 silences the launch's note. The full text,
with an nftables example, is docs/SECURITY.md in tfcluster's source.
"""

TOPICS = {"security": SECURITY}


def security_note(source: Optional[str], ports: Sequence[int], silenced: bool = False,
                  environ=None, first_time: Callable[[str, str], bool] = lambda kind, key: True,
                  local: bool = True, why_host: str = "") -> Optional[str]:
    """Who can connect to a run of ``source`` on ``ports`` in the host network, or None when
    it is silenced (the flag, ``TFCLUSTER_NO_SECURITY_NOTE=1``). ``local``: the run is on
    this machine (said at every start, with ``why_host``: why not a private network); else
    the hosts of an ssh, Slurm or Ray run (said once per file: ``first_time(kind, key)``
    answers that and remembers it; the launcher passes :func:`tfcluster.runs.index.first_time`)."""
    environ = os.environ if environ is None else environ
    if silenced or environ.get(SILENCE_ENV, "").strip() not in ("", "0"):
        return None
    listed = ", ".join(str(p) for p in ports) or "chosen where the tasks land"
    if local:
        because = f" ({why_host})" if why_host else ""
        return (f"note: network: host{because}: every user of this machine can connect to this "
                f"run's tasks (ports {listed}), and TensorFlow's servers trust whoever connects; "
                f"--network private keeps them to the run (tfcluster help security)")
    key = os.path.abspath(source) if source else "(no file)"
    if not first_time("security", key):
        return None
    return (f"note: TensorFlow's gRPC servers have no authentication or encryption and listen on "
            f"every address; every user of the run's hosts can connect to its ports ({listed}): "
            f"fence them off: tfcluster help security (said once per file; --no-security-note "
            f"silences it)")


# ------------------------------------------------------------------ command-line hints
def sbatch_hint(argv: Sequence[str]) -> Optional[str]:
    """``--sbatch --mem=8G`` (a space, so argparse reads --mem=8G as a flag of its own)."""
    for i, a in enumerate(argv):
        if a == "--sbatch" and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            return f"write --sbatch={argv[i + 1]} (with '=': the value starts with '-')"
    return None


#: files a word that names the cluster file ends with (not taken for an --arg's value)
FILE_SUFFIXES = (".yaml", ".yml", ".json")


def arg_value_hint(argv: Sequence[str], exists: Callable[[str], bool] = os.path.exists) -> Optional[str]:
    """``--arg --train_steps 10``: argparse takes ``--train_steps`` alone (a flag without a
    value is a valid edit) and ``10`` for the cluster file or an unknown word. The fix, when the
    word after ``--arg --NAME`` is a value (it does not start with '-', is no file here and does
    not look like a cluster file): ``--arg --NAME=VALUE``. ``argv``: the subcommand's words,
    before a program's ``--``."""
    words = list(argv)
    for i, w in enumerate(words):
        if w == "--arg" and i + 2 < len(words):
            name, value = words[i + 1], words[i + 2]
        elif w.startswith("--arg=") and i + 1 < len(words):
            name, value = w[len("--arg="):], words[i + 1]
        else:
            continue
        if not name or "=" in name or name == "--" or not value or value.startswith("-"):
            continue
        if exists(value) or value.endswith(FILE_SUFFIXES):
            continue
        return (f"--arg {name} {value}: --arg takes one word, NAME=VALUE; write "
                f"--arg {shlex.quote(name + '=' + value)}")
    return None


def script_hint(program: Sequence[str], cluster_dir: Optional[str], cwd: str) -> Optional[str]:
    """A relative script path after ``--`` that is not in the current folder but is beside
    the cluster file: the did-you-mean."""
    if not program or not cluster_dir:
        return None
    words = list(program)
    if os.path.basename(words[0]) in ("python", "python3") and len(words) > 1:
        words = words[1:]
    script = next((w for w in words if not w.startswith("-")), None)
    if not script or os.path.isabs(script) or not script.endswith(".py"):
        return None
    if os.path.exists(os.path.join(cwd, script)):
        return None
    beside = os.path.join(cluster_dir, script)
    if os.path.isfile(beside):
        shown = os.path.relpath(beside, cwd)
        fixed = [shown if w == script else w for w in program]
        return (f"{script}: no such file here ({cwd}); the program after '--' runs from this "
                f"folder. Did you mean {shown}? tfcluster launch ... -- "
                + " ".join(shlex.quote(w) for w in fixed))
    return None


# ------------------------------------------------------------------ the command a hint names
RUN_FILE_LIMIT = 64 << 20      # bytes of run.json read for its "file" (as tfcluster status reads it)


def launch_command(file: Optional[str], cwd: Optional[str] = None) -> Optional[str]:
    """``tfcluster launch cluster.yaml``: how the person launches the run's cluster file again,
    for a hint to name -- the file as a path from ``cwd`` when it is below it, else whole;
    None for a run without a file (``launch --ps 1 --workers 2 -- ...``)."""
    if not file:
        return None
    shown = file
    if cwd and os.path.isabs(file):
        rel = os.path.relpath(file, cwd)
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            shown = rel
    return "tfcluster launch " + shlex.quote(shown)


def run_cluster_file(environ=None) -> Optional[str]:
    """For a program: the cluster file its run was launched from (``file`` in the run's
    run.json, in ``TFCLUSTER_RUN_DIR``), or None (no run folder here, no file, unreadable)."""
    import json

    from tfcluster import safe_files
    from tfcluster.errors import UserError
    from tfcluster.plan.contract import RUN_DIR
    run_dir = (os.environ if environ is None else environ).get(RUN_DIR)
    if not run_dir:
        return None
    try:
        data = safe_files.read_bytes(os.path.join(run_dir, safe_files.RUN_FILE), RUN_FILE_LIMIT)
        record = json.loads(data) if data else None
    except (OSError, ValueError, UserError):   # no record to read (not a file, too big): no file named
        return None
    file = record.get("file") if isinstance(record, dict) else None
    return file if isinstance(file, str) and file else None


# ------------------------------------------------------------------ training
def nothing_trained(step: int, target: int, checkpoint_dir: Optional[str],
                    flag: str = "--train_steps", launch: Optional[str] = None) -> str:
    """What a trainer says when it starts at or after its target step. The way to train on is
    ``--arg``, which changes that one flag and keeps the others (``--checkpoint_dir``); a
    program after ``--`` would replace every argument of the file's program. ``launch``: the
    command that launches the run's file (default: the file of the run this program is a task
    of, :func:`run_cluster_file`); without one, the ``--arg`` alone."""
    if launch is None:
        launch = launch_command(run_cluster_file())
    where = f" restored from {checkpoint_dir}" if checkpoint_dir else ""
    edit = f"--arg {flag}={max(step, target) * 2}"
    more = f"{launch} {edit}" if launch else f"launch it again with {edit}"
    fix = (f"to train again from scratch, clear {checkpoint_dir} (or give another "
           f"--checkpoint_dir: --arg --checkpoint_dir=DIR); to train on, raise {flag} above "
           f"{step}: {more}") if checkpoint_dir \
        else f"raise {flag} above {step}: {more}"
    return (f"already at the target step, nothing trained: global_step={step}{where} and "
            f"{flag}={target}; {fix}")


def elastic_line(min_workers: int, workers: int, on_change: str, new_address_on: str = "",
                 jobs: Iterable[str] = (), start: Optional[int] = None) -> str:
    """What an elastic run does (validate, the launch's first lines). With ``go-on`` on a
    backend whose returning workers land at a new address (``new_address_on``, its name: Ray's;
    BackendKind.rejoins_at_new_address), also what growth does for the shape of the cluster's
    ``jobs`` and the mode docs/FAULT_TOLERANCE.md gives it."""
    change = {"restart": "every task restarts with the workers in the run",
              "restart-on-join": "the others go on, and one coming back restarts every task",
              "restart-chief": "the others go on, and one coming back restarts the chief with the "
                               "workers in the run"}.get(on_change, "the others go on")
    line = (f"elastic: goes on with at least {min_workers} of {workers} workers; when one leaves "
            f"or comes back, {change}")
    if start is not None:      # sized (elastic.scale): ``workers`` is max_workers
        line = (f"elastic: starts {start} of up to {workers} workers and adds one while it raises "
                f"the global steps/s (elastic.scale: throughput); goes on with at least "
                f"{min_workers}; when one leaves or comes back, {change}")
    if not new_address_on or on_change != "go-on":
        return line
    if "ps" in set(jobs):
        return line + (
            f"; on {new_address_on.capitalize()} a worker coming back lands at a new address, "
            "which the ps (TF1) or the "
            "coordinator (ParameterServerStrategy) does not know: it fails its first step or "
            "serves nobody -- docs/FAULT_TOLERANCE.md gives on_change: restart-on-join for TF1, "
            "restart-chief for ParameterServerStrategy")
    return line + (
        "; with no ps (MultiWorkerMirroredStrategy) the collectives span the workers of the "
        "start, so a worker coming back needs every task restarted -- docs/FAULT_TOLERANCE.md "
        "gives on_change: restart")
