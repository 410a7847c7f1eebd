"""A DLRM-style model with large embedding tables, trained two ways (benchmark ``embeddings``):

* ``--variant=runtime``: tfcluster's runtime, between-graph and async (every task runs this
  program): ``replica_device_setter`` through ``rt.Placement`` (greedy), the tables split over
  the ps by ``placement.partitioner`` (partitioned variables), ``embedding_lookup`` on the
  partitions (the gather runs on each ps, next to its rows), plain SGD whose table updates are
  sparse (``IndexedSlices`` -> a scatter on the ps); 2 ps + 2 workers;
* ``--variant=pss``: TensorFlow 2's ``ParameterServerStrategy`` with a ``variable_partitioner``
  (the tables become ``ShardedVariable``s over the 2 ps), ``ClusterCoordinator`` and a custom
  loop (``strategy.run`` of a ``tf.function`` step, ``schedule`` per step); the chief runs this
  program, 2 ps + 2 workers serve (``python -m tfcluster.runtime.serve``).

Model (the same math in both): 4 tables of ``--rows`` x ``--dim`` float32 (default 250,000 x 64:
256 MB in all), one id per table and example; 13 dense features through a bottom layer
13 -> dim (relu); the 5 vectors concatenated -> 64 (relu) -> 1, sigmoid cross-entropy; SGD,
learning rate 0.05. Each step looks up only the batch's unique ids per table (``tf.unique``,
then a gather of the looked-up rows), as recommenders do, so the rows a step moves are its unique
rows. Data: ``--batch`` (1,024) examples a step; ids drawn with a Zipf skew (rank r has weight
1/r^1.05) over the rows, the ranks scattered over the table by a fixed permutation, 32 batches
made once from a seed and cycled by every worker, so both variants see the same ids.

Measured inside the program, over a window after a warm-up (``--warmup`` then ``--seconds``): the
global steps (one step = one batch on one worker) per second, and the bytes every TCP connection
of the cluster carried in that window: ``ss -tin`` on the cluster's ports (from TF_CONFIG),
``bytes_acked`` of both sockets of each connection (each byte counted once, by its sender; TCP
payload, gRPC and HTTP/2 framing included, headers of IP and TCP not). The floor of a step is
what it must move: its unique rows per table, down (the lookup) and up (their gradients),
``2 x unique x dim x 4`` bytes. The program prints one ``@bench {...}`` line at the end.
"""
import json
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import arg  # --name=value flags, as the other bench programs read them

TABLES, DENSE, TOP = 4, 13, 64
LR = 0.05
POOL = 32
SEED = 11
ZIPF = 1.05

ROWS, DIM, BATCH = arg("rows", 250000), arg("dim", 64), arg("batch", 1024)


def batches(worker):
    """The worker's pool of batches: ids [POOL, BATCH, TABLES], dense, labels; and the mean
    unique rows per step (summed over tables)."""
    import numpy as np

    rng = np.random.RandomState(SEED)
    perm = rng.permutation(ROWS)                   # the same scatter of ranks on every worker
    weights = 1.0 / np.arange(1, ROWS + 1) ** ZIPF
    cdf = np.cumsum(weights / weights.sum())
    rng = np.random.RandomState(SEED + 1 + worker)
    ranks = np.minimum(np.searchsorted(cdf, rng.random_sample((POOL, BATCH, TABLES))), ROWS - 1)
    ids = perm[ranks].astype("int64")
    dense = rng.normal(size=(POOL, BATCH, DENSE)).astype("float32")
    labels = ((ids[:, :, 0] % 7 < 3) ^ (dense[:, :, 0] > 0)).astype("float32")
    unique = float(np.mean([sum(len(np.unique(ids[b, :, t])) for t in range(TABLES))
                            for b in range(POOL)]))
    return ids, dense, labels, unique


def dataset(tf, worker=0):
    ids, dense, labels, _ = batches(worker)
    return tf.data.Dataset.from_tensor_slices((ids, dense, labels)).repeat().prefetch(2)


def forward(tf, lookup, dense_layers, ids, dense, labels):
    """The model: ``lookup(t, unique_ids) -> rows``; ``dense_layers``: [(w, b)] bottom, top, out."""
    vecs = []
    for t in range(TABLES):
        uniq, idx = tf.unique(ids[:, t])
        vecs.append(tf.gather(lookup(t, uniq), idx))
    (bw, bb), (tw, tb), (ow, ob) = dense_layers
    vecs.append(tf.nn.relu(tf.matmul(dense, bw) + bb))
    h = tf.nn.relu(tf.matmul(tf.concat(vecs, 1), tw) + tb)
    logits = tf.squeeze(tf.matmul(h, ow) + ob, 1)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


