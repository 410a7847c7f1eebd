"""GPU warnings without a process: entries of CUDA_VISIBLE_DEVICES that name no GPU, and a machine
without a driver. (nvidia-smi and the driver's list read for real: tests/integration/test_gpus.py.)
"""
from __future__ import annotations

import pytest

from tfcluster.plan.gpus import Gpu, gpu_warnings, visible_gpus


@pytest.fixture
def no_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


def test_an_entry_after_a_missing_one_is_named_too(tmp_path):
    gpus = [Gpu(0, "x", "GPU-a"), Gpu(1, "x", "GPU-b")]
    [w] = gpu_warnings([("worker:0", "0,5,1")], gpus)
    assert w.startswith("worker:0: CUDA_VISIBLE_DEVICES=0,5,1: GPU 5 does not exist")
    assert "CUDA also ignores what follows it (1)" in w and "CPU" not in w
    [w] = gpu_warnings([("worker:3", "GPU-zzz")], gpus)
    assert "worker:3" in w and "'GPU-zzz' does not exist" in w


def test_no_driver_is_one_line_naming_the_tasks(no_smi, tmp_path):
    assert visible_gpus(proc_root=str(tmp_path / "no-proc")) is None
    warnings = gpu_warnings([("ps:0", ""), ("worker:0", "0"), ("worker:1", "1")], None)
    assert warnings == ["no NVIDIA driver on this machine: worker:0, worker:1 ask for GPUs "
                        "(CUDA_VISIBLE_DEVICES) and will run on CPU"]
    assert gpu_warnings([("ps:0", ""), ("worker:0", None)], None) == []
