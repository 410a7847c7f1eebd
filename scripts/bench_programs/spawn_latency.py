"""How fast can one Python process start children (docs/BENCHMARKS.md, "Where every goal
stands"): ``subprocess.Popen`` as the local backend uses it (``setpriv --pdeathsig KILL --``,
a new session, stdout on a pipe, a 10 KB environment variable like a big TF_CONFIG) against
``os.posix_spawn``, from one thread and from four. Prints wall and CPU milliseconds a start.

    python scripts/bench_programs/spawn_latency.py [N]

CPython 3.11 starts children with ``vfork`` and holds the GIL until the child has exec'd, so
four threads are no faster than one: the starts are serial at the kernel's exec latency.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
SETPRIV = shutil.which("setpriv")
TRUE = shutil.which("true") or "/bin/true"
ARGV = [SETPRIV, "--pdeathsig", "KILL", "--", TRUE] if SETPRIV else [TRUE]
ENV = dict(os.environ, TF_CONFIG="x" * 10000)


def popen_one():
    p = subprocess.Popen(ARGV, env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    return p, p.stdout


def spawn_one():
    r, w = os.pipe()
    pid = os.posix_spawn(ARGV[0], ARGV, ENV, setsid=True,
                         file_actions=[(os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_DUP2, w, 2)])
    os.close(w)
    return pid, r


def run(fn, threads: int):
    got, lock = [], threading.Lock()

    def work(k):
        for _ in range(k):
            x = fn()
            with lock:
                got.append(x)
    t, c = time.perf_counter(), time.process_time()
    ts = [threading.Thread(target=work, args=(N // threads,)) for _ in range(threads)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    for child, out in got:
        child.wait() if hasattr(child, "wait") else os.waitpid(child, 0)
        out.close() if hasattr(out, "close") else os.close(out)
    return wall / len(got) * 1000, cpu / len(got) * 1000


if __name__ == "__main__":
    print(f"{N} starts of {' '.join(ARGV)}; ms a start (wall, this process's CPU)")
    for _rep in range(2):
        for fn in (popen_one, spawn_one):
            for threads in (1, 4):
                wall, cpu = run(fn, threads)
                print(f"  {fn.__name__:10s} {threads} thread(s): {wall:.2f} ms wall, {cpu:.2f} ms CPU")
