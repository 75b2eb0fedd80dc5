"""The attention explorer: its data against hand-built heads with known answers and exact identities, the page
rendered in headless Chromium (driven over the DevTools protocol on a pipe: real mouse clicks, two window sizes),
the live server, and the ``explore`` command.

The hand-built model (``conftest.handset_state_dict``): layer 0 has a previous-token head (L0H0), a current-token
head (L0H1), a uniform head (L0H2) and a head that avoids its own position (L0H3); nothing any block writes reaches
the residual stream, so layer 1 reads ``W_pos`` alone and no intervention below it can move it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib

import numpy as np
import pytest
import torch

from gpt2_posheads.__main__ import main as cli_main
from gpt2_posheads.analysis.diagonals import diagonal_attention
from gpt2_posheads.analysis.induction import repeated_random_tokens
from gpt2_posheads.model.paths import REPO_ROOT
from gpt2_posheads.report.explorer import explorer_data, write_explorer
from gpt2_posheads.report.explorer_server import LiveExplorer, start_server

from conftest import HANDSET

CHROMIUM = next(
    (p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p is not None), None
)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (setup.sh installs Debian's chromium)")
N = HANDSET["n_ctx"]
L, H = HANDSET["n_layers"], HANDSET["n_heads"]


# --------------------------------------------------------------------------------------------------------------------
# the page's data, decoded as the page decodes it
# --------------------------------------------------------------------------------------------------------------------
def unpack(b64: str, dtype=np.uint8) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(b64)), dtype=dtype)


def patterns(data: dict, variant: str, prompt: int = 0) -> np.ndarray:
    """``[layer, head, q, k]`` weights as the page stores them (bytes / 255)."""
    p = data["prompts"][prompt]
    n = p["n"]
    return unpack(p["variants"][variant]["pat"]).reshape(data["n_layers"], data["n_heads"], n, n) / 255


@pytest.fixture(scope="module")
def handset_tokens(handset_model):
    return torch.randint(1, handset_model.cfg.d_vocab, (N,), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def handset_data(handset_model, handset_tokens):
    return explorer_data(handset_model, [("random", handset_tokens, None)], "hand-built")


def test_known_heads_in_the_data(handset_model, handset_tokens, handset_data):
    D = handset_data
    assert D["aggregator"] == "L0H0"  # the sharpest previous-token head
    A = patterns(D, "clean")
    q = np.arange(1, N)
    assert (A[0, 0, q].argmax(-1) == q - 1).all()  # previous token
    assert (A[0, 1].argmax(-1) == np.arange(N)).all()  # current token
    assert np.abs(A[0, 2] - np.tril(1 / np.arange(1, N + 1)[:, None] * np.ones(N))).max() <= 1 / 255  # uniform
    assert A[0, 3, q, q].max() < 0.01  # avoids its own position
    assert np.triu(A, 1).max() == 0  # nothing after the query
    # the statistics are the toolkit's own numbers (every offset, key 0 left out)
    clean = D["prompts"][0]["variants"]["clean"]
    expect = diagonal_attention(handset_model, handset_tokens[None], progress=False)
    assert clean["top"][:4] == [1, 0, 0, 1]
    assert np.allclose(clean["prev"], expect[..., 1].flatten().numpy(), atol=1e-5)
    prof = unpack(clean["prof"], "<f4").reshape(L, H, N - 1)
    assert np.allclose(prof, expect[..., : N - 1].numpy(), atol=1e-5)  # every offset of the prompt


def test_each_intervention_or_its_reason(handset_data):
    D = handset_data
    v = D["prompts"][0]["variants"]
    clean = patterns(D, "clean")
    # W_pos averaged in groups of 10: positions 0..9 share one embedding, so each of those queries spreads evenly
    wpos = patterns(D, "wpos")
    for q in range(1, 10):
        assert np.abs(wpos[0, 0, q, : q + 1] - 1 / (q + 1)).max() <= 1 / 255
    # extended embeddings averaged at layer 0 (groups after BOS: 1..10): keys 1..q are one residual, equal weights
    ext = patterns(D, "extavg")
    for q in range(2, 11):
        assert np.ptp(ext[0, 0, q, 1 : q + 1]) <= 1 / 255
    # masking below: layer 0 has nothing below it, said with the reason and with no pattern at all
    for h in range(H):
        assert re.fullmatch(rf"L0H{h} is in layer 0: there is no layer below it .*", v["mask"]["na"][h])
    mask = patterns(D, "mask")
    assert mask[0].max() == 0 and v["mask"]["prev"][:H] == [None] * H
    assert v["mask"]["na"][H:] == [None] * H
    assert np.array_equal(mask[1], clean[1])  # layer 0 writes nothing: layer 1 cannot move (exact)
    # the edit doubles the aggregator's output, which is zero here: not applicable to any head, and why
    assert "pat" not in v["edit"] and set(v["edit"]["na"]) == {D["unavailable"]["edit"]}
    assert "has no effect on this model" in D["unavailable"]["edit"]


# --------------------------------------------------------------------------------------------------------------------
# headless Chromium over the DevTools protocol on a pipe (stdlib only: --remote-debugging-pipe, fds 3 and 4)
# --------------------------------------------------------------------------------------------------------------------
class Browser:
    def __init__(self, exe: str, user_dir):
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        def fds():  # the browser reads commands on fd 3 and writes replies on fd 4
            os.dup2(to_r, 100)
            os.dup2(from_w, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)

        flags = "--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update"
        self.proc = subprocess.Popen(
            [exe, *flags.split(), "--disable-sync", "--no-first-run", f"--user-data-dir={user_dir}"]
            + ["--window-size=1400,900", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_r)
        os.close(from_w)
        self._next, self._replies, self.events = 0, {}, []
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.target = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.page(f"{domain}.enable")

    def _read(self):
        buf = b""
        while chunk := os.read(self._from_r, 1 << 16):
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            with self._cv:
                for m in map(json.loads, msgs):
                    (self._replies.__setitem__(m["id"], m) if "id" in m else self.events.append(m))
                self._cv.notify_all()

    def call(self, method: str, target: str | None = None, **params):
        with self._cv:
            self._next += 1
            i = self._next
        msg = {"id": i, "method": method, "params": params, **({"sessionId": target} if target else {})}
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        with self._cv:
            assert self._cv.wait_for(lambda: i in self._replies, 30), f"{method}: no reply"
            r = self._replies.pop(i)
        assert "error" not in r, f"{method}: {r['error']}"
        return r["result"]

    def page(self, method: str, **params):
        return self.call(method, self.target, **params)

    def js(self, expr: str):
        r = self.page("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return r["result"].get("value")

    def wait(self, expr: str, timeout: float = 20):
        end = time.time() + timeout
        while time.time() < end:
            if v := self.js(expr):
                return v
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {expr}")

    def size(self, w: int, h: int):
        self.page("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=False)

    def open(self, url: str, head: str | None = None):
        self.events.clear()
        self.page("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && document.body.dataset.rendered")
        if head:
            self.wait(f"(document.body.dataset.rendered || '').includes('head={head}&')")

    def click(self, selector: str):
        """A real left click (mouse pressed and released) at the centre of the element."""
        box = self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, path) -> tuple[int, int]:
        png = base64.b64decode(self.page("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(png)
        return struct.unpack(">II", png[16:24])  # the PNG's width and height (IHDR)

    def errors(self) -> list[str]:
        bad = [e for e in self.events if e.get("method") == "Runtime.exceptionThrown"]
        bad += [
            e for e in self.events if e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error"
        ]
        return [json.dumps(e)[:300] for e in bad]

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def close(self):
        with contextlib.suppress(AssertionError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._to_w)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("no Chromium (setup.sh installs Debian's chromium)")
    b = Browser(CHROMIUM, tmp_path_factory.mktemp("chromium"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def handset_page(handset_model, handset_tokens, tmp_path_factory):
    return write_explorer(
        handset_model,
        tmp_path_factory.mktemp("pages") / "handset.html",
        "hand-built",
        [("random", handset_tokens, None)],
    )


@pytest.fixture(scope="module")
def tiny_page(tiny_model, tmp_path_factory):
    """A 63-token prompt (BOS, then 31 random tokens twice): an induction head's stripe would be at offset 30."""
    toks = repeated_random_tokens(tiny_model, 1, 31, seed=0)[0]
    path = write_explorer(tiny_model, tmp_path_factory.mktemp("pages") / "tiny.html", "tiny", [("31 + 31", toks, None)])
    return path, toks


