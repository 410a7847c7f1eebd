"""Run a command as another user for whom user namespaces are limited, without touching the
machine's sysctl: the command runs inside a user namespace of the test's own (made by root,
mapping root, the user and nobody to themselves), whose ``user.max_user_namespaces`` is set
there (a namespace's limit counts for every namespace made below it): 0 is "user namespaces
are off for this user"; 1 lets the first be made and refuses the nested one (a limit reached).
Only the machine's root can make such a namespace with several uids mapped."""
from __future__ import annotations

import os
import subprocess
import sys

# a Python of its own (one thread: unshare(CLONE_NEWUSER) takes a single-threaded process)
_WRAPPER = r"""
import ctypes, os, sys
limit, uid = int(sys.argv[1]), int(sys.argv[2])
argv = sys.argv[3:]
libc = ctypes.CDLL(None, use_errno=True)
go_r, go_w = os.pipe()
made_r, made_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(go_w); os.close(made_r)
    if libc.unshare(0x10000000) != 0:
        os._exit(120)
    os.write(made_w, b"1")
    os.read(go_r, 1)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write(str(limit))
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    os.execvp(argv[0], argv)
os.close(go_r); os.close(made_w)
if os.read(made_r, 1) != b"1":
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
ids = sorted({0, uid, 65534})
table = "".join(f"{i} {i} 1\n" for i in ids)
for name in ("uid_map", "gid_map"):
    with open(f"/proc/{pid}/{name}", "w") as f:
        f.write(table)
os.write(go_w, b"g")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def limited(limit: int, uid: int, argv, **popen) -> subprocess.Popen:
    """``argv`` as ``uid`` (gid the same) in a user namespace whose limit is ``limit``; needs root.
    Signals sent to the returned process do not reach ``argv`` (its parent waits for it)."""
    assert os.geteuid() == 0, "needs root"
    return subprocess.Popen([sys.executable, "-I", "-c", _WRAPPER, str(limit), str(uid), *argv],
                            **popen)
