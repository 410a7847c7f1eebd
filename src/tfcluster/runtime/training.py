"""Between-graph training sessions: async or sync, with the chief's duties, without the hangs.

:class:`TrainingSession` is a ``MonitoredSession`` set up the way a ps/worker cluster needs:

* chief: initialises or restores from the latest checkpoint in ``checkpoint_dir``, saves
  checkpoints (every N steps and/or seconds, and at the end), writes summaries and the
  steps/sec counter (like the seed's ``Supervisor``);
* non-chief: waits for the chief's initialisation, polling every ``recovery_wait_secs``
  (0.25 s) instead of ``MonitoredTrainingSession``'s hard-wired 30 s;
* sync (``SyncReplicasOptimizer``): the chief runs the chief queue runner and token init
  (the optimizer's hook); at its end it enqueues one spare token per replica so that no
  worker stays blocked on the token queue; ``stop_grace_period_secs`` is 1 s, not 120 s
  (``close()`` waits that long for the queue-runner thread, which never ends by itself);
* every session has ``device_filters`` (ps + itself) and a bounded
  ``operation_timeout_in_ms``; a run that times out once the last step is reached ends
  the loop instead of failing;
* at a clean end, every replica tells the ps tasks it is done (:func:`signal_done`) so a
  ps started by hand ends by itself -- unless a supervising launcher will stop the ps
  (:func:`tfcluster.plan.contract.supervised`: ``TFCLUSTER_LAUNCHER_PID`` names the parent of
  this task's process-group leader, and that process is a tfcluster supervisor: the launcher,
  the node agent of an ssh host or the Slurm node agent).
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import ContextManager, Iterable, Optional

from tfcluster.plan.contract import supervised
from tfcluster.runtime.context import TaskContext
from tfcluster.runtime.server import session_config, signal_done

#: default bound on any single blocking op in a training session (ms)
DEFAULT_OPERATION_TIMEOUT_MS = 120_000


def make_sync_optimizer(optimizer, ctx: TaskContext, replicas_to_aggregate: Optional[int] = None,
                        total_num_replicas: Optional[int] = None, backup_workers: int = 0):
    """Wrap ``optimizer`` in a ``tf.compat.v1.train.SyncReplicasOptimizer``.

    ``total_num_replicas`` defaults to the number of replicas (chief + workers);
    ``replicas_to_aggregate`` to ``total_num_replicas - backup_workers`` (so the default is
    the number of workers). With backup workers, each step applies the first
    ``replicas_to_aggregate`` gradients and drops the stragglers'.
    """
    import tensorflow as tf

    total = int(total_num_replicas or ctx.num_workers)
    if replicas_to_aggregate is None or replicas_to_aggregate <= 0:
        replicas_to_aggregate = max(1, total - int(backup_workers))
    if replicas_to_aggregate > total and total_num_replicas is None:
        total = replicas_to_aggregate
    with quiet_deprecations():   # its notice points to tf.contrib, which is gone
        return tf.compat.v1.train.SyncReplicasOptimizer(
            optimizer, replicas_to_aggregate=int(replicas_to_aggregate), total_num_replicas=total)


def quiet_deprecations() -> ContextManager[object]:
    """TensorFlow's deprecation notices silenced while the block runs, where the notice points
    to something gone (``tf.contrib``) or to TensorFlow's own code. The switch lives in
    ``tensorflow.python.util.deprecation``, which is not TensorFlow's public API: where a
    release moves it, the notices are printed and nothing fails."""
    try:
        from tensorflow.python.util import deprecation
        return deprecation.silence()
    except (ImportError, AttributeError):
        return contextlib.nullcontext()


class OtherRunError(RuntimeError):
    """The ps this task reached belongs to another run (its run token differs)."""


def check_run_token(tf, ctx: TaskContext, target, config) -> None:
    """Before training: the run's token (``TFCLUSTER_RUN_TOKEN``, one random word per run) on
    ps:0. The first task of the run that gets there writes it; every other one reads it and
    stops with :class:`OtherRunError` when it is another run's (its port reached another run's
    ps: a stale endpoint, a port reused). The variable is in no collection: checkpoints do not
    hold it and the model's readiness does not wait for it. Nothing is checked for a task that
    tfcluster did not start, or a cluster without a ps."""
    import os

    from tfcluster.plan.contract import RUN_TOKEN
    token = os.environ.get(RUN_TOKEN, "")
    if not token or not ctx.cluster.get("ps") or not ctx.in_cluster:
        return
    graph = tf.compat.v1.get_default_graph()
    with graph.as_default(), tf.compat.v1.device("/job:ps/task:0/device:CPU:0"):
        var = tf.compat.v1.Variable("", dtype=tf.string, trainable=False, collections=[],
                                    name="tfcluster_run_token")
        ready = tf.compat.v1.is_variable_initialized(var)
        write = tf.compat.v1.assign(var, token)
        read = var.read_value() if hasattr(var, "read_value") else var.value()
    with tf.compat.v1.Session(target, config=config) as sess:
        if not sess.run(ready):
            sess.run(write)
        seen = sess.run(read)
    seen = seen.decode("utf-8", "replace") if isinstance(seen, bytes) else str(seen)
    if seen != token:
        raise OtherRunError(f"{ctx.task_id}: the ps at {ctx.cluster['ps'][0]} belongs to another run "
                            f"(its run token is not this run's): not training against it; is that "
                            f"endpoint stale, or its port reused?")


def is_sync_optimizer(opt) -> bool:
    import tensorflow as tf

    return isinstance(opt, tf.compat.v1.train.SyncReplicasOptimizer)


_PER_STEP_METHODS = ("before_run", "after_run")


def hook_acts_per_step(hook, base) -> bool:
    """True when ``hook`` may do work at every ``run()``: it overrides ``before_run`` or
    ``after_run`` of ``base`` (``tf.compat.v1.train.SessionRunHook``), on its class or on the
    instance, or is not a ``base`` at all (duck-typed: assume it does).

    A hook that only overrides ``begin``, ``after_create_session`` or ``end`` -- like
    TensorFlow's ``_SyncReplicasOptimizerHook`` (sync_replicas_optimizer.py: its local-step
    init, the chief's token init and queue runner, all in ``after_create_session``) -- is
    called by ``MonitoredSession`` only when a session is created, recovered or closed, so
    a step may bypass the ``_HookedSession`` wrapper without changing what it does.
    """
    if not isinstance(hook, base):
        return True
    for name in _PER_STEP_METHODS:
        if name in getattr(hook, "__dict__", {}):
            return True
        if getattr(type(hook), name, None) is not getattr(base, name):
            return True
    return False


class _FastWorkerSessionCreator:
    """``WorkerSessionCreator`` whose ``SessionManager`` polls every ``recovery_wait_secs``."""

    def __init__(self, scaffold, master: str, config, max_wait_secs: float,
                 recovery_wait_secs: float):
        self._scaffold = scaffold
        self._master = master
        self._config = config
        self._max_wait_secs = max_wait_secs
        self._recovery_wait_secs = recovery_wait_secs

    def create_session(self):
        import tensorflow as tf

        self._scaffold.finalize()
        sm = tf.compat.v1.train.SessionManager(
            local_init_op=self._scaffold.local_init_op,
            local_init_feed_dict=self._scaffold.local_init_feed_dict,
            ready_op=self._scaffold.ready_op,
            ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
            graph=tf.compat.v1.get_default_graph(),
            recovery_wait_secs=self._recovery_wait_secs)
        return sm.wait_for_session(self._master, config=self._config,
                                   max_wait_secs=self._max_wait_secs)


def _checkpoint_step(tf, path: Optional[str]) -> Optional[int]:
    """The global step saved in checkpoint ``path`` (None for no checkpoint)."""
    if not path:
        return None
    try:
        return int(tf.train.load_variable(path, tf.compat.v1.GraphKeys.GLOBAL_STEP))
    except Exception:  # no global_step in it: fall back to the "-N" suffix
        tail = path.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else None


class TrainingSession:
    """A ``MonitoredSession`` for one replica of between-graph training (a context manager).

    Build it inside the graph, after the model and train op, before running::

        with TrainingSession(ctx, server, last_step=1000, checkpoint_dir=d,
                             sync_optimizer=opt if sync else None) as sess:
            while not sess.should_stop():
                out = sess.run([train_op, global_step, loss])
                if out is None:      # the run timed out after the last step: done
                    break
            acc = sess.run_raw(accuracy, feed_dict=...)  # no hooks (evaluation)

    ``server`` is the task's ``tf.compat.v1.train.Server`` or a session target string.
    Saving checkpoints: ``save_checkpoint_steps`` and/or ``save_checkpoint_secs`` (if
    neither: every 600 s); a final checkpoint is always written at a clean end when
    ``checkpoint_dir`` is set. ``sharded_checkpoints=False`` (default) writes the whole
    checkpoint from the chief (no shared filesystem needed between machines).
    """

    def __init__(self, ctx: TaskContext, server=None, *, last_step: Optional[int] = None,
                 checkpoint_dir: Optional[str] = None, sync_optimizer=None,
                 hooks: Iterable = (), chief_only_hooks: Iterable = (),
                 save_checkpoint_steps: Optional[int] = None,
                 save_checkpoint_secs: Optional[float] = None,
                 save_summaries_steps: Optional[int] = 100,
                 log_step_count_steps: Optional[int] = None,
                 config=None, scaffold=None, max_to_keep: int = 5,
                 sharded_checkpoints: bool = False,
                 stop_grace_period_secs: float = 1.0, recovery_wait_secs: float = 0.25,
                 max_wait_secs: float = 600.0,
                 operation_timeout_ms: Optional[int] = DEFAULT_OPERATION_TIMEOUT_MS,
                 signal_done_at_end: bool = True, is_chief: Optional[bool] = None):
        import tensorflow as tf

        self.ctx = ctx
        self.is_chief = ctx.is_chief if is_chief is None else bool(is_chief)
        if server is None:
            self.target = ctx.target()
        elif isinstance(server, str):
            self.target = server
        else:
            self.target = server.target
        self.last_step = last_step
        self.checkpoint_dir = checkpoint_dir or None
        self.sync_optimizer = sync_optimizer
        self.stop_grace_period_secs = stop_grace_period_secs
        self.close_wait_secs = 0.1
        self.signal_done_at_end = signal_done_at_end
        self.config = config if config is not None else session_config(
            ctx, operation_timeout_ms=operation_timeout_ms)

        self.global_step = tf.compat.v1.train.get_or_create_global_step()
        graph = self.global_step.graph
        # The chief's spare tokens (sync): one per replica, so a worker blocked on the token
        # queue when the chief stops gets through, sees the last step, and ends.
        self._release_tokens = None
        if sync_optimizer is not None and self.is_chief:
            self._release_tokens = sync_optimizer.get_init_tokens_op(
                num_tokens=max(ctx.num_workers, 1))
        if scaffold is None:
            with graph.device(ctx.device + "/device:CPU:0" if ctx.in_cluster else None):
                saver = tf.compat.v1.train.Saver(sharded=sharded_checkpoints, max_to_keep=max_to_keep,
                                                 allow_empty=True)
            scaffold = tf.compat.v1.train.Scaffold(saver=saver)
        self.scaffold = scaffold

        all_hooks = list(hooks)
        # SIGTERM (tfcluster stopping the cluster, Ctrl-C on the launcher, a pod eviction)
        # ends the loop at the next step; closing then writes the final checkpoint.
        self.stop_signal: Optional[int] = None  # checked by should_stop(): no per-step hook
        # No StopAtStepHook: run() checks the global step it fetches anyway (the hook costs a
        # second read op and a hook round per step, ~10% of a small model's step on this
        # machine: scripts/bench_programs/step_overhead.py).
        if sync_optimizer is not None:
            all_hooks.append(sync_optimizer.make_session_run_hook(self.is_chief))
        if self.is_chief:
            all_hooks.extend(chief_only_hooks)
            if self.checkpoint_dir:
                if save_checkpoint_steps:
                    all_hooks.append(tf.compat.v1.train.CheckpointSaverHook(
                        self.checkpoint_dir, save_steps=int(save_checkpoint_steps), scaffold=scaffold))
                if save_checkpoint_secs or not save_checkpoint_steps:
                    all_hooks.append(tf.compat.v1.train.CheckpointSaverHook(
                        self.checkpoint_dir, save_secs=float(save_checkpoint_secs or 600),
                        scaffold=scaffold))
                if save_summaries_steps:
                    all_hooks.append(tf.compat.v1.train.SummarySaverHook(
                        save_steps=int(save_summaries_steps), output_dir=self.checkpoint_dir,
                        scaffold=scaffold))
                if log_step_count_steps and sync_optimizer is None:  # sync: spurious warnings
                    all_hooks.append(tf.compat.v1.train.StepCounterHook(
                        every_n_steps=int(log_step_count_steps), output_dir=self.checkpoint_dir))
        self.hooks = all_hooks
        # No hook with per-step work (async, or sync without the chief's checkpoint/summary
        # hooks: the SyncReplicasOptimizer's hook only acts when a session is created): run()
        # calls a cached callable of the raw session instead of MonitoredSession's wrapper
        # chain and fetch handling. Session creation and recovery still go through
        # MonitoredSession, so every hook's begin/after_create_session/end runs as before.
        self.per_step_hooks = [h for h in all_hooks
                               if hook_acts_per_step(h, tf.compat.v1.train.SessionRunHook)]
        self._fast = not self.per_step_hooks
        self._callables: dict = {}

        if self.is_chief:
            self._creator = tf.compat.v1.train.ChiefSessionCreator(
                scaffold=scaffold, master=self.target, config=self.config,
                checkpoint_dir=self.checkpoint_dir)
        else:
            self._creator = _FastWorkerSessionCreator(scaffold, self.target, self.config,
                                                      max_wait_secs, recovery_wait_secs)
        self._sess = None
        self._stopped = False
        self.start_step: Optional[int] = None
        #: the steps this worker ran itself (calls of :meth:`run` that returned): its own rate,
        #: where the global step moves with every worker's steps (ProgressReporter reports it)
        self.local_step = 0
        self.started_at: Optional[float] = None
        #: chief only: the checkpoint the session was restored from, and its global step
        self.restored_from: Optional[str] = None
        self.restored_step: Optional[int] = None

    # --- context manager ---------------------------------------------------------------
    def __enter__(self) -> "TrainingSession":
        import tensorflow as tf

        self._old_sigterm = None
        self._opening = True
        if threading.current_thread() is threading.main_thread():
            def on_sigterm(signum, frame):
                self.stop_signal = signum
                if self._opening:
                    # still waiting for the session (a non-chief polls until the chief has
                    # initialised or restored the model, up to max_wait_secs): nothing to save,
                    # so end now instead of being killed after the launcher's stop timeout
                    raise SystemExit(128 + signum)
            self._old_sigterm = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            self._open(tf)
        except BaseException:
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
            raise
        finally:
            self._opening = False
        return self

    def _open(self, tf) -> None:
        if self.is_chief and self.checkpoint_dir:
            # what ChiefSessionCreator is about to restore. start_step (read after the
            # session is up) can already be past it: other workers step as soon as the
            # variables are restored.
            self.restored_from = tf.train.latest_checkpoint(self.checkpoint_dir)
            self.restored_step = _checkpoint_step(tf, self.restored_from)
        check_run_token(tf, self.ctx, self.target, self.config)
        with quiet_deprecations():   # TF's own restore path calls get_checkpoint_mtimes
            self._sess = tf.compat.v1.train.MonitoredSession(
                session_creator=self._creator, hooks=self.hooks,
                stop_grace_period_secs=self.stop_grace_period_secs)
        self.start_step = self.current_step()
        self.started_at = time.time()
        if self.last_step is not None and self.start_step >= self.last_step:
            self._stopped = True  # resumed at or past the last step: nothing to train

    def __exit__(self, exc_type, exc, tb) -> bool:
        import tensorflow as tf

        suppress = False
        if self.sync_optimizer is not None and self.is_chief:
            _quiet_cancelled_queue_runners()
        try:
            if self._release_tokens is not None:
                self._release()
            if exc_type in (tf.errors.OutOfRangeError, StopIteration):
                exc_type = None
                suppress = True
            if exc_type is None:
                self._close_fast()
            else:
                self._sess._close_internal(exc_type)  # same as MonitoredSession.__exit__
        finally:
            self._sess = None
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
        if self.stop_signal is not None:
            return suppress  # stopped, not done: the ps must not count this replica as finished
        # Under a supervising tfcluster launcher (contract.supervised: TFCLUSTER_LAUNCHER_PID
        # names the tfcluster supervisor that started this task's process group: the launcher,
        # the ssh or Slurm node agent, the Ray actor) it stops the ps tasks; telling them costs
        # a new session (0.5-2 s) between the last step and the exit. Anywhere else -- `tfcluster
        # commands` lines, pods, hand-written Slurm scripts, TFCLUSTER_TASK or not -- the ps
        # ends only when every replica says done.
        if exc_type is None and self.signal_done_at_end and not supervised():
            signal_done(self.ctx, self.target)
        return suppress

    def _close_fast(self) -> None:
        """A clean end: run every hook's ``end()`` here (the final checkpoint, the last
        summaries), then close the session in a background thread. ``MonitoredSession.close()``
        would first wait for the sync chief's queue-runner thread, which never ends by itself,
        and then for the master to cancel that thread's pending step on the ps: 1-3 s after
        the last step, for nothing (measured: scripts/benchmark.py --only fastclose)."""
        sess = self._sess
        raw = self.raw_session
        for hook in self.hooks:
            hook.end(raw)

        def close() -> None:
            try:  # hooks already ended: an exception type makes close skip their end()
                sess._close_internal(StopIteration)
            except Exception:  # best effort, the process is ending
                pass

        closer = threading.Thread(target=close, name="tfcluster-close", daemon=True)
        closer.start()
        closer.join(self.close_wait_secs)

    @property
    def stopped_by_signal(self) -> Optional[int]:
        """The signal (SIGTERM) that ended training early, or None."""
        return self.stop_signal

    def _release(self) -> None:
        import tensorflow as tf

        try:
            self.run_raw(self._release_tokens,
                         options=tf.compat.v1.RunOptions(timeout_in_ms=10_000))
        except Exception:  # best effort: the ps may be gone
            pass

    # --- running ------------------------------------------------------------------------
    @property
    def session(self):
        """The ``MonitoredSession``."""
        return self._sess

    @property
    def raw_session(self):
        """The underlying ``tf.compat.v1.Session`` (no hooks)."""
        return self._sess._tf_sess()

    def should_stop(self) -> bool:
        return self._stopped or self.stop_signal is not None or self._sess.should_stop()

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """``MonitoredSession.run``; returns None (and stops) when a run times out after the
        last step was reached, e.g. a sync worker whose token will never come."""
        import tensorflow as tf

        try:
            fn = None
            if self._fast and feed_dict is None and options is None and run_metadata is None:
                fn = self._callable(fetches)
            if fn is not None:
                try:
                    out = fn()
                except (tf.errors.AbortedError, tf.errors.UnavailableError):
                    # a ps restarted: MonitoredSession's path recreates the session
                    out = self._sess.run(fetches if self.last_step is None
                                         else (fetches, self.global_step))
                except Exception:
                    # MonitoredSession's rule (_CoordinatedSession.run): an error whose root
                    # cause is a preemption that a coordinated thread (the sync chief's queue
                    # runner) saw first is handled as that preemption: recover.
                    if not self._coordinator_saw_preemption():
                        raise
                    out = self._sess.run(fetches if self.last_step is None
                                         else (fetches, self.global_step))
                if self.last_step is None:
                    self.local_step += 1
                    return out
            elif self.last_step is None:
                out = self._sess.run(fetches, feed_dict=feed_dict, options=options,
                                     run_metadata=run_metadata)
                self.local_step += 1
                return out
            else:
                out = self._sess.run((fetches, self.global_step), feed_dict=feed_dict,
                                     options=options, run_metadata=run_metadata)
        except tf.errors.DeadlineExceededError:
            if self.last_step is not None and self.current_step() >= self.last_step:
                self._stopped = True
                return None
            raise
        self.local_step += 1
        result, step = out
        # StopAtStepHook's rule: the value fetched may be from before this run's increment,
        # so look again only when it is (almost) there.
        if step + 1 >= self.last_step and self.current_step() >= self.last_step:
            self._stopped = True
        return result

    def _coordinator_saw_preemption(self) -> bool:
        import tensorflow as tf

        creator = getattr(self._sess, "_coordinated_creator", None)  # MonitoredSession's
        coord = getattr(creator, "coord", None)
        if coord is None:
            return False
        try:
            coord.raise_requested_exception()
        except (tf.errors.AbortedError, tf.errors.UnavailableError):
            return True
        except Exception:  # another error: the caller raises its own
            return False
        return False

    def _callable(self, fetches):
        """``Session.make_callable`` of ``fetches`` (plus the global step), cached per raw
        session and per fetch list; None for fetches it cannot key (nested structures)."""
        if isinstance(fetches, (list, tuple)):
            if any(isinstance(f, (list, tuple, dict)) for f in fetches):
                return None
            key = (type(fetches), tuple(id(f) for f in fetches))
        elif isinstance(fetches, dict):
            return None
        else:
            key = id(fetches)
        raw = self._sess._tf_sess()  # changes when a session is recreated
        key = (id(raw), key)
        fn = self._callables.get(key)
        if fn is None:
            if len(self._callables) > 64:
                self._callables.clear()
            fn = raw.make_callable(fetches if self.last_step is None
                                   else (fetches, self.global_step))
            self._callables[key] = (fn, fetches, raw)  # keep the keyed objects alive
            return fn
        return fn[0]

    def run_raw(self, fetches, feed_dict=None, options=None):
        """Run without hooks (e.g. evaluation after the loop; does not count as a step)."""
        return self.raw_session.run(fetches, feed_dict=feed_dict, options=options)

    def current_step(self) -> int:
        """The global step, read from the ps."""
        return int(self.run_raw(self.global_step))


def _quiet_cancelled_queue_runners() -> None:
    """Closing the chief's session cancels the sync queue-runner thread, blocked in
    ``take_grad`` for gradients that will never come; its CancelledError is expected, so it
    is not printed as a thread traceback."""
    import threading

    import tensorflow as tf

    previous = threading.excepthook
    if getattr(previous, "_tfcluster_quiet", False):
        return

    def hook(args):
        if (args.thread is not None and args.thread.name.startswith("QueueRunnerThread")
                and isinstance(args.exc_value, tf.errors.CancelledError)):
            return
        previous(args)

    hook._tfcluster_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class ProgressReporter:
    """Prints ``@tfcluster progress`` lines at most every ``every_secs`` seconds (and on
    ``force=True``), as ``tfcluster launch`` expects (see ``tfcluster.plan.progress``).
    ``session`` (a :class:`TrainingSession`): each report also carries the steps this worker ran
    itself (``local_step``), so the launcher shows the task's own rate, not the global step's."""

    def __init__(self, total: Optional[int] = None, every_secs: float = 1.0, stream=None,
                 session=None):
        self.total = total
        self.every_secs = every_secs
        self.stream = stream
        self.session = session
        self._last = 0.0

    def due(self) -> bool:
        """True when the next call would print (fetch costly metrics only then)."""
        return time.monotonic() - self._last >= self.every_secs

    def __call__(self, step: int, force: bool = False, local_step: Optional[int] = None,
                 **metrics: float) -> bool:
        """Report global ``step`` (and ``local_step``, default the session's own count)."""
        now = time.monotonic()
        if not force and now - self._last < self.every_secs:
            return False
        self._last = now
        from tfcluster.plan.progress import report_progress

        if local_step is None and self.session is not None:
            local_step = self.session.local_step
        report_progress(int(step), self.total, stream=self.stream, local_step=local_step, **metrics)
        return True


def summary_line(ctx: TaskContext, global_step: int, accuracy: float, loss: float,
                 **extra) -> str:
    """The one line the chief prints at the end: ``... global_step=N accuracy=X loss=Y``."""
    parts = [f"global_step={int(global_step)}", f"accuracy={accuracy:.4f}", f"loss={loss:.4f}"]
    parts += [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in extra.items()]
    return f"{ctx.task_id}: done: " + " ".join(parts)
