"""Shell completion: the generated bash script really completes (bash runs the function with
COMP_WORDS/COMP_LINE set, as bash does on TAB, and COMPREPLY is read back). No TensorFlow."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from helpers.completion import complete
from tfcluster.cli import main as cli
from tfcluster.runs import index

bash = shutil.which("bash")
pytestmark = pytest.mark.skipif(bash is None, reason="bash is not installed")


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A folder with a cluster.yaml, a state folder with two indexed runs, and a ``tfcluster``
    on PATH that runs this tree's tfcluster."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    work = tmp_path / "work"
    work.mkdir()
    (work / "cluster.yaml").write_text(
        "cluster:\n  ps: [localhost:2222]\n  worker: [localhost:2223, localhost:2224]\n"
        "  chief: [localhost:2221]\nprogram: {command: [python, t.py]}\n")
    for rid in ("20260101-000001", "nightly"):
        d = tmp_path / "runs" / rid
        d.mkdir(parents=True)
        (d / "run.json").write_text(
            '{"run_id": "%s", "tasks": [{"task": "worker:0", "state": "succeeded"}, '
            '{"task": "ps:0", "state": "stopped"}], "result": "succeeded"}' % rid)
        assert index.register(str(d), rid) is None
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "tfcluster"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m tfcluster \"$@\"\n")
    exe.chmod(0o755)
    e = dict(os.environ, XDG_STATE_HOME=str(state), PATH=f"{bindir}:{os.environ['PATH']}")
    return work, e


def script(capsys, shell="bash") -> str:
    assert cli.main(["completion", shell]) == 0
    return capsys.readouterr().out


def test_bash_completes_subcommands_and_flags(env, capsys):
    work, e = env
    s = script(capsys)
    assert "complete -o default -F _tfcluster tfcluster" in s
    assert complete(s, "tfcluster la", work, e) == ["launch"]
    assert set(complete(s, "tfcluster st", work, e)) == {"stack", "status", "stop"}
    assert "--detach" in complete(s, "tfcluster launch --de", work, e)
    assert complete(s, "tfcluster logs --fo", work, e) == ["--follow"]
    # the parser's own choices: every render kind, trainjob included
    assert complete(s, "tfcluster render ", work, e) == ["k8s", "jobset", "trainjob", "slurm"]


def test_bash_completes_run_ids_and_task_names(env, capsys):
    work, e = env
    s = script(capsys)
    assert complete(s, "tfcluster stop ni", work, e) == ["nightly"]
    assert "20260101-000001" in complete(s, "tfcluster logs ", work, e)
    # task names of ./cluster.yaml; bash splits at ':', so only what follows it comes back
    assert set(complete(s, "tfcluster tf-config cluster.yaml w", work, e)) == {"worker:0", "worker:1"}
    assert set(complete(s, "tfcluster tf-config cluster.yaml worker:", work, e)) == {"0", "1"}
    assert set(complete(s, "tfcluster launch --tasks c", work, e)) == {"chief:0"}
    # the tasks of a run, for logs RUN TASK (a value flag's word is not a positional)
    assert set(complete(s, "tfcluster logs --attempt 1 nightly ", work, e)) == {"worker:0", "ps:0",
                                                                                "launcher"}


def test_task_names_without_a_file_on_the_line(env, capsys):
    """No run or file typed: the task names of ./cluster.yaml, as the commands default to it
    (``tf-config worker:1``, ``logs worker:1``, ``stack worker:1`` read the latest run)."""
    work, e = env
    s = script(capsys)
    assert set(complete(s, "tfcluster tf-config w", work, e)) == {"worker:0", "worker:1"}
    assert "chief:0" in complete(s, "tfcluster tf-config ", work, e)
    assert set(complete(s, "tfcluster logs w", work, e)) == {"worker:0", "worker:1"}
    # runs and tasks both, in the first place
    assert {"nightly", "ps:0", "chief:0"} <= set(complete(s, "tfcluster stack ", work, e))
    # stack TASK TASK...: after a task word (no run), more of ./cluster.yaml's tasks
    assert complete(s, "tfcluster stack worker:0 c", work, e) == ["chief:0"]


def test_new_commands_complete_their_arguments(env, capsys):
    work, e = env
    s = script(capsys)
    for cmd in ("attach", "profile", "stack"):
        assert complete(s, f"tfcluster {cmd} ni", work, e) == ["nightly"], cmd
    # stack RUN TASK...: the run's tasks, in every place after the run
    assert set(complete(s, "tfcluster stack nightly ", work, e)) == {"worker:0", "ps:0", "launcher"}
    assert complete(s, "tfcluster stack nightly worker:0 p", work, e) == ["ps:0"]
    # profile RUN --tasks: that run's tasks; launch FILE --tasks: that file's
    assert complete(s, "tfcluster profile nightly --tasks p", work, e) == ["ps:0"]
    (work / "eval.yaml").write_text("cluster:\n  worker: [localhost:2223]\n  evaluator: [localhost:2225]\n"
                                    "program: {command: [python, t.py]}\n")
    assert complete(s, "tfcluster launch eval.yaml --tasks e", work, e) == ["evaluator:0"]
    # a value flag's choices; file arguments get file names
    assert complete(s, "tfcluster doctor --backend s", work, e) == ["ssh", "slurm"]
    assert complete(s, "tfcluster doctor cl", work, e) == ["cluster.yaml"]
    assert complete(s, "tfcluster import ev", work, e) == ["eval.yaml"]


def zsh_complete(shell_script: str, line: str, cwd, env) -> list:
    """COMPREPLY of the function under zsh's bashcompinit. zsh's compgen leaves matching the
    word to zsh's completion system, so this is the candidate list zsh then filters."""
    zsh = shutil.which("zsh")
    script = ("autoload -U compinit && compinit -u 2>/dev/null\n" + shell_script +
              '\nCOMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; _tfcluster; print -l -- $COMPREPLY\n')
    out = subprocess.run([zsh, "-f", "-c", script, "zsh", line], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stderr, out.stderr
    return [w for w in out.stdout.splitlines() if w]


def test_zsh_script_wraps_the_bash_function(env, capsys):
    work, e = env
    s = script(capsys, "zsh")
    assert "bashcompinit" in s and "complete -o default -F _tfcluster tfcluster" in s
    if not shutil.which("zsh"):
        pytest.skip("zsh is not installed")
    assert "launch" in zsh_complete(s, "tfcluster la", work, e)
    assert {"bash", "zsh"} <= set(zsh_complete(s, "tfcluster completion ", work, e))
    assert "--detach" in zsh_complete(s, "tfcluster launch --de", work, e)
    assert "nightly" in zsh_complete(s, "tfcluster stop ", work, e)
    assert {"worker:0", "ps:0", "launcher"} <= set(
        zsh_complete(s, "tfcluster logs --attempt 1 nightly ", work, e))
    assert {"worker:0", "worker:1", "chief:0"} <= set(
        zsh_complete(s, "tfcluster tf-config cluster.yaml worker:", work, e))


def test_completion_needs_a_shell(capsys):
    assert cli.main(["completion"]) == 2
    assert "give a shell, bash or zsh" in capsys.readouterr().err
