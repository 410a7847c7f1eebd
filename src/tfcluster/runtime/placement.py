"""Where variables go: ``replica_device_setter`` with a choice of ps strategy, and a report.

* ``round_robin``: TensorFlow's default, ps task ``k mod num_ps`` for the k-th variable.
* ``greedy``: byte-size load balancing (``GreedyLoadBalancingStrategy``, which left
  TensorFlow with ``tf.contrib``): each variable goes to the ps task holding the fewest
  bytes so far. Correct for resource variables: a ``VarHandleOp``'s output is a
  ``resource`` handle whose dtype size is 0, so the size is read from the op's
  ``shape``/``dtype`` attributes.
* optional partitioning of large variables across ps tasks
  (``tf.compat.v1.min_max_variable_partitioner``): use ``placement.partitioner`` in a
  ``variable_scope``.
* local variables (``LOCAL_VARIABLES``: metrics, ``SyncReplicasOptimizer``'s local step)
  stay on the worker; ``replica_device_setter`` alone puts them on ps, where the replicas'
  copies would collide by name.
* worker ops go to the task's GPU when one is visible, else its CPU; ps stays on CPU.

Usage (graph mode)::

    placement = Placement(ctx, strategy="greedy")
    with tf.Graph().as_default(), placement.scope():
        ...build the model...
    print(placement.report().to_text())
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from tfcluster.runtime.context import TaskContext

STRATEGIES = ("round_robin", "greedy")
#: op types that hold a variable's value (reported, and counted by the greedy strategy)
VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable", "AutoReloadVariable")


# --- sizes ----------------------------------------------------------------------------

def _node_def(op):
    return op if not hasattr(op, "node_def") else op.node_def


def variable_shape_dtype(op) -> Tuple[Optional[List[Optional[int]]], object]:
    """``(dims, dtype)`` of a variable op: from its ``shape``/``dtype`` attributes when it has
    them (``VarHandleOp``, ``VariableV2``), else from its first output. ``dims`` is None for
    an unknown rank."""
    import tensorflow as tf

    nd = _node_def(op)
    attrs = nd.attr
    if "shape" in attrs and "dtype" in attrs:
        shape = tf.TensorShape(attrs["shape"].shape)
        dtype = tf.as_dtype(attrs["dtype"].type)
    else:
        outputs = getattr(op, "outputs", None)
        if not outputs:
            return [], None
        shape = outputs[0].get_shape()
        dtype = outputs[0].dtype
    dims = None if shape.rank is None else [d for d in shape.as_list()]
    return dims, dtype.base_dtype


def byte_size_load_fn(op) -> int:
    """Bytes a variable op holds (0 for non-variable or unknown-shape ops).

    Unknown dimensions count as 1; ``string`` and other variable-length types count 8 bytes
    per element (a pointer), TensorFlow's ``DType.size`` for them being 0 or 8.
    """
    try:
        dims, dtype = variable_shape_dtype(op)
    except Exception:  # not a variable-like op
        return 0
    if dtype is None or dims is None:
        return 0
    elements = 1
    for d in dims:
        elements *= (d if d is not None and d >= 0 else 1)
    size = getattr(dtype, "size", 0) or 8
    if getattr(dtype, "is_resource", False) or dtype.name in ("resource", "variant"):
        size = 0
    return int(elements * size)


# --- strategies -------------------------------------------------------------------------

class RoundRobinStrategy:
    """The next ps task for each ps op, in turn (TensorFlow's default strategy)."""

    def __init__(self, num_tasks: int):
        if num_tasks <= 0:
            raise ValueError("num_tasks must be > 0")
        self.num_tasks = num_tasks
        self._next = 0
        self.loads = [0] * num_tasks

    def __call__(self, op) -> int:
        task = self._next
        self._next = (self._next + 1) % self.num_tasks
        self.loads[task] += byte_size_load_fn(op)
        return task


class GreedyLoadBalancingStrategy:
    """Place each ps op on the ps task with the least load so far (ties: lowest index).

    ``load_fn(op)`` gives an op's load; the default is :func:`byte_size_load_fn`, so the
    greedy strategy balances bytes. Ops of load 0 (queues, accumulators, hash tables) are
    placed like the others and do not change the loads.
    """

    def __init__(self, num_tasks: int, load_fn: Callable = byte_size_load_fn):
        if num_tasks <= 0:
            raise ValueError("num_tasks must be > 0")
        self.num_tasks = num_tasks
        self.load_fn = load_fn
        self.loads = [0] * num_tasks

    def __call__(self, op) -> int:
        task = min(range(self.num_tasks), key=lambda i: (self.loads[i], i))
        self.loads[task] += self.load_fn(op)
        return task


def make_strategy(name: str, num_tasks: int):
    """A ps strategy by name: ``round_robin`` or ``greedy``."""
    key = name.replace("-", "_").lower()
    if key in ("round_robin", "roundrobin", "rr"):
        return RoundRobinStrategy(num_tasks)
    if key in ("greedy", "load_balancing", "greedy_load_balancing"):
        return GreedyLoadBalancingStrategy(num_tasks)
    raise ValueError(f"unknown ps strategy {name!r} (one of: {', '.join(STRATEGIES)})")


# --- GPUs ----------------------------------------------------------------------------------

def visible_gpus() -> int:
    """How many GPUs this process can see (TensorFlow's view, honouring CUDA_VISIBLE_DEVICES)."""
    try:
        import tensorflow as tf

        return len(tf.config.list_physical_devices("GPU"))
    except Exception:
        return 0


def worker_device_for(ctx: TaskContext, use_gpu: Optional[bool] = None) -> str:
    """``/job:worker/task:i/device:GPU:0`` when a GPU is visible (or ``use_gpu``), else the
    task's CPU."""
    if use_gpu is None:
        use_gpu = visible_gpus() > 0
    return ctx.device + ("/device:GPU:0" if use_gpu else "/device:CPU:0")


# --- the placement ---------------------------------------------------------------------------

_local = threading.local()


class Placement:
    """A ``replica_device_setter`` for one task, plus partitioning and a report.

    ``num_ps`` defaults to the context's ps count; ``worker_device`` to
    :func:`worker_device_for`. ``partition_min_bytes``: variables of at least twice this many
    bytes are split into up to ``num_ps`` parts of at least this size
    (``placement.partitioner``; None disables it).
    """

    def __init__(self, ctx: Optional[TaskContext] = None, *, strategy: str = "round_robin",
                 num_ps: Optional[int] = None, worker_device: Optional[str] = None,
                 ps_device: str = "/job:ps/device:CPU:0", use_gpu: Optional[bool] = None,
                 partition_min_bytes: Optional[int] = None, local_variables_on_worker: bool = True):
        import tensorflow as tf

        if num_ps is None:
            num_ps = ctx.num_ps if ctx is not None else 0
        if worker_device is None:
            worker_device = worker_device_for(ctx, use_gpu) if ctx is not None else ""
        self.ctx = ctx
        self.num_ps = int(num_ps)
        self.worker_device = worker_device
        self.ps_device = ps_device
        self.strategy_name = strategy
        self.strategy = make_strategy(strategy, self.num_ps) if self.num_ps > 0 else None
        self.local_variables_on_worker = local_variables_on_worker
        self.partition_min_bytes = partition_min_bytes
        if self.num_ps > 0:
            self._setter = tf.compat.v1.train.replica_device_setter(
                ps_tasks=self.num_ps, ps_device=ps_device, worker_device=worker_device,
                ps_strategy=self.strategy)
        else:  # no ps job: everything on the worker
            self._setter = worker_device or None

    # the device function to pass to tf.device()
    @property
    def device_fn(self):
        return self._setter

    @property
    def partitioner(self):
        """A partitioner for ``tf.compat.v1.variable_scope(partitioner=...)``, or None."""
        if not self.partition_min_bytes or self.num_ps < 2:
            return None
        import tensorflow as tf

        return tf.compat.v1.min_max_variable_partitioner(
            max_partitions=self.num_ps, axis=0, min_slice_size=int(self.partition_min_bytes))

    def _creator(self, next_creator, **kwargs):
        import tensorflow as tf

        collections = kwargs.get("collections") or ()
        if self.local_variables_on_worker and tf.compat.v1.GraphKeys.LOCAL_VARIABLES in collections:
            with tf.compat.v1.device(self.worker_device or None):
                return next_creator(**kwargs)
        return next_creator(**kwargs)

    @contextlib.contextmanager
    def scope(self) -> Iterator["Placement"]:
        """Place ops built inside: variables on ps, local variables and the rest on the worker."""
        import tensorflow as tf

        with contextlib.ExitStack() as stack:
            if self._setter is not None:
                stack.enter_context(tf.compat.v1.device(self._setter))
            stack.enter_context(tf.compat.v1.variable_creator_scope(self._creator))
            yield self

    def report(self, graph=None) -> "PlacementReport":
        return placement_report(graph, num_ps=self.num_ps, strategy=self.strategy_name)


# --- the report ----------------------------------------------------------------------------

@dataclass
class VariablePlacement:
    name: str
    device: str
    job: Optional[str]
    task: Optional[int]
    bytes: int


@dataclass
class PlacementReport:
    """Variables and where they are: ``bytes_per_ps[k]`` is the bytes held by ``ps:k``."""

    variables: List[VariablePlacement] = field(default_factory=list)
    bytes_per_ps: List[int] = field(default_factory=list)
    strategy: str = ""

    @property
    def total_ps_bytes(self) -> int:
        return sum(self.bytes_per_ps)

    @property
    def max_mean_ratio(self) -> float:
        """max / mean bytes over ps tasks: 1.0 is perfectly balanced; 0.0 with no bytes."""
        if not self.bytes_per_ps or not self.total_ps_bytes:
            return 0.0
        mean = self.total_ps_bytes / len(self.bytes_per_ps)
        return max(self.bytes_per_ps) / mean

    def of(self, name: str) -> VariablePlacement:
        for v in self.variables:
            if v.name == name:
                return v
        raise KeyError(name)

    def as_dict(self) -> Dict[str, object]:
        return {"strategy": self.strategy, "bytes_per_ps": list(self.bytes_per_ps),
                "max_mean_ratio": round(self.max_mean_ratio, 4),
                "variables": {v.name: {"device": v.device, "bytes": v.bytes} for v in self.variables}}

    def to_text(self, max_rows: int = 20) -> str:
        lines = [f"placement ({self.strategy or 'unknown strategy'}): "
                 f"{len(self.variables)} variable(s), bytes per ps {self.bytes_per_ps}, "
                 f"max/mean {self.max_mean_ratio:.2f}"]
        rows = sorted(self.variables, key=lambda v: -v.bytes)
        for v in rows[:max_rows]:
            where = f"{v.job}:{v.task}" if v.job else (v.device or "(unplaced)")
            lines.append(f"  {v.name:<40} {where:<12} {v.bytes:>12,d} B")
        if len(rows) > max_rows:
            lines.append(f"  ... and {len(rows) - max_rows} more")
        return "\n".join(lines)


def placement_report(graph=None, num_ps: Optional[int] = None, strategy: str = "",
                     op_types: Sequence[str] = VARIABLE_OPS) -> PlacementReport:
    """Report every variable op of ``graph`` (default graph): its device and bytes, and the
    bytes per ps task (``num_ps`` defaults to the highest ps task seen + 1)."""
    import tensorflow as tf

    graph = graph or tf.compat.v1.get_default_graph()
    entries: List[VariablePlacement] = []
    for op in graph.get_operations():
        if op.type not in op_types:
            continue
        spec = tf.DeviceSpec.from_string(op.device or "")
        entries.append(VariablePlacement(op.name, op.device, spec.job, spec.task,
                                         byte_size_load_fn(op)))
    ps_tasks = [v.task or 0 for v in entries if v.job == "ps"]
    n = num_ps if num_ps is not None else (max(ps_tasks) + 1 if ps_tasks else 0)
    per_ps = [0] * n
    for v in entries:
        if v.job == "ps" and v.task is not None and v.task < n:
            per_ps[v.task] += v.bytes
    return PlacementReport(entries, per_ps, strategy)
