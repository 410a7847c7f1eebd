"""Run folders that cannot be redirected: the one place tfcluster creates and writes the files of
a run (``<logdir>/<run id>/``: task logs, ``events.jsonl``, ``launcher.log``, ``run.json``).

The threat (issue 22): a log folder that another user can write to lets them replace a run folder
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
from typing import IO, Any, Callable, Dict, Optional

from .errors import UserError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = os.O_NOFOLLOW
_FILE_FLAGS = os.O_WRONLY | _NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
RUN_FILE = "run.json"  # a run folder's record (tfcluster.record writes it; runrecord, runindex read it)
MAX_SUFFIX = 1000    # <id>-2 ... <id>-1000: enough for any number of launches in one second

_lock = threading.Lock()
_open: Dict[str, "OpenRunDir"] = {}


def _trusted_owner(uid: int) -> bool:
    return uid == os.geteuid() or uid == 0


def check_folder_stat(st: os.stat_result, where: str, path: str) -> None:
    """Raise UserError (one line naming ``where``) unless ``st`` is a folder that only this user
    (or root) can change the entries of."""
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{where}: {path} is not a folder")
    if not _trusted_owner(st.st_uid):
        raise UserError(f"{where}: {path} is owned by another user (uid {st.st_uid}); a run "
                        f"folder there could be swapped for a link. Use a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        who = "group- and world-writable" if st.st_mode & stat.S_IWOTH and st.st_mode & stat.S_IWGRP \
            else ("world-writable" if st.st_mode & stat.S_IWOTH else "group-writable")
        raise UserError(f"{where}: {path} is {who} without the sticky bit (mode "
                        f"{stat.S_IMODE(st.st_mode):04o}); others could swap a run folder for a "
                        f"link. Run 'chmod go-w {path}' (or 'chmod +t') or use another logdir")


def open_logdir(logdir: str) -> int:
    """Make ``logdir`` when missing (mode 0700) and open it; raise UserError (one line, field
    ``logdir``) when it is not a folder or not safe (:func:`check_folder_stat`)."""
    try:
        os.makedirs(logdir, mode=0o700, exist_ok=True)
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
        check_folder_stat(os.fstat(fd), "logdir", logdir)
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
    tmp = f".{name}.tmp{os.getpid()}"
    try:
        os.unlink(tmp, dir_fd=dir_fd)   # a leftover of a killed launcher that had this pid
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


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
            if not _trusted_owner(st.st_uid) or (
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
