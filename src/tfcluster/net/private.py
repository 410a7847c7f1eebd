"""A private network for a run on this machine: a network namespace of the run's own.

TensorFlow's gRPC servers (and its profiler server) listen on every address of the machine and
trust whoever connects: any local user can place ``ReadFile`` or an ``assign`` on a task of a
run that listens on the host's network. A run whose tasks all live on this machine needs no
host network at all: the launcher moves itself into a network namespace of its own before it
starts the tasks, the tasks inherit it, and only the run's own processes reach its ports.

How, without any setuid helper (Linux user namespaces, as ``unshare -rn`` does):

* root: a new network namespace (``unshare(CLONE_NEWNET)``), ``lo`` brought up;
* another user: a user namespace U1 that maps the caller to root (the only way to be allowed to
  bring ``lo`` up), with the new network namespace N owned by it; ``lo`` up; then a nested user
  namespace U2 that maps the caller's own uid and gid back, so the launcher and every task keep
  the caller's uid (files they make are the caller's, ``os.getuid()`` is the caller's).

Outbound connections (a dataset in an object store, a package mirror) go through
``slirp4netns``, a user-mode network stack started in the host's network (before the launcher
moves) with ``--disable-host-loopback``: tasks reach other hosts, not the host's loopback
services, and no port of the run is forwarded back to the host. Without it (not installed, or
``/dev/net/tun`` not open to the user) the tasks reach loopback only, and :attr:`Private.note`
says so in one line.

From outside, the caller (and root) enters a run's network with :func:`enter_namespaces` (as
``nsenter`` would, in the order a user namespace needs: U1, N, U2): ``tfcluster exec RUN --
CMD`` and ``tfcluster profile`` use it. Another user cannot: the namespaces' files under
``/proc/PID/ns`` are the caller's.

No TensorFlow; the ground floor (standard library only).
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import socket
import struct
import threading
from dataclasses import dataclass
from typing import List, Optional

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NS_GET_PARENT = 0xB702              # ioctl on a namespace fd: its parent user namespace
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1

OUTBOUND_HELPER = "slirp4netns"
#: slirp4netns' arguments: its own network stack for outbound connections only; the host's
#: loopback is not reachable from inside, and nothing is forwarded into the namespace
SLIRP_ARGS = ["--configure", "--mtu=65520", "--disable-host-loopback", "--enable-seccomp"]
READY_TIMEOUT = 10.0


class PrivateNetworkError(Exception):
    """The private network could not be made or entered; the message says why, in one line."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise PrivateNetworkError(f"{what}: {os.strerror(e)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _bring_loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH14s", b"lo", 0, b"\0" * 14)
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, _SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, b"\0" * 14))


def threads_here() -> int:
    """Threads of this process, native ones included (a user namespace takes one thread)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def unavailable() -> Optional[str]:
    """Why a private network cannot be tried here (None when it can): checked without making one."""
    if not os.path.exists("/proc/self/ns/net"):
        return "this system has no network namespaces"
    if os.geteuid() != 0:
        try:
            with open("/proc/sys/user/max_user_namespaces") as f:
                if int(f.read().strip() or 0) <= 0:
                    return "user namespaces are turned off (user.max_user_namespaces is 0)"
        except (OSError, ValueError):   # no such file: an older kernel decides at unshare
            pass
        try:
            with open("/proc/sys/kernel/unprivileged_userns_clone") as f:
                if f.read().strip() == "0":
                    return "unprivileged user namespaces are turned off (kernel.unprivileged_userns_clone is 0)"
        except OSError:     # most kernels have no such switch
            pass
    return None


@dataclass
class Private:
    """The network this process now lives in: ``pid`` holds it (this process), ``userns`` when a
    user namespace was made (not root), ``outbound`` the helper's name when tasks can reach
    other hosts, ``note`` a line to say at start when they cannot (else ""). ``made``: the
    namespaces made, in order ("net"; "user+net+user"), for the run's record."""

    pid: int
    userns: bool
    made: str = ""
    outbound: str = ""
    note: str = ""
    _helper_pid: Optional[int] = None
    _exit_fd: Optional[int] = None
    _back_fd: Optional[int] = None        # the thread's network before (enter(back=True))

    def close(self) -> None:
        """Stop the outbound helper (it ends when its exit pipe closes, as it does when this
        process dies); with ``enter(back=True)``, return the calling thread to its network."""
        if self._exit_fd is not None:
            os.close(self._exit_fd)
            self._exit_fd = None
        if self._back_fd is not None:
            _check(_libc().setns(self._back_fd, CLONE_NEWNET), "returning to the host's network")
            os.close(self._back_fd)
            self._back_fd = None
        if self._helper_pid is not None:
            try:
                os.waitpid(self._helper_pid, 0)
            except ChildProcessError:    # reaped already
                pass
            self._helper_pid = None
        if self.userns:
            from tfcluster.net.owners import release
            release()


