"""The tfcluster runtime: what runs inside each task of a TensorFlow ps/worker cluster.

Importing this package does not import TensorFlow; the functions that need it import it
when called. See docs/RUNTIME.md.

    ctx = task_context()                      # TF_CONFIG and/or the seed's flags
    server = start_server(ctx)                # thread pools, device filters, clear port errors
    if ctx.is_ps: return serve_until_done(ctx, server)
    placement = Placement(ctx, strategy="greedy")
    with placement.scope(): ...model...
    with TrainingSession(ctx, server, last_step=N, sync_optimizer=...) as sess: ...
"""
from __future__ import annotations

from tfcluster.runtime.context import (
    ContextError,
    TaskContext,
    is_local_host,
    parse_cluster,
    parse_tf_config,
    task_context,
)

_LAZY = {
    # server
    "EXIT_PORT_IN_USE": "server", "EXIT_BAD_CONTEXT": "server", "PortInUseError": "server",
    "ServerStartError": "server", "start_server": "server", "session_config": "server",
    "thread_pool_sizes": "server", "thread_spinning": "server", "default_device_filters": "server",
    "serve_until_done": "server",
    "signal_done": "server", "join_forever": "server", "exit_now": "server", "fail": "server",
    "port_holder": "server", "wait_for_ports": "server",
    # placement
    "Placement": "placement", "PlacementReport": "placement", "placement_report": "placement",
    "byte_size_load_fn": "placement", "GreedyLoadBalancingStrategy": "placement",
    "RoundRobinStrategy": "placement", "make_strategy": "placement",
    "worker_device_for": "placement", "visible_gpus": "placement",
    # profiler
    "start_profiler": "profiler",
    # prefetch
    "PrefetchCache": "prefetch",
    # training
    "TrainingSession": "training", "make_sync_optimizer": "training",
    "quiet_deprecations": "training",
    "ProgressReporter": "training", "summary_line": "training",
    "DEFAULT_OPERATION_TIMEOUT_MS": "training",
    # flags
    "define_task_flags": "flags", "context_from_flags": "flags",
    # the tf.data service (the file's data_service:)
    "distribute": "data_service",
}

__all__ = ["ContextError", "TaskContext", "is_local_host", "parse_cluster", "parse_tf_config",
           "task_context", *_LAZY]


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tfcluster.runtime' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"tfcluster.runtime.{mod}"), name)
    globals()[name] = value
    return value
