"""tfcluster report: one self-contained HTML page per run, checked as text and in a real
headless browser (Chromium; skipped with the reason where it is not installed)."""
from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import select
import shutil
import struct
import subprocess
import time
import zlib

import pytest

from tfcluster.cli.main import main
from tfcluster.runs import report
from tfcluster.runs.eventlog import EventLog
from tfcluster.runs.report import build_model, render_html, write_report
from tfcluster.safe_files import write_json

T0 = 1_764_500_000.0
from helpers.runs import make_run, quick_start_run  # noqa: E402 (the documented run folders)

RESTART_RGB = (0x56, 0xB4, 0xE9)   # .restart-marker fill in report.CSS (Okabe-Ito sky blue)


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
    assert "worker:0 (chief)" in page
    # worker:1 restarted: it lags because it crashed, so it is never called a straggler
    assert re.search(r'<tr class="exempt" id="rate-worker-1">.*restarted 1x, not compared', page)
    assert '<tr class="straggler"' not in page
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


def test_a_task_hanging_now_shows_its_stall(tmp_path):
    d = make_run(tmp_path, result="running")
    lines = (d / "events.jsonl").read_text().splitlines()
    keep = [x for x in lines if '"worker:0"' in x and '"progress"' in x or '"task_started"' in x]
    (d / "events.jsonl").write_text("\n".join(keep) + "\n")   # no exits: every task runs
    os.utime(d / "run.json", (T0 + 120, T0 + 120))
    tasks = {v.name: v for v in build_model(str(d))["tasks"]}
    w0 = tasks["worker:0"]
    assert [a.state for a in w0.attempts] == ["lost"]
    assert w0.stalls == [(T0 + 59, T0 + 120)]          # last report at +59 s, seen until +120 s


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


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
    it reads NUL-terminated JSON commands on fd 3 and writes answers and events on fd 4)."""

    def __init__(self, profile, timeout=60.0):
        self.timeout = timeout
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()

        def child():  # the pipe ends become fds 3 and 4 of chromium
            a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(res_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
             "--disable-extensions", "--hide-scrollbars", "--remote-debugging-pipe",
             "--host-resolver-rules=MAP * ~NOTFOUND",        # offline: nothing from the network
             f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child, pass_fds=(3, 4))
        os.close(cmd_r)
        os.close(res_w)
        self._buf = b""
        self._id = 0
        self.events = []
        self.session = None

    def _message(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            if select.select([self._res_r], [], [], left)[0]:
                chunk = os.read(self._res_r, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed its DevTools pipe")
                self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method, params=None, browser=False):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + self.timeout
        while True:
            m = self._message(deadline)
            if m.get("id") == self._id:
                assert "error" not in m, f"{method}: {m['error']}"
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method):
        deadline = time.time() + self.timeout
        while not any(m.get("method") == method for m in self.events):
            self.events.append(self._message(deadline))

    def close(self):
        try:
            self.send("Browser.close", browser=True)
        except (OSError, EOFError, TimeoutError, AssertionError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
        os.close(self._cmd_w)
        os.close(self._res_r)


def render(page_path, profile, width=1100, height=1000, selector=".restart-marker", probe=None):
    """Open a page: (what it logged — console calls, uncaught exceptions, error and warning log
    entries such as failed loads —, the boxes of the elements matching selector, a PNG). With
    ``probe`` (a JavaScript expression), a 4th item: its value, JSON-decoded."""
    c = Chromium(profile)
    try:
        target = c.send("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
        c.session = c.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                           browser=True)["sessionId"]
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            c.send(method)
        c.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                      "deviceScaleFactor": 1, "mobile": False})
        c.send("Page.navigate", {"url": f"file://{page_path}"})
        c.wait_for("Page.loadEventFired")
        boxes = c.send("Runtime.evaluate", {"returnByValue": True, "expression":
                       f"JSON.stringify([...document.querySelectorAll({json.dumps(selector)})]"
                       ".map(e => {const r = e.getBoundingClientRect(); "
                       "return [r.x, r.y, r.width, r.height]}))"})["result"]["value"]
        probed = None
        if probe is not None:
            probed = json.loads(c.send("Runtime.evaluate", {"returnByValue": True, "expression":
                                f"JSON.stringify({probe})"})["result"]["value"])
        png = base64.b64decode(c.send("Page.captureScreenshot", {"format": "png"})["data"])
    finally:
        c.close()
    logged = []
    for m in c.events:
        p = m.get("params", {})
        if m.get("method") == "Runtime.consoleAPICalled":
            logged.append(f"console.{p['type']}: " + " ".join(str(a.get("value")) for a in p["args"]))
        elif m.get("method") == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            logged.append(f"exception: {d.get('text')} {d.get('exception', {}).get('description', '')}")
        elif m.get("method") == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            logged.append(f"log {p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
    if probe is not None:
        return logged, json.loads(boxes), png, probed
    return logged, json.loads(boxes), png


needs_browser = pytest.mark.skipif(_chromium() is None, reason="no chromium on PATH (install it "
                                   "with .ci/system-deps: apt-get install chromium)")


@needs_browser
def test_the_browser_check_catches_errors(tmp_path):
    """The check below can fail: script errors and loads from the network are caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><img src='https://cdn.example.com/a.png'>"
                   "<script>console.error('boom'); no_such_function();</script></body></html>")
    logged, boxes, png = render(str(bad), str(tmp_path / "profile"), 300, 200)
    assert any("console.error: boom" in x for x in logged), logged
    assert any("exception" in x and "no_such_function" in x for x in logged), logged
    assert any("log error" in x and "cdn.example.com" in x for x in logged), logged
    assert boxes == [] and png[:8] == b"\x89PNG\r\n\x1a\n"


