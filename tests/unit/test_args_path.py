"""The launch command's arguments go down the layers, not back and forth: followed through the
calls (in every form they take: the argparse namespace, the launch request, the options, the
plan), the path climbs back up a layer at most 5 times. No TensorFlow, no processes."""
from __future__ import annotations

import argparse
import os
import sys

import pytest
from test_layers import floor_of

from tfcluster.cli import main as cli
from tfcluster.cli.launching import LaunchRequest
from tfcluster.plan.runplan import LaunchOptions, RunPlan

FOLLOWED = (argparse.Namespace, LaunchRequest, LaunchOptions, RunPlan)
PKG = os.path.dirname(os.path.dirname(os.path.abspath(cli.__file__)))


def module_of(code) -> str:
    rel = os.path.relpath(code.co_filename, PKG)
    if rel.startswith(".."):
        return ""
    mod = rel[:-3].replace(os.sep, ".")
    return "" if mod == "__init__" else mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def follow(argv):
    """(module, function) of every tfcluster call that is handed the launch's arguments."""
    path = []

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        mod = module_of(code)
        if not mod:
            return
        n = code.co_argcount + code.co_kwonlyargcount
        given = [frame.f_locals.get(v) for v in code.co_varnames[:n]]
        if any(isinstance(g, FOLLOWED) for g in given):
            if not path or path[-1] != (mod, code.co_name):
                path.append((mod, code.co_name))

    sys.setprofile(profile)
    try:
        rc = cli.main(argv)
    finally:
        sys.setprofile(None)
    return rc, path


def climbs(path):
    floors = [floor_of(m) for m, _ in path]
    return [(path[i - 1], path[i]) for i in range(1, len(path)) if floors[i] > floors[i - 1]]


@pytest.mark.parametrize("extra", [[], ["--backend", "slurm"]], ids=["local", "slurm"])
def test_the_launch_commands_args_climb_back_up_a_layer_at_most_five_times(tmp_path, monkeypatch, capsys, extra):
    f = tmp_path / "cluster.yaml"
    f.write_text("cluster:\n  ps: [localhost:2222]\n  worker: [localhost:2223, localhost:2224]\n")
    monkeypatch.chdir(tmp_path)
    rc, path = follow(["launch", str(f), "--dry-run", *extra, "--", "python", "trainer.py"])
    assert rc == 0, capsys.readouterr()
    assert len(path) >= 3, path            # the tracer saw the arguments go down
    up = climbs(path)
    assert len(up) <= 5, "\n".join(f"{a} -> {b}" for a, b in up)
