"""The quick reader of cluster files (tfcluster.clusterfile.quick): a launch reads the plain
subset of a file without building pydantic's models, and it never accepts what the models
reject, nor reads a value other than theirs."""
from __future__ import annotations

import json
import math
import os
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import helpers
from tfcluster.clusterfile import config, models, quick
from tfcluster.errors import ConfigError

ROOT = os.path.dirname(helpers.SRC)
RULES = quick.rules()


def test_the_rules_file_is_made_from_the_models():
    assert quick.rules() == json.loads(json.dumps(models.quick_rules())), (
        "run: python -c \"import json; from tfcluster.clusterfile import models; print(json.dumps("
        "models.quick_rules(), indent=1, sort_keys=True))\" > src/tfcluster/clusterfile/quick_rules.json")


def test_a_model_outside_what_the_quick_reader_checks_is_refused(monkeypatch):
    from pydantic import field_validator

    class Odd(models.RestartSpec):
        @field_validator("policy")
        @classmethod
        def _p(cls, v):
            return v
    monkeypatch.setattr(models, "QUICK_MODELS", models.QUICK_MODELS + (Odd,))
    with pytest.raises(ValueError, match="Odd: a validator"):
        models.quick_rules()


# ---- soundness: whatever it accepts, the models accept with the same values

def _strategy_for(kind, depth=0):
    """Values of a rule's kind within its bounds, mostly; now and then a wrong one (a bound
    crossed, another type, inf/nan, a word not in a Literal)."""
    t = kind["t"]
    junk = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=True),
                     st.text(max_size=5), st.lists(st.integers(0, 3), max_size=2))
    if depth > 3:
        return junk
    lo, hi = kind.get("ge"), kind.get("le")
    good = {
        "str": st.text(max_size=8), "bool": st.booleans(), "none": st.none(), "skip": st.just(None),
        "int": st.integers(lo if lo is not None else -3, hi if hi is not None else 70000),
        "float": st.one_of(st.floats(lo, hi, allow_nan=False, allow_infinity=False),
                           st.integers(int(lo or 0), int(hi or 500))),
        "slow": st.dictionaries(st.sampled_from(["image", "partition", "x"]), st.text(max_size=3),
                                max_size=1),
    }.get(t)
    if t == "literal":
        good = st.sampled_from(kind["values"])
        junk = st.one_of(junk, st.sampled_from([True, "Never", 1.0]))
    elif t == "list":
        good = st.lists(_strategy_for(kind["item"], depth + 1), max_size=3)
    elif t == "dict":
        good = st.dictionaries(st.sampled_from(["worker", "ps", "A", "B_1"]),
                               _strategy_for(kind["value"], depth + 1), max_size=2)
    elif t == "union":
        good = st.one_of([_strategy_for(k, depth + 1) for k in kind["of"]])
    elif t == "model":
        good = _model_strategy(kind["name"], depth + 1)
    return st.integers(0, 7).flatmap(lambda i: junk if i == 0 else good)


def _model_strategy(name, depth=0):
    """A section with up to three of its keys (a wrong key now and then)."""
    fields = RULES["models"][name]["fields"]
    opt = {k: _strategy_for(r["kind"], depth) for k, r in fields.items() if k != "cluster"}
    keys = sorted(opt)
    opt["polcy"] = st.integers()
    chosen = st.lists(st.sampled_from(keys), max_size=3, unique=True).flatmap(
        lambda ks: st.sampled_from([ks] * 9 + [ks + ["polcy"]]))
    return chosen.flatmap(lambda ks: st.fixed_dictionaries({k: opt[k] for k in ks}))


files = _model_strategy(RULES["root"]).map(lambda d: {"cluster": {"worker": ["a:1"], "ps": ["a:2"]}, **d})


jobs_files = st.dictionaries(st.sampled_from(["worker", "ps"]), _model_strategy("JobSpec", 1),
                             max_size=2).map(lambda j: {"cluster": {"worker": ["a:1"], "ps": ["a:2"]},
                                                        "jobs": j})


@settings(max_examples=helpers.fuzz_examples(1000), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(files, jobs_files))
def test_what_the_quick_reader_accepts_the_models_accept_with_the_same_values(data):
    got = quick.read(data)
    if got is None:
        return
    full = models.ClusterFile.model_validate(data)   # raises if the quick reader was wrong
    dumped = full.model_dump(warnings=False)
    for key, value in got.dump().items():
        assert _same(dumped[key], value), (key, dumped[key], value)


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


# ---- the whole load: the same Cluster, or the same problems, by either path