@needs_browser
def test_the_report_renders_in_chromium_with_the_restart_drawn(tmp_path):
    d = make_run(tmp_path)
    page = write_report(str(d))
    logged, boxes, png = render(page, str(tmp_path / "profile"))
    assert logged == [], logged
    width, height, rows = decode_png(png)
    assert (width, height) == (1100, 1000)
    colors = {}
    for row in rows[::2]:
        for px in row[::2]:
            colors[px] = colors.get(px, 0) + 1
    total = sum(colors.values())
    assert len(colors) > 50, "the screenshot has almost no colours: blank page?"
    assert colors.get((255, 255, 255), 0) < 0.97 * total, "the screenshot is (nearly) all white"
    # the restart marker is laid out on screen, and its centre has the marker's colour
    [(x, y, w, h)] = boxes
    assert w >= 8 and h >= 8 and 0 <= x < width and 0 <= y < height, boxes
    centre = rows[int(y + h / 2)][int(x + w / 2)]
    assert all(abs(centre[i] - RESTART_RGB[i]) <= 8 for i in range(3)), centre


# ------------------------------------------------------------------ stragglers
def test_a_slow_task_that_never_restarted_is_a_straggler(tmp_path):
    d = make_run(tmp_path)
    log = EventLog(str(d))
    log.emit("task_started", "worker:2", time=T0 + 0.1, pid=300, attempt=0, host="localhost")
    for s in range(2, 60):                          # 3 steps/s, no restart: slow, not crashing
        log.emit("progress", "worker:2", time=T0 + s, step=3 * s, total=1000, local_step=3 * s)
    log.close()
    m = build_model(str(d))
    tasks = {v.name: v for v in m["tasks"]}
    assert tasks["worker:2"].straggler_exempt == "" and tasks["worker:1"].straggler_exempt == "restarted 1x"
    page = render_html(m)
    assert re.search(r'<tr class="straggler" id="rate-worker-2">.*30% &mdash; straggler', page)
    assert "straggler" not in re.search(r'id="rate-worker-1">(.*?)</tr>', page).group(1)


# ------------------------------------------------------------------ hostile records
MARK = "PWNED"
PAYLOADS = [
    f'"><script>console.log("{MARK}-s")</script>',
    f"'><img src=x onerror=console.log('{MARK}-i')>",
    f'</title><script>console.log("{MARK}-t")</script>',
    f'" onmouseover="console.log(\'{MARK}-a\')" x="',
    f'<svg onload=console.log("{MARK}-v")></svg>]]><iframe src="javascript:console.log(1)">',
    f'</style><script>console.log("{MARK}-c")</script>\u202e\x1b[31m',
]


