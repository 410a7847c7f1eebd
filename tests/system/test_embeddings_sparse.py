"""The runtime's update path for embedding tables stays sparse: a table split over
2 ps by ``Placement.partitioner``, looked up with ``embedding_lookup`` and trained with SGD,
gets ``IndexedSlices`` gradients that reach each ps as a scatter of the touched rows; no dense
gradient of a whole table (or of a partition) is made anywhere, and the worker never holds a
table-sized tensor. Real TensorFlow: 2 ps + 1 worker servers on loopback, real steps."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent(r'''
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    from tfcluster.runtime.context import TaskContext
    from tfcluster.runtime.placement import Placement

    ports = [int(p) for p in sys.argv[1].split(",")]
    ROWS, DIM = 50000, 16
    cluster = {"ps": [f"localhost:{ports[0]}", f"localhost:{ports[1]}"],
               "worker": [f"localhost:{ports[2]}"]}
    servers = [tf.distribute.Server(cluster, job_name=j, task_index=i, start=True)
               for j, i in (("ps", 0), ("ps", 1), ("worker", 0))]
    ctx = TaskContext(cluster=cluster, job_name="worker", task_index=0)
    placement = Placement(ctx, strategy="greedy", partition_min_bytes=2 ** 16)
    out = {}
    graph = tf.Graph()
    with graph.as_default(), placement.scope():
        gs = tf.compat.v1.train.get_or_create_global_step()
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        with tf.compat.v1.variable_scope("", partitioner=placement.partitioner):
            table = tf.compat.v1.get_variable("table", [ROWS, DIM],
                                              initializer=tf.compat.v1.ones_initializer())
        w = tf.compat.v1.get_variable("w", [DIM, 1], initializer=tf.compat.v1.ones_initializer())
        uniq, idx = tf.unique(ids)
        rows = tf.gather(tf.compat.v1.nn.embedding_lookup(table, uniq, partition_strategy="div"), idx)
        loss = tf.reduce_sum(tf.matmul(rows, w))
        parts = list(table)
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.5)
        grads = opt.compute_gradients(loss, var_list=parts + [w])
        train = opt.apply_gradients(grads, global_step=gs)
        out["partitions"] = [(p.shape.as_list(), p.device) for p in parts]
        out["grad_types"] = [type(g).__name__ for g, _ in grads[:len(parts)]]
        part_shapes = {tuple(p.shape.as_list()) for p in parts} | {(ROWS, DIM)}
        big = []
        for op in graph.get_operations():
            for t in op.outputs:
                shape = t.shape.as_list() if t.shape.rank is not None else None
                if shape and tuple(shape) in part_shapes and op.type not in (
                        "VarHandleOp", "VariableV2", "Const", "Fill", "ReadVariableOp",
                        "Identity", "AssignVariableOp"):
                    big.append((op.name, op.type, op.device))
        out["table_sized"] = big
        # every op that writes a table partition, and where it runs
        out["updates"] = sorted({(op.type, op.device) for op in graph.get_operations()
                                 if op.type.startswith(("ResourceScatter", "ResourceSparseApply",
                                                        "ResourceApply", "ScatterSub",
                                                        "SparseApply", "ApplyGradient"))
                                 and any(inp.op in [p.op for p in parts] for inp in op.inputs)})
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(servers[2].target, graph=graph) as sess:
        sess.run(init)
        touched = np.array([3, 3, 7, 30001, 49999], dtype=np.int64)
        opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        meta = tf.compat.v1.RunMetadata()
        sess.run(train, {ids: touched}, options=opts, run_metadata=meta)
        values = np.concatenate(sess.run(parts), axis=0)
        changed = sorted(int(i) for i in np.nonzero(np.any(values != 1.0, axis=1))[0])
        out["changed_rows"] = changed
        out["row3"] = float(values[3, 0])
        # the step's ops on the ps tasks: the scatters of the touched rows ran there
        out["ps_ops"] = sorted({n.node_name.split(":")[0] for d in meta.step_stats.dev_stats
                                if "/job:ps/" in d.device for n in d.node_stats})
    print("@result " + json.dumps(out), flush=True)
    os._exit(0)
''')


@pytest.mark.tf
def test_the_runtime_update_path_for_embedding_tables_stays_sparse(tmp_path, ports):
    p = ports(3)
    r = subprocess.run([sys.executable, "-c", PROGRAM, ",".join(map(str, p))],
                       capture_output=True, text=True, timeout=240,
                       env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    line = next((x for x in r.stdout.splitlines() if x.startswith("@result ")), None)
    assert r.returncode == 0 and line, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(line[len("@result "):])
    # the table is split over both ps, by rows
    assert [s for s, _ in out["partitions"]] == [[25000, 16], [25000, 16]]
    assert sorted(d.split("/device")[0] for _, d in out["partitions"]) == ["/job:ps/task:0",
                                                                          "/job:ps/task:1"]
    # the gradients of the partitions are IndexedSlices, not dense tensors
    assert out["grad_types"] == ["IndexedSlices", "IndexedSlices"], out["grad_types"]
    # the updates are sparse (scatters of rows), on the ps that holds each partition
    assert out["updates"], out
    for op_type, device in out["updates"]:
        assert "Sparse" in op_type or "Scatter" in op_type, out["updates"]
        assert device.startswith("/job:ps/task:"), out["updates"]
    # no op makes a table- or partition-sized tensor (a dense gradient, a gathered table)
    assert out["table_sized"] == [], out["table_sized"]
    # one real step changed exactly the touched rows (row 3 twice: two ids in the batch)
    assert out["changed_rows"] == [3, 7, 30001, 49999]
    assert out["row3"] == pytest.approx(1.0 - 0.5 * 2 * 1.0)
    assert out["ps_ops"], out
