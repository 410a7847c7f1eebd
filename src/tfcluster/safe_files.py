"""Run folders that cannot be redirected: the one place tfcluster creates and writes the files of
a run (``<logdir>/<run id>/``: task logs, ``events.jsonl``, ``launcher.log``, ``run.json``).

The threat: a log folder that another user can write to lets them replace a run folder
with a symbolic link between two opens, and a launcher that opens files by path then appends a
task's output to a file of their choosing (``~/.bashrc``) or writes ``run.json`` into their
folder. So:

* the logdir is checked once, on the open folder: it must be a folder, owned by this user (or
  root), and not writable by group or others unless it has the sticky bit (``/tmp``-style, where
  others cannot rename or remove what is not theirs). Anything else is refused with one line
  (a :class:`~tfcluster.errors.UserError`, exit 2);
* the run folder is made with ``mkdir`` (which never follows a link and fails on any existing
  name, a dangling link included) relative to the open logdir, then opened once with
  ``O_NOFOLLOW | O_DIRECTORY`` and checked to be ours;
* every file is opened relative to that folder's descriptor (``dir_fd``) with ``O_NOFOLLOW``:
  new files with ``O_EXCL``, logs with ``O_APPEND``; only regular files are written (a FIFO or
  device planted under a log's name is refused, without blocking); ``run.json`` is written to a
  temporary file made with ``O_EXCL`` and renamed over the old one within the folder (the
  temporary file is removed when the write fails, a full disk included).

Whatever happens to the path afterwards (the folder renamed, a link put in its place), writes
land in the folder that was made, or fail; they are never redirected.

A default run id (a timestamp) never collides: when the name is taken (another launch in the
same second, a leftover, a planted link) the next free ``<id>-2``, ``<id>-3``, ... is made. An
explicit ``--run-id`` that exists is an error.

Reading goes through this module too (:func:`open_regular`, :func:`read_bytes`,
:func:`read_lines`, :func:`open_run_dir`): regular files only (a FIFO, a device such as
``/dev/zero`` or a folder is refused without blocking), no link followed where the file belongs
to a run, sizes checked, and memory bounded by a window, never by the file's size. The reader
of a run's files (``logs``, ``report``, ``stop``) checks who owns the folder and the record
(:func:`check_own`): another user's record is not trusted.

Code that knows only a path (``run.json`` through :func:`write_json`, a task log through
:func:`open_log`, the event log) finds the open folder of that path in this process
(:func:`folder_for`); without one (another process, such as a Slurm task) it opens the parent
folder with ``O_NOFOLLOW`` and the same ownership check, then writes relative to it.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import threading
from typing import IO, Any, BinaryIO, Callable, Dict, Iterator, Optional

from tfcluster.errors import UserError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = os.O_NOFOLLOW
_FILE_FLAGS = os.O_WRONLY | _NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
RUN_FILE = "run.json"  # a run folder's record (tfcluster.runs.record writes it; runs.run_file and runs.index read it)
MAX_SUFFIX = 1000    # <id>-2 ... <id>-1000: enough for any number of launches in one second

_lock = threading.Lock()
_open: Dict[str, "OpenRunDir"] = {}


def _trusted_owner(uid: int, fd: Optional[int] = None) -> bool:
    """This user or root. Inside a private run's user namespace root shows as the overflow uid
    (as every unmapped user does): the open file ``fd`` is then asked about outside
    (:mod:`tfcluster.net.owners`)."""
    if uid == os.geteuid() or uid == 0:
        return True
    from tfcluster.net.owners import trusted
    return trusted(uid, fd)


def _link_trusted(path: str, uid: int) -> bool:
    """:func:`_trusted_owner` for the link at ``path`` itself (opened with ``O_PATH``, not followed)."""
    if uid == os.geteuid() or uid == 0:
        return True
    try:
        fd = os.open(path, getattr(os, "O_PATH", 0) | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return stat.S_ISLNK(st.st_mode) and st.st_uid == uid and _trusted_owner(uid, fd)
    finally:
        os.close(fd)


def check_folder_stat(st: os.stat_result, where: str, path: str, what: str = "a run folder",
                      instead: str = "use another logdir", fd: Optional[int] = None) -> None:
    """Raise UserError (one line naming ``where``) unless ``st`` is a folder that only this user
    (or root) can change the entries of. ``what`` others could swap there, and what to do
    ``instead``, are said in the message. ``fd``: the open folder ``st`` is of (its true owner
    is asked about outside a user namespace)."""
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{where}: {path} is not a folder")
    if not _trusted_owner(st.st_uid, fd):
        raise UserError(f"{where}: {path} is owned by another user (uid {st.st_uid}); {what} "
                        f"there could be swapped for a link. Use a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        who = "group- and world-writable" if st.st_mode & stat.S_IWOTH and st.st_mode & stat.S_IWGRP \
            else ("world-writable" if st.st_mode & stat.S_IWOTH else "group-writable")
        raise UserError(f"{where}: {path} is {who} without the sticky bit (mode "
                        f"{stat.S_IMODE(st.st_mode):04o}); others could swap {what} for a "
                        f"link. Run 'chmod go-w {path}' (or 'chmod +t') or {instead}")


def check_links(path: str, where: str) -> None:
    """Raise UserError (one line naming ``where``) when a part of ``path`` is a symbolic link
    that another user made (not this user, not root): a link planted in a shared folder
    (``/tmp/shared/runs -> /elsewhere``) is not followed. Links of this user's or root's
    (``/home -> /data/home``) are."""
    cur = os.path.abspath(path)
    parts = []
    while os.path.dirname(cur) != cur:
        parts.append(cur)
        cur = os.path.dirname(cur)
    for p in reversed(parts):
        try:
            st = os.lstat(p)
        except OSError:         # missing (made next) or unreadable (the open says why)
            return
        if stat.S_ISLNK(st.st_mode) and not _link_trusted(p, st.st_uid):
            raise UserError(f"{where}: {p} is a link made by another user (uid {st.st_uid}); "
                            f"not followed")


def private_temp_dir(prefix: str) -> str:
    """A new folder (``mkdtemp``: 0700, this user's) in the temporary folder, which must itself
    be one that only this user or root can change the entries of, or a sticky one (``/tmp``): a
    ``TMPDIR`` of another user's could rename ours away and put theirs in its place (an ssh
    control socket there would hand them the session). UserError naming TMPDIR otherwise."""
    import tempfile
    base = tempfile.gettempdir()
    check_folder_stat(os.stat(base), "TMPDIR", base, what="a folder of tfcluster's",
                      instead="set TMPDIR to a folder of your own")
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def make_private_folders(path: str) -> None:
    """``os.makedirs`` with mode 0700 at every level it makes, whatever the umask (makedirs
    gives the levels above the last the umask's default, 0777 under umask 000)."""
    missing = []
    cur = os.path.abspath(path)
    while not os.path.lexists(cur):
        missing.append(cur)
        cur = os.path.dirname(cur)
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:     # made meanwhile (another launch): checked as it is
            continue
        os.chmod(p, 0o700)


def open_logdir(logdir: str) -> int:
    """Make ``logdir`` when missing (mode 0700 at every level) and open it; raise UserError (one
    line, field ``logdir``) when a part of it is a link another user made
    (:func:`check_links`), or it is not a folder or not safe (:func:`check_folder_stat`)."""
    check_links(logdir, "logdir")
    try:
        make_private_folders(logdir)
    except FileExistsError:
        raise UserError(f"logdir: {logdir} is not a folder")
    except NotADirectoryError:
        raise UserError(f"logdir: {logdir}: a part of this path is not a folder")
    except OSError as e:
        raise UserError(f"logdir: cannot create {logdir} ({e.strerror or e})")
    try:
        fd = os.open(logdir, _DIR_FLAGS)
    except NotADirectoryError:
        raise UserError(f"logdir: {logdir} is not a folder")
    except OSError as e:
        raise UserError(f"logdir: cannot open {logdir} ({e.strerror or e})")
    try:
        check_folder_stat(os.fstat(fd), "logdir", logdir, fd=fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_run_folder(logdir: str, run_id: str, explicit: bool = True,
                    adopt: Optional[Callable[[str], bool]] = None) -> "OpenRunDir":
    """Make and open the run folder ``<logdir>/<run_id>`` (see the module's docstring).

    ``explicit``: the run id came from ``--run-id`` (an existing one is an error); otherwise it is
    a default, and a taken name gives the next free ``<run_id>-N``. ``adopt``: an existing folder
    for which it says True is opened instead (``launch --detach`` prepared it for this
    launcher); it is opened and checked like a new one."""
    lfd = open_logdir(logdir)
    try:
        name = run_id
        for n in range(1, MAX_SUFFIX + 1):
            name = run_id if n == 1 else f"{run_id}-{n}"
            try:
                os.mkdir(name, 0o700, dir_fd=lfd)
                break
            except FileExistsError:
                if adopt is not None and adopt(os.path.join(logdir, name)):
                    break
                if explicit:
                    raise UserError(f"--run-id: {os.path.join(logdir, name)} exists already; "
                                    f"choose another run id")
            except OSError as e:
                raise UserError(f"logdir: cannot create {os.path.join(logdir, name)} "
                                f"({e.strerror or e})")
        else:
            raise UserError(f"logdir: {logdir} holds {MAX_SUFFIX} runs named {run_id}[-N]; "
                            f"give --run-id")
        path = os.path.join(logdir, name)
        try:
            fd = os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=lfd)
        except OSError as e:   # swapped between mkdir and open (ELOOP, ENOTDIR)
            raise UserError(f"logdir: {path} changed while it was being made ({e.strerror or e}); "
                            f"is someone else writing to {logdir}?")
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise UserError(f"logdir: {path} is not the folder tfcluster made (owned by uid "
                                f"{st.st_uid}); is someone else writing to {logdir}?")
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(lfd)
    folder = OpenRunDir(path, fd)
    with _lock:
        _open[_key(path)] = folder
    return folder


def _key(path: str) -> str:
    return os.path.abspath(path)


def folder_for(path: str) -> Optional["OpenRunDir"]:
    """The open run folder made in this process at ``path``, if any."""
    with _lock:
        return _open.get(_key(path))


class OpenRunDir:
    """An open run folder: every write goes relative to :attr:`dir_fd`, with no link followed."""

    def __init__(self, path: str, dir_fd: int):
        self.path = path
        self.dir_fd = dir_fd

    # ---- files
    def _open(self, name: str, flags: int) -> int:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"not a plain file name: {name!r}")
        fd = os.open(name, _FILE_FLAGS | flags, 0o600, dir_fd=self.dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{os.path.join(self.path, name)} is not a regular file")
            if st.st_nlink > 1:
                raise OSError(f"{os.path.join(self.path, name)} has other names (a hard link)")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_append_fd(self, name: str) -> int:
        """A descriptor appending to ``name`` (made 0600 when missing; never a link)."""
        return self._open(name, os.O_CREAT | os.O_APPEND)

    def open_log(self, name: str) -> IO[bytes]:
        """A task's log, for appending bytes (``"ab"``)."""
        return os.fdopen(self.open_append_fd(name), "ab")

    def append(self, name: str) -> IO[str]:
        """A text file (UTF-8) for appending lines (events.jsonl, launcher.log)."""
        return os.fdopen(self.open_append_fd(name), "a", encoding="utf-8")

    def create(self, name: str) -> IO[str]:
        """A new text file (``O_EXCL``: fails when the name exists)."""
        return os.fdopen(self._open(name, os.O_CREAT | os.O_EXCL), "w", encoding="utf-8")

    def create_binary(self, name: str) -> IO[bytes]:
        """A new file for appending bytes (``O_EXCL``: fails when the name exists)."""
        return os.fdopen(self._open(name, os.O_CREAT | os.O_EXCL | os.O_APPEND), "ab")

    def write_json(self, name: str, data: Any) -> None:
        write_json_at(self.dir_fd, name, data)

    def close(self) -> None:
        with _lock:
            if _open.get(_key(self.path)) is self:
                del _open[_key(self.path)]
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> "OpenRunDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def dumps_lines(data: Any) -> str:
    """JSON for a person and a program: a dict one key a line, a list in it one item a line
    (a run record: one line per task), everything deeper on its line. ``json.dumps`` with
    ``indent`` uses the pure-Python encoder (0.19 s a write of a 512-task record); this uses the C
    one for each line."""
    if isinstance(data, dict) and data and all(isinstance(k, str) for k in data):
        def value(v: Any) -> str:
            if isinstance(v, list) and v:
                return "[\n" + ",\n".join("    " + json.dumps(x) for x in v) + "\n  ]"
            return json.dumps(v)
        return "{\n" + ",\n".join(f"  {json.dumps(k)}: {value(v)}" for k, v in data.items()) + "\n}"
    return json.dumps(data)


def write_json_at(dir_fd: int, name: str, data: Any, reserve: int = 0) -> None:
    """Write ``name`` in the folder ``dir_fd`` atomically, 0600: a temporary file made with
    ``O_EXCL | O_NOFOLLOW``, renamed over ``name`` within the folder. When the write fails (disk
    full) the temporary file is removed; with no space left, ``name`` itself is rewritten in
    place (its blocks exist already: ``reserve`` spaces after the JSON, which JSON readers skip,
    keep room for a slightly longer next version), else the error is raised and the old
    ``name`` is left whole."""
    text = dumps_lines(data) + "\n" + " " * max(0, reserve)
    try:
        _write_replace(dir_fd, name, text)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT) or not _rewrite_in_place(dir_fd, name, text):
            raise


