"""The run's rules, one room each: small policies that the run machine
(:class:`tfcluster.core.machine.RunMachine`) consults. The machine keeps the state (its tasks,
:class:`tfcluster.core.states.TaskTrack`; the phase; the counters) and the input log, and
dispatches events; a policy reads that state and decides one thing:

* :mod:`.restarts` -- what becomes of a task that failed: restarted after a backoff, its restart
  claimed from the run's shared budget, the cluster placed again (a lost node, a chosen port
  taken), the worker let go (elastic), or the run failed;
* :mod:`.on_change` -- which worker may leave the run, and what a worker leaving or coming back
  changes: one class per ``elastic.on_change`` mode (:data:`.on_change.MODES`);
* :mod:`.success` -- when the run has succeeded (``success:``), and the grace period after it;
* :mod:`.watchdog` -- no silent hangs: each watchdog one class, looked at every
  :data:`tfcluster.core.states.WATCH_EVERY` seconds while the run runs;
* :mod:`.stop` -- the stop order: chief, workers and evaluators first, ps last, each wave SIGTERM
  then SIGKILL;
* :mod:`.regroup` -- every task stopped to be placed again (a lost node, a chosen port taken,
  an elastic restart), and started again once the driver has placed them;
* :mod:`.sizing` -- ``elastic.scale: throughput``: spare workers added while they raise the
  global steps/s, the last one removed (and the run held) where they stop helping; a run
  watchdog whose requests (``scale_up``, ``scale_down``) are entries in ``RunMachine.ASKS``.

A policy has no I/O, no clock and no TensorFlow: time comes in with the events. It gets the
machine as ``run`` and reads it (``run.s``, the settings; ``run.tasks``; ``run.others``, the tasks
run elsewhere); what it decides it either returns (a watchdog's
:class:`tfcluster.core.rules.WatchdogAction`) or asks of the machine through its verbs --
``restart``, ``claim_restart``, ``fail``, ``leave``, ``start_at``, ``start_all``,
``hold_restarts``, ``stop_waves``, ``enter`` -- which change the state and write the log, or of
another policy through the machine (``run.regrouping.move``, ``run.elastic.may_leave``).

Adding a rule: a new ``elastic.on_change`` mode is a new :class:`.on_change.ElasticMode` subclass in
:data:`.on_change.MODES`; a new watchdog, or any policy that looks at the running run on the
watchdogs' clock (as :mod:`.sizing` is, which reads the run's global step and asks for workers
to be added or removed), is a new :class:`.watchdog.RunWatchdog` (or
:class:`.watchdog.TaskWatchdog`) subclass listed in :data:`.watchdog.RUN_WATCHDOGS` (or
:data:`.watchdog.TASK_WATCHDOGS`), or passed to the machine (``RunMachine(...,
watchdogs=...)``). The machine consults them all through :class:`.watchdog.Watchdogs` and carries
out what they ask by :attr:`tfcluster.core.machine.RunMachine.ASKS`, a table of the kinds of
request (``kill``, ``fail_run``; the sizing policy's ``scale_up``, ``scale_down``); that is the one
place a new kind of request is added.
"""