def hostile(i):
    return PAYLOADS[i % len(PAYLOADS)] + f"#{i}"


def make_hostile_run(folder):
    """A run whose every string in run.json and events.jsonl (task names and event names
    included) is markup that would run a script if written unescaped; the events' numbers
    (attempt, pid, exit code, step, delay) are such strings too."""
    d = folder / "hostile"
    d.mkdir(parents=True)
    n = iter(range(1000))
    h = lambda: hostile(next(n))                                    # noqa: E731
    tasks = [h(), h()]
    record = {"run_id": h(), "file": h(), "run_dir": str(d), "launcher_pid": 999999,
              "launcher_started": T0, "launcher_host": None, "backend": h(), "success_rule": h(),
              "chief": h(), "started": T0, "ended": T0 + 30, "result": "failed", "exit_code": 1,
              "root_cause": h(), "total_restarts": 1,
              "tasks": [{"task": t, "endpoint": h(), "host": h(), "pid": 10, "state": h(),
                         "exit": h(), "restarts": 1, "started": T0, "ended": T0 + 30,
                         "note": h(), "argv": [h()], "env": {h(): h()},
                         "progress": {"step": 5, "total": 10, "at": T0 + 5, h(): h()}}
                        for t in tasks]}
    write_json(str(d / "run.json"), record)
    lines = [
        {"event": "run_started", "task": None, "run_id": h(), "file": h(), "backend": h(),
         "tasks": tasks, "chief": tasks[0]},
        {"event": "task_started", "task": tasks[0], "pid": h(), "attempt": h(), "host": h()},
        {"event": "progress", "task": tasks[0], "step": 1, "total": h(), "metrics": {h(): h()}},
        {"event": "progress", "task": tasks[0], "step": h(), "total": 10, "metrics": h()},
        {"event": "progress", "task": tasks[0], "step": 4, "total": 10, "metrics": {"loss": h()}},
        {"event": "watchdog", "task": tasks[0], "reason": h(), "action": h()},
        {"event": "task_exited", "task": tasks[0], "exit_code": h(), "signal": h(), "exit": h(),
         "state": h()},
        {"event": "task_restarting", "task": tasks[0], "reason": h(), "attempt": h(), "delay": h()},
        {"event": "task_started", "task": tasks[0], "pid": 11, "attempt": h(), "host": h()},
        {"event": "stop_sent", "task": tasks[1], "signal": h()},
        {"event": "task_exited", "task": tasks[1], "exit_code": None, "signal": None, "exit": None,
         "state": "failed"},
        {"event": h(), "task": tasks[1], h(): h()},
        {"event": "decision", "task": None, "result": h(), "rule": h(), "exit_code": h(),
         "reason": h()},
        {"event": "run_ended", "task": None, "result": h(), "exit_code": h()},
    ]
    with open(d / "events.jsonl", "w") as f:
        for i, ev in enumerate(lines):
            f.write(json.dumps({"time": T0 + i, **ev}) + "\n")
    return d


INJECTED = ("[document.querySelectorAll('script, img, iframe, object, embed, "
            "[onerror], [onload], [onmouseover]').length, document.title.startsWith('tfcluster run '),"
            " document.querySelectorAll('#timeline, #steps, table.events').length]")


def test_hostile_values_are_escaped_in_the_page(tmp_path):
    d = make_hostile_run(tmp_path)
    page = open(write_report(str(d)), encoding="utf-8").read()
    low = page.lower()
    assert "<script" not in low and "<img" not in low and "<iframe" not in low
    tags = re.findall(r"<[a-zA-Z][^<>]*>", page)     # text has no raw < or >: these are real tags
    assert len(tags) > 100
    assert not [t for t in tags if re.search(r"\son\w+\s*=|\ssrc\s*=|javascript:", t, re.I)]
    assert "\x1b" not in page
    assert f"&lt;script&gt;console.log(&quot;{MARK}-s&quot;)" in page       # shown, as text
    assert re.search(r'id="restart-[A-Za-z0-9-]+-1"', page)                   # ids are slugs
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert csp and "script-src 'none'" in csp.group(1) and "default-src 'none'" in csp.group(1)
    assert not [t for t in tags if re.search(r"\shref\s*=|<link|url\(", t, re.I)]


