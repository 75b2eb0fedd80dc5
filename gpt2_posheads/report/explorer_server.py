"""The attention explorer, live on 127.0.0.1 (``docs/explorer.md``, "Live mode"): ``GET /`` is the page with a
prompt box; ``POST /api/explore`` with ``{"prompt": "text"}`` answers
:func:`~gpt2_posheads.report.explorer.explorer_data` of that prompt. Only 127.0.0.1 is bound, a request naming another
host (DNS rebinding) is refused, and every bad request gets a 4xx and one line of JSON ``{"error": "<parameter>: <what
is wrong>; <allowed values>; <hint>"}``, never a traceback or a 500.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import socket
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
READ_TIMEOUT = 30  # seconds a client may pause while sending a request
CELL_BUDGET = 4_000_000  # heads x tokens^2 per prompt: what one prompt's page data may hold (about 10 MB sent)


def max_tokens(model) -> int:
    """The longest prompt taken: the context, at most 512, and within :data:`CELL_BUDGET` cells (GPT-2 small: 166)."""
    heads = model.cfg.n_layers * model.cfg.n_heads
    return max(MIN_TOKENS, min(model.cfg.n_ctx, 512, math.isqrt(CELL_BUDGET // heads)))


def prompt_tokens(model, text, limit: int | None = None, param: str = "prompt") -> torch.Tensor:
    """``text`` as the model reads it (BOS first where the model has one), or a one-line :class:`UsageError`."""
    limit = max_tokens(model) if limit is None else limit
    allowed = f"allowed {MIN_TOKENS}..{limit} tokens, BOS included"
    if not isinstance(text, str) or not text.strip():
        raise UsageError(param, "is empty" if isinstance(text, str) else "is not text", allowed, "type a sentence")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate ("\ud800") is valid JSON but no text a tokenizer reads
        raise UsageError(
            param,
            f"holds a lone surrogate ({text[e.start]!r} at character {e.start}), which is not text",
            "UTF-8 text",
            "remove the character",
        ) from None
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
    """What the server answers from: a model, its label, the opening prompts' data and the shared context."""

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

    def explore(self, text) -> dict:
        toks = prompt_tokens(self.model, text, self.limit)
        with self.lock:
            self.count += 1
            words = " ".join(str(text).split())
            name = f"yours {self.count}: {words[:40]}{'…' if len(words) > 40 else ''}"
            return explorer_data(self.model, [(name, toks, None)], self.label, context=self.context)


class BadRequest(Exception):
    """A refused request: ``status`` (4xx) and the one-line reason's parts (as :class:`UsageError`)."""

    def __init__(self, status: int, param: str, problem: str, allowed: str = "", hint: str = ""):
        super().__init__(problem)
        self.status, self.parts = status, (param, problem, allowed, hint)


