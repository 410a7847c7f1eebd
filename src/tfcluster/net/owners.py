"""Who owns a file, as seen from outside a run's user namespace.

Another user's private run (:mod:`tfcluster.net.private`) lives in user namespaces that map only
the caller's uid. Inside them every other uid is unmapped and shows as the overflow uid (65534,
``/proc/sys/kernel/overflowuid``): root's files and another user's look the same. An ownership
check that trusts "this user or root" (:mod:`tfcluster.safe_files`) would then refuse root's
folders (``/tmp``-style shared logdirs, root's links such as ``/home -> /data/home``), pushing
users to the host network, or, trusting the overflow uid, accept another user's.

So, before the launcher moves, :func:`keep_outside_view` forks a helper that stays in the
host's namespaces; inside, a file that shows as the overflow uid is asked about by handing the
helper its open descriptor (``SCM_RIGHTS`` over a socket pair): the helper ``fstat``s the same
open file and answers whether its true owner is the caller or root. The helper does nothing
else and ends when the launcher does (its socket closes).

Standard library only (the ground floor).
"""
from __future__ import annotations

import os
import signal
import socket
from typing import Optional, Tuple

_outside: Optional[Tuple[socket.socket, int]] = None


def overflow_uid() -> int:
    try:
        with open("/proc/sys/kernel/overflowuid") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 65534


def identity_map(uid_map: str) -> bool:
    """Whether ``uid_map`` (the text of ``/proc/self/uid_map``) is the initial namespace's
    (every uid is itself: ``0 0 4294967295``), where no uid is unmapped."""
    rows = [line.split() for line in uid_map.splitlines() if line.strip()]
    return rows == [["0", "0", "4294967295"]]


def unmapped(uid: int, uid_map: str, overflow: int) -> bool:
    """Whether ``uid``, as a stat shows it under ``uid_map``, may stand for a uid that is not
    mapped here (root's, another user's): the overflow uid, outside the initial namespace."""
    return uid == overflow and not identity_map(uid_map)


def _uid_map() -> str:
    try:
        with open("/proc/self/uid_map") as f:
            return f.read()
    except OSError:
        return "0 0 4294967295\n"


def keep_outside_view() -> None:
    """Fork the helper that answers :func:`trusted_outside` (once; this process must have one
    thread, as it must to make a user namespace)."""
    global _outside
    if _outside is not None:
        return
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:                         # the helper: in the host's namespaces, for good
        code = 0
        try:
            keep = theirs.fileno()
            devnull = os.open(os.devnull, os.O_RDWR)
            for std in (0, 1, 2):        # holds no pipe of the launcher's (a caller waits on them)
                os.dup2(devnull, std)
            os.closerange(3, keep)
            os.closerange(keep + 1, 1 << 16)
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # the terminal's Ctrl-C is the launcher's
            me = os.geteuid()
            while True:
                msg, fds, _, _ = socket.recv_fds(theirs, 16, 1)
                if not msg:
                    break
                answer = b"0"
                for fd in fds:
                    try:
                        answer = b"1" if os.fstat(fd).st_uid in (me, 0) else b"0"
                    finally:
                        os.close(fd)
                theirs.send(answer)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    theirs.close()
    _outside = (mine, pid)


def release() -> None:
    """End the helper (its socket closed, it exits) and wait for it: the launcher's end."""
    global _outside
    if _outside is None:
        return
    sock, pid = _outside
    _outside = None
    sock.close()
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:      # reaped already
        pass


def trusted_outside(fd: int) -> Optional[bool]:
    """Whether the open file ``fd`` belongs, outside this user namespace, to the caller or
    root; None when there is no helper to ask (then nothing unmapped is trusted)."""
    if _outside is None:
        return None
    sock, _ = _outside
    try:
        socket.send_fds(sock, [b"?"], [fd])
        return sock.recv(1) == b"1"
    except OSError:
        return None


def trusted(uid: int, fd: Optional[int] = None) -> bool:
    """The rule of :mod:`tfcluster.safe_files`: a file of this user or root. Inside a user
    namespace a file shown as the overflow uid is asked about outside (with its open ``fd``)."""
    if uid == os.geteuid() or uid == 0:
        return True
    if fd is None or not unmapped(uid, _uid_map(), overflow_uid()):
        return False
    return trusted_outside(fd) is True
