"""A local HTTP server that speaks the Hugging Face hub's protocol, for tests that run the real clients.

``huggingface_hub`` (``hf_hub_download``, ``snapshot_download``, ``HfApi``, ``HfFileSystem``), ``transformers``
(``from_pretrained``) and ``datasets`` (``load_dataset``) talk to it through ``HF_ENDPOINT`` exactly as they talk to
huggingface.co: nothing on the client side is mocked. The server holds repos (models and datasets), each with named
revisions (branches such as ``main`` and refs such as ``refs/convert/parquet``), and answers:

* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` (``/datasets/{repo}/...`` for datasets): the file, with the headers
  the clients read (``ETag``, ``X-Repo-Commit``, ``X-Linked-Etag``/``X-Linked-Size`` for LFS files,
  ``Content-Length``, ``Accept-Ranges``), ``Range`` requests (206) and the hub's error codes (``X-Error-Code``:
  ``EntryNotFound``, ``RevisionNotFound``, ``RepoNotFound``, ``GatedRepo``);
* ``GET /api/{models|datasets}/{repo}[/revision/{rev}]``: repo info (``sha``, ``siblings``, ``cardData``, ...);
* ``GET /api/{models|datasets}/{repo}/tree/{rev}[/{path}]``: the tree listing, paginated through ``Link`` headers;
* ``POST /api/{models|datasets}/{repo}/paths-info/{rev}``: information on given paths;
* ``GET /api/{models|datasets}/{repo}/refs``: branches and ``refs/convert/*`` refs;
* ``GET /``: a liveness probe.

It never sends ``X-Xet-*`` headers, so the clients download over plain HTTP. Faults (rate limiting, server errors,
stalled or cut downloads, a captive-portal page) can be injected per request path, to test how a program behaves
when the hub misbehaves. ``standard_content`` fills a server with the repos the package itself asks the hub for.

Run ``python tests/hubserver.py --shared ../shared`` to serve the standard content by hand.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import email.utils
import fnmatch
import hashlib
import json
import os
import random
import select
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

FileSource = bytes | Path
"""The content of one file in a repo: its bytes, or a file on disk read when served."""

LFS_PATTERNS = ("*.safetensors", "*.bin", "*.parquet", "*.arrow", "*.h5", "*.msgpack", "*.pt", "*.pth", "*.ckpt")
"""Files stored through git LFS, as in the hub's default ``.gitattributes``; so are files of 10 MiB or more."""
LFS_MIN_SIZE = 10 * 1024 * 1024
GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS).encode()
FIXED_DATE = "2024-01-01T00:00:00.000Z"
"""``lastModified``/``createdAt`` of every repo: the listing stays the same from one run to the next."""
TREE_PAGE = 1000
TREE_PAGE_EXPANDED = 50
CHUNK = 64 * 1024
FAULT_KINDS = ("429", "500", "stall", "cut", "html")
PORTAL_HTML = (
    b"<!DOCTYPE html><html><head><title>Network login</title></head><body><h1>Sign in to continue</h1>"
    b"<p>This network requires you to accept the terms of use before browsing.</p></body></html>"
)
API_TAILS = ("revision", "tree", "paths-info", "refs", "resolve", "commits", "discussions")
"""Path segments that follow a repo id: a one-part id (``gpt2``) is told from a two-part one by them."""


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob with content ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


_HASHES: dict[tuple[str, int, int], tuple[str, str]] = {}
_HASHES_LOCK = threading.Lock()


