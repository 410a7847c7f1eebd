"""``tfcluster`` with one variant of the local backend's task start (an experiment of
``scripts/benchmark.py --only scalefix``; nothing in src/tfcluster is changed):

    python launch_patched.py PATCH launch cluster.yaml ...

PATCH:

* ``none``: tfcluster as it is: ``backends.base.start_child``'s fast start where ``setpriv``
  is (no ``preexec_fn``, so CPython uses ``vfork``; ``setpriv --pdeathsig KILL`` before the
  program);
* ``preexec``: the start before issue 24's fix, which is now the fallback without ``setpriv``
  (``TFCLUSTER_SETPRIV=""``): ``child_setup`` as ``preexec_fn``, so CPython forks the whole
  launcher and runs Python code in the child before ``exec``;
* ``no_preexec``: a plain ``Popen`` (``vfork``, no death signal at all): the floor of the start.
"""
import os
import subprocess
import sys

import tfcluster.backends.base as base
import tfcluster.backends.local as local

PATCH = sys.argv.pop(1)

if PATCH == "preexec":
    os.environ[base.SETPRIV_ENV] = ""
elif PATCH == "no_preexec":
    def start_child(argv, *, death_signal=None, **kw):
        return subprocess.Popen(argv, **kw)

    local.start_child = start_child
elif PATCH != "none":
    sys.exit(f"launch_patched.py: unknown patch {PATCH!r}")

from tfcluster.cli.main import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
