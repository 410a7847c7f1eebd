"""Fixtures of the integration layer: a real one-node Slurm (tests/helpers/slurm.py)."""
from __future__ import annotations

import pytest

from helpers import slurm


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    yield from slurm.one_node_slurm(tmp_path_factory)


@pytest.fixture(scope="module")
def gpu_slurm(tmp_path_factory):
    yield from slurm.gpu_slurm(tmp_path_factory)