LAYOUT = """(() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const texts = [...document.querySelectorAll('#profile text')].map(box);
  const overlaps = [];
  texts.forEach((a, i) => texts.slice(i + 1).forEach(b => {
    if (a[0] < b[2] - 0.5 && b[0] < a[2] - 0.5 && a[1] < b[3] - 0.5 && b[1] < a[3] - 0.5) overlaps.push([a, b]); }));
  return {
    scrollWidth: document.documentElement.scrollWidth, innerWidth,
    thumbs: [...document.querySelectorAll('.thumb canvas')].map(c => [c.offsetWidth, c.offsetHeight, box(c)[2]]),
    heatmaps: [...document.querySelectorAll('.panel')].filter(p => p.querySelector('.hm-body')).map(p => {
      const lg = p.querySelector('svg.legend'), r = lg && lg.getBoundingClientRect();
      return {panel: p.className, legend: lg && [r.width, r.height], right: box(p)[2],
        font: +p.querySelector('.hm-body').dataset.fontPx}; }),
    gridLegend: [...document.querySelectorAll('#gridlegend svg.legend')].map(s => s.getBoundingClientRect().width),
    bars: [...document.querySelectorAll('#profile .bars rect')].map(r => [+r.dataset.offset, box(r)[2]]),
    profileRight: box(document.getElementById('profile'))[2], overlaps,
    summary: document.getElementById('summary').textContent };
})()"""


