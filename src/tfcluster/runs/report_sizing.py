"""The report's section on a run sized by throughput (``elastic.scale``): the rate measured over
time with the worker count beside it, and each decision, as run.json's ``workers.sizing`` holds
them (:meth:`tfcluster.core.run_view.RunView.sizing_fields`). HTML text, escaped; no I/O."""
from __future__ import annotations

import html
from typing import Any, Dict, List

MAX_ROWS = 200   # measurements listed (the first and the latest kept)


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def sizing_html(record: Dict[str, Any], t0: float) -> str:
    """The section, or "" for a run that was not sized."""
    w = record.get("workers")
    sizing = w.get("sizing") if isinstance(w, dict) else None
    if not isinstance(sizing, dict):
        return ""
    rates = [r for r in sizing.get("rates") or [] if isinstance(r, list) and len(r) == 3]
    decisions = [d for d in sizing.get("decisions") or [] if isinstance(d, list) and len(d) == 6]
    if len(rates) > MAX_ROWS:
        rates = rates[: MAX_ROWS // 2] + rates[-MAX_ROWS // 2:]
    by_time: Dict[float, List[Any]] = {}
    for d in decisions:
        by_time.setdefault(d[0], []).append(d)
    rows = []
    for at, n, rate in rates:
        said = "; ".join(f"{d[1]}" + (f" {d[2]}" if d[2] else "") + f": {d[5]}" for d in by_time.get(at, []))
        rel = f"+{at - t0:.1f}s" if isinstance(at, (int, float)) else ""
        rows.append(f"<tr><td>{_e(rel)}</td><td>{_e(n)}</td><td>{_e(rate)}</td><td>{_e(said)}</td></tr>")
    most = f", at most {_e(w.get('max'))}" if w.get("max") is not None else ""
    return (f"<h2>Workers sized by throughput</h2><p class=\"note\">elastic.scale: "
            f"{_e(sizing.get('scale'))}{most}: the global steps/s measured after each change of "
            f"the workers, with the workers it was measured with, and what was decided "
            f"(docs/FAULT_TOLERANCE.md, Sizing by throughput).</p>"
            '<table class="sizing"><tr><th>time</th><th>workers</th><th>steps/s</th>'
            '<th>decision</th></tr>' + "".join(rows) + "</table>")
