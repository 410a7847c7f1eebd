"""The run machine's tables and rooms: every event has one registered handler, every driver
carries out every action or says why not, every elastic mode of the cluster file has its class,
and a policy is added without editing the machine (a watchdog given to it). No processes."""
from __future__ import annotations

import ast
import functools
import os
import signal
import typing

import pytest
from test_machine import make, of, started

import helpers
from tfcluster.clusterfile.models import ElasticSpec
from tfcluster.core import events, machine, rules
from tfcluster.core.events import ACTIONS, EVENTS, NotHere, check_table
from tfcluster.core.machine import Kill, LogEvent, Progressed, Tick
from tfcluster.core.policies import on_change, watchdog

SRC = os.path.join(helpers.SRC, "tfcluster")


def test_every_event_has_one_registered_handler():
    assert set(machine.HANDLERS) == set(EVENTS)
    assert all(callable(h) for h in machine.HANDLERS.values())


def test_a_table_that_misses_or_adds_an_entry_raises_naming_it():
    table = dict(machine.HANDLERS)
    del table[events.Exited]
    with pytest.raises(TypeError, match="no entry for Exited"):
        check_table(table, EVENTS, "handlers")

    class Stray:
        pass

    with pytest.raises(TypeError, match="entries for what is not one: Stray"):
        check_table({**machine.HANDLERS, Stray: None}, EVENTS, "handlers")


@functools.lru_cache(maxsize=None)
def _drivers():
    """Every module under src/tfcluster that hands events to a run machine (``.handle(``
    on something named machine), as a dotted name."""
    found = []
    for folder, _, files in os.walk(SRC):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.startswith(os.path.join(SRC, "core")):
                continue
            tree = ast.parse(open(path, encoding="utf-8").read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr == "handle" \
                        and isinstance(node.value, ast.Attribute) and node.value.attr == "machine":
                    rel = os.path.relpath(path, helpers.SRC)[:-3].replace(os.sep, ".")
                    found.append(rel)
                    break
    return tuple(sorted(found))


def test_the_drivers_are_found():
    assert _drivers() == ("tfcluster.backends.agent.node", "tfcluster.drivers.supervisor")


@pytest.mark.parametrize("module", _drivers())
def test_every_driver_carries_out_every_action_or_says_why_not(module):
    mod = __import__(module, fromlist=["CARRY"])
    table = getattr(mod, "CARRY", None)
    assert table is not None, f"{module} reads the machine's actions without a CARRY table"
    check_table(table, ACTIONS, module)
    for cls, entry in table.items():
        if isinstance(entry, NotHere):
            assert entry.why.strip(), f"{module}: {cls.__name__} is not carried out and says not why"
        else:
            assert callable(entry), f"{module}: {cls.__name__}"


def test_the_node_agent_answers_a_regroup_it_cannot_carry_out(tmp_path):
    """Slurm placed the tasks: asked to regroup, the agent says it cannot (the machine then fails
    the run instead of waiting for ever in REPLACE)."""
    from helpers.node_agent import Node
    n = Node(tmp_path, rank=1)
    n.start()
    fed = []
    handle = n.agent.machine.handle
    n.agent.machine.handle = lambda *evs: fed.extend(evs) or handle(*evs)
    n.agent._act([events.Regroup("worker:0", "n2")])
    assert [type(e).__name__ for e in fed] == ["Regrouped"]
    assert not fed[0].ok and "cannot place tasks again" in fed[0].message


def test_the_cluster_files_elastic_modes_are_the_policies():
    modes = typing.get_args(ElasticSpec.model_fields["on_change"].annotation)
    assert set(modes) == set(on_change.MODES)
    assert all(type(on_change.mode(m)).name == m for m in modes)
    with pytest.raises(ValueError, match="unknown mode"):
        on_change.mode("sideways")


class SlowWorker(watchdog.RunWatchdog):
    """A look at the running run that is none of the default ones (a scaling policy would be
    one): it asks for worker:1 to be killed once it has reported a step."""

    def look(self, run, now, out):
        t = run.tasks["worker:1"]
        return [rules.WatchdogAction("kill", t.name, "too slow")] if t.step is not None and not t.forced else []


def test_a_policy_is_added_without_editing_the_machine():
    dogs = watchdog.Watchdogs(run=[cls() for cls in watchdog.RUN_WATCHDOGS] + [SlowWorker()])
    m = make()
    m.watchdogs = dogs
    started(m)
    out = m.handle(Progressed("worker:1", 3, 1.0), Tick(1.0, watch=True))
    assert of(out, Kill) == [Kill("worker:1", signal.SIGKILL)]
    assert [a.as_dict()["reason"] for a in of(out, LogEvent) if a.event == "watchdog"] == ["too slow"]
    assert set(machine.RunMachine.ASKS) == {"kill", "fail_run", "scale_up", "scale_down"}
