"""The per-user index of runs, so that a run can be named by its id from any folder.

Every run folder the launcher makes is added, one JSON line, to ``runs.jsonl`` in the user's
state folder: ``$XDG_STATE_HOME/tfcluster`` (default ``~/.local/state/tfcluster``, the XDG Base
Directory rule). ``tfcluster logs/stop/tensorboard`` (and ``status``/``runs``/``report`` through
:func:`resolve_run`) turn a run id into its folder with it. The index is a convenience: a run
folder is still the record, and a line whose folder is gone is skipped.

No TensorFlow, no subprocess: pure file handling.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

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
    return os.path.join(state_dir(), INDEX)


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
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
    except OSError as e:
        return f"the run index {path} cannot be written ({e.strerror or e})"
    return None


def entries() -> List[Dict[str, Any]]:
    """Every readable line of the index, newest first (a bad line is skipped)."""
    try:
        with open(index_path(), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise UserError(f"the run index {index_path()} cannot be read ({e.strerror or e})")
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
        if d in seen or not is_run_dir(d):
            continue
        seen.add(d)
        out.append((d, e))
        if limit is not None and len(out) >= limit:
            break
    return out


def is_run_dir(path: str) -> bool:
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
    the index. Without ``arg``: see :func:`default_run`. Raises UserError (exit 2) naming where
    it looked."""
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
def noted(kind: str, key: str) -> bool:
    """Whether note ``kind`` (e.g. ``security``) was already shown for ``key`` (a file path)."""
    try:
        with open(os.path.join(state_dir(), f"noted-{kind}.json"), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and key in data


def first_time(kind: str, key: str) -> bool:
    """Whether note ``kind`` is shown for ``key`` for the first time; remembers that it is."""
    if noted(kind, key):
        return False
    note_shown(kind, key)
    return True


def note_shown(kind: str, key: str, now: Optional[float] = None) -> None:
    """Remember that note ``kind`` was shown for ``key``; a state folder that cannot be written
    only means the note is shown again next time."""
    path = os.path.join(state_dir(), f"noted-{kind}.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[key] = time.time() if now is None else now
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        return
