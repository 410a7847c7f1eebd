"""The plain subset of a cluster file, read without pydantic: the launch's quick path.

Building the file's pydantic models (:mod:`tfcluster.clusterfile.models`) costs every command that
loads a file ~0.15 s, and importing pydantic ~0.05 s more: a quarter of a launch's start on
these machines (docs/BENCHMARKS.md). Most files use only the sections a launch reads
(``cluster``, ``program``, ``jobs``, ``restart``, ``watchdog``, ``success``, ``logdir``,
``grace``, ``base_port``, ``backend``, ``data_service``, ``secrets``); :func:`read` checks
those with the models' own keys, types, bounds and defaults, which :func:`tfcluster.clusterfile.models.quick_rules`
writes to ``quick_rules.json`` (a unit test keeps the file equal to the models).

It decides nothing the models would not: it says only "this file is valid, and these are its
values", or None, when anything is not plainly right or lies outside the subset (a
``kubernetes:``, ``slurm:``, ``ray:``, ``remote:`` or ``hosts:`` section, a wrong type, a
bound crossed). The caller then validates with the models, which name what is wrong. A test
holds the two paths equal on every file the suite knows and on generated ones.
"""
from __future__ import annotations

import functools
import json
import math
import os
from typing import Any, Dict, Optional

RULES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quick_rules.json")


@functools.lru_cache(maxsize=None)
def rules() -> Dict[str, Any]:
    with open(RULES_FILE, encoding="utf-8") as f:
        return json.load(f)


class NotQuickError(Exception):
    """The value is outside the quick subset, or not valid: the models decide."""


class Section:
    """One validated section of a cluster file, read by attribute like its model."""

    def __init__(self, model: str, values: Dict[str, Any]):
        self.__dict__.update(values)
        self.__dict__["_model"] = model

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._model} is read-only")

    def values(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def dump(self) -> Dict[str, Any]:
        """Its values as plain data (what ``model_dump()`` gives for the model)."""
        return {k: _dump(v) for k, v in self.values().items()}

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Section):
            return self._model == other._model and self.dump() == other.dump()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like the models

    def __repr__(self) -> str:
        return f"{self._model}({', '.join(f'{k}={v!r}' for k, v in self.values().items())})"


class QuickSpec(Section):
    """A whole file read by :func:`read`. The sections outside the subset (absent from the
    file, so at their defaults) come from the models on first use (render, ssh, Slurm, Ray)."""

    def __init__(self, values: Dict[str, Any], data: Dict[str, Any]):
        super().__init__(rules()["root"], values)
        self.__dict__["_data"] = data
        self.__dict__["_full"] = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        full = self.__dict__.get("_full")
        if full is None:
            from tfcluster.clusterfile import models
            full = models.ClusterFile.model_validate(self.__dict__["_data"])
            self.__dict__["_full"] = full
        return getattr(full, name)

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_full": None}   # the models are built again where it lands


def read(data: Any) -> Optional[QuickSpec]:
    """The file's values when ``data`` (a parsed file) is valid and inside the quick subset;
    else None."""
    r = rules()
    if not isinstance(data, dict):
        return None
    try:
        values = _fields(r, r["root"], data)
    except NotQuickError:
        return None
    return QuickSpec(values, data)


def defaults(model: str) -> Dict[str, Any]:
    """Every key of a section of the subset at its default."""
    return _fields(rules(), model, {})


def _fields(r: Dict[str, Any], model: str, data: Dict[str, Any]) -> Dict[str, Any]:
    fields = r["models"][model]["fields"]
    if any(type(k) is not str or k not in fields for k in data):
        raise NotQuickError()
    out: Dict[str, Any] = {}
    for name, rule in fields.items():
        if name in data:
            out[name] = _check(r, rule["kind"], data[name])
        elif rule.get("required"):
            raise NotQuickError()
        elif "default_model" in rule:
            if rule["kind"].get("t") == "model":
                out[name] = Section(rule["default_model"], _fields(r, rule["default_model"], {}))
            # else: a section outside the subset, at its default: QuickSpec gets it from the models
        else:
            out[name] = _copy(rule["default"])
    return out


def _check(r: Dict[str, Any], kind: Dict[str, Any], v: Any, exact: bool = False) -> Any:
    """``v`` as the models would make it of a field of ``kind``; NotQuickError where the quick
    reader cannot say (the models then do)."""
    t = kind["t"]
    if t == "skip":         # checked by hand in both paths (cluster:, command:)
        return v
    if t == "list" and type(v) is list:
        return [_check(r, kind["item"], x) for x in v]
    if t == "dict" and type(v) is dict:
        if any(type(k) is not str for k in v):
            raise NotQuickError()
        return {k: _check(r, kind["value"], x) for k, x in v.items()}
    if t == "model" and type(v) is dict:
        return Section(kind["name"], _fields(r, kind["name"], v))
    if t == "union":
        return _union(r, kind, v)
    return _scalar(kind, v, exact)


def _scalar(kind: Dict[str, Any], v: Any, exact: bool) -> Any:
    """A str, bool, None, int, float or literal field's value (``exact``: no int for a float)."""
    t = kind["t"]
    if t == "str" and type(v) is str:
        return v
    if t == "bool" and type(v) is bool:
        return v
    if t == "none" and v is None:
        return v
    if t == "int" and type(v) is int:
        return _bounded(kind, v)
    if t == "float" and (type(v) is float or (type(v) is int and not exact)):
        if kind.get("finite") and not math.isfinite(v):
            raise NotQuickError()
        return _bounded(kind, float(v))
    if t == "literal" and any(type(v) is type(x) and v == x for x in kind["values"]):
        return v
    raise NotQuickError()


def _union(r: Dict[str, Any], kind: Dict[str, Any], v: Any) -> Any:
    """pydantic's smart union: a branch of the value's own type first (3 stays an int where
    int is a choice), then one that converts it (3 -> 3.0 for a float)."""
    for strict in (True, False):
        for branch in kind["of"]:
            try:
                return _check(r, branch, v, exact=strict)
            except NotQuickError:
                pass
    raise NotQuickError()


def _bounded(kind: Dict[str, Any], v: Any) -> Any:
    if ("ge" in kind and not v >= kind["ge"]) or ("le" in kind and not v <= kind["le"]):
        raise NotQuickError()
    return v


def _copy(value: Any) -> Any:
    """A default of its own for each file (a list or dict default is [] or {})."""
    return type(value)(value) if isinstance(value, (list, dict)) else value


def _dump(v: Any) -> Any:
    if isinstance(v, Section):
        return v.dump()
    if isinstance(v, dict):
        return {k: _dump(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_dump(x) for x in v]
    return v
