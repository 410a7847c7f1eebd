"""The per-user state folder (the run index, the notes already shown) is the caller's alone: made
0700 at every level whatever the umask, and refused, in one line, where another user could swap
it (a parent others can write, a link another user made, an index file others can write)."""
from __future__ import annotations

import json
import os

import pytest

from tfcluster.errors import UserError
from tfcluster.runs import index

OTHER = 65534      # nobody


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return h


def _run(tmp_path, name="r1"):
    d = tmp_path / "logs" / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"run_id": name, "result": "succeeded"}))
    return d


def test_under_umask_000_every_new_state_folder_is_0700(home, tmp_path):
    old = os.umask(0)
    try:
        assert index.register(str(_run(tmp_path))) is None
    finally:
        os.umask(old)
    for p in (home / ".local", home / ".local" / "state", home / ".local" / "state" / "tfcluster"):
        assert oct(os.stat(p).st_mode & 0o777) == "0o700", p
    assert oct(os.stat(index.index_path()).st_mode & 0o777) == "0o600"


def test_a_state_parent_others_can_write_is_refused(home, tmp_path):
    (home / ".local" / "state" / "tfcluster").mkdir(parents=True)
    os.chmod(home / ".local" / "state", 0o777)
    with pytest.raises(UserError, match=r"run index: .*/\.local/state is group- and world-writable .*others could swap the run index"):
        index.entries()
    why = index.register(str(_run(tmp_path)))
    assert why and "world-writable" in why and "cannot be written" in why and "XDG_STATE_HOME" in why
    assert not os.path.exists(index.index_path())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder another user owns")
def test_a_state_folder_swapped_for_another_users_is_refused(home, tmp_path):
    theirs = home / ".local" / "state" / "tfcluster"
    theirs.mkdir(parents=True)
    (theirs / "runs.jsonl").write_text(json.dumps({"run_id": "x", "run_dir": str(_run(tmp_path))}) + "\n")
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(UserError, match=r"owned by another user \(uid 65534\)"):
        index.lookup("x")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a link another user owns")
def test_a_link_another_user_made_is_not_followed(home, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (home / ".local" / "state").mkdir(parents=True)
    link = home / ".local" / "state" / "tfcluster"
    link.symlink_to(elsewhere)
    os.lchown(link, OTHER, OTHER)
    with pytest.raises(UserError, match="a link made by another user"):
        index.entries()


def test_an_index_file_others_can_write_is_not_used(home, tmp_path):
    assert index.register(str(_run(tmp_path))) is None
    os.chmod(index.index_path(), 0o666)
    with pytest.raises(UserError, match="can be written by others"):
        index.entries()


def test_an_index_that_is_a_link_is_not_followed(home, tmp_path):
    index.trusted_state_dir(create=True)
    target = tmp_path / "fake.jsonl"
    target.write_text("")
    os.symlink(target, index.index_path())
    with pytest.raises(UserError, match="cannot be read"):
        index.entries()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_an_index_line_never_leads_to_another_users_run_folder(home, tmp_path):
    theirs = _run(tmp_path, "planted")
    os.chown(theirs, OTHER, OTHER)
    assert index.register(str(theirs)) is None
    assert index.lookup("planted") is None


def test_notes_shown_are_kept_in_the_checked_folder(home):
    assert index.first_time("security", "/x/cluster.yaml")
    assert not index.first_time("security", "/x/cluster.yaml")
    os.chmod(home / ".local" / "state", 0o777)
    assert not index.shown_before("security", "/x/cluster.yaml")   # an unsafe folder is not read
