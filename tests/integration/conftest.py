"""Fixtures of the integration layer: a real one-node Slurm (tests/helpers/slurm.py) and a
three-node one (tests/helpers/slurm_nodes.py)."""
from __future__ import annotations

import pytest

from helpers import slurm, slurm_nodes


@pytest.fixture(scope="module")
def slurm_daemons(tmp_path_factory):
    yield from slurm.one_node_slurm(tmp_path_factory)


@pytest.fixture
def slurm_cluster(slurm_daemons):
    """The module's one-node Slurm, handed to one test at a time: whatever job a test leaves in
    the queue (a failed test's allocation) is cancelled after it, so one failure does not
    become the next tests' failures. Tests still assert an empty queue themselves."""
    yield slurm_daemons
    slurm_daemons.cancel_all()


@pytest.fixture(scope="module")
def gpu_slurm(tmp_path_factory):
    yield from slurm.gpu_slurm(tmp_path_factory)


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory):
    """A real Slurm of three nodes, each slurmd in its own network namespace (module scope)."""
    why = slurm_nodes.unavailable()
    if why:
        pytest.skip(why)
    base = str(tmp_path_factory.mktemp("slurm3"))
    s = slurm_nodes.ThreeNodeSlurm(base)
    try:
        s.start()
    except Exception as e:
        s.stop()
        pytest.skip(f"could not start a three-node Slurm: {e}")
    yield s
    s.stop()
    assert not s.left(), f"the three-node Slurm left: {s.left()}"


@pytest.fixture
def slurm3(three_nodes):
    """The three-node Slurm, one test at a time: its jobs cancelled and its nodes back after."""
    yield three_nodes
    three_nodes.cancel_all()
    three_nodes.revive_all()
