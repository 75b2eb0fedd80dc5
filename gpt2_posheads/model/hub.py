"""The Hugging Face hub as this package talks to it: whether it answers, and every download from it bounded in time.

``huggingface_hub`` waits without limit for an API answer, 60 s for a file's metadata on its second try, and restarts
its count of retries whenever bytes arrive, so a stalling hub, or a server that ignores ``Range`` and cuts a file at the
same byte every time, would hold a run for good. Every download runs under :func:`bounded`: connect and read timeouts of
``$GPT2_POSHEADS_HUB_TIMEOUT`` seconds (default 10) a request; a stop when nothing new arrives for twice that, when one
file is tried ``MAX_TRIES`` times in a row without getting further, or after ``$GPT2_POSHEADS_HUB_DEADLINE`` seconds in
all (default 1800); in a daemon thread the caller waits on, so Ctrl-C ends the wait at once; the client's log lines
kept, not printed, for the one :class:`HubTimeout` line that names what did not answer and ends with its last word."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import NamedTuple, TypeVar
from urllib.parse import quote

from .validation import UsageError

TIMEOUT_ENV = "GPT2_POSHEADS_HUB_TIMEOUT"
DEADLINE_ENV = "GPT2_POSHEADS_HUB_DEADLINE"
MAX_TRIES = 3  # tries in a row of one file that get no further than the furthest byte already received
PROBE_TIMEOUT = 3.0  # seconds the question "does the hub answer" waits (at most the request timeout)


class HubTimeout(TimeoutError):
    """A download stopped by its bounds (:func:`bounded`); the message says which bound and what did not answer."""


def seconds(name: str, default: float) -> float:
    """``$name`` as a positive number of seconds, ``default`` when it is not set."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"${name}", f"{text!r} is not a number of seconds", "a positive number", f"e.g. {default:g}")
    return value


def hub_endpoint() -> str:
    """The endpoint the Hugging Face clients talk to (``HF_ENDPOINT``, else the hub)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def error_chain(e: BaseException) -> list[BaseException]:
    """``e`` and the errors under it (``raise ... from``), outermost first: the clients wrap an HTTP error or a
    timeout in their own."""
    chain = [e]
    while chain[-1].__cause__ is not None and all(chain[-1].__cause__ is not c for c in chain):
        chain.append(chain[-1].__cause__)
    return chain


def http_status(e: BaseException) -> int | None:
    """The HTTP status of the first error in :func:`error_chain` that carries a response."""
    statuses = (getattr(getattr(c, "response", None), "status_code", None) for c in error_chain(e))
    return next((int(s) for s in statuses if s is not None), None)


def first_line(e: BaseException | str) -> str:
    """The first line of the innermost error's message (a client's advice after it is left out)."""
    root = e if isinstance(e, str) else error_chain(e)[-1]
    text = str(root).strip().splitlines()
    return (text[0] if text else type(root).__name__)[:200]


# --- does the hub answer: asked of the API the run will use, in seconds ------------------------------------------
class Unanswered(NamedTuple):
    """Why the hub's API did not answer: ``why``, words to follow "and"; ``offline``: no connection at all
    (``HF_HUB_OFFLINE``, no network, a dead proxy), as against an endpoint reached that stalls or fails."""

    why: str
    offline: bool


_REACHABLE: dict[tuple, tuple[float, Unanswered | None]] = {}  # (url, proxies) -> (when asked, answer)
_REACHABLE_TTL = 60.0  # seconds an answer is reused: every script of a job asks, the network rarely changes faster


def hub_problem(
    repo: str = "gpt2", repo_type: str = "model", revision: str | None = None, timeout: float | None = None
) -> Unanswered | None:
    """``None`` when the hub's API for ``repo`` (at ``revision``: a download's first request) answers HTTP below 500
    within ``timeout`` seconds (default 3, at most ``$GPT2_POSHEADS_HUB_TIMEOUT``), asked through ``huggingface_hub``'s
    own session and so its proxy; else :class:`Unanswered` (neither a TCP connection nor a front page answering while
    the API stalls is an answer). Reused for a minute."""
    from huggingface_hub import constants  # a dependency of transformers: always there

    offline = os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() not in ("0", "", "false", "no", "off")
    if offline or constants.HF_HUB_OFFLINE:  # set in the environment or in huggingface_hub's constants
        return Unanswered("HF_HUB_OFFLINE is set", True)
    url = f"{hub_endpoint()}/api/{repo_type}s/{repo}"
    url = f"{url}/revision/{quote(revision, safe='')}" if revision else url
    wait = min(PROBE_TIMEOUT if timeout is None else timeout, seconds(TIMEOUT_ENV, 10.0))
    proxies = tuple(os.environ.get(k, "") for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"))
    key = (url, proxies, os.environ.get("NO_PROXY", os.environ.get("no_proxy", "")))
    now = time.monotonic()
    if key in _REACHABLE and now - _REACHABLE[key][0] < _REACHABLE_TTL:
        return _REACHABLE[key][1]
    try:
        from huggingface_hub.utils import get_session

        status = get_session().get(url, timeout=wait, follow_redirects=True).status_code
        answer = None if status < 500 else Unanswered(f"{url} answered HTTP {status}", False)
    except Exception as e:  # noqa: BLE001 - any failure to get an HTTP answer means: not reachable from here
        name = type(e).__name__
        if "Timeout" in name:
            answer = Unanswered(f"{url} did not answer within {wait:g} s", False)
        elif "Connect" in name or "Proxy" in name:
            answer = Unanswered(f"there is no connection to {hub_endpoint()} ({name})", True)
        else:
            answer = Unanswered(f"{url} did not answer ({name}: {first_line(e)})", False)
    _REACHABLE[key] = (now, answer)
    return answer


def hub_reachable(
    timeout: float | None = None, repo: str = "gpt2", repo_type: str = "model", revision: str | None = None
) -> bool:
    """True when the hub's API for ``repo`` answers within ``timeout`` seconds (:func:`hub_problem`)."""
    return hub_problem(repo, repo_type, revision, timeout) is None


