"""scripts/benchmark.py --quick on the tiny setting: every figure of issues 7 and 15 is in the
JSON with a sane value. No timing assertions (timings belong in the benchmark's own table).
The simulated-link figures need root, ``ip`` and ``tc``; without them the benchmark says why in
one line and their test is skipped."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

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


def test_compute_bound(results):
    eff = results["compute_bound_efficiency"]
    for mode in ("async", "sync"):
        assert positive(eff[mode]), (eff, results["notes"])
    cb = results["compute_bound"]
    for key in ("single_examples_per_s", "async_examples_per_s", "sync_examples_per_s",
                "single_step_seconds", "single_cpu_seconds_per_step"):
        assert positive(cb[key]), (key, cb)
    # the ratio is what the runs say: cluster examples/s over one process's
    assert abs(eff["async"] - cb["async_examples_per_s"] / cb["single_examples_per_s"]) < 0.01


def test_first_step_floor(results):
    fl = results["first_step_floor"]
    assert fl["tasks"] == 3 and fl["cores"] == results["meta"]["machine"]["nproc"]
    assert positive(fl["import_wall_seconds"]) and positive(fl["import_cpu_seconds"])
    assert fl["floor"] >= 1.0
    expect = max(fl["import_wall_seconds"], 3 * fl["import_cpu_seconds"] / fl["cores"]) \
        / fl["import_wall_seconds"]
    assert abs(fl["floor"] - expect) < 0.01, fl
    assert positive(fl["ratio_over_floor"])


def test_simulated_links(results):
    links = results["links"]
    if links.get("skipped"):
        assert any(n.startswith("links: skipped") for n in results["notes"])
        pytest.skip(f"simulated links: {links['skipped']}")
    rows = {(r["ps"], r["placement"]): r for r in links["rows"]}
    assert set(rows) == {(1, "greedy_partitioned"), (2, "greedy_partitioned")}, rows
    for r in rows.values():
        assert r["mode"] == "async" and r["rate_gbit"] == 1.0
        assert positive(r["step_seconds"]) and positive(r["floor_seconds"])
        assert abs(r["over_floor"] - r["step_seconds"] / r["floor_seconds"]) < 0.01
        assert r["over_floor"] > 0.9, r  # a step cannot beat its link by much (token bucket)
    # partitioned over 2 ps: each ps holds about half, so the floor halves
    two = rows[(2, "greedy_partitioned")]
    assert max(two["bytes_per_ps"]) / sum(two["bytes_per_ps"]) < 0.55, two
    assert abs(two["floor_seconds"] * 2 / rows[(1, "greedy_partitioned")]["floor_seconds"] - 1) < 0.01
    assert positive(links["scaling"]["1gbit.async"]["2"])


def test_no_namespace_left_behind(results):
    import subprocess

    if results["links"].get("skipped"):
        pytest.skip("simulated links skipped")
    made = results["links"]["namespaces"]
    assert len(made) == 2 + 3  # a worker host and 1, then 2 ps hosts
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    present = {line.split()[0] for line in listed.splitlines() if line.strip()}
    assert not present & set(made), listed


def test_goals_table_and_meta(results):
    figures = {row["figure"] for row in results["goals"]}
    for key in ("launch_overhead_ratio", "first_step_ratio", "shutdown_seconds.async",
                "shutdown_seconds.sync", "throughput_ratio_vs_seed.async",
                "throughput_ratio_vs_seed.sync", "transfer_fraction_of_loopback",
                "compute_bound_efficiency.async", "compute_bound_efficiency.sync"):
        assert key in figures
    for row in results["goals"]:
        assert row["met"] in (True, False, None)
    meta = results["meta"]
    assert meta["mode"] == "tiny" and positive(meta["machine"]["nproc"])
    assert meta["machine"]["tensorflow"]