def enter(outbound: bool = True, back: bool = False) -> Private:
    """Move this process into a network namespace of its own (see the module's docstring), and
    start the outbound helper in the host's network when ``outbound``. The process must have one
    thread (a user namespace takes only a single-threaded process). ``back`` (root only): only
    the calling thread moves (a network namespace is a thread's), with what it starts, and
    :meth:`Private.close` returns it. Raises PrivateNetworkError."""
    why = unavailable()
    if why:
        raise PrivateNetworkError(why)
    root = os.geteuid() == 0
    if back and not root:
        raise PrivateNetworkError("only root can return a thread from a private network")
    if not root and threads_here() > 1:
        raise PrivateNetworkError("the launcher has several threads here; a user namespace "
                                  "takes only a single-threaded process")
    back_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC) if back else None
    if not root:       # inside, root's files show as the overflow uid: asked about outside
        from tfcluster.net.owners import keep_outside_view
        keep_outside_view()
    helper = _start_helper_waiting() if outbound else None
    try:
        _unshare(root)
    except BaseException:
        if helper is not None:
            helper.abandon()
        if not root:
            from tfcluster.net.owners import release
            release()
        if back_fd is not None:
            os.close(back_fd)
        raise
    net = Private(pid=os.getpid(), userns=not root, made="net" if root else "user+net+user",
                  _back_fd=back_fd)
    if helper is None:
        return net
    net.outbound, net.note, net._helper_pid, net._exit_fd = helper.go()
    return net


