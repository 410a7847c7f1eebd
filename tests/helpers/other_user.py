"""What a second local user needs to run this checkout's tfcluster (and TensorFlow) in the tests
that act as that user, in any clone: the checkout may live under a folder only root can enter
(``git clone . "$(mktemp -d)/c"`` makes one), where that user can read none of it.

:class:`Readable` gives, for each path, the path itself when the user can read it, else a tree of
hard links to it (a copy where a link cannot be made: another file system, a file others may not
read) in a 0755 folder of the test's own under /tmp, removed by :meth:`Readable.close`. Hard links
share the files' contents and modes, so nothing is copied that is not already open to others, and
a 3 GiB site-packages takes a few seconds. Nothing outside the test's own folder is changed.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from typing import Dict, Optional


def can_read(uid: int, path: str) -> bool:
    """True when ``uid`` can read ``path`` (every folder above it included)."""
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return subprocess.run(["test", "-r", path], preexec_fn=drop).returncode == 0


class Readable:
    """Paths readable by ``uid``: see the module's docstring."""

    def __init__(self, uid: int):
        self.uid = uid
        self.folder: Optional[str] = None
        self.made: Dict[str, str] = {}

    def __call__(self, path: str) -> str:
        path = os.path.abspath(path)
        if path in self.made:
            return self.made[path]
        if can_read(self.uid, path):
            self.made[path] = path
            return path
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="tfc-readable-")
            os.chmod(self.folder, 0o755)
        dest = os.path.join(self.folder, f"{len(self.made)}", os.path.basename(path))
        os.makedirs(os.path.dirname(dest), mode=0o755)
        os.chmod(os.path.dirname(dest), 0o755)
        if os.path.isdir(path):
            _link_tree(path, dest)
        else:
            _link_file(path, dest)
        self.made[path] = dest
        return dest

    def close(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        self.made.clear()


def _link_file(src: str, dest: str) -> None:
    st = os.lstat(src)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dest)
        return
    if not stat.S_ISREG(st.st_mode):
        return                                   # sockets, FIFOs: nothing a program imports
    if st.st_mode & 0o004:
        try:
            os.link(src, dest)
            return
        except OSError:
            pass                                 # another file system: a copy below
    shutil.copyfile(src, dest)
    os.chmod(dest, 0o755 if st.st_mode & 0o111 else 0o644)


def _link_tree(src: str, dest: str) -> None:
    for root, dirs, files in os.walk(src):
        here = os.path.join(dest, os.path.relpath(root, src))
        os.makedirs(here, exist_ok=True)
        os.chmod(here, 0o755)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            _link_file(os.path.join(root, name), os.path.join(here, name))
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))
                   and d != "__pycache__"]


def system_python() -> Optional[str]:
    """The system's Python of this minor version (what another user runs), or None."""
    want = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    return want if os.path.exists(want) else None


def python_path(readable: Readable, *paths: str) -> str:
    """PYTHONPATH for the user: ``paths``, then this interpreter's site-packages folders (a
    virtual environment's, and the base's where it borrows them), each readable by the user."""
    sites = [p for p in sys.path if os.path.basename(p) == "site-packages" and os.path.isdir(p)]
    sites = sites or [sysconfig.get_paths()["purelib"]]
    return os.pathsep.join(readable(p) for p in [*paths, *sites])
