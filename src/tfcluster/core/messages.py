"""Words the launcher and the CLI say to people, kept in one place: the security note (once
per cluster file, silenceable), ``tfcluster help security``, hints for common command-line
slips, and "nothing was trained". Pure functions (the security note remembers files in the
user's state folder through :mod:`tfcluster.runs.index`). No TensorFlow.
"""
from __future__ import annotations

import os
import shlex
from typing import Callable, Optional, Sequence

SILENCE_ENV = "TFCLUSTER_NO_SECURITY_NOTE"

SECURITY = """\
Security: TensorFlow's servers and what tfcluster does about them

- Every TensorFlow task (tf.compat.v1.train.Server and the servers behind tf.distribute) is a
  gRPC server with no authentication and no encryption. Anyone who reaches its port can run
  any TensorFlow op in the task's process (read and write files, run programs) as its user.
- It listens on every interface, IPv4 and IPv6, whatever host the cluster file names:
  localhost:2222 does not keep the port on loopback. IPv6 and IPv4 link-local addresses
  (fe80::/10, 169.254.0.0/16) reach it from the same link even without IPv6 service.
- Fence a cluster: a private network only the cluster's machines reach (VPC, VLAN, a
  Kubernetes NetworkPolicy), or a firewall on the task ports that admits only the cluster's
  hosts, over IPv4 AND IPv6 (nftables: one 'inet' table; iptables: the same rules again with
  ip6tables).
- Run tasks as an unprivileged user, never root. Keep secrets out of the file's env: name
  variables of the launcher's environment in 'secrets:'; values are masked in every output.
- tfcluster opens no port of its own; run folders are readable by their owner only
  (folder 0700, files 0600).

The launcher prints a short note about this the first time a cluster file is launched on a
machine with a network address beyond loopback; --no-security-note or
TFCLUSTER_NO_SECURITY_NOTE=1 silences it. The full text, with an nftables example, is
docs/SECURITY.md in tfcluster's source.
"""

TOPICS = {"security": SECURITY}


def security_note(source: Optional[str], ports: Sequence[int], silenced: bool = False,
                  environ=None, first_time: Callable[[str, str], bool] = lambda kind, key: True
                  ) -> Optional[str]:
    """The security note for a launch of ``source`` on ``ports``, or None when it is silenced
    (the flag, ``TFCLUSTER_NO_SECURITY_NOTE=1``) or was already shown for this file:
    ``first_time(kind, key)`` answers that and remembers the showing (the launcher passes
    :func:`tfcluster.runs.index.first_time`, per file in the user's state folder)."""
    environ = os.environ if environ is None else environ
    if silenced or environ.get(SILENCE_ENV, "").strip() not in ("", "0"):
        return None
    key = os.path.abspath(source) if source else "(no file)"
    if not first_time("security", key):
        return None
    return (f"note: TensorFlow's gRPC servers have no authentication or encryption and listen on "
            f"every interface, IPv4 and IPv6 (ports {', '.join(str(p) for p in ports)}); fence them "
            f"off: tfcluster help security (said once per file; --no-security-note silences it)")


# ------------------------------------------------------------------ command-line hints
def sbatch_hint(argv: Sequence[str]) -> Optional[str]:
    """``--sbatch --mem=8G`` (a space, so argparse reads --mem=8G as a flag of its own)."""
    for i, a in enumerate(argv):
        if a == "--sbatch" and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            return f"write --sbatch={argv[i + 1]} (with '=': the value starts with '-')"
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


# ------------------------------------------------------------------ training
def nothing_trained(step: int, target: int, checkpoint_dir: Optional[str],
                    flag: str = "--train_steps") -> str:
    """What a trainer says when it starts at or after its target step. The way to train on is
    ``--arg``, which changes that one flag and keeps the others (``--checkpoint_dir``); a
    program after ``--`` would replace every argument of the file's program."""
    where = f" restored from {checkpoint_dir}" if checkpoint_dir else ""
    more = f"tfcluster launch FILE --arg {flag}={max(step, target) * 2}"
    fix = (f"to train again from scratch, clear {checkpoint_dir} (or give another "
           f"--checkpoint_dir: --arg --checkpoint_dir=DIR); to train on, raise {flag} above "
           f"{step}: {more}") if checkpoint_dir \
        else f"raise {flag} above {step}: {more}"
    return (f"already at the target step, nothing trained: global_step={step}{where} and "
            f"{flag}={target}; {fix}")
