"""tfcluster attach with real TensorFlow: watch a running run from another terminal."""
import signal
import subprocess
import sys
import time

import pytest

from helpers.hang_runs import _cluster, _launch, _run_dir

pytestmark = pytest.mark.tf

def test_attach_shows_a_running_run_detaches_on_ctrl_c_and_follows_it_to_its_end(tmp_path, ports):
    """tfcluster attach from another terminal: the launcher's lines and the task table of a
    running run; Ctrl-C detaches and the run goes on; attached again, it ends with the run,
    with the run's final table and status's exit code."""
    path = _cluster(tmp_path, ports, "tf1_hangs.py", ["--steps=600", "--end_seconds=0"],
                    {"stall_timeout": 60})
    proc, out_path = _launch(path, tmp_path)
    try:
        run_dir = _run_dir(tmp_path)
        # Ctrl-C as a terminal sends it (a test run in the background may inherit SIGINT ignored)
        first = subprocess.Popen([sys.executable, "-m", "tfcluster", "attach", run_dir],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(4)
        first.send_signal(signal.SIGINT)
        said, _ = first.communicate(timeout=30)
        assert first.returncode == 0, said
        assert "attached to run" in said and "detached from run" in said
        assert f"tfcluster stop {run_dir}" in said
        assert proc.poll() is None                       # the run goes on
        second = subprocess.run([sys.executable, "-m", "tfcluster", "attach", run_dir],
                                capture_output=True, text=True, timeout=240)
        assert proc.wait(60) == 0, out_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
    text = second.stdout
    assert second.returncode == 0, text + second.stderr
    assert "worker:0 exited 0" in text                   # the launcher's own lines
    assert "ended: succeeded (exit code 0)" in text
    table = text[text.index("ended: succeeded"):]
    assert "worker:0" in table and "succeeded" in table and "ps:0" in table
