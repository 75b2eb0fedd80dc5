"""The attention explorer, live: the page of :mod:`gpt2_posheads.report.explorer` served on 127.0.0.1, where the
reader types a prompt and sees every head on it.

The page and the data are the static file's: ``GET /`` is :func:`~gpt2_posheads.report.explorer.page_html` of the
opening prompts with a prompt box added, and ``POST /api/explore`` with ``{"prompt": "text"}`` answers
:func:`~gpt2_posheads.report.explorer.explorer_data` of that prompt (the aggregator and the extended positional
embeddings are computed once, at start, in an :class:`~gpt2_posheads.report.explorer.ExplorerContext`). A mistake in
the prompt is answered ``400 {"error": "<parameter>: <what is wrong>; <allowed values>; <hint>"}``, which the page
shows in a red box. ``python -m gpt2_posheads explore --model-dir DIR`` runs it (:func:`serve`); Ctrl-C stops it.

Only 127.0.0.1 is bound, and requests naming another host (a page elsewhere reaching this port through DNS
rebinding) or posting anything but JSON are refused.
"""

from __future__ import annotations

import errno
import json
import math
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import torch

from ..model.validation import UsageError
from .explorer import MIN_TOKENS, ExplorerContext, default_prompts, explorer_context, explorer_data, page_html

HOST = "127.0.0.1"
MAX_BODY = 256_000  # bytes of JSON a prompt may take
CELL_BUDGET = 4_000_000  # heads x tokens^2 per prompt: what one prompt's page data may hold (about 10 MB sent)


