"""``tfcluster profile RUN``: a TensorFlow profile of every live task of a run, in one folder.

A run launched with its profiler on (``profiler: true``, ``launch --profiler``) gives every task
a profiler port chosen with the task ports (``TFCLUSTER_PROFILER_PORT``, recorded in run.json);
the runtime starts TensorFlow's profiler server there (:func:`tfcluster.runtime.start_profiler`).
This asks every live task for a trace of the same ``seconds`` at once (TensorFlow's
``tf.profiler.experimental.client.trace`` with all their addresses) and writes what comes back
into the run folder, in the layout TensorBoard's profile plugin reads::

    <run_dir>/profile/<time>/plugins/profile/<time>/<task>.xplane.pb     (worker-1.xplane.pb)

``tfcluster tensorboard RUN --profile`` opens ``<run_dir>/profile`` (one TensorBoard run per
capture). A run in a private network is traced from inside it (this process enters the
network first: :func:`tfcluster.runs.inside.enter_run_network`). The trace is taken by an
isolated child Python (TensorFlow's import and its log lines stay out of this process) into a
private temporary folder; the files are then copied into the run folder relative to its open
descriptor, without following links (tfcluster.safe_files's rules). TensorFlow's client reads no
IPv6 literal: a task on this machine is asked at 127.0.0.1 (its server listens on every address),
one elsewhere through a local TCP relay. A task whose capture came back without data (the first
traces of a process that has just started do) is asked again until it gives one or
:data:`RETRY_FOR` seconds are up, and ``profile`` says which it was. Only the caller's own,
running run can be profiled.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from tfcluster.errors import UserError

PROFILE_DIR = "profile"

#: how long ``profile`` goes on asking the tasks whose trace came back without data (the first
#: captures of a process that has just started do), after its first try
RETRY_FOR = 30.0

# The child: traces the tasks at ``addrs`` for ``ms``, again and again for those whose trace had
# no data, until each has one or ``retry`` seconds after its first try are up; one line per try
# on stdout.
_TRACE = r"""
import os
import sys
import time
import tensorflow as tf
addrs, logdir, ms, retry = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
opts = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                device_tracer_level=1)
tries, until = 0, time.time() + ms / 1000.0 + retry
while addrs:
    tries += 1
    began, error = time.time(), ""
    out = os.path.join(logdir, str(tries))
    try:
        tf.profiler.experimental.client.trace(",".join(addrs), out, ms, num_tracing_attempts=1,
                                              options=opts)
    except Exception as e:  # "No trace event was collected", a server not up yet: again
        error = (str(e).strip().splitlines() or [type(e).__name__])[-1]
    got = {f[:-len(".xplane.pb")].rpartition("_")[2]
           for d, _, files in os.walk(out) for f in files
           if f.endswith(".xplane.pb") and os.path.getsize(os.path.join(d, f)) > 0}
    addrs = [a for a in addrs if a.rpartition(":")[2] not in got]
    print(f"try {tries}: {len(got)} with data" + (f"; {error}" if error else ""), flush=True)
    if addrs and time.time() + ms / 1000.0 + 1.0 > until:
        break
    if addrs and time.time() - began < 0.5:    # an answer at once (refused): not a busy loop
        time.sleep(0.5)
"""


def _say(line: str) -> None:
    from tfcluster.terminal import printable
    print(f"tfcluster: {printable(line)}", file=sys.stderr, flush=True)   # record strings in it


def traceable_tasks(record: Dict, only: Sequence[str] = ()) -> List[Dict]:
    """The tasks of ``record`` to trace: running, with a profiler port; ``only`` (task names)
    picks some of them (a name that is not a task of the run is an error)."""
    rows = [t for t in record.get("tasks") or [] if isinstance(t, dict)]
    names = {t.get("task") for t in rows}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise UserError(f"--tasks: {', '.join(unknown)}: not a task of run {record.get('run_id')} "
                        f"(tasks: {', '.join(sorted(str(n) for n in names))})")
    picked = [t for t in rows if not only or t.get("task") in only]
    return [t for t in picked if t.get("state") == "running" and t.get("profiler_port")]


def task_address(row: Dict) -> str:
    """``host:port`` of a task's profiler server as TensorFlow's client reads it (no brackets:
    it reads no IPv6 literal, so this machine's ``::1`` is asked at 127.0.0.1, where its server
    listens too)."""
    from tfcluster.net.addresses import is_local
    host = (row.get("host") or "localhost").strip("[]")
    if ":" in host and is_local(host):
        host = "127.0.0.1"
    return f"{host}:{int(row['profiler_port'])}"


def socket_owner(tables: Sequence[str], local: tuple, remote: tuple) -> Optional[int]:
    """The uid that owns the TCP socket at ``local`` (ip, port) connected to ``remote`` (ip,
    port), from the text of ``/proc/net/tcp`` and ``/proc/net/tcp6`` (the kernel's socket
    tables: the uid column is the socket's creator); an IPv4 address also matches its
    IPv4-mapped IPv6 form. None when no such socket is listed."""
    want = (_ip4(local[0]), int(local[1]), _ip4(remote[0]), int(remote[1]))
    for text in tables:
        for line in text.splitlines()[1:]:
            parts = line.split()
            if len(parts) < 8:
                continue
            try:
                got = _endpoint(parts[1]) + _endpoint(parts[2])
                uid = int(parts[7])
            except ValueError:
                continue
            if got == want:
                return uid
    return None


def _ip4(ip: str) -> str:
    return ip[7:] if ip.startswith("::ffff:") and "." in ip else ip


def _endpoint(hexed: str) -> tuple:
    """('127.0.0.1', 8080) from the tables' ``0100007F:1F90`` (each 32-bit word of the address
    in the machine's byte order)."""
    import ipaddress
    import socket
    import struct
    addr, port = hexed.split(":")
    words = [int(addr[i:i + 8], 16) for i in range(0, len(addr), 8)]
    raw = b"".join(struct.pack("=I", w) for w in words)
    ip = socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)
    mapped = ipaddress.ip_address(ip)
    if getattr(mapped, "ipv4_mapped", None) is not None:
        ip = str(mapped.ipv4_mapped)
    return ip, int(port, 16)