@needs_chromium
@pytest.mark.parametrize("size", [(1400, 900), (800, 600)])
def test_page_offline_and_laid_out_at_two_window_sizes(browser, tiny_page, size, tmp_path):
    page, toks = tiny_page
    text = page.read_text()
    assert (
        "<script src" not in text and "<link" not in text and not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text)
    )
    browser.size(*size)
    browser.open(f"{page.as_uri()}#head=L1H2&variant=extavg", head="L1H2")
    assert browser.screenshot(tmp_path / f"explorer-{size[0]}x{size[1]}.png") == size
    got = browser.js(LAYOUT)
    assert not browser.errors()
    assert {u.split(":")[0] for u in browser.requests()} <= {"file", "data", "blob"}  # nothing from the network
    assert got["scrollWidth"] <= got["innerWidth"]  # nothing overflows the window sideways
    assert len(got["thumbs"]) == 3 * 4 and all(w > 0 and h > 0 and r <= size[0] for w, h, r in got["thumbs"])
    assert got["gridLegend"] and got["gridLegend"][0] > 0
    # intervened pattern, difference from clean, raw scores: each with its colour scale and readable labels
    assert [h["panel"] for h in got["heatmaps"]] == ["panel pattern", "panel diff", "panel raw"]
    assert all(h["legend"][0] > 0 and h["legend"][1] > 0 and h["right"] <= size[0] for h in got["heatmaps"])
    assert all(h["font"] >= 10 for h in got["heatmaps"])
    # every offset 0..61 (the induction offset 30 among them), each bar inside the plot
    assert [o for o, _ in got["bars"]] == list(range(len(toks) - 1))
    assert max(right for _, right in got["bars"]) <= got["profileRight"]
    assert not got["overlaps"]  # no label of the profile overlaps another (axis titles and ticks included)
    assert "))" not in got["summary"] and got["summary"].startswith("L1H2 on")