def _rewrite_in_place(dir_fd: int, name: str, text: str) -> bool:
    """Overwrite the regular file ``name`` with ``text`` (no link followed); True when it fit."""
    data = text.encode("utf-8")
    try:
        fd = os.open(name, os.O_WRONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or len(data) > os.fstat(fd).st_size:
            return False          # growing it needs blocks the disk does not have
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _write_replace(dir_fd: int, name: str, text: str) -> None:
    write_new_at(dir_fd, name, text.encode("utf-8"))


class _Parent:
    """The folder of ``path`` as a descriptor: the open run folder of this process, or the
    folder opened now with ``O_NOFOLLOW`` (its last component may not be a link) and checked."""

    def __init__(self, path: str):
        self.parent, self.name = os.path.split(os.path.abspath(path))
        self.folder = folder_for(self.parent)
        self.fd = -1

    def __enter__(self) -> int:
        if self.folder is not None and self.folder.dir_fd >= 0:
            return self.folder.dir_fd
        self.fd = os.open(self.parent, _DIR_FLAGS | _NOFOLLOW)
        try:
            st = os.fstat(self.fd)
            if not _trusted_owner(st.st_uid, self.fd) or (
                    st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX):
                raise PermissionError(f"{self.parent}: a folder others can change; not written")
        except BaseException:
            os.close(self.fd)
            raise
        return self.fd

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            os.close(self.fd)


def write_json(path: str, data: Any, reserve: int = 0) -> None:
    """Write JSON at ``path`` atomically, readable by its owner only, with no link followed
    (relative to the open run folder when ``path`` is in one; see the module's docstring)."""
    with _Parent(path) as fd:
        write_json_at(fd, os.path.basename(path), data, reserve)


def open_append_fd(path: str) -> int:
    """A descriptor appending to ``path`` (0600, never through a link, regular files only)."""
    holder = _Parent(path)
    with holder as fd:
        folder = holder.folder or OpenRunDir(holder.parent, fd)
        return folder.open_append_fd(holder.name)


def open_log(path: str) -> IO[bytes]:
    """A task's log at ``path``, for appending bytes: the drop-in for
    ``os.fdopen(os.open(path, O_WRONLY | O_CREAT | O_APPEND, 0o600), "ab")`` in the output
    reader, without following links."""
    return os.fdopen(open_append_fd(path), "ab")


def append_text(path: str) -> IO[str]:
    """A text file at ``path`` for appending lines (UTF-8), without following links."""
    return os.fdopen(open_append_fd(path), "a", encoding="utf-8")


# ------------------------------------------------------------------ reading
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
WINDOW = 1 << 20        # bytes: the most a line reader holds at once (a longer line is split)


def shown(path: Any) -> str:
    """A path for a one-line message: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))


def size_text(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{int(n)} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "something else")


def open_regular(path: str, *, follow: bool = False, dir_fd: Optional[int] = None,
                 limit: Optional[int] = None, what: str = "records are plain files",
                 single_link: bool = False) -> Optional[BinaryIO]:
    """``path`` opened for binary reading when it is a regular file; None when it does not
    exist. The open never blocks (``O_NONBLOCK``: a FIFO with no writer would) and follows no
    link unless ``follow`` (a cluster file the user linked to); a link, a FIFO, a device, a
    folder, a file larger than ``limit`` bytes or one that cannot be read is a UserError naming
    it (one line). ``dir_fd``: ``path`` is a name in that open folder. ``single_link``: a file
    with other names (a hard link someone made to a file outside the run folder) is refused."""
    flags = _READ_FLAGS | (0 if follow else _NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise UserError(f"{shown(path)}: a symbolic link; not followed ({what})")
        raise UserError(f"{shown(path)}: cannot be read ({e.strerror or e})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{shown(path)}: is {_kind(st.st_mode)}, not a regular file; {what}")
        if single_link and st.st_nlink > 1:
            raise UserError(f"{shown(path)}: has other names (a hard link); not read")
        if limit is not None and st.st_size > limit:
            raise UserError(f"{shown(path)}: {size_text(st.st_size)}, more than the "
                            f"{size_text(limit)} it may be; not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str, limit: int, *, follow: bool = False, dir_fd: Optional[int] = None,
               what: str = "records are plain files") -> Optional[bytes]:
    """The bytes of the regular file ``path`` (None when it does not exist), at most ``limit``
    of them: a larger file (or one that grows past it while read) is a UserError, not read."""
    f = open_regular(path, follow=follow, dir_fd=dir_fd, limit=limit, what=what)
    if f is None:
        return None
    with f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise UserError(f"{shown(path)}: cannot be read ({e.strerror or e})")
    if len(data) > limit:
        raise UserError(f"{shown(path)}: more than the {size_text(limit)} it may be; not read")
    return data


def read_lines(f: BinaryIO, window: int = WINDOW) -> Iterator[bytes]:
    """The lines of ``f`` (bytes, with their newline), read a window at a time: a line longer
    than ``window`` comes in pieces of ``window`` bytes, so memory never grows with the file."""
    while True:
        line = f.readline(window)
        if not line:
            return
        yield line


class LineTail:
    """New lines of a file another process appends to (a Slurm job's output, a launcher's
    log), read a window at a time: each read opens it with :func:`open_regular` (no link
    followed, regular files only, without blocking), a line longer than ``window`` comes in
    pieces, so memory never grows with the file. ``own``: a file of another user is refused."""

    def __init__(self, path: str, window: int = WINDOW, own: bool = False,
                 what: str = "a followed file is a plain file"):
        self.path, self.window, self.own, self.what = path, window, own, what
        self.pos, self.rest = 0, b""

    def skip_to_end(self) -> None:
        try:
            self.pos = os.stat(self.path, follow_symlinks=False).st_size
        except OSError:
            self.pos = 0

    def read(self, final: bool = False) -> Iterator[str]:
        """The lines appended since the last read (without their newline), as they are read.
        Not ``final``: up to the size the file had when opened (a fast writer cannot hold the
        caller here); ``final``: to its end, and the last unended line too. Something other
        than a plain file (of this user's, with ``own``) is a UserError at the first line."""
        f = open_regular(self.path, what=self.what)
        if f is not None:
            with f:
                st = os.fstat(f.fileno())
                if self.own:
                    check_own(self.path, st, self.what)
                end = None if final else st.st_size
                f.seek(self.pos)
                while end is None or self.pos < end:
                    try:
                        data = f.read(self.window if end is None else min(self.window, end - self.pos))
                    except OSError:   # a read error: the next read goes on from here
                        break
                    if not data:
                        break
                    self.pos += len(data)
                    lines, self.rest = split_lines(self.rest, data, self.window)
                    for line in lines:
                        yield line.decode("utf-8", "replace")
        if final and self.rest:
            rest, self.rest = self.rest, b""
            yield rest.decode("utf-8", "replace")


def split_lines(rest: bytes, data: bytes, window: int) -> "tuple[list[bytes], bytes]":
    """``data`` read after ``rest`` (the last line read, not ended yet), cut into its complete
    lines (without their newline) and what is left of a line not ended yet; a line without end
    that has reached ``window`` bytes is given as a line of its own, so what is kept stays
    bounded (a program that never writes a newline)."""
    lines = (rest + data).split(b"\n")
    rest = lines.pop()
    if len(rest) >= window:
        lines.append(rest)
        rest = b""
    return lines, rest


def check_own(path: str, st: os.stat_result, what: str) -> None:
    """Raise UserError unless ``st`` (of ``path``) belongs to this user: a record or run folder
    another user made is not trusted (it could name any process or file)."""
    if st.st_uid != os.geteuid():
        raise UserError(f"{shown(path)}: owned by another user (uid {st.st_uid}), not by you; "
                        f"{what}")


def open_run_dir(run_dir: str, *, own: bool = True) -> int:
    """The run folder opened for reading relative to it (``O_NOFOLLOW`` on its last part; a
    folder, and, with ``own``, yours). The caller closes the descriptor."""
    try:
        fd = os.open(run_dir, _DIR_FLAGS | _NOFOLLOW)
    except OSError as e:
        why = "a symbolic link; not followed" if e.errno == errno.ELOOP else (
            "not a folder" if e.errno == errno.ENOTDIR else f"cannot be opened ({e.strerror or e})")
        raise UserError(f"{shown(run_dir)}: {why}")
    if own:
        try:
            check_own(run_dir, os.fstat(fd), "a run folder must be yours to be used")
        except BaseException:
            os.close(fd)
            raise
    return fd


def plain_name(name: Any) -> Optional[str]:
    """``name`` when it is a plain file name (no folder part, not ``.``/``..``), else None."""
    if not isinstance(name, str) or not name or "/" in name or "\0" in name or name in (".", ".."):
        return None
    return name


def write_new_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Write the new file ``name`` in the folder ``dir_fd`` atomically: a temporary file made
    with ``O_EXCL | O_NOFOLLOW`` (a planted name or link is never opened), renamed over
    ``name`` within the folder (a link at ``name`` is replaced, not followed). On any failure (a
    full disk) the temporary file is removed."""
    tmp = f".{name}.tmp{os.getpid()}"
    try:
        os.unlink(tmp, dir_fd=dir_fd)   # a leftover of a killed writer that had this pid (or a link)
    except FileNotFoundError:   # none left over (the usual case): nothing to clear
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:   # gone already, or not removable: the write's own error (raised) matters
            pass
        raise


def write_file(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``path`` atomically (:func:`write_new_at`) in its folder opened with
    ``O_NOFOLLOW`` (its last part)."""
    parent, name = os.path.split(os.path.abspath(path))
    fd = os.open(parent, _DIR_FLAGS | _NOFOLLOW)
    try:
        write_new_at(fd, name, data, mode)
    finally:
        os.close(fd)


def create_new(path: str, data: bytes, mode: int = 0o644) -> None:
    """Make the new file ``path`` (``O_CREAT | O_EXCL | O_NOFOLLOW``: an existing name, a
    dangling link included, is FileExistsError) and write ``data``; removed again when the
    write fails."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        try:
            os.unlink(path)
        except OSError:   # gone already, or not removable: the write's own error (raised) matters
            pass
        raise
