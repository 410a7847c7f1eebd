"""What a task pays for importing tfcluster: the in-task runtime (trainer.py, the examples)
must not load the file model (pydantic), the launcher or the backends; the package's other
names load on first use and ``tfcluster.launch(...)`` stays a call."""
from __future__ import annotations

import json
import subprocess
import sys

PROBE = """\
import json, sys
import {module}
heavy = sorted(m for m in sys.modules
               if m.split(".")[0] in ("pydantic", "yaml", "rich", "psutil")
               or m.startswith(("tfcluster.clusterfile.config", "tfcluster.launch", "tfcluster.backends",
                                "tfcluster.plan.runplan", "tfcluster.cli.main")))
print(json.dumps(heavy))
"""


def _heavy_after(module):
    r = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_in_task_runtime_loads_nothing_of_the_launcher():
    assert _heavy_after("tfcluster.runtime") == []
    assert _heavy_after("tfcluster.plan.progress") == []


def test_the_package_names_load_on_first_use_and_launch_stays_callable(tmp_path):
    code = ("import tfcluster, tfcluster.drivers.supervisor, tfcluster.cli.main\n"
            "assert callable(tfcluster.launch) and tfcluster.load.__module__ == 'tfcluster.clusterfile.config'\n"
            "from tfcluster import Cluster, UserError, report_progress, resolve_run\n"
            "(open('cluster.yaml', 'w').write('cluster: {worker: 1}\\n'\n"
            "                                 'program: {command: [python, -c, pass]}\\n'))\n"
            "raise SystemExit(tfcluster.launch(dry_run=True))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "worker:0" in r.stdout + r.stderr