@needs_browser
def test_hostile_values_run_no_script_in_chromium(tmp_path):
    d = make_hostile_run(tmp_path)
    page = write_report(str(d))
    logged, _, png, (injected, title_ok, charts) = render(page, str(tmp_path / "p1"), probe=INJECTED)
    assert not any(MARK in x for x in logged) and logged == [], logged
    assert injected == 0 and title_ok and charts == 3
    # escaping alone holds: the same page without its CSP runs nothing either
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "",
                           open(page, encoding="utf-8").read()), encoding="utf-8")
    logged, _, _, (injected, title_ok, _) = render(str(bare), str(tmp_path / "p2"), probe=INJECTED)
    assert logged == [] and injected == 0 and title_ok
    # the check can fail: the payloads written raw run without the CSP and are blocked with it
    raw = "".join(PAYLOADS)
    (tmp_path / "raw.html").write_text(f"<!DOCTYPE html><html><head><title>t</title></head>"
                                       f"<body>{raw}</body></html>")
    logged, _, _, (injected, _, _) = render(str(tmp_path / "raw.html"), str(tmp_path / "p3"),
                                            probe=INJECTED)
    assert any(f"{MARK}-s" in x for x in logged) and injected > 0, logged
    (tmp_path / "raw-csp.html").write_text(
        f'<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
        f'content="{report.CSP}"><title>t</title></head><body>{raw}</body></html>')
    logged, _, _, _ = render(str(tmp_path / "raw-csp.html"), str(tmp_path / "p4"), probe=INJECTED)
    assert not any(MARK in x and x.startswith("console") for x in logged), logged


# ------------------------------------------------------------------ colours and labels
def make_outcomes_run(folder, result="failed"):
    """One run with every outcome: worker:0 (chief) succeeds (exit 0), ps:0 is stopped as planned,
    worker:1 fails (SIGKILL), is restarted and fails again (exit 3), worker:2 is killed by the
    watchdog; with result="running" and a dead launcher, worker:3's open attempt is lost."""
    d = folder / f"outcomes-{result}"
    d.mkdir(parents=True)
    names = ["ps:0", "worker:0", "worker:1", "worker:2", "worker:3"]
    record = {"run_id": d.name, "file": str(folder / "cluster.yaml"), "launcher_pid": 999999,
              "launcher_started": T0, "backend": "local", "started": T0,
              "ended": None if result == "running" else T0 + 100, "result": result,
              "exit_code": None if result == "running" else 1, "root_cause": "worker:1 exit 3",
              "total_restarts": 1,
              "tasks": [{"task": t, "state": "running", "restarts": 0} for t in names]}
    write_json(str(d / "run.json"), record)
    log = EventLog(str(d))
    e = log.emit
    e("run_started", time=T0, run_id=d.name, file=record["file"], backend="local", tasks=names,
      chief="worker:0")
    for i, t in enumerate(names):
        e("task_started", t, time=T0 + 1, pid=100 + i, attempt=0, host="localhost")
    for s in range(2, 90, 2):
        e("progress", "worker:0", time=T0 + s, step=10 * s, total=1000)
        if s < 30:
            e("progress", "worker:1", time=T0 + s, step=9 * s, total=1000)
        if s < 40:
            e("progress", "worker:2", time=T0 + s, step=8 * s, total=1000)
        e("progress", "worker:3", time=T0 + s, step=7 * s, total=1000)
    e("task_exited", "worker:1", time=T0 + 30, exit_code=None, signal="SIGKILL", exit="SIGKILL",
      state="failed")
    e("task_restarting", "worker:1", time=T0 + 30.1, reason="SIGKILL is retried", attempt=1, delay=4.0)
    e("task_started", "worker:1", time=T0 + 34, pid=201, attempt=1, host="localhost")
    e("watchdog", "worker:2", time=T0 + 60, reason="no progress for 20s", action="kill")
    e("task_exited", "worker:2", time=T0 + 60.5, exit_code=None, signal="SIGKILL", exit="SIGKILL",
      state="failed")
    e("task_exited", "worker:1", time=T0 + 70, exit_code=3, signal=None, exit="exit 3", state="failed")
    if result != "running":
        e("task_exited", "worker:0", time=T0 + 90, exit_code=0, signal=None, exit="exit 0",
          state="succeeded")
        e("decision", time=T0 + 90.1, result="failed", rule="chief", exit_code=1,
          reason="worker:1 exit 3")
        for t in ("ps:0", "worker:3"):
            e("stop_sent", t, time=T0 + 90.2, signal="SIGTERM")
            e("task_exited", t, time=T0 + 95, exit_code=None, signal="SIGTERM", exit="SIGTERM",
              state="stopped")
        e("run_ended", time=T0 + 100, result="failed", exit_code=1)
    log.close()
    if result == "running":
        os.utime(d / "run.json", (T0 + 100, T0 + 100))
    return d


