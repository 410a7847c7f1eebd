"""The run-folder attack's pieces, shared by the unit and process tests of tfcluster.safe_files."""
from __future__ import annotations

import os
import stat

import pytest


@pytest.fixture
def logdir(tmp_path):
    d = tmp_path / "runs"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def victim(tmp_path):
    """A folder of the attacker's choosing, with a file the victim must not write to."""
    d = tmp_path / "attacker"
    d.mkdir()
    (d / "bashrc").write_text("# the victim's ~/.bashrc\n")
    return d


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def untouched(victim):
    assert sorted(os.listdir(victim)) == ["bashrc"]
    assert (victim / "bashrc").read_text() == "# the victim's ~/.bashrc\n"