VALID = [
    "cluster: {ps: [localhost:2222], worker: [localhost:2223, localhost:2224]}",
    "cluster: {ps: 1, worker: 2}\nprogram: {command: python trainer.py, args: [--steps=3], env: {A: 1, B: true, C: 1.5}}\n"
    "jobs: {ps: {restart: {policy: on-failure, backoff: 2}}, worker: {gpus: [0, '1'], task_flags: true}}\n"
    "restart: {policy: exit-code, max_restarts: 0, max_total_restarts: 4}\nwatchdog: {stall_timeout: 8, end_timeout: 0}\n"
    "success: all-workers\ngrace: 2\nbase_port: 3000\nlogdir: ~/runs\nbackend: local\nsecrets: [API_TOKEN]",
    "cluster: {chief: [a:1], worker: [a:2], evaluator: [a:3]}\ndata_service: {workers: 2, work_dir: /tmp/x}",
    "cluster: {worker: 2}\ndata_service: {dispatcher: 'a:5', workers: ['a:6']}\njobs: {tfdata_worker: {env: {X: y}}}",
    "version: 1\ncluster: {worker: [a:1]}\nhosts: {}\nprogram: {cwd: sub, task_flags: false}",
    # outside the subset: the models read these
    "cluster: {worker: [a:1]}\nslurm: {partition: gpu}",
    "cluster: {worker: [a:1]}\nkubernetes: {image: 'tf:1'}\njobs: {worker: {kubernetes: {labels: {a: b}}}}",
    "cluster: {worker: [a:1]}\nremote: {user: me}",
    "cluster: {worker: [a:1]}\nray: {strategy: SPREAD}",
    # wrong: the models name the field
    "cluster: {worker: [a:1]}\ngrace: -1",
    "cluster: {worker: [a:1]}\nrestart: {max_restarts: true}",
    "cluster: {worker: [a:1]}\nversion: true",
    "cluster: {worker: [a:1]}\nbase_port: 70000",
]


def _examples():
    out = [("text", t) for t in VALID]
    for rel in ["cluster.yaml"] + [os.path.join("examples", f) for f in sorted(os.listdir(
            os.path.join(ROOT, "examples"))) if f.endswith(".yaml")]:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            out.append((rel, f.read()))
    return out


def _load(text, monkeypatch, use_quick):
    with monkeypatch.context() as m:
        if not use_quick:
            m.setattr(quick, "read", lambda data: None)
        try:
            return config.loads(text, source="c.yaml", base_dir="/srv/exp")
        except ConfigError as e:
            return ("error", str(e))


def _picture(cluster):
    if isinstance(cluster, tuple):
        return cluster
    tasks = [(t.job, t.index, t.endpoint, t.command, t.args, t.env, t.task_flags, t.cwd, t.gpus,
              _dump(t.restart)) for t in cluster.tasks]
    spec = cluster.spec
    sections = {k: _dump(getattr(spec, k)) for k in models.ClusterFile.model_fields}
    return (tasks, cluster.success, _dump(cluster.restart), cluster.logdir, cluster.grace,
            cluster.base_port, cluster.count_jobs, cluster.warnings, sections,
            sorted(cluster.secret_names))


def _dump(v):
    if isinstance(v, quick.Section):
        return v.dump()
    if hasattr(v, "model_dump"):
        return v.model_dump()
    if isinstance(v, dict):
        return {k: _dump(x) for k, x in v.items()}
    return v


@pytest.mark.parametrize("name,text", _examples(), ids=lambda x: x if len(x) < 40 else x[:40])
def test_both_paths_load_the_same_cluster(name, text, monkeypatch):
    fast, slow = _load(text, monkeypatch, True), _load(text, monkeypatch, False)
    assert _picture(fast) == _picture(slow)


def test_the_shipped_files_take_the_quick_path_and_the_rest_the_models(monkeypatch):
    for name, text in _examples():
        if name != "text":
            assert isinstance(config.loads(text).spec, quick.QuickSpec), name
    assert isinstance(config.loads(VALID[1]).spec, quick.QuickSpec)
    assert isinstance(config.loads(VALID[3]).spec, quick.QuickSpec)
    assert isinstance(config.loads(VALID[5]).spec, models.ClusterFile)   # slurm:


def test_sections_outside_the_subset_come_from_the_models_and_pickle():
    c = config.loads(VALID[0])
    assert c.spec.slurm == models.SlurmSpec() and c.spec.kubernetes == models.KubernetesSpec()
    back = pickle.loads(pickle.dumps(c))
    assert back.spec.watchdog.stall_timeout == 300.0 and back.spec.ray == models.RaySpec()
    with pytest.raises(AttributeError):
        c.spec.watchdog.stall_timeout = 1