def peer_uid(conn) -> Optional[int]:
    """Who owns the other end of ``conn``, a TCP connection accepted on this machine's
    loopback (read from the kernel's socket tables of this network namespace)."""
    tables = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                tables.append(f.read())
        except OSError:
            continue
    try:
        peer, here = conn.getpeername()[:2], conn.getsockname()[:2]
    except OSError:
        return None
    return socket_owner(tables, peer, here)


class _Relay:
    """A local TCP relay to ``host:port`` (an IPv6 literal TensorFlow's client cannot dial):
    127.0.0.1:<its port> forwards a connection there, for the trace's length, when the
    connecting socket is this user's own (:func:`peer_uid`, the kernel's record of the socket's
    creator): another local user who connects is closed at once, and never reaches the task as
    this user. (Not a unix socket in a 0700 folder: TensorFlow's profiler client dials
    host:port and names the trace file by the port.)"""

    def __init__(self, host: str, port: int):
        import socket
        import threading
        self.target = (host, port)
        self.refused = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:           # closed: the trace is over
                return
            if peer_uid(conn) != os.geteuid():    # another user's socket (or none found)
                self.refused += 1
                conn.close()
                continue
            try:
                up = socket.create_connection(self.target, timeout=10)
            except OSError:           # the task's server is gone: the client sees it close
                conn.close()
                continue
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:               # either side closed: the other is closed below
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:           # closed by the other direction already
                pass

    def close(self) -> None:
        self.sock.close()


