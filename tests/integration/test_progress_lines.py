"""The launcher's progress lines (no live table) against a program of known speed
(tests/programs/steady_steps.py): the first ETA shown is close to the real remaining time,
and a program whose reports stop gets one line that says so, not its stale line again and
again with an ETA from a rate it no longer has."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from helpers import PROGRAMS, write_cluster

STEADY = os.path.join(PROGRAMS, "steady_steps.py")


def launch_and_watch(tmp_path, ports, *program_args, timeout=120):
    """Launch one worker of steady_steps.py with a progress line every second; every line
    tfcluster writes on stderr, with the time it arrived; and the run's record."""
    f = write_cluster(tmp_path, ports(1), ["python", STEADY, *program_args], jobs={"worker": 1})
    proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", f, "--no-live",
                             "--no-security-note", "--progress-interval", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state")))
    got = []
    deadline = time.time() + timeout
    try:
        for line in proc.stderr:
            got.append((time.time(), line.rstrip("\n")))
            assert time.time() < deadline, got
        assert proc.wait(timeout=30) == 0, got
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    [run] = list((tmp_path / "runs").iterdir())
    record = json.loads((run / "run.json").read_text())
    return got, record


def _seconds(text):
    m = re.fullmatch(r"(?:(\d+)m)?(\d+(?:\.\d+)?)s", text)
    return int(m.group(1) or 0) * 60 + float(m.group(2))


def test_the_first_eta_shown_is_within_a_quarter_of_the_real_remaining_time(tmp_path, ports):
    """600 steps of 20 ms after a first step of 4 s: an ETA from the first steps' rate would
    say minutes; the first one shown must be within 25% of what is really left."""
    got, record = launch_and_watch(tmp_path, ports, "600", "0.02", "4")
    [worker] = [t for t in record["tasks"] if t["task"] == "worker:0"]
    etas = [(at, line) for at, line in got if ", ETA " in line and line.startswith("tfcluster: worker:0: step")]
    assert etas, "\n".join(x for _, x in got)
    at, line = etas[0]
    eta = _seconds(re.search(r", ETA (\S+?),? ", line + " ").group(1).rstrip(","))
    left = worker["ended"] - at
    assert left > 2, (line, left)              # shown while there was something left to say
    assert abs(eta - left) <= 0.25 * left, (line, eta, left)
    # never from the first step: no line at step 0 or 1 carries an ETA
    assert not [x for _, x in got if re.search(r"worker:0: step [01]/600, .*ETA", x)], got


def test_a_stall_is_said_once_and_its_growth_sparingly_without_an_eta(tmp_path, ports):
    """The program stands still 12 s at step 150, with a progress line due every second: the
    launcher says it once, then only when the silence has doubled; no line repeats itself and
    none gives an ETA while no report comes."""
    got, _ = launch_and_watch(tmp_path, ports, "300", "0.02", "0.5", "150", "12")
    lines = [x for _, x in got if x.startswith("tfcluster: worker:0:")]
    text = "\n".join(x for _, x in got)
    silent = [x for x in lines if "no progress report for" in x]
    assert 1 <= len(silent) <= 3, text
    assert "still no progress report" not in silent[0], text
    assert 130 <= int(re.search(r"\(at step (\d+)/300\)", silent[0]).group(1)) <= 150, text
    assert all("ETA" not in x for x in silent), text
    assert not [x for x in lines if "last report" in x], text        # no stale line again
    assert len(lines) == len(set(lines)), text                       # nothing said twice
    after = lines[lines.index(silent[-1]) + 1:]
    assert after and re.search(r"step (1[5-9]\d|2\d\d)/300", after[0]), text   # going again
