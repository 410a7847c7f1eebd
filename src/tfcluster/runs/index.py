"""The per-user index of runs, so that a run can be named by its id from any folder.

Every run folder the launcher makes is added, one JSON line, to ``runs.jsonl`` in the user's
state folder: ``$XDG_STATE_HOME/tfcluster`` (default ``~/.local/state/tfcluster``, the XDG Base
Directory rule). ``tfcluster logs/stop/tensorboard`` (and ``status``/``runs``/``report`` through
:func:`resolve_run`) turn a run id into its folder with it. The index is a convenience: a run
folder is still the record, and a line whose folder is gone is skipped.

The state folder is the caller's alone: each folder of it that is missing is made with mode 0700
whatever the umask, and before the index is read or written, the state folder and every folder
above it up to the home folder must be the caller's (or root's), not changeable by others, and
no link that another user made; the index file must be a regular file of the caller's that
nobody else can write. Anything else is one line (exit 2) naming the folder and the fix: a state
folder another user can swap would let them choose which folder ``logs RUN`` reads.

No TensorFlow, no subprocess: pure file handling.
"""
from __future__ import annotations

import json
import os
import stat
import time
from typing import Any, Dict, List, Optional, Tuple

from tfcluster import safe_files
from tfcluster.errors import UserError

INDEX = "runs.jsonl"
CONSOLE = "console.log"          # a detached launcher's own output, in its run folder


def state_dir() -> str:
    """The user's tfcluster state folder (XDG): ``$XDG_STATE_HOME/tfcluster``, else
    ``~/.local/state/tfcluster``. Not created here."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):       # the spec: a relative value is invalid and ignored
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "tfcluster")


def index_path() -> str:
    """The run index's file (under the state folder)."""
    return os.path.join(state_dir(), INDEX)


def _guarded_folders(folder: str) -> List[str]:
    """``folder`` and the folders above it that guard it: up to the home folder (not included)
    when it lies under home (``~/.local/state/tfcluster``: ``.local``, ``state``, ``tfcluster``),
    else ``$XDG_STATE_HOME`` itself and ``tfcluster`` in it."""
    home = os.path.abspath(os.path.expanduser("~"))
    folder = os.path.abspath(folder)
    if not folder.startswith(os.path.join(home, "")):
        return [folder, os.path.dirname(folder)]
    out, cur = [], folder
    while cur != home and os.path.dirname(cur) != cur:
        out.append(cur)
        cur = os.path.dirname(cur)
    return out


def trusted_state_dir(create: bool = False) -> str:
    """The state folder, checked (see the module's docstring) and, with ``create``, made where
    missing (0700 at each level). Raises UserError naming the folder when it is not safe;
    returns its path (which may not exist when ``create`` is off)."""
    folder = state_dir()
    safe_files.check_links(folder, "run index")
    for path in reversed(_guarded_folders(folder)):     # outermost first
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create:
                return folder
            try:
                safe_files.make_private_folders(path)
            except OSError as e:
                raise UserError(f"run index: cannot create {path} ({e.strerror or e})")
            st = os.lstat(path)
        if os.path.islink(path):        # one of ours or root's (check_links)
            st = os.stat(path)
        safe_files.check_folder_stat(st, "run index", path, what="the run index",
                                     instead="set XDG_STATE_HOME to a folder of your own")
    return folder


def _open_index(flags: int) -> int:
    """The index file opened with ``flags`` (no link followed), after the state folder's check;
    refused (UserError) when it is not a regular file of the caller's that only they can write."""
    trusted_state_dir(create=bool(flags & os.O_CREAT))
    path = index_path()
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o600)
    st = os.fstat(fd)
    why = ("is not a regular file" if not stat.S_ISREG(st.st_mode) else
           f"belongs to another user (uid {st.st_uid})" if st.st_uid not in (os.geteuid(), 0) else
           "can be written by others" if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) else "")
    if why:
        os.close(fd)
        raise UserError(f"run index: {path} {why}; not used. Remove it (a new one is made)")
    return fd


