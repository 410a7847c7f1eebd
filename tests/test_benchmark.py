"""scripts/benchmark.py --quick on the tiny setting: every figure of issue 7 is in the JSON
with a sane value. No timing assertions (timings belong in the benchmark's own table)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "benchmark.py")


def positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--tiny", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "launch_overhead_ratio" in proc.stdout  # the printed table
    with open(out) as f:
        return json.load(f)


def test_headline_figures_are_positive_numbers(results):
    for key in ("launch_overhead_ratio", "first_step_ratio", "transfer_fraction_of_loopback"):
        assert positive(results[key]), (key, results[key], results["notes"])
    for mode in ("async", "sync"):
        assert positive(results["shutdown_seconds"][mode]), results["shutdown_seconds"]
        assert positive(results["throughput_ratio_vs_seed"][mode]), results["throughput_ratio_vs_seed"]


def test_throughput_details(results):
    thr = results["throughput"]
    for name in ("trainer_async", "trainer_sync", "seed_async", "seed_sync", "single"):
        assert positive(thr[name]["steps_per_s"]), (name, thr[name])
        assert positive(thr[name]["examples_per_s"]), (name, thr[name])
    for mode in ("async", "sync"):
        assert positive(thr["scaling_efficiency"][mode])
    fs = results["first_step_seconds"]
    assert positive(fs["tfcluster"]) and positive(fs["single_process"])
    assert "naive_mts" in fs


def test_ps_balance(results):
    pb = results["ps_balance"]
    for strategy in ("round_robin", "greedy"):
        for n in ("2", "4"):
            assert isinstance(pb[strategy][n], float) and pb[strategy][n] >= 1.0, pb
    assert "step_seconds" in pb  # null outside the full run


def test_scale(results):
    sc = results["scale"]
    assert sc["completed"] is True
    assert positive(sc["launcher_rss_mb"]) and positive(sc["task_rss_mb"]["median"])
    assert sc["task_rss_mb"]["tasks_seen"] == sc["ps"] + sc["workers"]
    assert positive(sc["validate_seconds"])
    for key in ("render_k8s_seconds", "render_slurm_seconds"):
        # null (with a note) while tfcluster.render is missing
        assert sc[key] is None or positive(sc[key]), (key, results["notes"])
        if sc[key] is None:
            assert any(key in n for n in results["notes"])


def test_goals_table_and_meta(results):
    figures = {row["figure"] for row in results["goals"]}
    for key in ("launch_overhead_ratio", "first_step_ratio", "shutdown_seconds.async",
                "shutdown_seconds.sync", "throughput_ratio_vs_seed.async",
                "throughput_ratio_vs_seed.sync", "transfer_fraction_of_loopback"):
        assert key in figures
    for row in results["goals"]:
        assert row["met"] in (True, False, None)
    meta = results["meta"]
    assert meta["mode"] == "tiny" and positive(meta["machine"]["nproc"])
    assert meta["machine"]["tensorflow"]
