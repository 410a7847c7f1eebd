"""Masking of secrets with real processes: a launch whose program prints a multi-line secret, and a
real one-node Slurm run with secret program arguments. No TensorFlow."""
import json
import os
import subprocess
import sys

import pytest

from tfcluster.cli import main as cli

PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
       "q8XfLkP2zQ3m9vYtB1aR7sN0cE4uH6jW5dK8lG2oI3pS9xV1yZ\n"
       "-----END PRIVATE KEY-----\n")
PEM_LINES = [ln for ln in PEM.splitlines() if "PRIVATE" not in ln]


# --------------------------------------------------------------------- the name heuristic
def test_launch_masks_a_multi_line_secret_on_the_console_and_in_the_task_log(tmp_path, ports, capsys):
    (port,) = ports(1)
    f = tmp_path / "c.yaml"
    f.write_text(config_text := (
        f"cluster: {{worker: ['localhost:{port}']}}\n"
        f"program:\n  command: [{sys.executable}, -c, 'import os; print(os.environ[\"TLS_KEY\"]); "
        f"print(\"done\")', --api-key=abcdef123456]\n"
        f"  env: {{TLS_KEY: {json.dumps(PEM)}}}\n"
        f"logdir: {tmp_path / 'runs'}\n"))
    assert config_text
    assert cli.main(["launch", str(f), "--run-id", "m1"]) == 0
    out = capsys.readouterr()
    log = (tmp_path / "runs" / "m1" / "worker-0.log").read_text()
    for text in (out.out + out.err, log):
        assert "done" in text
        for line in PEM_LINES:
            assert line not in text
        assert "abcdef123456" not in text
    assert "****" in log
    record = json.loads((tmp_path / "runs" / "m1" / "run.json").read_text())
    assert "abcdef123456" not in json.dumps(record) and "MIIE" not in json.dumps(record)


# --------------------------------------------------------------------- Slurm
HIDDEN = ("abcdef123456", "hunter2hunter2", "tok_zzzz9999")
SLURM_PROGRAM = """\
import sys
open(sys.argv[1], "w").write(" ".join(sys.argv[2:]))
print("args:", " ".join(sys.argv[2:]), flush=True)
"""


def test_slurm_job_gets_the_real_arguments_while_the_script_and_logs_mask_them(tmp_path):
    """launch --backend slurm with secret program arguments: job.sbatch and every log hold
    `****`, the program receives the real words, and the files Slurm and the tasks make are 0600."""
    import shutil
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("sbatch", "srun", "slurmctld",
                                                              "slurmd", "munged")):
        pytest.skip("needs the one-node Slurm of tests/helpers/slurm.py (root, slurm-wlm, munge)")
    slurm_node = _one_node_slurm()(str(tmp_path / "slurm"))
    old_conf = os.environ.get("SLURM_CONF")
    try:
        slurm_node.start()
    except Exception as e:
        slurm_node.stop()
        pytest.skip(f"could not start a one-node Slurm: {e}")
    try:
        (tmp_path / "prog.py").write_text(SLURM_PROGRAM)
        seen = tmp_path / "seen"
        (tmp_path / "cluster.yaml").write_text(
            f"cluster: {{worker: 1}}\nprogram: {{command: [python, prog.py, {seen}, "
            f"--api-key=abcdef123456, --password, hunter2hunter2, DB_TOKEN=tok_zzzz9999]}}\n"
            f"logdir: runs\n")
        env = dict(os.environ)
        env.pop("SLURM_JOB_ID", None)
        r = subprocess.run([sys.executable, "-m", "tfcluster", "launch", str(tmp_path / "cluster.yaml"),
                            "--backend", "slurm", "--no-live", "--run-id", "m1"], cwd=str(tmp_path),
                           env=env, capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-3000:]
        assert seen.read_text() == ("--api-key=abcdef123456 --password hunter2hunter2 "
                                    "DB_TOKEN=tok_zzzz9999")
        run = tmp_path / "runs" / "m1"
        assert "args: --api-key=**** --password **** DB_TOKEN=****" in out, out[-3000:]
        for name in os.listdir(run):
            path = run / name
            if path.is_file():
                text = path.read_text(errors="replace")
                for v in HIDDEN:
                    assert v not in text, name
                assert stat_mode(path) == 0o600, (name, oct(stat_mode(path)))
        made = os.listdir(run)
        assert [n for n in made if n.startswith("slurm-") and n.endswith(".out")], made
        assert any(n.startswith("run_over") for n in made), made
        assert "job.sbatch" in made and "worker-0.log" in made, made
        assert slurm_node.wait_empty_queue(10) == ""
    finally:
        slurm_node.stop()
        if old_conf is not None:
            os.environ["SLURM_CONF"] = old_conf


def stat_mode(path):
    import stat
    return stat.S_IMODE(os.stat(path).st_mode)


def _one_node_slurm():
    """The one-node Slurm of the Slurm tests (tests/helpers/slurm.py)."""
    from helpers.slurm import OneNodeSlurm
    return OneNodeSlurm