def _file_hashes(path: Path, git_sha1: bool) -> tuple[str, str]:
    """``(git blob sha1 or "", sha256)`` of a file, remembered by path, size and modification time (repos that share
    a large weights file hash it once). ``git_sha1``: also the blob id of the content, which an LFS file (whose git
    blob is its pointer) does not need."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _HASHES_LOCK:
        known = _HASHES.get(key)
        if known is not None and (known[0] or not git_sha1):
            return known
        sha1 = hashlib.sha1(b"blob %d\0" % st.st_size) if git_sha1 else None
        sha256 = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                sha256.update(chunk)
                if sha1 is not None:
                    sha1.update(chunk)
        _HASHES[key] = (sha1.hexdigest() if sha1 is not None else "", sha256.hexdigest())
        return _HASHES[key]


@dataclass
class RepoFileEntry:
    """One file of one revision: its content and the hashes the hub reports for it."""

    path: str
    source: FileSource
    size: int = 0
    blob_id: str = ""
    sha256: str = ""
    lfs: bool = False

    def __post_init__(self):
        name = self.path.rsplit("/", 1)[-1]
        if isinstance(self.source, Path):
            self.size = self.source.stat().st_size
            self.lfs = self.size >= LFS_MIN_SIZE or any(fnmatch.fnmatch(name, p) for p in LFS_PATTERNS)
            self.blob_id, self.sha256 = _file_hashes(self.source, git_sha1=not self.lfs)
        else:
            self.source = bytes(self.source)
            self.size = len(self.source)
            self.lfs = self.size >= LFS_MIN_SIZE or any(fnmatch.fnmatch(name, p) for p in LFS_PATTERNS)
            self.blob_id, self.sha256 = git_blob_sha1(self.source), hashlib.sha256(self.source).hexdigest()
        if self.lfs:
            # What git stores is the LFS pointer: the tree's oid is the pointer's blob id.
            self.blob_id = git_blob_sha1(self.pointer())

    def pointer(self) -> bytes:
        return f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n".encode()

    @property
    def etag(self) -> str:
        """What the hub sends as ``ETag``: the sha256 of an LFS file, the git blob id of any other."""
        return self.sha256 if self.lfs else self.blob_id

    def read(self, start: int, end: int) -> Iterator[bytes]:
        """The bytes ``[start, end)`` in chunks."""
        if isinstance(self.source, bytes):
            for i in range(start, end, CHUNK):
                yield self.source[i : min(end, i + CHUNK)]
            return
        with open(self.source, "rb") as f:
            f.seek(start)
            pos = start
            while pos < end:
                chunk = f.read(min(CHUNK, end - pos))
                if not chunk:
                    return
                pos += len(chunk)
                yield chunk

    def tree_entry(self, commit: str | None = None) -> dict:
        e: dict = {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.path}
        if self.lfs:
            e["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": len(self.pointer())}
        if commit is not None:
            e["lastCommit"] = {"id": commit, "title": "Upload files", "date": FIXED_DATE}
        return e


@dataclass
class Revision:
    """One revision of a repo: its files by path and a commit sha derived from them, the revision's name and
    ``repo`` (so that two repos holding the same files still have commits of their own)."""

    name: str
    files: dict[str, RepoFileEntry]
    repo: str = ""
    sha: str = ""

    def __post_init__(self):
        h = hashlib.sha1(f"{self.repo}\0{self.name}".encode())
        for p in sorted(self.files):
            h.update(f"\0{p}\0{self.files[p].blob_id}".encode())
        self.sha = h.hexdigest()

    def directories(self) -> set[str]:
        dirs = set()
        for p in self.files:
            parts = p.split("/")[:-1]
            dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        return dirs

    def dir_entry(self, path: str, commit: str | None = None) -> dict:
        h = hashlib.sha1(path.encode())
        for p in sorted(self.files):
            if p.startswith(path + "/"):
                h.update(f"{p}\0{self.files[p].blob_id}".encode())
        e: dict = {"type": "directory", "oid": h.hexdigest(), "size": 0, "path": path}
        if commit is not None:
            e["lastCommit"] = {"id": commit, "title": "Upload files", "date": FIXED_DATE}
        return e


@dataclass
class Repo:
    """A model or dataset repo: revisions by name, access (``gated``), a card and a download stall for tests."""

    repo_type: str
    repo_id: str
    revisions: dict[str, Revision] = field(default_factory=dict)
    gated: bool = False
    card_data: dict | None = None
    tags: list[str] = field(default_factory=list)
    stall_after: int | None = None

    def revision(self, rev: str) -> Revision | None:
        """A revision by branch/ref name or by commit sha (a prefix of at least 7 hex digits)."""
        if rev in self.revisions:
            return self.revisions[rev]
        if len(rev) >= 7 and all(c in "0123456789abcdef" for c in rev):
            for r in self.revisions.values():
                if r.sha.startswith(rev):
                    return r
        return None


@dataclass
class Fault:
    """A misbehaviour for requests whose path contains ``match``; ``times=None`` means every time."""

    match: str
    kind: str
    times: int | None = None
    after: int | None = None
    method: str | None = None
    ranges: bool = True


def _files_of(folder_or_files: str | os.PathLike | Mapping[str, FileSource]) -> dict[str, FileSource]:
    if isinstance(folder_or_files, Mapping):
        return {
            str(k): (Path(v) if isinstance(v, (str, os.PathLike)) else bytes(v)) for k, v in folder_or_files.items()
        }
    root = Path(folder_or_files)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a folder")
    files: dict[str, FileSource] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not any(part.startswith(".") and part != ".gitattributes" for part in rel.parts):
            files[rel.as_posix()] = p
    return files


class HubServer:
    """A hub on ``127.0.0.1`` serving from a background thread; started on construction, ended by ``stop()``.

    ``requests`` logs every request as ``(method, raw path with query, status)``; the status is ``None`` for a
    request answered by silence (a ``stall`` fault before any header). Repos are added with ``add_model``,
    ``add_dataset`` and ``add_gated``; faults with ``fault`` and ``clear_faults``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[tuple[str, str, int | None]] = []
        self.tree_page = TREE_PAGE
        self.tree_page_expanded = TREE_PAGE_EXPANDED
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.hub = self  # type: ignore[attr-defined]
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="hubserver", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving: stalled responses end, the port is freed."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # ----- content

    def _add(self, repo_type: str, repo_id: str, revisions: Mapping[str, Mapping[str, FileSource]], **opts) -> Repo:
        with self._lock:
            repo = self.repos.get((repo_type, repo_id)) or Repo(repo_type, repo_id)
            for name, files in revisions.items():
                entries = {p: RepoFileEntry(p, src) for p, src in files.items()}
                repo.revisions[name] = Revision(name, entries, f"{repo_type}/{repo_id}")
            for k, v in opts.items():
                if v is not None:
                    setattr(repo, k, v)
            self.repos[(repo_type, repo_id)] = repo
            return repo

    def add_model(
        self,
        repo_id: str,
        folder_or_files: str | os.PathLike | Mapping[str, FileSource],
        revision: str = "main",
        *,
        stall_after: int | None = None,
        card_data: dict | None = None,
        gated: bool | None = None,
        gitattributes: bool = True,
    ) -> Repo:
        """Serve a model repo from a local folder (hidden files left out) or from ``{path_in_repo: bytes | Path}``.

        ``stall_after``: every LFS file of the repo (the weights) stalls after that many bytes, on every download and
        resumption, to show that a half download is never used. ``gitattributes``: add the hub's default
        ``.gitattributes`` when the files lack one, as every repo created on the hub has.
        """
        files = _files_of(folder_or_files)
        if gitattributes:
            files.setdefault(".gitattributes", GITATTRIBUTES)
        return self._add("model", repo_id, {revision: files}, stall_after=stall_after, card_data=card_data, gated=gated)

    def add_dataset(
        self,
        repo_id: str,
        revisions: Mapping[str, Mapping[str, FileSource] | str | os.PathLike],
        *,
        card_data: dict | None = None,
        gated: bool | None = None,
        gitattributes: bool = True,
    ) -> Repo:
        """Serve a dataset repo: ``{revision: {path_in_repo: bytes | Path} or a folder}``, e.g. ``main`` and
        ``refs/convert/parquet``."""
        revs = {}
        for name, files in revisions.items():
            revs[name] = _files_of(files)
            if gitattributes and not name.startswith("refs/"):
                revs[name].setdefault(".gitattributes", GITATTRIBUTES)
        return self._add("dataset", repo_id, revs, card_data=card_data, gated=gated)

    def add_gated(
        self,
        repo_id: str,
        folder_or_files: str | os.PathLike | Mapping[str, FileSource] | None = None,
        repo_type: str = "model",
    ) -> Repo:
        """A gated repo: its info and listing are public, its files answer 401 (403 with a token) ``GatedRepo``."""
        files = _files_of(folder_or_files) if folder_or_files is not None else {"config.json": b"{}\n"}
        files.setdefault(".gitattributes", GITATTRIBUTES)
        return self._add(repo_type, repo_id, {"main": files}, gated=True)

    # ----- faults

    def fault(
        self,
        match: str,
        kind: str,
        times: int | None = None,
        after: int | None = None,
        method: str | None = None,
        ranges: bool = True,
    ) -> Fault:
        """Misbehave on requests whose path (raw or URL-decoded) contains ``match``.

        ``kind``:

        * ``"429"``: rate limited, ``Retry-After: 0``; ``"500"``: a server error; ``"html"``: 200 with a
          captive-portal page and none of the hub's headers;
        * ``"stall"``: a file download (``GET``) sends its headers and its bytes up to offset ``after`` (default 0),
          then nothing until the client hangs up or the server stops; any other request gets no answer at all;
        * ``"cut"``: a file download announces its whole ``Content-Length`` and closes the connection at offset
          ``after`` (default half the file); a ``HEAD`` is closed unanswered; any other request is closed half way
          through its body.

        Offsets are positions in the file, so a resumed download (``Range``) starting past them gets no further.
        ``ranges=False``: the request's ``Range`` is ignored (200 and the file from byte 0, as some mirrors and proxies
        answer), so a ``cut`` file is cut at the same byte on every try while bytes keep arriving.
        ``times``: how many requests misbehave (``None``: all). ``method``: only requests of that method
        (``"GET"`` leaves the metadata ``HEAD`` of a download alone). The first matching fault with requests left
        applies.

        What the clients do about it: ``huggingface_hub`` retries a 429 or 5xx ``HEAD`` five times with backoff
        (about a second each for a 429), and a broken download five times a second apart, resuming from what it has
        written, which it writes in 10 MiB pieces (so a download broken before 10 MiB starts again from 0), and
        counting its five tries again whenever a piece arrives (so a file cut past 10 MiB without ``Range`` support is
        tried for ever). A stalled ``HEAD`` is tried again with a 60 s timeout, whatever ``HF_HUB_ETAG_TIMEOUT`` says;
        an API request has no timeout at all.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
        f = Fault(match, kind, times, after, method.upper() if method else None, ranges)
        with self._lock:
            self._faults.append(f)
        return f

    def stall_api(self) -> None:
        """A hub whose front page answers while its API and its files never do: every ``/api/`` request and every
        download (its ``HEAD`` too) stalls until the test's faults are cleared."""
        self.fault("/api/", "stall")
        self.fault("/resolve/", "stall")

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, method: str, raw_path: str) -> Fault | None:
        decoded = unquote(raw_path)
        with self._lock:
            for f in self._faults:
                if f.method not in (None, method):
                    continue
                if (f.match in raw_path or f.match in decoded) and (f.times is None or f.times > 0):
                    if f.times is not None:
                        f.times -= 1
                    return f
        return None

    # ----- client settings

    def env(self, hf_home: str | os.PathLike, timeout: int = 3, base: Mapping[str, str] | None = None) -> dict:
        """The environment of a subprocess that uses this server as its hub, with caches under ``hf_home``.

        ``base`` (default ``os.environ``) without proxy settings, tokens and offline switches, plus ``HF_ENDPOINT``,
        ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_DATASETS_CACHE``, telemetry and Xet off, and ``timeout`` seconds
        (a whole number, as the clients parse it) for ``HF_HUB_ETAG_TIMEOUT``, ``HF_HUB_DOWNLOAD_TIMEOUT`` and the
        package's own ``GPT2_POSHEADS_HUB_TIMEOUT``.
        """
        env = {k: v for k, v in (os.environ if base is None else base).items() if not _dropped_var(k)}
        env.update(self.settings(hf_home, timeout))
        return env

    def settings(self, hf_home: str | os.PathLike, timeout: int | float = 3) -> dict[str, str]:
        """Only the variables that ``env`` sets (no copy of the current environment)."""
        home = Path(hf_home)
        return {
            "HF_ENDPOINT": self.url,
            "HF_HOME": str(home),
            "HF_HUB_CACHE": str(home / "hub"),
            "HF_ASSETS_CACHE": str(home / "assets"),
            "HF_XET_CACHE": str(home / "xet"),
            "HF_DATASETS_CACHE": str(home / "datasets"),
            "HF_MODULES_CACHE": str(home / "modules"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_ETAG_TIMEOUT": str(timeout),
            "HF_HUB_DOWNLOAD_TIMEOUT": str(timeout),
            "GPT2_POSHEADS_HUB_TIMEOUT": str(timeout),
        }

    @contextlib.contextmanager
    def patched(self, monkeypatch, hf_home: str | os.PathLike, *, offline: bool = False, timeout: float = 3):
        """Point the clients of this process at the server, caches under ``hf_home``: the environment (for what is
        imported later) and the module constants that ``huggingface_hub``, ``datasets`` and ``transformers`` read at
        import time. ``offline``: ``HF_HUB_OFFLINE=1``. ``timeout`` (seconds, fractions allowed in process): the
        etag and download timeouts.

        ``monkeypatch``: a pytest ``MonkeyPatch``; the settings then last until the test's teardown, like its other
        patches. With ``None`` they are undone when the block ends.
        """
        own = monkeypatch is None
        if own:
            import pytest

            monkeypatch = pytest.MonkeyPatch()
        try:
            _apply_client_settings(monkeypatch, self, Path(hf_home), offline, timeout)
            yield self
        finally:
            if own:
                monkeypatch.undo()
                hffs = sys.modules.get("huggingface_hub.hf_file_system")
                if hffs is not None:
                    hffs.HfFileSystem.clear_instance_cache()


def _dropped_var(name: str) -> bool:
    u = name.upper()
    return (
        u.endswith("_PROXY")
        or u in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "TRANSFORMERS_CACHE", "HUGGINGFACE_HUB_CACHE")
        or u in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HUGGINGFACE_CO_STAGING")
    )