def register(run_dir: str, run_id: Optional[str] = None, file: Optional[str] = None,
             now: Optional[float] = None) -> Optional[str]:
    """Add a run folder to the index. Returns None, or why it could not be added (the run goes
    on: the index is a convenience; the caller may print the reason as a warning)."""
    entry = {"run_id": run_id or os.path.basename(os.path.normpath(run_dir)),
             "run_dir": os.path.abspath(run_dir),
             "file": os.path.abspath(file) if file else None,
             "registered": time.time() if now is None else now}
    path = index_path()
    try:
        fd = _open_index(os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
    except UserError as e:
        return f"the run index {path} cannot be written ({str(e).replace('run index: ', '')})"
    except OSError as e:
        return f"the run index {path} cannot be written ({e.strerror or e})"
    return None


def entries() -> List[Dict[str, Any]]:
    """Every readable line of the index, newest first (a bad line is skipped)."""
    try:
        fd = _open_index(os.O_RDONLY)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise UserError(f"the run index {index_path()} cannot be read ({e.strerror or e})")
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    out = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and isinstance(e.get("run_dir"), str) and isinstance(e.get("run_id"), str):
            out.append(e)
    out.reverse()
    return out


def runs(limit: Optional[int] = None) -> List[Tuple[str, Dict[str, Any]]]:
    """(run folder, index entry) of the indexed runs whose folder still holds a run.json,
    newest first, each folder once."""
    seen, out = set(), []
    for e in entries():
        d = e["run_dir"]
        if d in seen or not is_run_dir(d) or not _ours(d):
            continue
        seen.add(d)
        out.append((d, e))
        if limit is not None and len(out) >= limit:
            break
    return out


def _ours(path: str) -> bool:
    """The run folder belongs to the caller (or root): an index line never leads to another
    user's folder."""
    try:
        return os.stat(path).st_uid in (os.geteuid(), 0)
    except OSError:
        return False


def is_run_dir(path: str) -> bool:
    """Whether ``path`` is a run folder (it holds run.json)."""
    from tfcluster.runs.run_file import is_run_folder
    return is_run_folder(path)


def lookup(run_id: str) -> Optional[str]:
    """The folder of the newest indexed run with this id (or, failing that, the only one whose
    id starts with it); None when there is none. Raises UserError when a prefix is ambiguous."""
    found = runs()
    exact = [d for d, e in found if e["run_id"] == run_id]
    if exact:
        return exact[0]
    prefixed = sorted({e["run_id"]: d for d, e in found if e["run_id"].startswith(run_id)}.items())
    if len(prefixed) == 1:
        return prefixed[0][1]
    if len(prefixed) > 1:
        names = ", ".join(k for k, _ in prefixed[:5]) + (", ..." if len(prefixed) > 5 else "")
        raise UserError(f"run id '{run_id}' is ambiguous: {names}")
    return None


def resolve_run(arg: Optional[str] = None, file: Optional[str] = None) -> str:
    """The run folder ``arg`` names: a run folder (a path holding run.json), or a run id from
    the index. Without ``arg``: see :func:`choose_run`.

    Args:
        arg: a run folder's path or a run id (None: the latest run, as ``choose_run`` picks).
        file: a cluster file whose logdir is searched too.

    Returns:
        The run folder's path.

    Raises:
        UserError: no such run, naming where it looked (exit 2).
    """
    return choose_run(arg, file)[0]


def here_first(found: List[Tuple[str, Dict[str, Any]]], cwd: Optional[str] = None):
    """The indexed runs of this folder (their run folder or cluster file under it), else all:
    the index holds every run of the user, from every folder. (runs, True when only this
    folder's)."""
    cwd = os.path.join(os.path.abspath(cwd or os.getcwd()), "")
    mine = [(d, e) for d, e in found
            if d.startswith(cwd) or str(e.get("file") or "").startswith(cwd)]
    return (mine, True) if mine else (found, False)


def choose_run(arg: Optional[str] = None, file: Optional[str] = None) -> Tuple[str, str]:
    """(run folder, how it was chosen: "" when ``arg`` names it). Without ``arg``: the latest
    run of ``file`` (default ./cluster.yaml when it exists), else the latest run in ./runs, else
    the latest indexed run of this folder, else the latest indexed run of any folder."""
    if arg:
        return _named_run(arg, file), ""
    if file or os.path.isfile("cluster.yaml"):
        from tfcluster.runs.find import find_run
        return (os.path.abspath(find_run(None, file)[0]),
                f"the latest run of {file or './cluster.yaml'}")
    if os.path.isdir("runs"):
        from tfcluster.runs.find import find_run
        try:
            return os.path.abspath(find_run("runs", None)[0]), "the latest run in ./runs"
        except UserError:   # no run of ours in ./runs: the index is asked next
            pass
    found, here = here_first(runs())
    if not found:
        raise UserError(f"no run given, no ./cluster.yaml here, and no runs in {index_path()}")
    return found[0][0], ("the latest run of this folder in your run index" if here else
                         f"your latest run in any folder (your run index, {index_path()}; "
                         f"none of this folder)")


def _named_run(arg: str, file: Optional[str]) -> str:
    if arg:
        # a bare id is looked up in the caller's own index first: a folder of that name in the
        # current (perhaps shared) folder is someone else's to plant
        if os.sep not in arg and arg not in (".", ".."):
            d = lookup(arg)
            if d:
                return d
        if is_run_dir(arg):
            return os.path.abspath(arg)
        if os.path.isdir(arg):   # a logdir: its latest run (the records' rule)
            from tfcluster.runs.find import find_run
            return os.path.abspath(find_run(arg, file)[0])
        raise UserError(f"{arg}: no such run folder, and no run with this id in {index_path()}")
    raise UserError("no run given")


def run_ids() -> List[str]:
    """Ids of the indexed runs, newest first (for shell completion)."""
    seen, out = set(), []
    for e in entries():
        if e["run_id"] not in seen:
            seen.add(e["run_id"])
            out.append(e["run_id"])
    return out


# ------------------------------------------------------------------ per-file notes
# (kept in the state folder as noted-KIND.json: the name that earlier versions wrote and read)
def shown_before(kind: str, key: str) -> bool:
    """Whether note ``kind`` (e.g. ``security``) was already shown for ``key`` (a file path)."""
    data = _read_shown(kind)
    return key in data


def first_time(kind: str, key: str) -> bool:
    """Whether note ``kind`` is shown for ``key`` for the first time; remembers that it is."""
    if shown_before(kind, key):
        return False
    remember_shown(kind, key)
    return True


def remember_shown(kind: str, key: str, now: Optional[float] = None) -> None:
    """Remember that note ``kind`` was shown for ``key``; a state folder that cannot be written
    only means the note is shown again next time."""
    data = _read_shown(kind)
    data[key] = time.time() if now is None else now
    try:
        folder = trusted_state_dir(create=True)
        path = os.path.join(folder, f"noted-{kind}.json")
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except (OSError, UserError):   # the note is only shown again next time
        return


def _read_shown(kind: str) -> Dict[str, Any]:
    try:
        f = safe_files.open_regular(os.path.join(trusted_state_dir(), f"noted-{kind}.json"))
        if f is None:
            return {}
        with f:
            data = json.loads(f.read(1 << 20) or b"{}")
    except (OSError, ValueError, UserError):    # missing, unreadable or not ours: not shown before
        return {}
    return data if isinstance(data, dict) else {}
