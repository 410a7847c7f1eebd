"""Fixtures of the integration layer: a real one-node Slurm (tests/helpers/slurm.py)."""
from __future__ import annotations

import pytest

from helpers import slurm


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
