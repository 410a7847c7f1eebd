"""Helpers shared by the test layers (tests/unit, tests/integration, tests/system).

Test modules import from here (``from helpers import ROOT``), never from each other: pytest puts
tests/ on sys.path (``pythonpath`` in pyproject.toml). Nothing here imports TensorFlow.
"""
from __future__ import annotations

import os
import re
import textwrap

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
SRC = os.path.join(ROOT, "src")
PROGRAMS = os.path.join(TESTS, "programs")
EXAMPLES = os.path.join(ROOT, "examples")
DOCS = os.path.join(ROOT, "docs")
# How long the fuzz tests of the unit layer run: a few seconds while working (`pytest tests/unit`
# stays within 30 s), longer where the environment asks (.ci/run sets 20).
FUZZ_SECONDS = float(os.environ.get("TFCLUSTER_FUZZ_SECONDS", "2"))


def fuzz_examples(full: int) -> int:
    """A hypothesis test's ``max_examples``: ``full`` with TFCLUSTER_FUZZ_SECONDS of 20 or more
    (CI), a proportional share (at least 50) with the short default."""
    return full if FUZZ_SECONDS >= 20 else max(50, int(full * FUZZ_SECONDS / 20))


def load(text: str, tmp_path, name="cluster.yaml"):
    """Write ``text`` (dedented) to tmp_path/name and load it as a cluster file."""
    from tfcluster.clusterfile import config
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return config.load(str(p))


def write_cluster(tmp_path, ports, program, extra="", jobs=None):
    """A cluster file for tfcluster launch: ``jobs`` (default 1 ps, the rest workers) on the
    given localhost ports, every task running ``program``, logdir tmp_path/runs."""
    import json
    jobs = jobs or {"ps": 1, "worker": len(ports) - 1}
    it = iter(ports)
    lines = ["cluster:"]
    for job, n in jobs.items():
        lines.append(f"  {job}: [{', '.join(f'localhost:{next(it)}' for _ in range(n))}]")
    cmd = ", ".join(json.dumps(w) for w in program)
    lines.append(f"program: {{command: [{cmd}]}}")
    lines.append(f"logdir: {tmp_path / 'runs'}")
    f = tmp_path / "cluster.yaml"
    f.write_text("\n".join(lines) + "\n" + extra)
    return str(f)


def doc_blocks(heading: str, doc: str = "BACKENDS.md"):
    """The fenced code blocks of docs/<doc> after ``heading``, in order."""
    with open(os.path.join(DOCS, doc)) as f:
        text = f.read()
    return re.findall(r"```\w*\n(.*?)```", text[text.index(heading):], re.S)


def cli(capsys, *argv):
    """Run ``tfcluster ARGV`` in this process: (exit code, stdout, stderr).

    ``tfcluster.cli.main.main`` returns the exit code, or raises SystemExit (argparse's usage errors),
    which is caught here; both end the same way as ``python -m tfcluster``."""
    from tfcluster.cli.main import main
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out, err = capsys.readouterr()
    return rc, out, err


def run_cli(*argv, cwd):
    """Run ``tfcluster ARGV`` in this process from folder ``cwd``, as ``subprocess.run`` of
    ``python -m tfcluster`` would: a CompletedProcess with returncode, stdout and stderr."""
    import contextlib
    import io
    import subprocess

    from tfcluster.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(str(cwd))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in argv])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(old)
    return subprocess.CompletedProcess(list(argv), rc, out.getvalue(), err.getvalue())