DARKNESS = """(() => {
  const c = document.querySelector('.panel.pattern .hm-body'), n = +c.dataset.n, s = c.width / n;
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, out = [];
  for (let q = 0; q < n; q++) { const row = [];
    for (let k = 0; k <= q; k++)
      row.push(255 - px[4 * (Math.floor((q + 0.5) * s) * c.width + Math.floor((k + 0.5) * s))]);
    out.push(row); }
  return out; })()"""


@needs_chromium
def test_clicking_through_the_grid_opens_each_known_head(browser, handset_page):
    browser.size(1400, 900)
    browser.open(handset_page.as_uri(), head="L0H0")  # opens on the aggregator
    assert browser.js("document.querySelector('.thumb.sel').dataset.head") == "L0H0"
    for h in (1, 2, 3, 0):
        head = f"L0H{h}"
        browser.click(f'.thumb[data-head="{head}"]')
        browser.wait(f"(document.body.dataset.rendered || '').includes('head={head}&')")
        assert f"head={head}&" in browser.js("location.hash")  # the click wrote the address, which drew the view
        assert browser.js("document.querySelector('.thumb.sel').dataset.head") == head
        assert browser.js("document.getElementById('summary').dataset.head") == head
        dark = browser.wait(DARKNESS)  # darkness of each drawn cell of the large pattern, row by row
        for q in range(2, N):
            row = dark[q]
            if h == 0:
                assert int(np.argmax(row)) == q - 1
            elif h == 1:
                assert int(np.argmax(row)) == q
            elif h == 2:
                assert max(row) - min(row) <= 2 and dark[q][0] <= dark[q - 1][0]  # even, and 1 / (q + 1)
            else:
                assert int(np.argmin(row)) == q  # its own position is the lightest
    browser.click('.thumb[data-head="L1H3"]')  # and into layer 1
    browser.wait("(document.body.dataset.rendered || '').includes('head=L1H3&')")


@needs_chromium
def test_not_applicable_is_shown_with_its_reason(browser, handset_page):
    browser.size(1400, 900)
    browser.open(f"{handset_page.as_uri()}#head=L0H2", head="L0H2")
    browser.click('#variants button[data-variant="mask"]')
    browser.wait("(document.body.dataset.rendered || '').includes('variant=mask')")
    got = browser.js(
        """(() => ({na: [...document.querySelectorAll('.panel.pattern .na, .panel.diff .na')].map(e => e.textContent),
        drawn: document.querySelectorAll('.panel.pattern .hm-body, .panel.diff .hm-body').length,
        applicable: document.getElementById('summary').dataset.applicable,
        titles: [...document.querySelectorAll('.thumb')].map(b => b.title)}))()"""
    )
    assert len(got["na"]) == 2 and got["drawn"] == 0 and got["applicable"] == "no"  # never the clean pattern
    assert all(t.startswith("p-1 masked below: not applicable to L0H2. L0H2 is in layer 0") for t in got["na"])
    assert all("not applicable" in t for t in got["titles"][:H]) and not any("n/a" in t for t in got["titles"][H:])


