"""tfcluster report: one self-contained HTML page per run, checked as text and in a real
headless browser (Chromium; skipped with the reason where it is not installed)."""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

from tfcluster.cli import main
from tfcluster.events import EventLog
from tfcluster.report import build_model, write_report
from tfcluster.runrecord import write_json_private

T0 = 1_764_500_000.0
RESTART_RGB = (0xD9, 0x48, 0x0F)   # .restart-marker fill in report.CSS


def make_run(folder, events=True, result="failed", file=None, run_id="20261130-120000", t0=T0):
    """A run folder built from the documented formats: ps:0, worker:0 (chief), worker:1; worker:1
    is killed (SIGKILL) at +20 s, restarted at +22 s, stalls from +40 s; worker:0 fails at +60 s."""
    T0 = t0
    d = folder / run_id
    d.mkdir(parents=True)
    tasks = ["ps:0", "worker:0", "worker:1"]
    record = {
        "run_id": d.name, "file": str(file or folder / "cluster.yaml"), "run_dir": str(d),
        "launcher_pid": 999999, "launcher_started": T0 - 0.2, "backend": "local",
        "success_rule": "chief", "started": T0, "ended": T0 + 62, "result": result,
        "exit_code": 1, "root_cause": "worker:0 exit 3 <boom>", "total_restarts": 1,
        "tasks": [
            {"task": "ps:0", "endpoint": "localhost:2222", "pid": 100, "state": "stopped",
             "exit": "SIGTERM", "restarts": 0, "started": T0 + 0.1, "ended": T0 + 61.5},
            {"task": "worker:0", "endpoint": "localhost:2223", "pid": 101, "state": "failed",
             "exit": "exit 3", "restarts": 0, "started": T0 + 0.1, "ended": T0 + 60,
             "progress": {"step": 580, "total": 1000, "loss": 0.2, "at": T0 + 59}},
            {"task": "worker:1", "endpoint": "localhost:2224", "pid": 202, "state": "stopped",
             "exit": "SIGTERM", "restarts": 1, "started": T0 + 22, "ended": T0 + 61,
             "progress": {"step": 300, "total": 1000, "at": T0 + 40}},
        ]}
    write_json_private(str(d / "run.json"), record)
    if not events:
        return d
    log = EventLog(str(d))
    e = log.emit
    e("run_started", time=T0, run_id=d.name, file=record["file"], backend="local", tasks=tasks,
      chief="worker:0")
    for i, t in enumerate(tasks):
        e("task_started", t, time=T0 + 0.1, pid=100 + i, attempt=0, host="localhost")
    for s in range(2, 60):                          # worker:0: 10 steps/s
        e("progress", "worker:0", time=T0 + s, step=10 * s, total=1000, metrics={"loss": 1.0 / s})
    for s in range(2, 20):                          # worker:1 before the kill: 5 steps/s
        e("progress", "worker:1", time=T0 + s, step=5 * s, total=1000, metrics={"loss": 1.0 / s})
    e("task_exited", "worker:1", time=T0 + 20, exit_code=None, signal="SIGKILL", exit="SIGKILL",
      state="failed")
    e("task_restarting", "worker:1", time=T0 + 20.01, reason="exit-code policy: SIGKILL is retried <&>",
      attempt=1, delay=2.0)
    e("task_started", "worker:1", time=T0 + 22, pid=202, attempt=1, host="localhost")
    for s in range(24, 41):
        e("progress", "worker:1", time=T0 + s, step=5 * s + 100, total=1000)
    e("watchdog", "worker:1", time=T0 + 58, reason="no progress for 18s", action="kill")
    e("task_exited", "worker:0", time=T0 + 60, exit_code=3, signal=None, exit="exit 3", state="failed")
    e("decision", time=T0 + 60.01, result="failed", rule="chief", exit_code=1,
      reason="worker:0 exit 3 <boom>")
    for t in ("worker:1", "ps:0"):
        e("stop_sent", t, time=T0 + 60.1, signal="SIGTERM")
    e("task_exited", "worker:1", time=T0 + 61, exit_code=None, signal="SIGTERM", exit="SIGTERM",
      state="stopped")
    e("task_exited", "ps:0", time=T0 + 61.5, exit_code=None, signal="SIGTERM", exit="SIGTERM",
      state="stopped")
    e("run_ended", time=T0 + 62, result="failed", exit_code=1)
    log.close()
    return d


# ------------------------------------------------------------------ the page as text
def test_the_model_sees_attempts_restarts_stalls_and_rates(tmp_path):
    m = build_model(str(make_run(tmp_path)))
    tasks = {v.name: v for v in m["tasks"]}
    assert list(tasks) == ["ps:0", "worker:0", "worker:1"] and m["chief"] == "worker:0"
    w1 = tasks["worker:1"]
    assert [(a.attempt, a.exit, a.state) for a in w1.attempts] == [(0, "SIGKILL", "failed"),
                                                                   (1, "SIGTERM", "stopped")]
    assert w1.restart_count == 1 and w1.restarts[0]["delay"] == 2.0
    assert w1.stalls == [(T0 + 40, T0 + 61)]        # last report +40 s, stopped at +61 s
    assert tasks["worker:0"].stalls == []
    assert tasks["worker:0"].rate == pytest.approx(10.0)
    assert tasks["worker:1"].rate < 0.8 * m["fastest"]


