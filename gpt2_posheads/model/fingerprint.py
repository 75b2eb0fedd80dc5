"""A model folder's fingerprint: what tells two models of the same folder name apart, from every byte of its weights.

Results are filed by model name, and a folder of results is refused to a model whose fingerprint differs
(``cli.output``). The fingerprint is SHA-256 over ``config.json`` and every weight file (``*.safetensors``, ``*.bin``,
their ``*.index.json``), each file hashed whole and streamed in 8 MiB reads, so a model that differs anywhere (a
``W_pos`` row in the middle of the file) has another fingerprint. Hashing GPT-2 XL's 6 GB takes seconds
(``docs/benchmarks.md``), so each file's hash is remembered by (path, size, modification time) in a small JSON file
under the user cache folder (:func:`~gpt2_posheads.model.paths.cache_dir`): ``$GPT2_POSHEADS_CACHE``, else
``$XDG_CACHE_HOME/gpt2_posheads``, else ``~/.cache/gpt2_posheads``. A rerun on unchanged files reads none of them; a
file rewritten in place gets a new modification time and is hashed again. Where the cache cannot be written, every call
hashes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from .paths import cache_dir, write_whole_text

CACHE_FILE = "file-sha256.json"
CACHE_ENTRIES = 1024  # the most recently hashed files kept
CHUNK = 8 << 20
SCHEME = "sha256"  # fingerprints read "sha256:<16 hex digits>"


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a whole file, read in 8 MiB pieces (memory stays flat whatever its size)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def cached_file_sha256(path: str | os.PathLike) -> str:
    """:func:`file_sha256`, remembered by (resolved path, size, modification time in ns) in the cache folder."""
    p = Path(path).resolve()
    st = p.stat()
    stamp = [st.st_size, st.st_mtime_ns]
    cache = cache_dir() / CACHE_FILE
    entries = {}
    with contextlib.suppress(OSError, ValueError):
        entries = json.loads(cache.read_text(encoding="utf-8"))
    entries = entries if isinstance(entries, dict) else {}
    hit = entries.get(str(p))
    if isinstance(hit, list) and len(hit) == 3 and hit[:2] == stamp and isinstance(hit[2], str):
        return hit[2]
    digest = file_sha256(p)
    entries.pop(str(p), None)
    entries[str(p)] = [*stamp, digest]
    if len(entries) > CACHE_ENTRIES:  # oldest first (insertion order): keep the most recent
        entries = dict(list(entries.items())[-CACHE_ENTRIES:])
    with contextlib.suppress(OSError):  # written whole (a reader never sees half a file), or not at all
        write_whole_text(cache, json.dumps(entries))
    return digest


def fingerprinted_files(folder: Path) -> list[Path]:
    """The files a folder's fingerprint covers: ``config.json`` and the weight files with their indexes."""
    return [
        f
        for f in sorted(folder.iterdir())
        if f.is_file()
        and (f.name == "config.json" or f.suffix in (".safetensors", ".bin") or f.name.endswith(".index.json"))
    ]


def folder_fingerprint(folder: str | os.PathLike) -> str:
    """``"sha256:<16 hex digits>"``: SHA-256 over each fingerprinted file's name, size and whole-file hash."""
    h = hashlib.sha256()
    for f in fingerprinted_files(Path(folder).expanduser()):
        h.update(f"{f.name}:{f.stat().st_size}:{cached_file_sha256(f)}\n".encode())
    return f"{SCHEME}:{h.hexdigest()[:16]}"
