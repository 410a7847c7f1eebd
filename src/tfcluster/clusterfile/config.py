"""cluster.yaml: load, validate and resolve a cluster file. No TensorFlow is imported here.

The file is TensorFlow's ClusterSpec dict (``cluster:``) plus what is needed to run it
(``program:``, ``jobs:``, ``success:``, ``restart:``, ``logdir:``). :func:`load` turns a
file into a :class:`~tfcluster.clusterfile.cluster.Cluster`, the typed model every other part
of tfcluster uses: its tasks (``worker:1``), their endpoints, the ClusterSpec dict and each
task's TF_CONFIG. ``Cluster``, ``Task`` and ``TaskId`` are importable from here too (the
package's ``tfcluster.load``, ``tfcluster.Cluster`` ... come from this module).

The steps, each in its own module: the YAML with each field's line
(:mod:`~tfcluster.clusterfile.yaml_lines`); structure and types checked by the quick reader
(:mod:`~tfcluster.clusterfile.quick`) or by pydantic (:mod:`~tfcluster.clusterfile.models`,
which also gives the JSON Schema that editors use; its errors worded by
:mod:`~tfcluster.clusterfile.model_errors`); the cluster itself (endpoints, ports, duplicates,
job names) checked by hand (:mod:`~tfcluster.clusterfile.checks`), so that every message names
its field: ``cluster.worker[1]: port 70000 is out of range 1-65535``; then the tasks resolved
(:mod:`~tfcluster.clusterfile.resolve`). All problems in a file are reported at once.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Dict, List, Optional

from tfcluster.clusterfile import checks, quick, resolve, yaml_lines
from tfcluster.clusterfile.cluster import Cluster, Task, TaskId
from tfcluster.clusterfile.wording import kind_of, short
from tfcluster.errors import ConfigError, UserError
from tfcluster.terminal import printable

__all__ = ["CLUSTER_FILE_LIMIT", "Cluster", "Task", "TaskId", "from_dict", "load", "loads"]

#: bytes: a cluster file larger than this is refused unread (100,000 listed tasks take ~2.5 MiB)
CLUSTER_FILE_LIMIT = 4 << 20


def load(path: str) -> Cluster:
    """Read, validate and resolve a cluster file.

    Args:
        path: the cluster file's path; its relative paths resolve against its folder.

    Returns:
        The :class:`Cluster`.

    Raises:
        ConfigError: the file's problems, all of them, each naming its field (exit 2).
        UserError: the file cannot be read, or is not a regular file or too large (exit 2).

    Read as run files are (:func:`tfcluster.safe_files.read_bytes`): a regular file only (a FIFO or
    ``/dev/zero`` is refused at once, never waited on or read without end), at most
    :data:`CLUSTER_FILE_LIMIT` bytes; a link the user made to a file is followed."""
    from tfcluster.safe_files import read_bytes
    data = read_bytes(path, CLUSTER_FILE_LIMIT, follow=True, what="a cluster file is a plain file")
    if data is None:
        raise UserError(f"{printable(path)}: no such file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{printable(path)}: not a text file ({e.reason} at byte {e.start})")
    return loads(text, source=path, base_dir=os.path.dirname(os.path.abspath(path)))


def loads(text: str, source: str = "<string>", base_dir: Optional[str] = None) -> Cluster:
    """Validate and resolve a cluster file given as text.

    Args:
        text: the file's YAML.
        source: the name its messages give it.
        base_dir: where its relative paths resolve (default: the current folder).

    Returns:
        The :class:`Cluster`.

    Raises:
        ConfigError: the YAML or the file's problems, each naming its field (exit 2).
    """
    import yaml  # local: pyyaml is light, but only this path needs it

    shown = printable(source)
    try:
        data, lines, duplicates = yaml_lines.parse_with_lines(text)
    except yaml.YAMLError as e:
        raise ConfigError(shown, [printable(f"not valid YAML: {yaml_lines.syntax_error(e, text)}")])
    except (ValueError, TypeError, RecursionError, OverflowError) as e:  # odd scalars
        raise ConfigError(shown, [printable(f"not valid YAML: {type(e).__name__}: {str(e)[:120]}")])
    if duplicates:
        raise ConfigError(shown, [printable(f"not valid YAML: {d}") for d in duplicates])
    if data is None:
        raise ConfigError(shown, ["the file is empty; it needs at least a 'cluster:' mapping"])
    return from_dict(data, source=source, base_dir=base_dir, _lines=lines)


def from_dict(data: Any, source: str = "", base_dir: Optional[str] = None,
              _lines: Optional[Dict[str, int]] = None) -> Cluster:
    """Validate a parsed file (a dict, as ``yaml.safe_load`` gives it) into a Cluster.

    Args:
        data: the file's contents.
        source: the name its messages give it.
        base_dir: where its relative paths resolve (default: the current folder).

    Returns:
        The :class:`Cluster`.

    Raises:
        ConfigError: the problems, each naming its field (exit 2).
    """
    base_dir = os.path.abspath(base_dir or os.getcwd())
    shown = printable(source)

    def fail(problems: List[str]):
        return ConfigError(shown, [printable(yaml_lines.with_line(p, _lines or {}))
                                   for p in dict.fromkeys(problems)])

    if not isinstance(data, dict):
        raise fail([f"the file must be a mapping with a 'cluster:' key, not {kind_of(data)}"])
    problems: List[str] = []
    non_str = [k for k in data if not isinstance(k, str)]
    if non_str:
        raise fail([f"key {short(non_str[0])}: keys must be strings"])
    data = resolve.with_data_service(data, problems)
    bad_text = checks.check_strings(data)
    if bad_text:  # NUL or lone surrogates: nothing else is worth checking, and printing may fail
        raise fail(bad_text)
    if "cluster" not in data:
        problems.append("cluster: required (job -> list of host:port), for example "
                        "cluster: {ps: [localhost:2222], worker: [localhost:2223]}")
    spec: Any = None if problems else quick.read(data)
    if spec is None:     # outside the quick subset, or something is wrong: the models say what
        from pydantic import ValidationError

        from tfcluster.clusterfile import kubernetes
        from tfcluster.clusterfile.model_errors import pydantic_problems
        from tfcluster.clusterfile.models import ClusterFile
        try:
            spec = ClusterFile.model_validate(data)
        except ValidationError as e:
            problems.extend(p for p in pydantic_problems(e) if not p.startswith("cluster: required"))
            spec = None
        if spec is not None and isinstance(data.get("cluster"), dict):
            problems.extend(kubernetes.check(spec.kubernetes, {
                job: (spec.jobs[job].kubernetes if job in spec.jobs else None)
                for job in data["cluster"] if isinstance(job, str)}))
    warnings: List[str] = []
    problems.extend(checks.check_file(data, warnings))
    if problems:
        raise fail(problems)
    assert spec is not None
    cluster, more = resolve.resolve(spec, data["cluster"], source, base_dir)
    if more:
        raise fail(more)
    if warnings:
        cluster = replace(cluster, warnings=tuple(printable(yaml_lines.with_line(w, _lines or {}))
                                                  for w in warnings))
    return cluster

