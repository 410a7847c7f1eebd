"""trainer.py with a proposed change to ``TrainingSession.__exit__`` (runtime, not applied there):
at a clean end, run the hooks' ``end()`` (the final checkpoint), release the sync tokens, tell
the ps, and close the ``MonitoredSession`` in a daemon thread instead of waiting for it.

Why: the chief's ``MonitoredSession.close()`` in sync mode first waits
``stop_grace_period_secs`` in ``Coordinator.join`` for the chief queue-runner thread, which is
blocked in ``take_grad`` and never ends by itself, then ``Session.close()`` blocks until the
master has cancelled that pending step on the ps -- about 1 s + 1-2.5 s on this machine, all
spent after the last step. The process ends with ``os._exit`` right after anyway.

Used by ``scripts/benchmark.py --only fastclose`` to measure before/after side by side.
"""
import os
import runpy
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tfcluster.runtime.training as training  # noqa: E402

_original_exit = training.TrainingSession.__exit__


def _fast_exit(self, exc_type, exc, tb):
    if exc_type is not None:
        return _original_exit(self, exc_type, exc, tb)
    if self.sync_optimizer is not None and self.is_chief:
        training._quiet_cancelled_queue_runners()
    if self._release_tokens is not None:
        self._release()
    raw = self.raw_session
    for hook in self.hooks:
        hook.end(raw)
    sess, self._sess = self._sess, None
    closer = threading.Thread(target=sess.close, name="tfcluster-close", daemon=True)
    closer.start()
    closer.join(0.1)
    if self.signal_done_at_end:
        training.signal_done(self.ctx, self.target)
    return False


training.TrainingSession.__exit__ = _fast_exit
sys.argv = [os.path.join(ROOT, "trainer.py")] + sys.argv[1:]
sys.path.insert(0, ROOT)
runpy.run_path(os.path.join(ROOT, "trainer.py"), run_name="__main__")