def hexrgb(colour):
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def test_outcomes_get_their_classes_and_labels(tmp_path):
    page = open(write_report(str(make_outcomes_run(tmp_path))), encoding="utf-8").read()
    bar = lambda task, k: re.search(rf'<rect class="attempt (att-\w+)" id="attempt-{task}-{k}"', page).group(1)  # noqa: E731
    assert bar("worker-0", 0) == "att-succeeded" and bar("ps-0", 0) == "att-stopped"
    assert bar("worker-1", 0) == bar("worker-1", 1) == bar("worker-2", 0) == "att-failed"
    assert ">exit 0 succeeded</text>" in page and ">SIGTERM stopped (planned)</text>" in page
    assert ">exit 3 failed</text>" in page and ">restart 1</text>" in page
    assert ">watchdog: kill</text>" in page and 'id="watchdog-worker-2-1"' in page
    assert 'class="ev-task_exited ev-state-succeeded"' in page
    assert 'class="ev-task_exited ev-state-stopped"' in page
    assert 'class="ev-task_exited ev-state-failed"' in page
    for cls, colour, words in report.LEGEND:
        assert f'<i class="{cls}" style="background:{colour}"></i>{words}' in page
    lost = open(write_report(str(make_outcomes_run(tmp_path, "running"))), encoding="utf-8").read()
    assert 'id="result">lost<' in lost
    assert re.search(r'<rect class="attempt att-lost" id="attempt-worker-3-0"', lost)
    assert 'class="exit-label exit-lost"' in lost


def test_the_colours_are_distinct_and_by_meaning():
    c = report.COLOURS
    meanings = ["succeeded", "failed", "stopped", "running", "lost", "restart", "watchdog", "stall"]
    assert len({c[k] for k in meanings}) == len(meanings)
    okabe_ito = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
    assert {c[k] for k in meanings if k != "stopped"} <= okabe_ito
    r, g, b = hexrgb(c["stopped"])
    assert r == g == b                          # a planned stop is neutral grey
    assert c["left"] not in {c[k] for k in meanings} | {"#E69F00"}   # left: no failure, not orange
    styles = {report.line_style(i) for i in range(28)}
    assert len(styles) == 28                    # 28 worker lines, no two alike


SHOTS = os.environ.get("TFCLUSTER_REPORT_SHOTS")   # a folder to keep the screenshots in


@needs_browser
@pytest.mark.parametrize("result", ["failed", "running"])
def test_outcome_colours_in_chromium(tmp_path, result):
    d = make_outcomes_run(tmp_path, result)
    page = write_report(str(d))
    probe = ("[...document.querySelectorAll('.attempt, .restart-marker, .watchdog-marker')]"
             ".map(e => {const r = e.getBoundingClientRect(); return [e.id, r.x, r.y, r.width, r.height]})")
    logged, _, png, shapes = render(page, str(tmp_path / "profile"), width=1100, height=700,
                                    probe=probe)
    assert logged == [], logged
    if SHOTS:
        os.makedirs(SHOTS, exist_ok=True)
        with open(os.path.join(SHOTS, f"report-{result}.png"), "wb") as f:
            f.write(png)
    _, _, rows = decode_png(png)
    C = report.COLOURS
    want = {"attempt-worker-1-0": C["failed"], "attempt-worker-2-0": C["failed"],
            "restart-worker-1-1": C["restart"], "watchdog-worker-2-1": C["watchdog"]}
    if result == "failed":
        want.update({"attempt-worker-0-0": C["succeeded"], "attempt-ps-0-0": C["stopped"],
                     "attempt-worker-3-0": C["stopped"]})
    else:
        want.update({"attempt-worker-0-0": C["lost"], "attempt-worker-3-0": C["lost"]})
    seen = {}
    for id_, x, y, w, h in shapes:
        if id_ in want:
            seen[id_] = rows[int(y + h / 2)][int(x + min(w, 40) / 2)]
    assert set(seen) == set(want)
    for id_, colour in want.items():
        got, exp = seen[id_], hexrgb(colour)
        assert all(abs(got[i] - exp[i]) <= 10 for i in range(3)), (id_, got, colour)


