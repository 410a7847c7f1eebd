"""tfcluster report in a real headless browser (Chromium, skipped with the reason where it is not
installed): the page renders without errors and draws the restart. (The page as text:
tests/unit/test_report.py.)
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import time
import zlib

import pytest

from tfcluster.report import write_report

from helpers.runs import make_run


RESTART_RGB = (0xD9, 0x48, 0x0F)   # .restart-marker fill in report.CSS


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


def render(page_path, profile, width=1100, height=1000, selector=".restart-marker"):
    """Open a page: (what it logged — console calls, uncaught exceptions, error and warning log
    entries such as failed loads —, the boxes of the elements matching selector, a PNG)."""
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
