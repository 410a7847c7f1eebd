"""Launching the tests/programs hang scenarios (tests/system/test_hangs.py, test_attach.py)."""
import json
import os
import subprocess
import sys
import time

from helpers import PROGRAMS


def _events(run_dir):
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _cluster(tmp_path, ports, program, args, watchdog, workers=2):
    p = ports(1 + workers)
    text = (f"cluster:\n  ps: [localhost:{p[0]}]\n"
            f"  worker: [{', '.join(f'localhost:{x}' for x in p[1:])}]\n"
            f"program:\n  command: [python, {os.path.join(PROGRAMS, program)}]\n"
            f"  args: {json.dumps(args)}\n  task_flags: true\n"
            f"logdir: {tmp_path / 'runs'}\nwatchdog: {json.dumps(watchdog)}\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return str(path)


def _run_dir(tmp_path, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = list((tmp_path / "runs").glob("*/run.json")) if (tmp_path / "runs").exists() else []
        if runs:
            return str(runs[0].parent)
        time.sleep(0.2)
    raise AssertionError("no run folder appeared")


def _wait_for(path, text, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in path.read_text():
            return True
        if proc.poll() is not None:
            return text in path.read_text()
        time.sleep(0.2)
    return False


def _launch(path, tmp_path):
    """tfcluster launch PATH in the background, its output in tmp_path/launch.out."""
    out_path = tmp_path / "launch.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tfcluster", "launch", path, "--no-live"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, out_path
