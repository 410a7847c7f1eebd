"""GPUs that exist: read without TensorFlow (nvidia-smi -L, else the driver's device list), and a
warning naming the task for a CUDA_VISIBLE_DEVICES entry that is not there."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tfcluster.plan.gpus import gpu_warnings, visible_gpus

UUID0 = "GPU-4f1c2b3a-1111-2222-3333-444455556666"
ONE_GPU = f"GPU 0: NVIDIA H200 (UUID: {UUID0})\n"
MIG = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n"
       "  MIG 1g.5gb      Device  0: (UUID: MIG-bbbb-cccc)\n"
       "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-dddd)\n")


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """Put a fake nvidia-smi first on PATH; returns a function to set what it prints."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"

    def install(stdout, rc=0):
        (tmp_path / "out.txt").write_text(stdout)
        smi.write_text(f"#!/bin/sh\n[ \"$1\" = -L ] || exit 9\ncat '{tmp_path / 'out.txt'}'\nexit {rc}\n")
        smi.chmod(smi.stat().st_mode | stat.S_IXUSR)

    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return install


def test_one_gpu_from_nvidia_smi(fake_smi, tmp_path):
    fake_smi(ONE_GPU)
    gpus = visible_gpus(proc_root=str(tmp_path / "no-proc"))
    assert [(g.index, g.name, g.uuid) for g in gpus] == [(0, "NVIDIA H200", UUID0)]


def test_mig_devices_are_kept_with_their_gpu(fake_smi, tmp_path):
    fake_smi(MIG)
    gpus = visible_gpus(proc_root=str(tmp_path / "no-proc"))
    assert [g.uuid for g in gpus] == ["GPU-aaaa", "GPU-dddd"] and gpus[0].mig == ["MIG-bbbb-cccc"]
    assert gpu_warnings([("worker:0", "MIG-bbbb-cccc"), ("worker:1", "GPU-dd")], gpus) == []


def test_a_missing_index_names_the_task(fake_smi, tmp_path):
    fake_smi(ONE_GPU)
    tasks = [("ps:0", ""), ("worker:0", "0"), ("worker:1", "1"), ("chief:0", None),
             ("evaluator:0", "-1")]
    warnings = gpu_warnings(tasks, visible_gpus(proc_root=str(tmp_path / "no-proc")))
    assert warnings == ["worker:1: CUDA_VISIBLE_DEVICES=1: GPU 1 does not exist (this machine has "
                        "1 GPU: 0); it will run on CPU"]


def test_nvidia_smi_that_fails_falls_back_to_the_driver_list(fake_smi, tmp_path):
    fake_smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", rc=9)
    proc = tmp_path / "proc"
    for bus, uuid in (("0000:3b:00.0", "GPU-b"), ("0000:1a:00.0", "GPU-a")):
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(f"Model: \t\t NVIDIA H200\nIRQ: 1\nGPU UUID: \t {uuid}\n")
    gpus = visible_gpus(proc_root=str(proc))
    assert [(g.index, g.uuid, g.name) for g in gpus] == [(0, "GPU-a", "NVIDIA H200"),
                                                        (1, "GPU-b", "NVIDIA H200")]


def test_gpus_are_read_without_tensorflow():
    code = ("import sys, tfcluster.plan.gpus as g; g.gpu_warnings([('worker:0', '0')]); "
            "assert 'tensorflow' not in sys.modules; print('NO-TF')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "NO-TF" in r.stdout, r.stderr
