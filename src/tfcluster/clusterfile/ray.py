"""Ray settings: the file's ``ray:`` section, validated once, and the placement it asks for.

Pure: no Ray import here (the CLI stays fast and Ray stays optional). :class:`RaySpec` is the
model (pydantic, part of ``cluster.yaml``); :func:`bundles` gives the placement group's
bundles, one per task, in the plan's task order; :func:`address` picks the cluster address the
way Ray does (``RAY_ADDRESS`` over the file's ``ray.address``; ``auto`` finds a cluster started
on this machine).

GPUs: a task gets GPUs only when its job asks for them (``ray.jobs.<job>.num_gpus``); Ray then
sets ``CUDA_VISIBLE_DEVICES`` in the task's actor to the devices it reserved, and the task
inherits it. A task whose job asks for none gets ``CUDA_VISIBLE_DEVICES=""`` (ps included), so
that it never takes a device Ray gave to another task; ``jobs.<job>.gpus`` in the file still
wins where it is given.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

ADDRESS_ENV = "RAY_ADDRESS"
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RayResources(_Strict):
    """What one task of a job reserves on its Ray node (one bundle of the placement group)."""

    num_cpus: Optional[float] = Field(None, ge=0, allow_inf_nan=False,
                                      description="CPUs a task reserves (default 1)")
    num_gpus: Optional[float] = Field(None, ge=0, allow_inf_nan=False,
                                      description="GPUs a task reserves (default 0; ps too)")
    memory: Optional[int] = Field(None, ge=0, description="bytes of memory a task reserves")
    resources: Dict[str, float] = Field(default_factory=dict,
                                        description="custom Ray resources a task reserves")


class RayRuntimeEnv(_Strict):
    """The parts of Ray's ``runtime_env`` tfcluster passes on (for the launcher's job: every
    task's actor and so every task inherits them)."""

    working_dir: Optional[str] = Field(None, description="folder shipped to every node (relative "
                                       "to this file); tasks run in it")
    env_vars: Dict[str, str] = Field(default_factory=dict, description="environment of every task")
    pip: Optional[List[str]] = Field(None, description="packages installed for the tasks")


class RaySpec(_Strict):
    """The ``ray:`` section (``--backend ray``)."""

    address: Optional[str] = Field(None, description="the Ray cluster (host:port, ray://..., auto); "
                                   "RAY_ADDRESS wins when set")
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK", description="placement group strategy (one bundle per task)")
    placement_timeout: float = Field(60.0, gt=0, allow_inf_nan=False,
                                     description="seconds to wait for Ray to place every task")
    runtime_env: RayRuntimeEnv = Field(default_factory=RayRuntimeEnv)
    resources: RayResources = Field(default_factory=RayResources,
                                    description="what every task reserves (jobs: overrides)")
    jobs: Dict[str, RayResources] = Field(default_factory=dict,
                                          description="per-job resources, merged over resources:")


def job_resources(spec: RaySpec, job: str) -> Dict[str, float]:
    """One task's bundle: ``resources:`` with the job's entry over it (CPU 1, no GPU unless
    given)."""
    base, over = spec.resources, spec.jobs.get(job, RayResources())

    def pick(name: str):
        v = getattr(over, name)
        return getattr(base, name) if v is None else v

    out: Dict[str, float] = {"CPU": float(pick("num_cpus") if pick("num_cpus") is not None else 1.0)}
    gpus = pick("num_gpus")
    if gpus:
        out["GPU"] = float(gpus)
    mem = pick("memory")
    if mem:
        out["memory"] = float(mem)
    for k, v in {**base.resources, **over.resources}.items():
        if v:
            out[k] = float(v)
    return {k: v for k, v in out.items() if v}


def bundles(spec: RaySpec, jobs: Iterable[str]) -> List[Dict[str, float]]:
    """The placement group's bundles: one per task, ``jobs`` the job of each task in order."""
    return [job_resources(spec, job) for job in jobs]


def describe_bundle(bundle: Dict[str, float]) -> str:
    """``CPU 1, GPU 2, memory 2.0 GB``: one bundle in words."""
    parts = []
    for k, v in bundle.items():
        if k == "memory":
            parts.append(f"memory {v / 1e9:.1f} GB")
        else:
            parts.append(f"{k} {v:g}")
    return ", ".join(parts) or "nothing"


def address(spec: Optional[RaySpec], environ=None) -> Optional[str]:
    """The Ray address the launcher connects to: ``RAY_ADDRESS``, else ``ray.address``, else
    None (Ray's own default: a cluster started on this machine, or a new local one)."""
    environ = os.environ if environ is None else environ
    return environ.get(ADDRESS_ENV) or (spec.address if spec is not None else None) or None


def runtime_env(spec: RaySpec, base_dir: str) -> Dict[str, Any]:
    """The ``runtime_env`` for ``ray.init``: the file's, with ``working_dir`` relative to the
    cluster file's folder."""
    env: Dict[str, Any] = {}
    r = spec.runtime_env
    if r.working_dir:
        env["working_dir"] = os.path.normpath(os.path.join(base_dir, os.path.expanduser(r.working_dir)))
    if r.env_vars:
        env["env_vars"] = dict(r.env_vars)
    if r.pip:
        env["pip"] = list(r.pip)
    return env