class _Handler(BaseHTTPRequestHandler):
    server_version = "gpt2-posheads-explorer"
    explorer: LiveExplorer  # set on the subclass :func:`start_server` makes
    timeout = READ_TIMEOUT  # a client that stops sending is answered 408, not waited for forever

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
        self.close_connection = True  # what is left of a refused request is not read as the next one
        self._unread = True
        self._json(status, {"error": str(UsageError(param, problem, allowed, hint))})

    def finish(self) -> None:
        super().finish()
        if getattr(self, "_unread", False):
            # a refused body may still be arriving: closing on unread data resets the connection, and the client
            # could lose the answer with it; read (and drop) what comes for a moment first
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_WR)
                self.connection.settimeout(1)
                left = 4 * MAX_BODY
                while left > 0 and (data := self.connection.recv(65536)):
                    left -= len(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's errors (malformed request line or header, unknown method) as a 4xx and one JSON line."""
        if code == 501:  # "unsupported method": the client asked for something this server does not do
            code, message = 405, f"method {self.command!r} is not taken"
        if code >= 500:
            code = 400
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # a request line that did not parse: answer with a status line anyway
        with contextlib.suppress(OSError):  # the client is gone
            self._error(code, "request", " ".join(str(message or "is malformed").split()), "GET /, POST /api/explore")

    def _read_body(self) -> bytes:
        """The body (at most :data:`MAX_BODY` bytes, by ``Content-Length`` or chunked), else a :class:`BadRequest`."""
        allowed = f"allowed 1..{MAX_BODY} bytes"
        coding = (self.headers.get("Transfer-Encoding") or "").strip().lower()
        if coding:
            if coding != "chunked":
                raise BadRequest(400, "Transfer-Encoding", f"{coding!r} is not taken", "chunked, or Content-Length")
            return self._read_chunked(allowed)
        length = self.headers.get("Content-Length")
        if length is None:
            raise BadRequest(411, "request", "has no Content-Length", "Content-Length or Transfer-Encoding: chunked")
        if not length.strip().isdigit():
            raise BadRequest(400, "Content-Length", f"{length.strip()[:40]!r} is not a number of bytes", allowed)
        size = int(length)
        if not 0 < size <= MAX_BODY:
            raise BadRequest(413 if size else 400, "request", f"body of {size} bytes", allowed)
        body = self.rfile.read(size)
        if len(body) < size:
            raise BadRequest(400, "request", f"body ended after {len(body)} of {size} bytes", allowed)
        return body

    def _read_chunked(self, allowed: str) -> bytes:
        body = bytearray()
        while True:
            line = self.rfile.readline(1026)
            size_text = line.split(b";", 1)[0].strip()  # chunk extensions are ignored
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadRequest(400, "request", f"chunk size {size_text[:20]!r} is not hexadecimal", allowed) from None
            if size < 0:
                raise BadRequest(400, "request", "a chunk size is negative", allowed)
            if size == 0:
                while self.rfile.readline(1026) not in (b"\r\n", b"\n", b""):
                    pass  # trailer fields, up to the blank line
                break
            if len(body) + size > MAX_BODY:
                raise BadRequest(413, "request", f"body of more than {MAX_BODY} bytes (chunked)", allowed)
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise BadRequest(400, "request", "a chunk ended early or without its line break", allowed)
            body += chunk
        if not body:
            raise BadRequest(400, "request", "body of 0 bytes", allowed)
        return bytes(body)

    def _path(self) -> str | None:  # the request's path; None: refused, its Host is not this machine
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        if host in (HOST, "localhost"):
            return urlsplit(self.path).path
        self._error(403, "Host", f"{host!r} is not this machine", f"allowed {HOST} or localhost")
        return None

    def do_GET(self):  # noqa: N802 - BaseHTTPRequestHandler's API
        path = self._path()
        if path in ("/", "/index.html"):
            self._send(200, page_html(self.explorer.initial, live=True).encode("utf-8"), "text/html; charset=utf-8")
        elif path == "/api/health":
            self._json(200, {"ok": True, "model": self.explorer.label, "max_tokens": self.explorer.limit})
        elif path is not None:
            self._error(404, "path", f"{path} is not served", "allowed /, /api/explore (POST), /api/health")

    def do_POST(self):  # noqa: N802
        path = self._path()
        if path is None:
            return
        if path != "/api/explore":
            return self._error(404, "path", f"{path} takes no POST", "allowed /api/explore")
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            return self._error(415, "request", "is not JSON", 'Content-Type: application/json, {"prompt": "..."}')
        try:
            body = json.loads(self._read_body().decode("utf-8"))
        except BadRequest as e:
            return self._error(e.status, *e.parts)
        except TimeoutError:
            return self._error(408, "request", f"the body did not arrive within {READ_TIMEOUT} s", "send it at once")
        except (UnicodeDecodeError, ValueError):
            return self._error(400, "request", "body is not valid JSON", '{"prompt": "your text"}')
        except RecursionError:
            return self._error(400, "request", "body is JSON nested too deep", '{"prompt": "your text"}')
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

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (TimeoutError, ConnectionError):  # the request never came whole, or its client left: nothing to answer
            self.close_connection = True


class ExplorerServer(ThreadingHTTPServer):
    daemon_threads = True  # Ctrl-C does not wait for a page still loading
    url = property(lambda self: f"http://{HOST}:{self.server_address[1]}/")


def start_server(explorer: LiveExplorer, port: int = 0) -> ExplorerServer:
    """A server of ``explorer`` on 127.0.0.1:``port`` (0: any free one), not yet serving; a port in use: UsageError."""
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
    """Serve ``explorer`` until Ctrl-C (or SIGTERM made ``KeyboardInterrupt``); 0 once stopped."""
    server = start_server(explorer, port)
    where = f"at {server.url} (this machine only); Ctrl-C stops it"
    print(f"serving the attention explorer of {explorer.label} {where}", file=out, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped", file=out, flush=True)
    finally:
        server.server_close()
    return 0