DENSE_SHAPES = [((DENSE, DIM), (DIM,)), (((TABLES + 1) * DIM, TOP), (TOP,)), ((TOP, 1), (1,))]


# ------------------------------------------------------------------ bytes on the wire
_ACKED = re.compile(r"\bbytes_acked:(\d+)")
_RECEIVED = re.compile(r"\bbytes_received:(\d+)")


def cluster_ports():
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    return sorted({int(ep.rsplit(":", 1)[1]) for eps in cluster.values() for ep in eps})


def wire_bytes(ports):
    """Bytes carried so far by every TCP connection to or from a cluster port that this network
    namespace sees, each byte counted once: a connection whose both sockets are here counts the
    bytes each socket's peer acknowledged; one whose other end is in another namespace (a
    simulated host) adds what this end received."""
    expr = " or ".join(f"sport = :{p} or dport = :{p}" for p in ports)
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( {expr} )"],
                         capture_output=True, text=True, timeout=30).stdout
    socks, cur = [], None
    for line in out.splitlines():
        if line[:1].isspace() and cur is not None:
            cur[2] += " " + line
        elif line.strip():
            words = line.split()
            cur = [words[-2], words[-1], ""]          # local, peer, info
            socks.append(cur)
    here = {local for local, _, _ in socks}
    total = 0
    for _local, peer, info in socks:
        acked, received = _ACKED.search(info), _RECEIVED.search(info)
        total += int(acked.group(1)) if acked else 0
        if peer not in here:
            total += int(received.group(1)) if received else 0
    return total


class Window:
    """Steps and wire bytes between the end of the warm-up and ``seconds`` later."""

    def __init__(self, warmup, seconds):
        self.warmup, self.seconds = warmup, seconds
        self.ports = cluster_ports()
        self.start = self.first = None
        self.result = None

    def on_step(self, step):
        """After a step with global step ``step``; True once the window is over."""
        now = time.monotonic()
        if self.first is None:
            self.first = now
            print("@embeddings first_step", flush=True)
        if self.start is None:
            if now - self.first >= self.warmup:
                self.start = (now, step, wire_bytes(self.ports))
            return False
        if now - self.start[0] < self.seconds:
            return False
        t0, s0, b0 = self.start
        b1 = wire_bytes(self.ports)
        self.result = {"seconds": now - t0, "steps": step - s0, "bytes": b1 - b0}
        return True

    def report(self, variant, unique_per_step, extra=None):
        r = self.result or {}
        steps = max(1, r.get("steps") or 0)
        floor = 2.0 * unique_per_step * DIM * 4
        per_step = (r.get("bytes") or 0) / steps
        print("@bench " + json.dumps({
            "variant": variant, "steps": r.get("steps"), "seconds": r.get("seconds"),
            "steps_per_s": (r.get("steps") or 0) / r["seconds"] if r.get("seconds") else None,
            "examples_per_s": (r.get("steps") or 0) * BATCH / r["seconds"] if r.get("seconds") else None,
            "bytes_per_step": per_step, "floor_bytes_per_step": floor,
            "bytes_over_floor": per_step / floor if floor else None,
            "unique_rows_per_step": unique_per_step,
            "table_mb": TABLES * ROWS * DIM * 4 / 1e6, "rows": ROWS, "dim": DIM, "batch": BATCH,
            **(extra or {})}), flush=True)


# ------------------------------------------------------------------ TF1, tfcluster's runtime
def build_runtime(tf, placement, ids, dense, labels, global_step):
    """The runtime's graph: partitioned tables under ``placement``; returns (train_op, loss,
    tables). Shared with tests/system/test_embeddings_sparse.py."""
    init = tf.compat.v1.random_uniform_initializer(-0.05, 0.05)
    with tf.compat.v1.variable_scope("", partitioner=placement.partitioner):
        tables = [tf.compat.v1.get_variable(f"table_{t}", [ROWS, DIM], initializer=init)
                  for t in range(TABLES)]
    layers = []
    for i, (ws, bs) in enumerate(DENSE_SHAPES):
        layers.append((tf.compat.v1.get_variable(f"dense_{i}/kernel", ws,
                                                 initializer=tf.compat.v1.glorot_uniform_initializer()),
                       tf.compat.v1.get_variable(f"dense_{i}/bias", bs,
                                                 initializer=tf.zeros_initializer())))

    def lookup(t, uniq):
        return tf.compat.v1.nn.embedding_lookup(tables[t], uniq, partition_strategy="div")

    loss = forward(tf, lookup, layers, ids, dense, labels)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(loss, global_step=global_step)
    return train_op, loss, tables


