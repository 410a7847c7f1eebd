"""scripts/test_times.py: docs/TESTING.md's table of where the suite's time goes, from pytest's
JUnit XML (layers, files, and the xdist groups that ran one test after another)."""
from __future__ import annotations

import os
import sys

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import test_times

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.unit.test_rules" name="test_a" time="0.5"/>
<testcase classname="tests.unit.test_rules" name="test_b[x@y]" time="0.25"/>
<testcase classname="tests.system.test_ray_move" name="test_moves@ray-2" time="100"/>
<testcase classname="tests.integration.test_ray" name="test_one@ray-2" time="20.5"/>
<testcase classname="tests.integration.test_launch" name="test_two" time="3"/>
<testcase classname="elsewhere.test_x" name="test_y" time="9"/>
</testsuite></testsuites>"""


def test_rows_read_layer_file_group_and_seconds(tmp_path):
    p = tmp_path / "s.xml"
    p.write_text(XML)
    assert list(test_times.rows(str(p))) == [
        ("unit", "tests/unit/test_rules.py", "", 0.5),
        ("unit", "tests/unit/test_rules.py", "", 0.25),       # an '@' inside a parameter is no group
        ("system", "tests/system/test_ray_move.py", "ray-2", 100.0),
        ("integration", "tests/integration/test_ray.py", "ray-2", 20.5),
        ("integration", "tests/integration/test_launch.py", "", 3.0)]


def test_the_tables_sum_by_layer_file_and_group(tmp_path, capsys):
    p = tmp_path / "s.xml"
    p.write_text(XML)
    assert test_times.main([str(p), "--files", "2"]) == 0
    out = capsys.readouterr().out
    assert "| system | 1 | 100 |" in out and "| integration | 2 | 24 |" in out and "| unit | 2 | 1 |" in out
    assert "| system | `tests/system/test_ray_move.py` | 1 | 100 |" in out
    assert "| | 2 other files | 3 | 4 |" in out
    assert "| `ray-2` | 2 | 120 |" in out


def test_a_file_without_tests_is_one_line_exit_2(tmp_path, capsys):
    p = tmp_path / "s.xml"
    p.write_text("<testsuites/>")
    assert test_times.main([str(p)]) == 2
    assert "no test cases" in capsys.readouterr().err