# --------------------------------------------------------------------------------------------------------------------
# the live server and the command
# --------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live(handset_model, handset_tokens):
    explorer = LiveExplorer(handset_model, "hand-built", [("random", handset_tokens, None)])
    server = start_server(explorer, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def post(url: str, body: bytes, kind: str = "application/json") -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": kind}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_live_server_answers_a_prompt(live, handset_model):
    with urllib.request.urlopen(live.url, timeout=30) as r:
        page = r.read().decode()
    assert '"live":true' in page and "hand-built: attention explorer" in page
    text = "the cat sat on the mat"
    status, data = post(live.url + "api/explore", json.dumps({"prompt": text}).encode())
    n = len(handset_model.to_tokens(text)[0])
    assert status == 200 and data["aggregator"] == "L0H0" and [p["n"] for p in data["prompts"]] == [n]
    assert set(data["prompts"][0]["variants"]) == {"clean", "wpos", "extavg", "mask", "edit"}
    A = patterns(data, "clean")
    assert (A[0, 0, np.arange(1, n)].argmax(-1) == np.arange(n - 1)).all()  # the previous-token head, on your text
    status, data = post(live.url + "api/explore", json.dumps({"prompt": "a b " * 20}).encode())
    assert status == 400 and re.fullmatch(
        r"prompt: \d+ tokens is too long for the model's context \(n_ctx 16\); allowed 3\.\.16 tokens, BOS included;"
        r" shorten the prompt",
        data["error"],
    )
    assert post(live.url + "api/explore", b"{", "application/json")[0] == 400
    assert post(live.url + "api/explore", b"prompt=x", "application/x-www-form-urlencoded")[0] == 415


@needs_chromium
def test_live_page_shows_the_error_then_your_prompt(browser, live):
    browser.size(1400, 900)
    browser.open(live.url, head="L0H0")
    assert browser.js("document.getElementById('live').hidden") is False
    browser.js("document.getElementById('live-text').value = 'a b '.repeat(20)")
    browser.click("#live-run")
    msg = browser.wait(
        "!document.getElementById('live-error').hidden && document.getElementById('live-error').textContent"
    )
    assert msg.startswith("error: prompt: ") and "allowed 3..16 tokens" in msg
    assert browser.js("document.getElementById('live-error').getBoundingClientRect().height") > 0
    browser.js("document.getElementById('live-text').value = 'one two three four five'")
    browser.click("#live-run")
    browser.wait("(document.body.dataset.rendered || '').startsWith('prompt=1&')")
    assert browser.js("document.getElementById('live-error').hidden") is True
    assert browser.js("document.getElementById('summary').dataset.head") == "L0H0"


def test_explore_command_says_what_is_wrong(handset_dir, tmp_path, capsys):
    def error(argv):
        assert cli_main(["explore", *argv]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ")
        return lines[0]

    assert error(["--model-dir", str(tmp_path / "nope")]).startswith("error: --model-dir: ")
    assert error(["--model-dir", str(handset_dir), "--port", "80"]).startswith("error: --port: 80 is out of range;")
    assert error(["--model-dir", str(handset_dir), "--out", str(tmp_path / "x.txt")]).startswith("error: --out: ")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert error(["--model-dir", str(handset_dir), "--port", str(port)]).startswith(
            f"error: --port: {port} is in use"
        )
    long = error(["--model-dir", str(handset_dir), "--prompt", "a b " * 20, "--out", str(tmp_path / "x.html")])
    assert re.match(r"error: --prompt: \d+ tokens is too long .*; allowed 3\.\.16 tokens", long)
    assert (
        cli_main(
            ["explore", "--model-dir", str(handset_dir), "--prompt", "one two three", "--out", str(tmp_path / "e.html")]
        )
        == 0
    )
    assert (tmp_path / "e.html").stat().st_size > 10_000


def test_explore_server_stops_cleanly_on_ctrl_c(handset_dir):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpt2_posheads", "explore", "--model-dir", str(handset_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal, whatever ran pytest
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        with urllib.request.urlopen(url + "api/health", timeout=30) as r:
            assert json.loads(r.read())["max_tokens"] == N
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and out.strip() == "stopped"


def raw_request(server, data: bytes, timeout: float = 30) -> tuple[int, dict]:
    """Send ``data`` as it is to the live server; its status and JSON body (the server closes after answering)."""
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=timeout) as s:
        s.sendall(data)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post_raw(server, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    lines = ["POST /api/explore HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return raw_request(server, ("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"


def one_line_reason(status: int, data: dict) -> bool:
    return (
        400 <= status < 500
        and set(data) == {"error"}
        and "\n" not in data["error"]
        and "Traceback" not in data["error"]
    )


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b'{"prompt": "\\ud800 the cat sat"}', 400, "lone surrogate"),  # valid JSON, but not text
        (b'{"prompt": "the cat \\udfff"}', 400, "lone surrogate"),
        (b'{"prompt": 3}', 400, "is not text"),
        (b'{"prompt": ["a", "b"]}', 400, "is not text"),
        (b'{"prompt": null}', 400, "is not text"),
        (b'{"prompt": NaN}', 400, "is not text"),
        (b'["prompt"]', 400, "is missing"),
        (b'"just text"', 400, "is missing"),
        (b'{"text": "the cat"}', 400, "is missing"),
        (b'{"prompt": "the', 400, "not valid JSON"),
        (b"\xff\xfe{}", 400, "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deep"),
    ],
)
def test_every_bad_body_is_a_4xx_with_one_line(live, body, status, words):
    got, data = post(live.url + "api/explore", body)
    assert got == status and one_line_reason(got, data) and words in data["error"], data


