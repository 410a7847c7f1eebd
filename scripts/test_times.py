#!/usr/bin/env python3
"""Where the test suite's time goes, from pytest's JUnit XML (docs/TESTING.md's table).

    PYTEST_ADDOPTS=--junitxml=/tmp/suite.xml bash .ci/run      # or the README's test line
    python scripts/test_times.py /tmp/suite.xml                 # a Markdown table

Prints one row per layer, then the test files that took longest (their tests' summed time: under
``-n 4`` four tests run at once, so the sums add up to more than the wall time), then the xdist
groups that ran one test after another (tests/conftest.py: SERIAL_GROUPS, LONGEST_FIRST), whose
sums are lower bounds of the wall time. Standard library only.
"""
from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET


def rows(path: str):
    """(layer, file, group, seconds) of every test case in the file."""
    for case in ET.parse(path).iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        parts = classname.split(".")
        if len(parts) < 3 or parts[0] != "tests":
            continue
        group = name.rsplit("@", 1)[1] if "@" in name.rsplit("]", 1)[-1] else ""
        yield parts[1], f"tests/{parts[1]}/{parts[2]}.py", group, float(case.get("time") or 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit_xml")
    ap.add_argument("--files", type=int, default=20, help="how many files to list (20)")
    args = ap.parse_args(argv)
    layers, files, groups = (collections.defaultdict(lambda: [0, 0.0]) for _ in range(3))
    for layer, path, group, seconds in rows(args.junit_xml):
        for table, key in ((layers, layer), (files, (layer, path)), (groups, group)):
            if table is groups and not key:
                continue
            table[key][0] += 1
            table[key][1] += seconds
    if not layers:
        print(f"{args.junit_xml}: no test cases of tests/", file=sys.stderr)
        return 2
    print("| layer | tests | seconds (summed) |\n|---|---:|---:|")
    for layer, (n, s) in sorted(layers.items(), key=lambda kv: -kv[1][1]):
        print(f"| {layer} | {n} | {s:.0f} |")
    print("\n| layer | file | tests | seconds (summed) |\n|---|---|---:|---:|")
    ranked = sorted(files.items(), key=lambda kv: -kv[1][1])
    for (layer, path), (n, s) in ranked[:args.files]:
        print(f"| {layer} | `{path}` | {n} | {s:.0f} |")
    rest = ranked[args.files:]
    if rest:
        print(f"| | {len(rest)} other files | {sum(v[0] for _, v in rest)} | "
              f"{sum(v[1] for _, v in rest):.0f} |")
    if groups:
        print("\n| xdist group (one test after another) | tests | seconds |\n|---|---:|---:|")
        for group, (n, s) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            print(f"| `{group}` | {n} | {s:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
