"""``tfcluster attach RUN``: watch a running run from another terminal (a ``--detach`` run, or
one launched in another window), the way ``kubectl get -w`` does.

It reads what the launcher writes -- ``run.json``, rewritten about every second, and
``launcher.log``, its own lines -- and shows them: on a terminal a live table (each task's
state, uptime, step, last progress and last output, the global step) under the launcher's lines;
elsewhere the launcher's lines and the table every ``every`` seconds. It never signals
anything: Ctrl-C detaches and the run goes on; ``tfcluster stop RUN`` stops it. It ends when the
run ends, with the run's final table and ``status``'s exit code.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Dict, Optional

from tfcluster.errors import UserError
from tfcluster.safe_files import LineTail

POLL = 0.5            # seconds between looks at run.json and launcher.log
PLAIN_EVERY = 10.0    # seconds between tables when the output is not a terminal


class LineFollower(LineTail):
    """New whole lines of a file of the caller's (:class:`tfcluster.safe_files.LineTail`); a
    link, another user's file or something other than a plain file gives nothing."""

    def __init__(self, path: str):
        super().__init__(path, own=True, what="the launcher's log is a plain file of yours")

    def read(self, final: bool = False) -> list:
        try:
            return list(super().read(final))
        except UserError:
            return []


def table_text(record: Dict, now: float) -> str:
    """The run's task table as ``status`` prints it for a running run, with the global step."""
    from tfcluster.runs.table import LIVE_HEADER, format_table, task_rows
    text = format_table(LIVE_HEADER, task_rows(record, now, live=True))
    best = None
    for t in record.get("tasks") or ():
        p = t.get("progress") if isinstance(t, dict) else None
        step = p.get("step") if isinstance(p, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and (best is None or step > best[0]):
            total = p.get("total")
            best = (step, total if isinstance(total, int) and not isinstance(total, bool) else None)
    if best is not None:
        text += f"\nglobal step {best[0]}" + (f"/{best[1]}" if best[1] else "")
    return text


def _closed(record: Dict) -> bool:
    """Whether the run is over: the launcher wrote its end (a decided run still stops its
    tasks, and its record says the result before its end and exit code), or it is gone."""
    from tfcluster.runs.liveness import launcher_alive
    return record.get("ended") is not None or launcher_alive(record) is not True


def attach(run_dir: str, out=None, clock: Callable[[], float] = time.time,
           sleep: Callable[[float], None] = time.sleep, live: Optional[bool] = None,
           every: float = PLAIN_EVERY) -> int:
    """Show the run until it ends (exit code as ``status``), or until Ctrl-C (0, detached)."""
    from tfcluster.runs.find import running_record
    from tfcluster.runs.result import STATUS_EXIT, derive_result
    from tfcluster.runs.run_file import read_run
    from tfcluster.runs.table import stop_hint
    from tfcluster.terminal import printable
    out = out or sys.stdout
    record, run_id = running_record(run_dir, "attach", "tfcluster status shows how it ended")
    tty = bool(getattr(out, "isatty", lambda: False)()) if live is None else live
    follower = LineFollower(os.path.join(run_dir, "launcher.log"))
    follower.skip_to_end()          # what happened before: tfcluster logs RUN launcher
    say = f"attached to run {run_id} ({run_dir}); Ctrl-C detaches, the run goes on; " \
          + stop_hint(run_dir, None).replace("stop it: ", "stop it with: ")
    print(f"tfcluster: {printable(say)}", file=out, flush=True)
    view = None
    if tty:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text
        console = Console(file=out, highlight=False, soft_wrap=True)
        view = Live(Text(table_text(record, clock())), console=console, refresh_per_second=2,
                    transient=True)
        view.start()
    last_table = clock()
    try:
        while True:
            try:
                record = read_run(run_dir)
            except UserError:
                pass                 # mid-rewrite or briefly unreadable: the last one holds
            result = derive_result(record)
            for line in follower.read():
                if view is not None:
                    view.console.print(printable(line), markup=False, highlight=False)
                else:
                    print(printable(line), file=out, flush=True)
            now = clock()
            if result != "running" and _closed(record):
                break
            if view is not None:
                from rich.text import Text
                view.update(Text(table_text(record, now)))
            elif now - last_table >= every:
                last_table = now
                print(printable(table_text(record, now)), file=out, flush=True)
            sleep(POLL)
    except KeyboardInterrupt:
        if view is not None:
            view.stop()
        print(f"tfcluster: detached from run {run_id}; it goes on ("
              f"{printable(stop_hint(run_dir, None))})", file=out, flush=True)
        return 0
    if view is not None:
        view.stop()
    from tfcluster.runs.table import HEADER, format_table, task_rows
    print(f"tfcluster: run {printable(run_id)} ended: {result}"
          + (f" (exit code {record.get('exit_code')})" if record.get("exit_code") is not None else ""),
          file=out, flush=True)
    print(printable(format_table(HEADER, task_rows(record, record.get("ended") or clock()))),
          file=out, flush=True)
    for line in record.get("stalled") if isinstance(record.get("stalled"), list) else ():
        if isinstance(line, str):
            print(f"warning: {printable(line)}", file=out, flush=True)
    return STATUS_EXIT.get(result, 1)