def runtime(warmup, seconds):
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    import tfcluster.runtime as rt

    ctx = rt.task_context()
    server = rt.start_server(ctx)
    if ctx.is_ps:
        rt.exit_now(rt.serve_until_done(ctx, server))
    # tables of >= 2 x 1 MB are split over every ps; the dense layers placed whole (greedy)
    placement = rt.Placement(ctx, strategy="greedy", partition_min_bytes=2 ** 20)
    window = Window(warmup, seconds) if ctx.is_chief else None
    with tf.Graph().as_default(), placement.scope():
        gs = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.device(ctx.device + "/device:CPU:0"):
            ids, dense, labels = tf.compat.v1.data.make_one_shot_iterator(dataset(tf)).get_next()
        train_op, _, tables = build_runtime(tf, placement, ids, dense, labels, gs)
        partitions = [len(list(t)) if hasattr(t, "_get_variable_list") else 1 for t in tables]
        with rt.TrainingSession(ctx, server, last_step=10 ** 9, save_summaries_steps=None) as sess:
            while not sess.should_stop():
                out = sess.run([train_op, gs])
                if out is None:
                    break
                if window is not None and window.on_step(int(out[1])):
                    break
    if window is not None:
        window.report("runtime", batches(0)[3], {"partitions_per_table": partitions})
    rt.exit_now(0)


# ------------------------------------------------------------------ TF2 ParameterServerStrategy
def pss(warmup, seconds):
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    num_ps = resolver.cluster_spec().num_tasks("ps")
    strategy = tf.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=2 ** 20, max_shards=num_ps))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        init = tf.random_uniform_initializer(-0.05, 0.05)
        glorot = tf.keras.initializers.GlorotUniform()
        # each shard is made on its ps from its own shape (nothing big leaves the coordinator)
        tables = [tf.Variable(lambda shard_info: init(shard_info.shape), name=f"table_{t}",
                              shape=[ROWS, DIM], dtype=tf.float32) for t in range(TABLES)]
        layers = [(tf.Variable(glorot(ws), name=f"dense_{i}/kernel"),
                   tf.Variable(tf.zeros(bs), name=f"dense_{i}/bias"))
                  for i, (ws, bs) in enumerate(DENSE_SHAPES)]
        optimizer = tf.keras.optimizers.SGD(learning_rate=LR)
    # a ShardedVariable is trained through its shards (as Keras lists them in trainable_variables)
    variables = [v for t in tables for v in getattr(t, "variables", [t])] + [
        v for pair in layers for v in pair]

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(
            lambda ctx: dataset(tf))

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def step_fn(iterator):
        def replica_fn(batch):
            ids, dense, labels = batch
            with tf.GradientTape() as tape:
                loss = forward(tf, lambda t, uniq: tf.nn.embedding_lookup(tables[t], uniq),
                               layers, ids, dense, labels)
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(grads, variables))
            return loss

        return strategy.run(replica_fn, args=(next(iterator),))

    window = Window(warmup, seconds)
    coordinator.schedule(step_fn, args=(iterator,)).fetch()
    done = 1
    window.on_step(done)
    while True:
        for _ in range(10):
            coordinator.schedule(step_fn, args=(iterator,))
        coordinator.join()
        done += 10
        if window.on_step(done):
            break
    shards = [len(getattr(t, "variables", [t])) for t in tables]
    window.report("pss", batches(0)[3], {"shards_per_table": shards,
                                        "sharded": type(tables[0]).__name__})


def main():
    variant = arg("variant", "runtime")
    warmup, seconds = arg("warmup", 3.0), arg("seconds", 6.0)
    if variant == "runtime":
        runtime(warmup, seconds)
    elif variant == "pss":
        pss(warmup, seconds)
    else:
        sys.exit(f"embeddings.py: --variant: unknown {variant!r}")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