def _open_own_dir(path: str, parent_fd: Optional[int] = None, make: bool = False) -> int:
    """Open (making it when ``make``) a folder of this user without following links."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    if make:
        try:
            os.mkdir(path, 0o700, dir_fd=parent_fd)
        except FileExistsError:   # made before: opened below without following a link, and checked
            pass
    fd = os.open(path, flags, dir_fd=parent_fd)
    if os.fstat(fd).st_uid != os.geteuid():
        os.close(fd)
        raise UserError(f"{path}: not your folder; tfcluster profile writes only into your own runs")
    return fd


def _copy_into(src: str, dir_fd: int, name: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    out = os.open(name, flags, 0o600, dir_fd=dir_fd)
    with open(src, "rb") as f, os.fdopen(out, "wb") as g:
        shutil.copyfileobj(f, g)


def tries_words(tries: int, took: float, missing: Sequence[str], last: str = "") -> str:
    """Which it was: every trace had data (on which try), or the time was up (after how many
    tries, for which tasks, and the last error)."""
    from tfcluster.terminal import printable
    if not tries:
        return printable(f"no trace: the tracing process ended before its first try ({last[:300]})")
    if not missing:
        if tries <= 1:
            return "every trace has data"
        return (f"every trace has data on try {tries} ({took:.0f} s: the first captures of a "
                f"process that has just started come back empty)")
    return printable(f"time is up after {tries} tr{'ies' if tries != 1 else 'y'} in {took:.0f} s: "
                     f"no trace with data from {', '.join(missing)}"
                     + (f" (last: {last[:300]})" if last else ""))


def _rows_to_trace(run_dir: str, record: Dict, run_id: str, seconds: float,
                   tasks: Sequence[str]) -> List[Dict]:
    """The record's rows of the live tasks to trace; UserError (exit 2) when there is nothing
    to trace: no profiler, a run that has ended, no positive ``seconds``, no such task."""
    from tfcluster.runs.result import derive_result
    from tfcluster.terminal import printable
    if not any(isinstance(t, dict) and t.get("profiler_port") for t in record.get("tasks") or ()):
        raise UserError(f"run {run_id} was launched without the profiler: launch it with "
                        f"--profiler (or profiler: true in the file) to trace it")
    result = derive_result(record, run_dir=run_dir)
    if result != "running":
        raise UserError(f"run {run_id} is not running (result: {printable(result)}); only live "
                        f"tasks can be profiled")
    if not seconds or seconds <= 0:
        raise UserError("--seconds: give a positive number of seconds")
    rows = traceable_tasks(record, tasks)
    if not rows:
        raise UserError(f"run {run_id}: no task with a profiler port is running")
    return rows


def _traces(folder: str, by_port: Dict[str, Dict]) -> Dict[str, str]:
    """task -> its trace file (``*_PORT.xplane.pb``, not empty) that the tracer wrote under ``folder``."""
    found: Dict[str, str] = {}
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if f.endswith(".xplane.pb"):
                port = f[:-len(".xplane.pb")].rpartition("_")[2]
                row = by_port.get(port)
                if row is not None and os.path.getsize(os.path.join(dirpath, f)) > 0:
                    found[row["task"]] = os.path.join(dirpath, f)
    return found


def profile_run(run_dir: str, record: Dict, seconds: float = 3.0, tasks: Sequence[str] = (),
                run_arg: Optional[str] = None, timeout: float = 120.0,
                retry_for: float = RETRY_FOR) -> int:
    """Trace the run's live tasks for ``seconds`` into ``<run_dir>/profile/<time>/``; print
    where it went and how to open it. Exit code 0 when every asked task gave a trace, 1 when
    some did not, 2 (UserError) when there is nothing to trace."""
    from tfcluster.runs.inside import enter_run_network
    from tfcluster.terminal import printable

    run_id = printable(record.get("run_id") or os.path.basename(run_dir))
    rows = _rows_to_trace(run_dir, record, run_id, seconds, tasks)
    record = enter_run_network(run_dir, "profile")     # a private run is traced from inside
    run_fd = _open_own_dir(run_dir)
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S")
    by_port: Dict[str, Dict] = {str(int(r["profiler_port"])): r for r in rows}
    tmp = tempfile.mkdtemp(prefix="tfcluster-profile-")
    relays: List[_Relay] = []
    try:
        _say(f"tracing {', '.join(r['task'] for r in rows)} of run {run_id} for {seconds:g} s")
        found: Dict[str, str] = {}          # task -> file
        addrs = []
        for r in rows:
            address = task_address(r)
            host, _, port = address.rpartition(":")
            if ":" in host:             # another host's IPv6 literal: through a relay
                relays.append(_Relay(host, int(port)))
                by_port[str(relays[-1].port)] = r
                address = f"127.0.0.1:{relays[-1].port}"
            addrs.append(f"grpc://{address}")
        began = time.time()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        limit = seconds + retry_for + timeout
        try:
            proc = subprocess.run([sys.executable, "-I", "-c", _TRACE, ",".join(addrs), tmp,
                                   str(int(seconds * 1000)), str(retry_for)],
                                  env=env, capture_output=True, text=True, timeout=limit)
            out, err = proc.stdout or "", proc.stderr or ""
        except subprocess.TimeoutExpired as e:
            # the tracer did not end in time (a loaded machine: TensorFlow's import alone can take
            # a minute): it is killed, and the traces it wrote still count
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = f"the tracer did not end within {limit:g}s"
        tries = [ln for ln in out.splitlines() if ln.startswith("try ")]
        tail = (tries[-1].partition("; ")[2] if tries else "") or \
            (err.strip().splitlines()[-1:] or ["no output"])[0]
        found.update(_traces(tmp, by_port))
        _say(tries_words(len(tries), time.time() - began, [r["task"] for r in rows if r["task"] not in found],
                         tail))
        if not found:
            return 1
        try:
            pfd = _open_own_dir(PROFILE_DIR, run_fd, make=True)
            try:
                cfd = _open_own_dir(stamp, pfd, make=True)
            finally:
                os.close(pfd)
            fd = cfd
            for part in ("plugins", "profile", stamp):
                nfd = _open_own_dir(part, fd, make=True)
                os.close(fd)
                fd = nfd
            try:
                for task, path in sorted(found.items()):
                    _copy_into(path, fd, f"{task.replace(':', '-')}.xplane.pb")
            finally:
                os.close(fd)
        except OSError as e:
            raise UserError(f"{run_dir}/{PROFILE_DIR}: cannot write the profile ({e.strerror or e})")
    finally:
        for relay in relays:
            relay.close()
        os.close(run_fd)
        shutil.rmtree(tmp, ignore_errors=True)
    out = os.path.join(run_dir, PROFILE_DIR, stamp)
    missing = [r["task"] for r in rows if r["task"] not in found]
    print(printable(f"profile of {', '.join(sorted(found))} ({seconds:g} s): {out}"))
    if missing:
        _say(f"no trace from {', '.join(missing)} (its profiler server did not answer; a program "
             f"not built on tfcluster.runtime starts it with one line: see docs/RUNTIME.md)")
    print(f"open it: tfcluster tensorboard {printable(run_arg or run_id)} --profile"
          f"   (TensorBoard's profile tab: pip install tensorboard-plugin-profile)")
    return 1 if missing else 0
