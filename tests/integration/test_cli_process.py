"""The CLI as a separate process: `python -m tfcluster` (the entry point) exits as main() says, and
the TensorFlow-free commands load no TensorFlow in a fresh interpreter. (Everything else about the
command line runs in-process: tests/unit/test_cli.py.)
"""
import subprocess
import sys

import pytest

from helpers import ROOT


def test_cli_paths_do_not_import_tensorflow():
    code = ("import sys, tfcluster.cli.main as c, tfcluster.clusterfile.config, tfcluster.net.addresses, tfcluster.drivers.supervisor, tfcluster.runs.status\n"
            "rc = c.main(['validate', 'cluster.yaml'])\n"
            "c.main(['tf-config', 'cluster.yaml', 'worker:1']); c.main(['commands', 'cluster.yaml'])\n"
            "c.main(['schema'])\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
            "print('NO-TF', rc)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "NO-TF 0" in r.stdout, r.stderr


@pytest.mark.parametrize("args,code,stream,needle", [
    (["--help"], 0, "stdout", "tf-config"),
    (["validate", "cluster.yaml"], 0, "stdout", "chief: worker:0"),
    (["tf-config", "cluster.yaml", "worker:9"], 2, "stderr", "tfcluster: error: "),
    (["frobnicate"], 2, "stderr", "invalid choice"),
])
def test_python_m_tfcluster_exits_with_mains_code(args, code, stream, needle):
    r = subprocess.run([sys.executable, "-m", "tfcluster", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == code, r.stderr
    assert needle in getattr(r, stream) and "Traceback" not in r.stderr