def _apply_client_settings(mp, server: HubServer, home: Path, offline: bool, timeout: float) -> None:
    """Set the environment and the import-time constants of the hub clients (those already imported; the ones
    imported later read the environment)."""
    for k in list(os.environ):
        if _dropped_var(k):
            mp.delenv(k, raising=False)
    for k, v in server.settings(home, max(1, round(timeout))).items():
        mp.setenv(k, v)
    if offline:
        mp.setenv("HF_HUB_OFFLINE", "1")

    from huggingface_hub import constants

    c = {
        "ENDPOINT": server.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": server.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HUGGINGFACE_HUB_CACHE": str(home / "hub"),
        "HF_ASSETS_CACHE": str(home / "assets"),
        "HUGGINGFACE_ASSETS_CACHE": str(home / "assets"),
        "HF_XET_CACHE": str(home / "xet"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "CHECK_FOR_UPDATE_DONE_PATH": str(home / ".check_for_update_done"),
        "HF_HUB_OFFLINE": offline,
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_DISABLE_XET": True,
        "HF_HUB_DISABLE_UPDATE_CHECK": True,
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": True,
        "HF_HUB_ETAG_TIMEOUT": timeout,
        "HF_HUB_DOWNLOAD_TIMEOUT": timeout,
    }
    for name, value in c.items():
        if hasattr(constants, name):
            mp.setattr(constants, name, value)
    if hasattr(constants, "HF_URL_HOSTS"):
        mp.setattr(constants, "HF_URL_HOSTS", constants.HF_URL_HOSTS | {server.host})
    from huggingface_hub import hf_api
    from huggingface_hub.utils import _http

    mp.setattr(hf_api.api, "endpoint", server.url)  # the instance behind huggingface_hub.list_repo_files & co
    if hasattr(_http, "_HUB_ORIGINS"):
        mp.setattr(_http, "_HUB_ORIGINS", _http._HUB_ORIGINS | {("http", server.host, server.port)})

    hffs = sys.modules.get("huggingface_hub.hf_file_system")
    if hffs is not None:
        # fsspec keeps HfFileSystem instances (endpoint, listings, resolved revisions) by their arguments, which
        # do not name the endpoint: a cached one may point at another server
        hffs.HfFileSystem.clear_instance_cache()
    dcfg = sys.modules.get("datasets.config")
    if dcfg is not None:
        d = {
            "HF_ENDPOINT": server.url,
            "HUB_DATASETS_URL": server.url + "/datasets/{repo_id}/resolve/{revision}/{path}",
            "HF_CACHE_HOME": str(home),
            "HF_DATASETS_CACHE": home / "datasets",
            "HF_MODULES_CACHE": home / "modules",
            "DOWNLOADED_DATASETS_PATH": home / "datasets" / "downloads",
            "EXTRACTED_DATASETS_PATH": home / "datasets" / "downloads" / "extracted",
            "HF_HUB_OFFLINE": offline,
            "HF_DATASETS_OFFLINE": offline,
        }
        for name, value in d.items():
            if hasattr(dcfg, name):
                mp.setattr(dcfg, name, value)
    thub = sys.modules.get("transformers.utils.hub")
    if thub is not None and hasattr(thub, "HF_MODULES_CACHE"):
        mp.setattr(thub, "HF_MODULES_CACHE", str(home / "modules"))


# ----- HTTP


class _Stop(Exception):
    """The response has been dealt with (or abandoned); nothing more to send."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hubserver"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined]

    # ----- plumbing

    def _dispatch(self, method: str) -> None:
        self._method = method
        n = int(self.headers.get("Content-Length") or 0)
        self._body = self.rfile.read(n) if n else b""
        self._fault = self.hub._take_fault(method, self.path)
        try:
            if self._fault is not None and self._fault.kind in ("429", "500", "html"):
                self._send_fault(self._fault.kind)
            else:
                self._route(method)
        except _Stop:
            pass
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _log(self, status: int | None) -> None:
        self.hub.requests.append((self._method, self.path, status))

    def _start(self, status: int, headers: Mapping[str, str]) -> None:
        self._log(status)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("X-Request-Id", f"Root={uuid.uuid4()}")
        self.end_headers()

    def _reply(self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None, ctype: str = "") -> None:
        """A whole response from ``body`` (not sent for HEAD); ``stall``/``cut`` faults apply here."""
        h = {"Content-Type": ctype or "text/plain; charset=utf-8", "Content-Length": str(len(body)), **(headers or {})}
        f = self._fault
        if f is not None and f.kind == "stall":
            self._log(None)
            self._stall()
        if f is not None and f.kind == "cut" and self._method == "HEAD":
            self._log(None)
            self._drop()
        self._start(status, h)
        if self._method == "HEAD" or not body:
            return
        if f is not None and f.kind == "cut":
            self.wfile.write(body[: len(body) // 2])
            self._drop()
        self.wfile.write(body)

    def _json(self, obj, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self._reply(status, json.dumps(obj).encode(), headers, "application/json; charset=utf-8")

    def _error(self, status: int, code: str | None, message: str, headers: Mapping[str, str] | None = None) -> None:
        h = {"X-Error-Message": message, **(headers or {})}
        if code:
            h["X-Error-Code"] = code
        self._json({"error": message}, status, h)

    def _send_fault(self, kind: str) -> None:
        self._fault = None
        if kind == "429":
            self._reply(429, b"Too Many Requests\n", {"Retry-After": "0"})
        elif kind == "500":
            self._reply(500, b"Internal Server Error\n")
        else:
            self._reply(200, PORTAL_HTML, ctype="text/html; charset=utf-8")

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _stall(self) -> None:
        """Send nothing more until the server stops or the client hangs up, then close."""
        with contextlib.suppress(OSError):
            self.wfile.flush()
        while not self.hub.stopping.wait(0.05):
            if self._client_gone():
                break
        self._drop()

    def _drop(self) -> None:
        """Close the connection in the middle of a response."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        raise _Stop

    # ----- routes

    def _route(self, method: str) -> None:
        parts = urlsplit(self.path)
        segs = [unquote(s) for s in parts.path.split("/")[1:]]
        query = parse_qs(parts.query, keep_blank_values=True)
        if segs in ([], [""]):
            return self._reply(200, b"hubserver: a local Hugging Face hub for tests\n")
        if segs[0] == "api":
            if len(segs) >= 3 and segs[1] in ("models", "datasets", "spaces"):
                return self._api_repo(method, segs[1][:-1], segs[2:], query)
            return self._error(404, None, "Not Found")
        repo_type = "model"
        if segs[0] in ("datasets", "spaces"):
            repo_type, segs = segs[0][:-1], segs[1:]
        if "resolve" in segs[1:3] and method in ("GET", "HEAD"):
            i = segs.index("resolve", 1)
            return self._resolve(repo_type, "/".join(segs[:i]), segs[i + 1 :])
        return self._error(404, None, "Not Found")

    def _find_repo(self, repo_type: str, rest: list[str]) -> tuple[str, list[str]]:
        """Split ``rest`` into a repo id (one or two segments) and what follows it."""
        if len(rest) >= 2 and (repo_type, f"{rest[0]}/{rest[1]}") in self.hub.repos:
            return f"{rest[0]}/{rest[1]}", rest[2:]
        if (repo_type, rest[0]) in self.hub.repos or len(rest) == 1 or rest[1] in API_TAILS:
            return rest[0], rest[1:]
        return f"{rest[0]}/{rest[1]}", rest[2:]

    @staticmethod
    def _split_revision(repo: Repo, segs: list[str]) -> tuple[str, list[str]]:
        """The revision at the start of ``segs`` (a ref name sent with plain slashes spans several segments)."""
        for n in range(len(segs), 1, -1):
            name = "/".join(segs[:n])
            if name in repo.revisions:
                return name, segs[n:]
        return (segs[0], segs[1:]) if segs else ("main", [])

    def _repo_or_error(self, repo_type: str, repo_id: str) -> Repo | None:
        repo = self.hub.repos.get((repo_type, repo_id))
        if repo is None:
            # What the hub answers an unauthenticated client for a repo that does not exist (or is private).
            self._error(401, "RepoNotFound", "Invalid username or password.")
        return repo

    def _revision_or_error(self, repo: Repo, rev: str) -> Revision | None:
        r = repo.revision(rev)
        if r is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return r

    def _resolve(self, repo_type: str, repo_id: str, rest: list[str]) -> None:
        repo = self._repo_or_error(repo_type, repo_id)
        if repo is None:
            return
        rev_name, path_segs = self._split_revision(repo, rest)
        rev = self._revision_or_error(repo, rev_name)
        if rev is None:
            return
        path = "/".join(path_segs)
        entry = rev.files.get(path)
        commit = {"X-Repo-Commit": rev.sha}
        if entry is None:
            return self._error(404, "EntryNotFound", "Entry not found", commit)
        if repo.gated:
            authed = bool(self.headers.get("Authorization"))
            msg = (
                f"Access to {repo_type} {repo_id} is restricted. You must have access to it and be authenticated "
                "to access it. Please log in."
                if not authed
                else f"Access to {repo_type} {repo_id} is restricted and you are not in the authorized list."
            )
            return self._error(403 if authed else 401, "GatedRepo", msg, commit)
        self._send_file(entry, rev, repo)

    def _send_file(self, entry: RepoFileEntry, rev: Revision, repo: Repo) -> None:
        size = entry.size
        start, end, status = 0, size, 200
        ranges = self._fault is None or self._fault.ranges
        rng = self.headers.get("Range") if ranges else None
        headers = {
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes" if ranges else "none",
            "ETag": f'"{entry.etag}"',
            "X-Repo-Commit": rev.sha,
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(entry.path.rsplit('/', 1)[-1])}; "
            f'filename="{entry.path.rsplit("/", 1)[-1]}";',
            "Last-Modified": email.utils.formatdate(0, usegmt=True),
            "Cache-Control": "public, max-age=0",
        }
        if entry.lfs:
            headers["X-Linked-Etag"] = f'"{entry.sha256}"'
            headers["X-Linked-Size"] = str(size)
        if rng:
            parsed = _parse_range(rng, size)
            if parsed is None:
                headers["Content-Range"] = f"bytes */{size}"
                return self._reply(416, b"", {k: v for k, v in headers.items() if k != "Content-Type"})
            start, end = parsed
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        headers["Content-Length"] = str(end - start)
        f = self._fault
        limit = None
        if f is not None and f.kind in ("stall", "cut"):
            limit = f.after if f.after is not None else (0 if f.kind == "stall" else size // 2)
        elif repo.stall_after is not None and entry.lfs:
            f, limit = Fault("", "stall"), repo.stall_after
        if f is not None and self._method == "HEAD":
            if f.kind == "stall" and f is self._fault:
                self._log(None)
                self._stall()
            if f.kind == "cut":
                self._log(None)
                self._drop()
        self._start(status, headers)
        if self._method == "HEAD":
            return
        pos = start
        for chunk in entry.read(start, end):
            if limit is not None and pos + len(chunk) > limit:
                keep = max(0, limit - pos)
                self.wfile.write(chunk[:keep])
                self._stall() if f.kind == "stall" else self._drop()
            self.wfile.write(chunk)
            pos += len(chunk)

    # ----- API

    def _api_repo(self, method: str, repo_type: str, rest: list[str], query: dict) -> None:
        repo_id, tail = self._find_repo(repo_type, rest)
        repo = self._repo_or_error(repo_type, repo_id)
        if repo is None:
            return
        kind = tail[0] if tail else ""
        if method == "GET" and kind in ("", "revision"):
            rev_name, _ = self._split_revision(repo, tail[1:]) if kind else ("main", [])
            rev = self._revision_or_error(repo, rev_name)
            if rev is not None:
                self._json(self._info(repo, rev, query))
            return
        if method == "GET" and kind == "tree":
            rev_name, path_segs = self._split_revision(repo, tail[1:])
            rev = self._revision_or_error(repo, rev_name)
            if rev is not None:
                self._tree(repo, rev, "/".join(path_segs).strip("/"), query)
            return
        if method == "POST" and kind == "paths-info":
            rev_name, _ = self._split_revision(repo, tail[1:])
            rev = self._revision_or_error(repo, rev_name)
            if rev is not None:
                self._paths_info(rev)
            return
        if method == "GET" and kind == "refs":
            return self._json(self._refs(repo))
        self._error(404, None, "Not Found")

    def _info(self, repo: Repo, rev: Revision, query: dict) -> dict:
        author = repo.repo_id.split("/")[0] if "/" in repo.repo_id else None
        info: dict = {
            "_id": hashlib.sha1(f"{repo.repo_type}/{repo.repo_id}".encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": author,
            "sha": rev.sha,
            "lastModified": FIXED_DATE,
            "createdAt": FIXED_DATE,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": list(repo.tags),
            "cardData": repo.card_data or {},
            "siblings": [{"rfilename": p} for p in sorted(rev.files)],
            "usedStorage": sum(e.size for e in rev.files.values()),
        }
        if repo.repo_type == "model":
            info["modelId"] = repo.repo_id
            info["library_name"] = "transformers"
            info["pipeline_tag"] = "text-generation"
            cfg = rev.files.get("config.json")
            if cfg is not None:
                with contextlib.suppress(Exception):
                    data = json.loads(b"".join(cfg.read(0, cfg.size)))
                    info["config"] = {k: data[k] for k in ("architectures", "model_type") if k in data}
        else:
            info["description"] = (repo.card_data or {}).get("pretty_name", "")
        if query.get("blobs") in (["true"], ["True"], ["1"]):
            info["siblings"] = [
                {"rfilename": e.path, "size": e.size, "blobId": e.blob_id}
                | ({"lfs": {"sha256": e.sha256, "size": e.size, "pointerSize": len(e.pointer())}} if e.lfs else {})
                for _, e in sorted(rev.files.items())
            ]
        expand = query.get("expand") or query.get("expand[]")
        if expand:
            # Like the hub: only the properties asked for (those known here), plus the ids.
            keep = {"_id", "id"} | set(expand)
            info = {k: v for k, v in info.items() if k in keep}
        return info

    def _tree(self, repo: Repo, rev: Revision, path: str, query: dict) -> None:
        recursive = (query.get("recursive") or ["false"])[0].lower() in ("1", "true")
        expand = (query.get("expand") or ["false"])[0].lower() in ("1", "true")
        dirs = rev.directories()
        if path and path not in dirs:
            if path in rev.files:
                # The hub lists a file path as an empty folder would be listed: no entries.
                return self._json([])
            return self._error(404, "EntryNotFound", f'{path} does not exist on "{rev.name}"')
        prefix = path + "/" if path else ""
        entries = []
        commit = rev.sha if expand else None
        for d in sorted(dirs):
            if d.startswith(prefix) and (recursive or "/" not in d[len(prefix) :]):
                entries.append(rev.dir_entry(d, commit))
        for p in sorted(rev.files):
            if p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :]):
                entries.append(rev.files[p].tree_entry(commit))
        if recursive:
            entries.sort(key=lambda e: e["path"])
        page = self.hub.tree_page_expanded if expand else self.hub.tree_page
        offset = 0
        cursor = (query.get("cursor") or [""])[0]
        if cursor:
            with contextlib.suppress(ValueError):
                offset = int(base64.urlsafe_b64decode(cursor.encode()).decode())
        headers = {}
        if offset + page < len(entries):
            params = {k: v[0] for k, v in query.items() if k != "cursor"}
            params["cursor"] = base64.urlsafe_b64encode(str(offset + page).encode()).decode()
            next_url = f"{self.hub.url}{urlsplit(self.path).path}?{urlencode(params)}"
            headers["Link"] = f'<{next_url}>; rel="next"'
        self._json(entries[offset : offset + page], headers=headers)

    def _paths_info(self, rev: Revision) -> None:
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            body = json.loads(self._body or b"{}")
            paths, expand = body.get("paths", []), body.get("expand", False)
        else:
            form = parse_qs(self._body.decode(), keep_blank_values=True)
            paths, expand = form.get("paths", []), (form.get("expand") or ["false"])[0]
        if isinstance(paths, str):
            paths = [paths]
        expand = str(expand).lower() in ("1", "true")
        commit = rev.sha if expand else None
        dirs = rev.directories()
        out = []
        for p in paths:
            p = p.strip("/")
            if p in rev.files:
                out.append(rev.files[p].tree_entry(commit))
            elif p in dirs:
                out.append(rev.dir_entry(p, commit))
        self._json(out)

    @staticmethod
    def _refs(repo: Repo) -> dict:
        refs: dict = {"branches": [], "converts": [], "tags": []}
        for name, r in repo.revisions.items():
            if name.startswith("refs/convert/"):
                refs["converts"].append({"name": name.split("/", 2)[2], "ref": name, "targetCommit": r.sha})
            elif name.startswith("refs/tags/"):
                refs["tags"].append({"name": name.split("/", 2)[2], "ref": name, "targetCommit": r.sha})
            else:
                refs["branches"].append({"name": name, "ref": f"refs/heads/{name}", "targetCommit": r.sha})
        return refs


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of a single ``bytes=`` range, or None when it cannot be satisfied."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    a, _, b = spec.strip().partition("-")
    try:
        if a == "":
            n = int(b)
            return (max(0, size - n), size) if n > 0 else None
        start = int(a)
        end = min(size, int(b) + 1) if b else size
    except ValueError:
        return None
    if start >= size or end <= start:
        return (size, size) if start == size and size == 0 else None
    return start, end


