"""`python -m tfcluster.runtime.serve` with no usable task context: exit 2 and a one-line error,
before TensorFlow is imported. (Real servers: tests/system/test_runtime_cluster.py.)
"""
from __future__ import annotations


def test_bad_context_exit_2(capsys):
    from tfcluster.runtime import serve

    assert serve.main(["--job_name=ps"]) == 2
    assert "tfcluster: error:" in capsys.readouterr().err
