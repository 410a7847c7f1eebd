"""What ``tfcluster completion --values`` hands the shell on TAB (no shell, no processes): task
names of a run or of ./cluster.yaml as the commands default to it, read safely (a FIFO or a
huge ./cluster.yaml gives nothing at once, never a hang), plain words only."""
from __future__ import annotations

import os
import time

import pytest

from tfcluster.cli.completion import values
from tfcluster.clusterfile.config import CLUSTER_FILE_LIMIT
from tfcluster.runs import index

CLUSTER = ("cluster:\n  ps: [localhost:2222]\n  worker: [localhost:2223, localhost:2224]\n"
           "program: {command: [python, t.py]}\n")


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    d = tmp_path / "runs" / "nightly"
    d.mkdir(parents=True)
    (d / "run.json").write_text('{"run_id": "nightly", "tasks": [{"task": "chief:0", "state": "succeeded"}, '
                                '{"task": "evil$(touch x)", "state": "failed"}], "result": "succeeded"}')
    assert index.register(str(d), "nightly") is None
    return work


def test_tasks_default_to_the_cluster_file_here(here):
    (here / "cluster.yaml").write_text(CLUSTER)
    assert values("tasks") == ["ps:0", "worker:0", "worker:1"]


def test_a_task_word_in_the_run_place_means_the_latest_run(here):
    """``tfcluster stack worker:1 <TAB>``: worker:1 is no run, so ./cluster.yaml's tasks."""
    (here / "cluster.yaml").write_text(CLUSTER)
    assert values("tasks", run="worker:1") == ["ps:0", "worker:0", "worker:1"]
    # a named run gives its own tasks; a word that is not a plain word is left out
    assert values("tasks", run="nightly") == ["chief:0", "launcher"]
    assert values("tasks", run="no-such-run") == []


def test_a_fifo_or_huge_cluster_file_gives_nothing_at_once(here):
    os.mkfifo(here / "cluster.yaml")
    t0 = time.monotonic()
    assert values("tasks") == []
    assert values("tasks", run="worker:0") == []
    assert time.monotonic() - t0 < 30      # a FIFO opened for reading without a writer blocks
    os.unlink(here / "cluster.yaml")
    with open(here / "cluster.yaml", "wb") as f:
        f.truncate(CLUSTER_FILE_LIMIT + 1)   # sparse: no disk used
    assert values("tasks") == []