def _unshare(root: bool) -> None:
    """Make the namespaces whole, or leave none half-made behind: root's network namespace is
    left again (back to the one it came from) when ``lo`` cannot be brought up. A user namespace
    cannot be left: another user's half-made one (the nested namespace refused: a limit
    reached) raises, and the caller must start nothing in it (:func:`half_made` says so; the
    launcher ends with one line, exit 2)."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if root:
        before = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(libc.unshare(CLONE_NEWNET), "a network namespace")
            try:
                _bring_loopback_up()
            except OSError as e:
                _check(libc.setns(before, CLONE_NEWNET), "leaving a half-made network namespace")
                raise PrivateNetworkError(f"bringing up loopback in the network namespace: "
                                          f"{e.strerror or e}")
        finally:
            os.close(before)
        return
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "a user and network namespace")
    global _HALF_MADE
    _HALF_MADE = True            # until the caller's own uid is back inside, below
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
        _bring_loopback_up()
    except OSError as e:
        raise PrivateNetworkError(f"setting up the network namespace: {e.strerror or e}")
    _check(libc.unshare(CLONE_NEWUSER), "the caller's own uid inside (a nested user namespace)")
    try:
        _write("/proc/self/uid_map", f"{uid} 0 1")
        _write("/proc/self/gid_map", f"{gid} 0 1")
    except OSError as e:
        raise PrivateNetworkError(f"mapping the caller's uid inside: {e.strerror or e}")
    _HALF_MADE = False


#: whether this process is in a user namespace it made and could not finish (it cannot leave
#: it): nothing may be started from here, and the process should end
_HALF_MADE = False


def half_made() -> bool:
    """Whether this process was left in a half-made user namespace (:func:`_unshare`)."""
    return _HALF_MADE


class _WaitingHelper:
    """A child forked in the host's network before the launcher moves: it waits on a pipe,
    then becomes slirp4netns attached to the launcher's new namespace."""

    def __init__(self, path: Optional[str]):
        self.path = path
        self.pid: Optional[int] = None
        self.go_w: Optional[int] = None

    def start(self) -> "_WaitingHelper":
        if self.path is None:
            return self
        go_r, self.go_w = os.pipe()
        self.ready_r, ready_w = os.pipe()
        exit_r, self.exit_w = os.pipe()
        self.err_r, err_w = os.pipe()
        parent = os.getpid()
        thread = threading.get_native_id()    # the thread that moves (its namespace, not the process's)
        pid = os.fork()
        if pid == 0:                    # the child: only system calls until exec
            try:
                for fd in (self.go_w, self.ready_r, self.exit_w, self.err_r):
                    os.close(fd)
                os.read(go_r, 1)
                _exec_slirp(self.path, parent, ready_w, exit_r, err_w,
                            thread if thread != parent else None)
            finally:
                os._exit(127)
        for fd in (go_r, ready_w, exit_r, err_w):
            os.close(fd)
        os.set_inheritable(self.exit_w, False)
        self.pid = pid
        return self

    def abandon(self) -> None:
        if self.pid is None:
            return
        for fd in (self.go_w, self.exit_w, self.ready_r, self.err_r):
            os.close(fd)
        os.waitpid(self.pid, 0)
        self.pid = None

    def go(self):
        """(outbound helper, note, helper pid, exit fd) once the helper is up or has failed."""
        if self.path is None:
            return "", (f"network: private, tasks reach loopback only ({OUTBOUND_HELPER} is not "
                        f"installed: apt install {OUTBOUND_HELPER} for outbound connections; "
                        f"or --network host)"), None, None
        import select
        os.write(self.go_w, b"g")
        os.close(self.go_w)
        ready, _, _ = select.select([self.ready_r], [], [], READY_TIMEOUT)
        ok = bool(ready) and os.read(self.ready_r, 1) == b"1"
        os.close(self.ready_r)
        if ok:
            os.close(self.err_r)
            return OUTBOUND_HELPER, "", self.pid, self.exit_w
        err = _read_some(self.err_r)
        os.close(self.err_r)
        os.close(self.exit_w)
        try:
            os.kill(self.pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        why = err or "it did not start"
        if "/dev/net/tun" in err:
            why = ("it cannot open /dev/net/tun (mode "
                   f"{_mode('/dev/net/tun')}; Debian's default is 0666: ask root to "
                   "chmod 0666 /dev/net/tun)")
        return "", (f"network: private, tasks reach loopback only ({OUTBOUND_HELPER}: {why}; "
                    f"or --network host)"), None, None


def _mode(path: str) -> str:
    try:
        return f"{os.stat(path).st_mode & 0o7777:04o}"
    except OSError:
        return "missing"


def _read_some(fd: int) -> str:
    import select
    chunks: List[bytes] = []
    while select.select([fd], [], [], 0.5)[0]:
        b = os.read(fd, 4096)
        if not b:
            break
        chunks.append(b)
    lines = [ln.strip() for ln in b"".join(chunks).decode("utf-8", "replace").splitlines()
             if ln.strip() and "child failed" not in ln]
    return lines[-1][:200] if lines else ""


def _exec_slirp(path: str, parent: int, ready_w: int, exit_r: int, err_w: int,
                thread: Optional[int] = None) -> None:
    args = [path] + SLIRP_ARGS + [f"--ready-fd={ready_w}", f"--exit-fd={exit_r}"]
    keep = [ready_w, exit_r]
    if os.geteuid() != 0:
        u2 = os.open(f"/proc/{parent}/ns/user", os.O_RDONLY)
        u1 = fcntl.ioctl(u2, NS_GET_PARENT)
        os.close(u2)
        keep.append(u1)
        args.append(f"--userns-path=/proc/self/fd/{u1}")
    where = f"/proc/{parent}/task/{thread}/ns/net" if thread else f"/proc/{parent}/ns/net"
    args += ["--netns-type=path", where, "tap0"]
    for fd in keep:
        os.set_inheritable(fd, True)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(err_w, 2)
    os.setsid()                          # not in the launcher's terminal group (Ctrl-C)
    os.execv(path, args)


def _start_helper_waiting() -> _WaitingHelper:
    return _WaitingHelper(shutil.which(OUTBOUND_HELPER)).start()


def enter_namespaces(pid: int, still_alive=lambda: True) -> None:
    """Move this (single-threaded) process into the network of process ``pid`` (a private
    run's launcher): as root its network namespace; else its user namespace's parent U1, the
    network namespace, then its user namespace U2 (the caller's uid inside). ``still_alive``
    is asked once the namespaces are open (a pidfd's answer: the pid was not reused while they
    were opened). Raises PrivateNetworkError (another user's process, a gone one)."""
    libc = _libc()
    try:
        net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    except OSError as e:
        raise PrivateNetworkError(f"pid {pid}'s network cannot be opened ({e.strerror or e})")
    try:
        if os.geteuid() == 0:
            if not still_alive():
                raise PrivateNetworkError(f"pid {pid} ended meanwhile")
            _check(libc.setns(net, CLONE_NEWNET), "entering the run's network")
            return
        if threads_here() > 1:
            raise PrivateNetworkError("entering a user namespace takes a single-threaded process")
        u2 = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
        try:
            if not still_alive():
                raise PrivateNetworkError(f"pid {pid} ended meanwhile")
            mine = os.stat("/proc/self/ns/user")
            theirs = os.fstat(u2)
            if (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino):
                _check(libc.setns(net, CLONE_NEWNET), "entering the run's network")
                return
            try:
                u1 = fcntl.ioctl(u2, NS_GET_PARENT)
            except OSError as e:
                raise PrivateNetworkError(f"pid {pid}'s user namespace has no parent of yours "
                                          f"({os.strerror(e.errno or errno.EPERM)})")
            try:
                _check(libc.setns(u1, CLONE_NEWUSER), "entering the run's user namespace")
            finally:
                os.close(u1)
            _check(libc.setns(net, CLONE_NEWNET), "entering the run's network")
            _check(libc.setns(u2, CLONE_NEWUSER), "taking your own uid inside the run's network")
        finally:
            os.close(u2)
    finally:
        os.close(net)


def same_network(pid: int) -> bool:
    """Whether process ``pid`` lives in this process's network namespace."""
    try:
        a, b = os.stat("/proc/self/ns/net"), os.stat(f"/proc/{pid}/ns/net")
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
