"""Importing tfcluster does nothing but define things: no signal handler installed, no thread
started (a module that installed SIGINT/SIGTERM/SIGHUP/SIGURG handlers at import, as the Slurm
node agent once did, makes a test that imports it swallow pytest's Ctrl-C). Every module but those that
import TensorFlow at their top, imported afresh."""
from __future__ import annotations

import importlib
import os
import signal
import sys
import threading

import helpers

SRC = os.path.join(helpers.SRC, "tfcluster")

def _modules():
    for root, _, files in os.walk(SRC):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(root, f), os.path.dirname(SRC))[:-3]
            name = rel.replace(os.sep, ".")
            if name.endswith(".__init__"):
                name = name[: -len(".__init__")]
            text = open(os.path.join(root, f), encoding="utf-8").read()
            if "\nimport tensorflow" in text or name.endswith("__main__"):
                continue          # TensorFlow at the top (the in-task runtime's Keras parts)
            yield name


def test_importing_every_module_installs_no_signal_handler_and_starts_no_thread():
    names = list(_modules())
    assert "tfcluster.backends.agent.node" in names and len(names) > 40
    sigs = [s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)]
    before = {s: signal.getsignal(s) for s in sigs}
    threads = set(threading.enumerate())
    # a fresh import of every module: the ones other tests imported are set aside meanwhile
    saved = {k: m for k, m in sys.modules.items() if k == "tfcluster" or k.startswith("tfcluster.")}
    had_tf = "tensorflow" in sys.modules
    for k in saved:
        del sys.modules[k]
    try:
        for name in names:
            importlib.import_module(name)
        changed = sorted(s.name for s in sigs if signal.getsignal(s) != before[s])
        started = sorted(t.name for t in set(threading.enumerate()) - threads)
        tf = "tensorflow" in sys.modules and not had_tf
    finally:
        for k in [k for k in sys.modules if k == "tfcluster" or k.startswith("tfcluster.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        for s, h in before.items():
            if signal.getsignal(s) != h and h is not None:
                signal.signal(s, h)
    assert changed == []
    assert started == []
    assert not tf, "a tfcluster module imports TensorFlow at import time"
