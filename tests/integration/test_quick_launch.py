"""A launch of a plain cluster file reads it without pydantic (the quick reader, which shortens the
launcher's start)."""
from __future__ import annotations

import os
import subprocess
import sys


def test_a_launch_of_a_plain_file_never_imports_pydantic(tmp_path):
    (tmp_path / "cluster.yaml").write_text(
        "cluster: {ps: [localhost:2222], worker: [localhost:2223]}\n"
        "program: {command: [python, -c, pass]}\nwatchdog: {stall_timeout: 30}\n")
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "tfcluster", "launch",
                        "cluster.yaml", "--dry-run"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, XDG_STATE_HOME=str(tmp_path / "s")))
    assert r.returncode == 0, r.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:")]
    assert "tfcluster.plan.runplan" in imported
    assert not [m for m in imported if m.split(".")[0] == "pydantic"
                or m in ("tfcluster.clusterfile.models", "tfcluster.clusterfile.slurm", "tfcluster.clusterfile.kubernetes")]
