"""Prefetched variables (async only, opt-in): a worker reads the variables for its next step
while it sends this step's update, so both directions of each ps link work at once.

Without it, each replica step of a ps/worker cluster is serial: read every variable from the
ps tasks, compute, send the update; a link direction idles while its worker is in the other
phase (docs/BENCHMARKS.md, "Simulated network links"). With it, the model reads a worker-local
copy of each trainable variable (a local variable on the worker, filled once when the session
starts); each step computes its gradients from that copy, applies them to the ps variables,
and, in the same run, receives the ps variables' current values into the copy for the next
step. The receive starts when the step starts, with nothing to wait for; the copy is
overwritten only after every read of it in this step.

The cost, in plain words: each step's gradient is computed from variables one step older than
without it -- they lack this worker's own previous update (other workers' updates arrive as
before). That is the staleness asynchronous training already has, one step more; it is not
allowed with ``SyncReplicasOptimizer`` (its gradients must come from the current step's
variables). It pays when steps are transfer-bound and variables are read whole (dense layers);
for embeddings read a few rows a step it would fetch the whole table: do not use it there.

    cache = PrefetchCache(placement.worker_device)
    with placement.scope():
        gs = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.variable_scope("", custom_getter=cache.getter,
                                         partitioner=placement.partitioner):
            loss = model(...)           # reads the local copies (tensors)
        train_op = cache.minimize(tf.compat.v1.train.GradientDescentOptimizer(0.1), loss, gs)

The getter returns a tensor (the copy's value; the parts concatenated for a partitioned
variable), so the model must use variables as tensors (``tf.matmul(x, w)``), as code built on
``tf.compat.v1.get_variable`` does. Non-trainable variables are not cached.
"""
from __future__ import annotations

from typing import List, Optional, Tuple


class PrefetchCache:
    """Worker-local copies of the trainable variables created under :meth:`getter`."""

    def __init__(self, worker_device: Optional[str] = None):
        self.worker_device = worker_device or None
        #: (snapshot of the local copy used by the model, the ps variable, the local copy)
        self.pairs: List[Tuple[object, object, object]] = []

    def _local_copy(self, tf, var):
        name = var.op.name.replace("/", "_") + "_prefetched"
        with tf.compat.v1.device(self.worker_device):
            copy = tf.compat.v1.Variable(var.read_value(), trainable=False, name=name,
                                         collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                         use_resource=True)
            snap = copy.read_value()
        self.pairs.append((snap, var, copy))
        return snap

    def getter(self, getter, name, *args, **kwargs):
        """A ``custom_getter`` for ``tf.compat.v1.variable_scope``."""
        import tensorflow as tf

        var = getter(name, *args, **kwargs)
        if not kwargs.get("trainable", True):
            return var
        parts = list(var) if hasattr(var, "_get_variable_list") else None
        if parts is None:
            return self._local_copy(tf, var)
        partitions = list(var._get_partitions())  # the partition axis
        axis = max(range(len(partitions)), key=lambda i: partitions[i])
        return tf.concat([self._local_copy(tf, p) for p in parts], axis=axis)

    def minimize(self, optimizer, loss, global_step=None, name: Optional[str] = None):
        """Gradients of ``loss`` with respect to the copies, applied to the ps variables by
        ``optimizer`` (not a ``SyncReplicasOptimizer``); each copy then takes the value its ps
        variable had when the step's read of it ran: with nothing to wait for, normally at the
        start of the step, before this step's update (the order is not forced)."""
        import tensorflow as tf

        if isinstance(optimizer, tf.compat.v1.train.SyncReplicasOptimizer):
            raise ValueError("PrefetchCache: not with SyncReplicasOptimizer (its gradients must "
                             "come from the current step's variables)")
        if not self.pairs:
            raise ValueError("PrefetchCache: no variable was created under its getter")
        snaps = [s for s, _, _ in self.pairs]
        grads = tf.gradients(loss, snaps)
        apply = optimizer.apply_gradients(
            [(g, v) for g, (_, v, _) in zip(grads, self.pairs) if g is not None],
            global_step=global_step)
        refresh = []
        for _snap, var, copy in self.pairs:
            fresh = var.read_value()   # on the ps, no dependency: its transfer starts at once
            with tf.compat.v1.device(self.worker_device):
                with tf.control_dependencies([g for g in grads if g is not None] + snaps + [loss]):
                    refresh.append(copy.assign(fresh, read_value=False))
        return tf.group(apply, *refresh, name=name or "prefetch_minimize")