# ----- standard content

OPENWEBTEXT_ID = "stas/openwebtext-10k"
PARQUET_REF = "refs/convert/parquet"
PARQUET_PATH = "plain_text/train/0000.parquet"

OPENWEBTEXT_SCRIPT = '''\
"""OpenWebText 10k: the first 10,000 documents of OpenWebText, for quick experiments."""

import os

import datasets

_CITATION = """\\
@misc{Gokaslan2019OpenWeb,
  title={OpenWebText Corpus},
  author={Aaron Gokaslan and Vanya Cohen},
  howpublished={\\\\url{http://Skylion007.github.io/OpenWebTextCorpus}},
  year={2019}
}
"""

_DESCRIPTION = """\\
An open-source replication of the WebText dataset from OpenAI. This is a small subset representing the first
10K records from the original dataset, created for testing.
"""

_URL = "https://cdn-datasets.huggingface.co/nlp/datasets/openwebtext/openwebtext-10k.tar.xz"


class Openwebtext10k(datasets.GeneratorBasedBuilder):
    """The first 10K documents of OpenWebText."""

    BUILDER_CONFIGS = [
        datasets.BuilderConfig(
            name="plain_text",
            description="Plain text",
            version=datasets.Version("1.0.0"),
        )
    ]

    def _info(self):
        return datasets.DatasetInfo(
            description=_DESCRIPTION,
            features=datasets.Features({"text": datasets.Value("string")}),
            homepage="https://skylion007.github.io/OpenWebTextCorpus/",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager):
        dl_dir = dl_manager.download_and_extract(_URL)
        owt_dir = os.path.join(dl_dir, "openwebtext-10k")
        subset_xzs = [
            os.path.join(owt_dir, file_name)
            for file_name in sorted(os.listdir(owt_dir))
            if file_name.endswith("xz")
        ]
        return [datasets.SplitGenerator(name=datasets.Split.TRAIN, gen_kwargs={"txt_files": subset_xzs})]

    def _generate_examples(self, txt_files):
        for idx, filepath in enumerate(txt_files):
            with open(filepath, encoding="utf-8") as f:
                yield idx, {"text": f.read().strip()}
'''