# --- bounded downloads --------------------------------------------------------------------------------------------
class _Guard:
    """The bounds of one download, enforced from the client's requests and the thread that waits (:meth:`overdue`)."""

    def __init__(self, timeout: float, deadline: float):
        self.timeout, self.deadline = timeout, deadline
        self.started = self.progressed = time.monotonic()
        self.furthest: dict[str, int] = {}  # url -> furthest byte of it received
        self.tries: dict[str, int] = {}  # url -> tries in a row that ended short without getting further
        self.last_url = ""
        self.stopped: str | None = None
        self.said: list[str] = []  # the client's log lines

    def overdue(self) -> str | None:
        now = time.monotonic()
        if now - self.started > self.deadline:
            return f"the download did not finish within {self.deadline:g} s (${DEADLINE_ENV})"
        if now - self.progressed > 2 * self.timeout:
            return f"{self.last_url} sent nothing new for {2 * self.timeout:g} s"
        return None

    def stop(self, why: str) -> None:
        self.stopped = self.stopped or why

    def check(self) -> None:
        if self.stopped:
            raise HubTimeout(self.stopped)

    def explain(self) -> str:
        """Why it stopped, with how many log lines the client said and the last (addresses left out)."""
        if not self.said:
            return self.stopped or ""
        last = re.sub(r"\s*(from )?https?://\S+?(:\s|\s|$)", r"\2", first_line(self.said[-1])).strip()
        return f"{self.stopped} (the client warned {len(self.said)} times, last: {last})"

    def body(self, url: str, start: int, chunks):
        """``chunks`` of ``url`` from byte ``start``: bytes past the furthest received are progress; a try ending short
        without getting further counts against :data:`MAX_TRIES`."""
        pos, further = start, False
        try:
            for chunk in chunks:
                self.check()
                pos += len(chunk)
                if pos > self.furthest.get(url, 0):
                    self.furthest[url], self.progressed, further = pos, time.monotonic(), True
                yield chunk
        except BaseException:
            self.tries[url] = 0 if further else self.tries.get(url, 0) + 1
            raise
        self.tries[url] = 0


_GUARDS: dict[int, _Guard] = {}  # thread ident -> the guard of the download that thread runs


def _on_request(request) -> None:
    """A request hook: within a bounded download, stop once it is stopped or a file had its tries, and bound every
    request's timeouts."""
    guard = _GUARDS.get(threading.get_ident())
    if guard is None:
        return
    guard.check()
    url = str(request.url).split("?")[0]
    guard.last_url = url
    if guard.tries.get(url, 0) >= MAX_TRIES:
        guard.stop(f"{url} got no further than byte {guard.furthest.get(url, 0)} in {MAX_TRIES + 1} tries")
        guard.check()
    given = request.extensions.get("timeout") or {}
    bound = {k: min(given.get(k) or guard.timeout, guard.timeout) for k in ("connect", "read", "write", "pool")}
    request.extensions = {**request.extensions, "timeout": bound}