def test_report_draws_the_restart_and_is_self_contained(tmp_path, capsys):
    d = make_run(tmp_path)
    assert main(["report", str(d)]) == 0
    path = capsys.readouterr().out.strip()
    assert path == str(d / "report.html") and os.stat(path).st_mode & 0o077 == 0
    page = open(path, encoding="utf-8").read()
    assert re.search(r'<path class="restart-marker" id="restart-worker-1-1"', page)
    assert "restart 1" in page and "SIGKILL" in page and "exit 3" in page
    assert 'class="stall"' in page and 'class="watchdog-marker"' in page
    assert page.count('class="stop-marker"') == 2 and 'class="decision"' in page
    assert 'id="steps-worker-0"' in page and 'id="steps-worker-1"' in page
    assert "straggler" in page and "worker:0 (chief)" in page
    assert "exit-code policy: SIGKILL is retried &lt;&amp;&gt;" in page   # escaped
    assert "<boom>" not in page
    assert "progress reports are drawn in the chart" in page
    assert_self_contained(page)


def assert_self_contained(page):
    """Nothing that a browser would fetch: no script, no linked style, no remote URL."""
    low = page.lower()
    assert "<script" not in low and "<link" not in low and "@import" not in low
    assert not re.search(r'(src|href)\s*=', low)
    assert not re.search(r'url\(', low)
    assert "http://" not in low and "https://" not in low


def test_a_run_without_events_degrades_to_its_record(tmp_path, capsys):
    d = make_run(tmp_path, events=False)
    assert main(["report", str(d)]) == 0
    page = (d / "report.html").read_text()
    assert "no events.jsonl" in page and 'class="restart-marker"' not in page
    assert "1 restart before (time not recorded)" in page
    m = build_model(str(d))
    w1 = {v.name: v for v in m["tasks"]}["worker:1"]
    assert w1.restart_count == 1 and [a.exit for a in w1.attempts] == ["SIGTERM"]
    assert w1.last_step == 300
    assert_self_contained(page)


def test_a_broken_event_log_is_one_line_exit_2(tmp_path, capsys):
    d = make_run(tmp_path)
    with open(d / "events.jsonl", "r+") as f:
        lines = f.readlines()
        lines[3] = "{oops\n"
        f.seek(0)
        f.writelines(lines)
    rc = main(["report", str(d)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "events.jsonl: line 4: not valid JSON" in err
    assert not (d / "report.html").exists()


def test_report_of_a_lost_run_and_output_option(tmp_path, capsys):
    d = make_run(tmp_path, result="running")          # launcher pid 999999 does not exist
    out = tmp_path / "elsewhere.html"
    assert main(["report", str(d), "-o", str(out)]) == 0
    page = out.read_text()
    assert 'id="result">lost<' in page and "died without closing the record" in page


def test_report_finds_the_latest_run_of_the_file(tmp_path, capsys, monkeypatch):
    (tmp_path / "cluster.yaml").write_text("cluster: {worker: [localhost:2223]}\nlogdir: runs\n")
    d = make_run(tmp_path / "runs", file=tmp_path / "cluster.yaml")
    make_run(tmp_path / "runs", run_id="newer-of-another-file", t0=T0 + 100)
    monkeypatch.chdir(tmp_path)
    assert main(["report"]) == 0
    assert capsys.readouterr().out.strip() == str(d / "report.html")


# ------------------------------------------------------------------ in a real browser
def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def decode_png(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def render(page_path, shot_path, size="1100,1000"):
    """Open a page in headless Chromium: its console messages (any at all) and a screenshot."""
    browser = _chromium()
    r = subprocess.run(
        [browser, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0",
         "--no-first-run", "--disable-extensions", "--hide-scrollbars",
         "--host-resolver-rules=MAP * ~NOTFOUND",      # offline: nothing from the network
         f"--user-data-dir={os.path.dirname(shot_path)}/profile",
         f"--screenshot={shot_path}", f"--window-size={size}", f"file://{page_path}"],
        capture_output=True, text=True, timeout=120)
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert os.path.exists(shot_path), f"no screenshot (rc {r.returncode}): {r.stderr[-2000:]}"
    return console


needs_browser = pytest.mark.skipif(_chromium() is None, reason="no chromium on PATH (install it "
                                   "with .ci/system-deps: apt-get install chromium)")


@needs_browser
def test_the_console_check_catches_errors(tmp_path):
    """The check below can fail: a page with a script error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('boom');"
                   "no_such_function();</script></body></html>")
    console = render(str(bad), str(tmp_path / "bad.png"), "300,200")
    assert any("boom" in line for line in console)
    assert any("Uncaught ReferenceError" in line for line in console)


@needs_browser
def test_the_report_renders_in_chromium_with_the_restart_drawn(tmp_path):
    d = make_run(tmp_path)
    page = write_report(str(d))
    shot = tmp_path / "shot.png"
    console = render(page, str(shot))
    assert console == [], console
    width, height, rows = decode_png(shot.read_bytes())
    assert (width, height) == (1100, 1000)
    colors = {}
    for row in rows[::2]:
        for px in row[::2]:
            colors[px] = colors.get(px, 0) + 1
    total = sum(colors.values())
    white = colors.get((255, 255, 255), 0)
    assert len(colors) > 50, "the screenshot has almost no colours: blank page?"
    assert white < 0.97 * total, "the screenshot is (nearly) all white"
    # the restart marker is drawn, in its colour, on screen
    near = sum(n for px, n in colors.items()
               if all(abs(px[i] - RESTART_RGB[i]) <= 6 for i in range(3)))
    assert near >= 10, "no restart marker pixels in the screenshot"