def max_tokens(model) -> int:
    """The longest prompt the explorer takes on ``model``: its context, at most 512 tokens, and at most what keeps
    every head's ``[n, n]`` pattern within :data:`CELL_BUDGET` cells (GPT-2 small: 166 tokens)."""
    heads = model.cfg.n_layers * model.cfg.n_heads
    return max(MIN_TOKENS, min(model.cfg.n_ctx, 512, math.isqrt(CELL_BUDGET // heads)))


def prompt_tokens(model, text, limit: int | None = None, param: str = "prompt") -> torch.Tensor:
    """``text`` as the model reads it (BOS first where the model has one), or a one-line :class:`UsageError`."""
    limit = max_tokens(model) if limit is None else limit
    allowed = f"allowed {MIN_TOKENS}..{limit} tokens, BOS included"
    if not isinstance(text, str) or not text.strip():
        raise UsageError(param, "is empty" if isinstance(text, str) else "is not text", allowed, "type a sentence")
    toks = model.to_tokens(text, truncate=False)[0].cpu()
    n = len(toks)
    if n > limit:
        why = (
            f"the model's context (n_ctx {model.cfg.n_ctx})"
            if limit >= model.cfg.n_ctx
            else f"the explorer's limit on this {model.cfg.n_layers * model.cfg.n_heads}-head model "
            f"(the model's context is {model.cfg.n_ctx})"
        )
        raise UsageError(param, f"{n} tokens is too long for {why}", allowed, "shorten the prompt")
    if n < MIN_TOKENS:
        raise UsageError(param, f"{n} tokens is too short", allowed, "type a few more words")
    return toks


class LiveExplorer:
    """A model, its label, the opening prompts' data and the shared context: what the server answers from."""

    def __init__(
        self, model, label: str, prompts=None, limit: int | None = None, context: ExplorerContext | None = None
    ):
        self.model, self.label = model, label
        self.limit = max_tokens(model) if limit is None else limit
        prompts = default_prompts(model) if prompts is None else prompts
        self.context = context or explorer_context(model, prompts)
        self.initial = explorer_data(model, prompts, label, context=self.context)
        self.lock = threading.Lock()  # one forward pass at a time: hooks live on the shared model
        self.count = 0

    def page(self) -> str:
        return page_html(self.initial, live=True)

    def explore(self, text) -> dict:
        """The page's data for one prompt of the reader's."""
        toks = prompt_tokens(self.model, text, self.limit)
        with self.lock:
            self.count += 1
            words = " ".join(str(text).split())
            name = f"yours {self.count}: {words[:40]}{'…' if len(words) > 40 else ''}"
            return explorer_data(self.model, [(name, toks, None)], self.label, context=self.context)


class _Handler(BaseHTTPRequestHandler):
    server_version = "gpt2-posheads-explorer"
    explorer: LiveExplorer  # set on the subclass :func:`start_server` makes

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's API
        pass  # the terminal shows the address once, not every request

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict) -> None:
        self._send(status, json.dumps(obj, separators=(",", ":"), allow_nan=False).encode(), "application/json")

    def _error(self, status: int, param: str, problem: str, allowed: str = "", hint: str = "") -> None:
        self._json(status, {"error": str(UsageError(param, problem, allowed, hint))})

    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        if host in (HOST, "localhost"):
            return True
        self._error(403, "Host", f"{host!r} is not this machine", f"allowed {HOST} or localhost")
        return False

    def do_GET(self):  # noqa: N802 - BaseHTTPRequestHandler's API
        if not self._host_ok():
            return
        path = urlsplit(self.path).path
        if path in ("/", "/index.html"):
            self._send(200, self.explorer.page().encode("utf-8"), "text/html; charset=utf-8")
        elif path == "/api/health":
            self._json(200, {"ok": True, "model": self.explorer.label, "max_tokens": self.explorer.limit})
        else:
            self._error(404, "path", f"{path} is not served", "allowed /, /api/explore (POST), /api/health")

    def do_POST(self):  # noqa: N802
        if not self._host_ok():
            return
        path = urlsplit(self.path).path
        if path != "/api/explore":
            return self._error(404, "path", f"{path} takes no POST", "allowed /api/explore")
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            return self._error(415, "request", "is not JSON", 'Content-Type: application/json, {"prompt": "..."}')
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            size = -1
        if not 0 < size <= MAX_BODY:
            return self._error(413, "request", f"body of {size} bytes", f"allowed 1..{MAX_BODY} bytes")
        try:
            body = json.loads(self.rfile.read(size).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return self._error(400, "request", "body is not valid JSON", '{"prompt": "your text"}')
        if not isinstance(body, dict) or "prompt" not in body:
            return self._error(400, "prompt", "is missing", '{"prompt": "your text"}')
        try:
            data = self.explorer.explore(body["prompt"])
        except UsageError as e:
            return self._json(400, {"error": str(e)})
        except Exception as e:  # a bug: the page says so, the terminal has the traceback
            traceback.print_exc(file=sys.stderr)
            return self._error(
                500, "server", f"{type(e).__name__}: {e}", "", "the terminal running the server has the traceback"
            )
        self._json(200, data)


class ExplorerServer(ThreadingHTTPServer):
    daemon_threads = True  # Ctrl-C does not wait for a page still loading

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"


def start_server(explorer: LiveExplorer, port: int = 0) -> ExplorerServer:
    """A server of ``explorer`` bound to 127.0.0.1:``port`` (0: any free port), not yet serving: call its
    ``serve_forever()`` (in a thread for tests), then ``shutdown()`` and ``server_close()``. A port in use is a
    :class:`UsageError`."""
    handler = type("Handler", (_Handler,), {"explorer": explorer})
    try:
        return ExplorerServer((HOST, port), handler)
    except OSError as e:
        if e.errno in (errno.EADDRINUSE, errno.EACCES):
            raise UsageError(
                "--port",
                f"{port} is {'in use' if e.errno == errno.EADDRINUSE else 'not allowed for this user'}",
                "allowed 0 (any free port) or 1024..65535",
                "pick another --port, or --port 0",
            ) from None
        raise


def serve(explorer: LiveExplorer, port: int = 0, out=sys.stdout) -> int:
    """Serve ``explorer`` until Ctrl-C (or SIGTERM, where the caller turns it into ``KeyboardInterrupt``); returns 0
    once stopped."""
    server = start_server(explorer, port)
    print(
        f"serving the attention explorer of {explorer.label} at {server.url} (this machine only); Ctrl-C stops it",
        file=out,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped", file=out, flush=True)
    finally:
        server.server_close()
    return 0