OPENWEBTEXT_README = """\
---
language:
- en
license: cc0-1.0
pretty_name: openwebtext-10k
size_categories:
- 10K<n<100K
task_categories:
- text-generation
---

# openwebtext-10k

10K slice of OpenWebText, an open-source replication of the WebText dataset from OpenAI.

This is a small subset representing the first 10K records from the original dataset, created for testing.
The full 8M-record dataset is [here](https://huggingface.co/datasets/openwebtext).
"""


def corpus_documents(
    shared_dir: str | os.PathLike, n_docs: int = 300, min_words: int = 300, max_words: int = 2000
) -> list[str]:
    """``n_docs`` English documents of ``min_words``..``max_words`` words (lengths drawn with a fixed seed), cut at
    line ends from the NLTK web text (then the Brown corpus) in ``shared_dir/corpus/nltk-english``."""
    root = Path(shared_dir) / "corpus" / "nltk-english"
    sources = [root / n for n in ("webtext.txt", "brown.txt") if (root / n).exists()]
    if not sources:
        raise FileNotFoundError(f"no webtext.txt or brown.txt under {root}")
    rng = random.Random(0)
    docs: list[str] = []
    lines: list[str] = []
    words, target = 0, rng.randint(min_words, max_words)
    for src in sources:
        for line in src.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if not line:
                continue
            lines.append(line)
            words += len(line.split())
            if words >= target:
                docs.append("\n".join(lines))
                if len(docs) == n_docs:
                    return docs
                lines, words, target = [], 0, rng.randint(min_words, max_words)
    if words >= min_words:
        docs.append("\n".join(lines))
    return docs