@needs_browser
def test_a_worker_that_left_an_elastic_run_is_drawn_in_its_own_colour_in_chromium(tmp_path):
    """worker:2 left the run (issue 48, item 7): its bar has the colour of ``left``, not the
    vermillion of a failure; worker:1's line is flat across its 22 s gap."""
    from helpers.runs import elastic_run
    page = write_report(str(elastic_run(tmp_path)))
    probe = ("[...document.querySelectorAll('.attempt')].map(e => {const r = e.getBoundingClientRect(); "
             "return [e.id, r.x, r.y, r.width, r.height]})")
    logged, _, png, shapes = render(page, str(tmp_path / "profile"), width=1100, height=700,
                                    probe=probe)
    assert logged == [], logged
    _, _, rows = decode_png(png)
    C = report.COLOURS
    want = {"attempt-worker-2-0": C["left"], "attempt-worker-0-0": C["succeeded"]}
    seen = {id_: rows[int(y + h / 2)][int(x + min(w, 40) / 2)] for id_, x, y, w, h in shapes if id_ in want}
    assert set(seen) == set(want)
    for id_, colour in want.items():
        got, exp = seen[id_], hexrgb(colour)
        assert all(abs(got[i] - exp[i]) <= 10 for i in range(3)), (id_, got, colour)


# ------------------------------------------------------------------ end labels
LABEL_BOXES = ("[...document.querySelectorAll('#steps .line-label')].map(e => {const b = e.getBBox(); "
               "return [e.textContent, b.x, b.y, b.width, b.height]})")


def _overlaps(boxes):
    """Pairs of (name, x, y, w, h) boxes that intersect."""
    out = []
    for i, (n1, x1, y1, w1, h1) in enumerate(boxes):
        for n2, x2, y2, w2, h2 in boxes[i + 1:]:
            if x1 < x2 + w2 and x2 < x1 + w1 and y1 < y2 + h2 and y2 < y1 + h1:
                out.append((n1, n2))
    return out


@needs_browser
@pytest.mark.parametrize("workers", [2, 5, 28])
def test_the_end_labels_of_lines_that_end_together_do_not_overlap(tmp_path, workers):
    """The quick start's workers end at the same step at the same moment: their labels at the
    end of the step chart's lines are laid out apart, as the browser draws them (getBBox)."""
    d = quick_start_run(tmp_path, workers=workers)
    page = write_report(str(d))
    logged, _, png, boxes = render(page, str(tmp_path / "profile"), probe=LABEL_BOXES)
    assert logged == [], logged
    assert sorted(b[0] for b in boxes) == sorted(f"worker:{k}" for k in range(workers))
    assert all(w > 20 and h > 8 for _, _, _, w, h in boxes), boxes
    assert _overlaps(boxes) == [], boxes
    svg_h = float(re.search(r'<svg id="steps" class="chart" viewBox="0 0 \d+ (\d+)"',
                            open(page, encoding="utf-8").read()).group(1))
    assert all(y >= 0 and y + h <= svg_h for _, _, y, _, h in boxes), (boxes, svg_h)   # all in the chart
    if SHOTS:
        os.makedirs(SHOTS, exist_ok=True)
        with open(os.path.join(SHOTS, f"labels-{workers}.png"), "wb") as f:
            f.write(png)
