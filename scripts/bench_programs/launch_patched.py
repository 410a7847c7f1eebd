"""``tfcluster`` with one proposed change to the local backend's task start applied by
monkeypatching (an experiment of ``scripts/benchmark.py --only scale``; nothing in
src/tfcluster is changed):

    python launch_patched.py PATCH launch cluster.yaml ...

PATCH:

* ``none``: tfcluster as it is (the same entry point, for a fair pair);
* ``cached_prctl``: ``child_setup`` (run between fork and exec of every task) without
  ``ctypes.CDLL(None)`` and ``signal.signal`` in the child: ``prctl`` looked up once in the
  launcher; the child only calls it and checks its parent. (Signal dispositions need no reset:
  exec resets handled signals to their defaults; only ignored ones survive, and the launcher
  ignores none of SIGINT, SIGTERM, SIGHUP; SIGPIPE is restored by Popen's ``restore_signals``.)
* ``no_preexec``: no ``preexec_fn`` at all, so CPython forks with ``vfork`` (no copy of the
  launcher's page tables, no Python code in the child); the parent-death signal is then
  missing and only the reaper stops tasks of a launcher that died.
* ``setpriv``: no ``preexec_fn`` (``vfork``), and the task's argv behind
  ``setpriv --pdeathsig KILL --`` (util-linux): the death signal is set by that small C program,
  which then execs the task (same pid; the signal survives ``exec``).
"""
import ctypes
import os
import signal
import subprocess
import sys

import tfcluster.backends.base as base
import tfcluster.backends.local as local

PATCH = sys.argv.pop(1)

if PATCH == "cached_prctl":
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
    _parent = os.getpid()

    def child_setup(death_signal=signal.SIGKILL):
        _prctl(base.PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
        if os.getppid() != _parent:   # the launcher died between fork and prctl
            os._exit(137)

    local.child_setup = child_setup
elif PATCH == "no_preexec":
    _Popen = subprocess.Popen

    class Popen(_Popen):
        def __init__(self, *a, **kw):
            if kw.get("preexec_fn") is local.child_setup:
                kw["preexec_fn"] = None
            super().__init__(*a, **kw)

    local.subprocess = type(sys)("subprocess_patched")
    local.subprocess.__dict__.update(subprocess.__dict__)
    local.subprocess.Popen = Popen
elif PATCH == "setpriv":
    _Popen = subprocess.Popen

    class Popen(_Popen):
        def __init__(self, args, *a, **kw):
            if kw.get("preexec_fn") is local.child_setup:
                kw["preexec_fn"] = None
                args = ["setpriv", "--pdeathsig", "KILL", "--", *args]
            super().__init__(args, *a, **kw)

    local.subprocess = type(sys)("subprocess_patched")
    local.subprocess.__dict__.update(subprocess.__dict__)
    local.subprocess.Popen = Popen
elif PATCH != "none":
    sys.exit(f"launch_patched.py: unknown patch {PATCH!r}")

from tfcluster.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