def write_openwebtext_parquet(out: str | os.PathLike, documents: list[str]) -> Path:
    """The parquet export of a text dataset: one ``text`` column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": pa.array(documents, type=pa.string())}), out)
    return out


def gpt2_folder(out: str | os.PathLike, shared_dir: str | os.PathLike) -> Path:
    """The folder served as ``gpt2``: the package's GPT-2-small stand-in (``gpt2_posheads.organism.standin``).

    It is deterministic and takes half a minute to build, so a built copy is kept in the compiled models' folder
    (``gpt2_posheads.model.paths.models_dir``), under a name that carries a digest of the code that builds it: a
    change to that code builds a new one. ``out`` is used when that folder cannot be written. GPT-2's tokenizer
    files come from ``shared_dir/gpt2-small``."""
    from gpt2_posheads.model.paths import models_dir
    from gpt2_posheads.organism import compiled, generator, standin, weights

    digest = hashlib.sha256(b"".join(Path(m.__file__).read_bytes() for m in (compiled, generator, standin, weights)))
    keep = models_dir() / f"gpt2-standin-{digest.hexdigest()[:12]}"
    tokenizer = [Path(shared_dir) / "gpt2-small" / name for name in ("vocab.json", "merges.txt")]
    if keep.is_dir():  # only ever a whole build, renamed into place
        return keep
    staging = keep.with_name(f".{keep.name}.partial-{os.getpid()}")
    try:
        standin.write_standin(staging, *tokenizer)
        staging.rename(keep)
        return keep
    except OSError:  # no writable models folder, or another process renamed its build first
        shutil.rmtree(staging, ignore_errors=True)
        return keep if keep.is_dir() else Path(standin.write_standin(Path(out), *tokenizer))


def standard_content(server: HubServer, workdir: str | os.PathLike, shared_dir: str | os.PathLike) -> HubServer:
    """Fill ``server`` with the repos the package asks the hub for, files written under ``workdir``:

    * ``stas/openwebtext-10k`` (dataset) as the hub holds it: a loading script and a card without ``configs`` on
      ``main`` (which ``datasets`` 4 and later refuse), and the parquet export ``plain_text/train/0000.parquet``
      (``text`` column; documents of English web text from ``shared_dir``, not WikiText) on
      ``refs/convert/parquet``;
    * ``gpt2``: the GPT-2 stand-in folder;
    * ``gated-org/gated-model``: gated;
    * ``stall-org/stalling-gpt2``: the same files as ``gpt2``, its weights stalling after half their bytes.
    """
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    parquet = write_openwebtext_parquet(work / "openwebtext-10k" / PARQUET_PATH, corpus_documents(shared_dir))
    server.add_dataset(
        OPENWEBTEXT_ID,
        {
            "main": {"openwebtext-10k.py": OPENWEBTEXT_SCRIPT.encode(), "README.md": OPENWEBTEXT_README.encode()},
            PARQUET_REF: {PARQUET_PATH: parquet},
        },
        card_data={"language": ["en"], "license": "cc0-1.0", "pretty_name": "openwebtext-10k"},
    )
    gpt2 = gpt2_folder(work / "gpt2", shared_dir)
    server.add_model("gpt2", gpt2)
    server.add_gated("gated-org/gated-model", gpt2)
    weights = gpt2 / "model.safetensors"
    half = weights.stat().st_size // 2 if weights.exists() else 0
    server.add_model("stall-org/stalling-gpt2", gpt2, stall_after=half)
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Serve a local Hugging Face hub (the standard test content) until interrupted.",
    )
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    p.add_argument("--shared", required=True, help="the shared/ data folder (corpus, GPT-2 tokenizer)")
    p.add_argument("--workdir", default=None, help="where to write the served files (default: a temporary folder)")
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="hubserver-"))
        server = stack.enter_context(HubServer(port=args.port))
        standard_content(server, workdir, args.shared)
        print(f"HF_ENDPOINT={server.url}", flush=True)
        for repo_type, repo_id in sorted(server.repos):
            print(f"serving {repo_type} {repo_id}", file=sys.stderr, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
