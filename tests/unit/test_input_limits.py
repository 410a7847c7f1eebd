"""Hostile and unlucky input to the cluster file and the command line, each refused in one line
and in bounded time, or read as meant: YAML alias amplification, overlong endpoints and names,
tabs and duplicate keys, GPU ids with newlines, other spellings of loopback, newlines in render's
flags. Pure logic: no TensorFlow, no processes."""
import time

import pytest

from tfcluster.clusterfile import checks, config
from tfcluster.errors import ConfigError
from tfcluster.net import addresses


def problems(text):
    with pytest.raises(ConfigError) as e:
        config.loads(text, source="f.yaml")
    return e.value.problems


# --------------------------------------------------------------------- alias amplification
LONG = "a" * 100_000


@pytest.mark.parametrize("where", [
    "cluster:\n  worker:\n{refs}\n",
    "cluster:\n  worker: [localhost:2222]\nprogram:\n  command: [python]\n  args:\n{refs}\n",
    "cluster:\n  worker: [localhost:2222]\nprogram:\n  env:\n{envs}\n",
    "cluster:\n  worker: [localhost:2222]\nsecrets:\n{refs}\n",
])
def test_a_100kb_alias_string_file_is_rejected_fast(where):
    refs = "\n".join(["    - *a"] * 1000)
    envs = "\n".join(f"    V{i}: *a" for i in range(1000))
    text = f"logdir: &a {LONG}\n" + where.format(refs=refs, envs=envs)
    assert 100_000 < len(text) < 120_000
    start = time.monotonic()
    found = problems(text)
    took = time.monotonic() - start
    print(f"\n{len(text)} bytes rejected in {took:.3f} s: {found[0][:100]}")
    assert any("aliases expand to more than" in p and "characters" in p for p in found), found
    assert took < 10   # loose (a shared machine); 28.7 s before the fix, ~0.1 s after


def test_the_text_check_looks_at_each_aliased_string_once(monkeypatch):
    calls = []
    real = checks._bad_text
    monkeypatch.setattr(checks, "_bad_text", lambda t: calls.append(len(t)) or real(t))
    value = "x" * 1000
    data = {"cluster": {"worker": ["localhost:2222"]}, "program": {"args": [value] * 500}}
    assert checks.check_strings(data) == []
    assert calls.count(1000) == 1


def test_the_text_check_still_finds_a_nul_behind_an_alias():
    found = problems("cluster: {worker: [localhost:2222]}\n"
                     "program: {command: [python], args: [&a \"x\\0y\", *a, *a]}\n")
    assert any("NUL byte" in p for p in found), found


def test_a_long_endpoint_is_refused_without_echoing_it():
    found = problems(f"cluster: {{worker: [\"{'h' * 5000}:2222\"]}}\n")
    assert "too long for host:port (5005 characters)" in found[0]
    assert len(found[0]) < 200


# --------------------------------------------------------------------- YAML hints
def test_a_tab_in_the_indentation_gets_a_hint():
    found = problems("cluster:\n\tworker: [localhost:2222]\n")
    assert "line 2" in found[0] and "use spaces, not tabs" in found[0]
    found = problems("cluster:\n  worker:\n\t- localhost:2222\n")
    assert "use spaces, not tabs" in found[0]


def test_every_duplicate_key_is_reported():
    found = problems("cluster:\n  worker: [localhost:2222]\n  worker: [localhost:2223]\n"
                     "logdir: a\nlogdir: b\nprogram: {env: {A: 1, A: 2}}\n")
    assert len(found) == 3, found
    assert "line 3, column 3: duplicate key 'worker' (first on line 2)" in found[0]
    assert "line 5, column 1: duplicate key 'logdir' (first on line 4)" in found[1]
    assert "duplicate key 'A'" in found[2]


# --------------------------------------------------------------------- names
def test_a_300_character_job_name_is_refused_naming_the_field():
    job = "w" * 300
    found = problems(f"cluster: {{{job}: [localhost:2222], worker: [localhost:2223]}}\n")
    assert any(p.startswith("cluster: job name") and "300 characters long; at most 40" in p
               for p in found), found


def test_a_253_character_dns_label_is_refused():
    found = problems(f"cluster: {{worker: [\"{'a' * 253}:2222\"]}}\n")
    assert "a DNS label (the part between dots) is at most 63 characters, not 253" in found[0]
    # a long name made of short labels is fine
    name = ".".join(["a" * 60] * 4)
    assert config.loads(f"cluster: {{worker: [\"{name}:2222\"]}}\n").tasks[0].endpoint.host == name


@pytest.mark.parametrize("gpu", ["0\\n1", "0 1", "0;rm", "\\e[31m"])
def test_gpu_ids_with_newlines_or_spaces_are_refused(gpu):
    found = problems(f'cluster: {{worker: [localhost:2222]}}\njobs: {{worker: {{gpus: ["{gpu}"]}}}}\n')
    assert any(p.startswith("jobs.worker.gpus[0]:") and "is not a GPU id" in p
               for p in found), found
    assert all("\n" not in p and "\x1b" not in p for p in found)


def test_good_gpu_ids_are_kept():
    c = config.loads('cluster: {worker: [localhost:2222, localhost:2223]}\n'
                     'jobs: {worker: {gpus: ["0,1", "GPU-8a3b-11ee/MIG-1"]}}\n')
    assert [t.gpus for t in c.tasks] == ["0,1", "GPU-8a3b-11ee/MIG-1"]


# --------------------------------------------------------------------- loopback spellings
@pytest.mark.parametrize("host", ["127.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.0.0.1",
                                  "localhost.", "::ffff:127.0.0.1"])
def test_other_spellings_of_loopback_are_this_machine(host):
    assert addresses.is_loopback(host) and addresses.is_local(host)
    assert addresses.endpoint_key(host, 2222) == ("<local>", 2222)
    # the cluster file's check reads them the same way
    entry = f"[{host}]:2222" if ":" in host else f"{host}:2222"
    found = problems(f'cluster: {{ps: ["{entry}"], worker: ["node1:2223"]}}\n')
    assert "is this machine's loopback address" in found[0], found


@pytest.mark.parametrize("host", ["10.0.0.1", "node1", "1.2.3.4.5", "example.com"])
def test_other_hosts_are_not_loopback(host):
    assert not addresses.is_loopback(host)


def test_mixing_127_1_with_localhost_is_not_called_another_machine():
    c = config.loads('cluster: {ps: ["127.1:2222"], worker: ["localhost:2223", "2130706433:2224"]}\n')
    assert len(c.tasks) == 3
    # and the same port under two spellings is one port
    found = problems('cluster: {ps: ["2130706433:2222"], worker: ["localhost:2222"]}\n')
    assert "already used by cluster.ps[0] (the same port on this machine)" in found[0]


# --------------------------------------------------------------------- names on the command line
@pytest.mark.parametrize("kind", ["k8s", "jobset"])
@pytest.mark.parametrize("flag", ["--name", "--namespace"])
def test_render_k8s_errors_do_not_echo_a_raw_newline(tmp_path, capsys, kind, flag):
    f = tmp_path / "c.yaml"
    f.write_text("cluster: {ps: [localhost:2222], worker: [localhost:2223]}\n"
                 "program: {command: [python, t.py]}\n")
    from tfcluster.cli import main as cli
    assert cli.main(["render", kind, str(f), "--image", "img", flag, "evil\nspec: {}\x1b[2J"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err
    assert f"{flag} 'evil\\nspec: {{}}\\x1b[2J' is not a Kubernetes name" in err