def test_bad_lengths_methods_and_request_lines_are_4xx_with_one_line(live):
    good = json.dumps({"prompt": "the cat sat on the mat"}).encode()
    cases = [
        (post_raw(live, b"x" * 300_000, {"Content-Length": "300000"}), 413, "body of 300000 bytes"),  # unread
        (post_raw(live, good, {"Content-Length": "-5"}), 400, "not a number of bytes"),
        (post_raw(live, good, {"Content-Length": "ten"}), 400, "not a number of bytes"),
        (post_raw(live, b"", {"Content-Length": "0"}), 400, "body of 0 bytes"),
        (post_raw(live, good, {}), 411, "no Content-Length"),
        (post_raw(live, good, {"Transfer-Encoding": "gzip"}), 400, "'gzip' is not taken"),
        (post_raw(live, b"zz\r\n" + good, {"Transfer-Encoding": "chunked"}), 400, "not hexadecimal"),
        (post_raw(live, b"3\r\nabcXYZ", {"Transfer-Encoding": "chunked"}), 400, "without its line break"),
        (post_raw(live, chunked(b"x" * 300_000, 65536), {"Transfer-Encoding": "chunked"}), 413, "more than"),
        (post_raw(live, b"0\r\n\r\n", {"Transfer-Encoding": "chunked"}), 400, "body of 0 bytes"),
        (raw_request(live, b"PUT / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 405, "'PUT' is not taken"),
        (raw_request(live, b"DELETE /api/explore HTTP/1.0\r\n\r\n"), 405, "'DELETE' is not taken"),
        (raw_request(live, b"GARBAGE\r\n\r\n"), 400, "request"),
        (raw_request(live, b"GET / HTTP/9.9\r\n\r\n"), 400, "request"),
        (raw_request(live, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"), 414, "request"),
    ]
    for (status, data), want, words in cases:
        assert status == want and one_line_reason(status, data) and words in data["error"], (want, status, data)


def test_a_chunked_body_is_read(live, handset_model):
    text = "the cat sat on the mat"
    status, data = post_raw(live, chunked(json.dumps({"prompt": text}).encode()), {"Transfer-Encoding": "chunked"})
    assert status == 200 and [p["n"] for p in data["prompts"]] == [len(handset_model.to_tokens(text)[0])]
    # a chunk extension and a trailer field are allowed by HTTP/1.1 and ignored
    body = json.dumps({"prompt": text}).encode()
    framed = f"{len(body):x};note=1\r\n".encode() + body + b"\r\n0\r\nX-Trailer: 1\r\n\r\n"
    assert post_raw(live, framed, {"Transfer-Encoding": "chunked"})[0] == 200


def test_a_client_that_stops_sending_is_answered_408(live, monkeypatch):
    monkeypatch.setattr(live.RequestHandlerClass, "timeout", 1)
    status, data = post_raw(live, b'{"prompt": "the', {"Content-Length": "40"})
    assert status == 408 and one_line_reason(status, data) and "did not arrive" in data["error"]