def _on_response(response) -> None:
    """A response hook: within a bounded download, the body is counted (:meth:`_Guard.body`)."""
    guard = _GUARDS.get(threading.get_ident())
    if guard is None or response.request.method != "GET" or response.status_code not in (200, 206):
        return
    start = 0
    if response.status_code == 206:  # Content-Range: bytes <start>-<end>/<size>
        with contextlib.suppress(IndexError, ValueError):
            start = int(response.headers.get("Content-Range", "").split()[1].split("-")[0])
    url = str(response.request.url).split("?")[0]
    http = importlib.import_module(type(response).__module__.split(".")[0])  # httpx, or httpx2 (huggingface_hub 2)
    response.stream = _counted(http.SyncByteStream)(response.stream, guard.body(url, start, response.stream))


@functools.cache
def _counted(base: type) -> type:
    """A response body (a ``base``, the HTTP library's byte stream) read through :meth:`_Guard.body`."""

    class Counted(base):
        def __init__(self, inner, chunks):
            self.inner, self.chunks = inner, chunks

        def __iter__(self):
            yield from self.chunks

        def close(self):
            self.inner.close()

    return Counted


class _KeepClientLines(logging.Filter):
    """Keeps ``huggingface_hub``'s log lines of a bounded download for its error line."""

    def filter(self, record: logging.LogRecord) -> bool:
        guard = _GUARDS.get(record.thread or 0)
        if guard is None or not record.name.startswith("huggingface_hub"):
            return True
        if not getattr(record, "_kept", False):
            record._kept = True
            guard.said.append(record.getMessage())
        return False


_KEEP = _KeepClientLines()


def _install() -> None:
    """The hooks on the clients ``huggingface_hub``'s factory makes, and the log filter; idle outside a bounded
    download."""
    import huggingface_hub
    from huggingface_hub.utils import _http

    factory = getattr(_http, "_GLOBAL_CLIENT_FACTORY", None)
    if factory is not None and not getattr(factory, "bounded", False):

        def bounded_factory():
            client = factory()
            client.event_hooks["request"].append(_on_request)
            client.event_hooks["response"].append(_on_response)
            return client

        bounded_factory.bounded = True
        huggingface_hub.set_client_factory(bounded_factory)
    for logger in (logging.getLogger("huggingface_hub"), logging.getLogger()):
        for handler in logger.handlers:
            if _KEEP not in handler.filters:
                handler.addFilter(_KEEP)


T = TypeVar("T")


def bounded(call: Callable[[], T]) -> T:
    """``call()``'s value or error under the bounds (module doc), or :class:`HubTimeout`; the caller waits in steps
    of 50 ms, so an interrupt ends the wait at once."""
    _install()
    guard = _Guard(seconds(TIMEOUT_ENV, 10.0), seconds(DEADLINE_ENV, 1800.0))
    box: dict = {}

    def work():
        _GUARDS[threading.get_ident()] = guard
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e
        finally:
            _GUARDS.pop(threading.get_ident(), None)

    worker = threading.Thread(target=work, name="gpt2_posheads hub download", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.05)
            why = guard.overdue()
            if why is not None:
                guard.stop(why)
                break
    except BaseException:
        guard.stop("stopped by the caller")
        raise
    if guard.stopped:
        raise HubTimeout(guard.explain()) from box.get("error")
    if "error" in box:
        raise box["error"]
    return box["value"]


def download(
    repo_id: str,
    pick: Callable[[list[str]], list[str]],
    repo_type: str = "model",
    revision: str = "main",
    force: bool = False,
) -> dict[str, Path]:
    """``{name: cached path}`` of the files ``pick`` chooses among ``repo_id``'s at ``revision``, downloaded under
    :func:`bounded` into the Hugging Face cache (each renamed when complete; ``force``: over a cached copy)."""

    def fetch() -> dict[str, Path]:
        from huggingface_hub import HfApi, hf_hub_download

        timeout = seconds(TIMEOUT_ENV, 10.0)
        info = HfApi().repo_info(repo_id, repo_type=repo_type, revision=revision, timeout=timeout)
        names = pick(sorted(s.rfilename for s in info.siblings or []))
        options = dict(repo_type=repo_type, revision=revision, force_download=force, etag_timeout=timeout)
        return {n: Path(hf_hub_download(repo_id, n, **options)) for n in names}

    return bounded(fetch)


def snapshot_folder(name: str, path: Path) -> Path:
    """The snapshot folder that holds ``path``, the cached copy of the repository's file ``name``."""
    return path.parents[len(PurePosixPath(name).parts) - 1]
