"""Where data lives, found from the installed package, never from the folder a user stands in or a checkout's root.

* **Package data** (:data:`PACKAGE_DATA`, inside the wheel): GPT-2 small's ``W_pos``, WikiText-2's test and validation
  text, the trained organism ``mini-gpt2`` (``gpt2_posheads/data/README.md``).
* **The models folder** (:func:`models_dir`), where compiled models are built on first use: ``$GPT2_POSHEADS_MODELS``;
  else ``data/`` of a source checkout; else ``models/`` in the user cache (:func:`cache_dir`).
* **Shipped models by name** (:func:`shipped_model_dir`): ``mini-gpt2`` and the compiled ``route-gpt2``,
  ``lookalike-*``; ``../shared`` in development (:func:`shared_dir`).

A compiled model is built once, whoever asks first: under a ``flock`` lock beside it (``.<name>.lock``; a process that
dies releases it), into ``.<name>.partial-<pid>`` renamed into place once it passes its check; a second process waits,
then uses it. A cached folder that fails the check is rebuilt, and said; one holding files a build does not write, or
that cannot be written, is one line naming it and ``gpt2-posheads build_compiled_models --only NAME``; no writable
models folder is one line naming where it tried and ``$GPT2_POSHEADS_MODELS`` (a ``UsageError`` on ``model``). What
cannot be written (:data:`CANNOT_WRITE`) is named here once for every writer (:func:`cannot_write`)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from .validation import UsageError

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PACKAGE_DATA = PACKAGE_DIR / "data"
REPO_ROOT = PACKAGE_DIR.parent  # a source checkout's root, when the package runs from one (see source_checkout)
SHARED_ENV = "GPT2_POSHEADS_SHARED"
MODELS_ENV = "GPT2_POSHEADS_MODELS"
CACHE_ENV = "GPT2_POSHEADS_CACHE"
GPT2_W_POS = PACKAGE_DATA / "gpt2-small" / "W_pos.npy"  # GPT-2 small's real W_pos [1024, 768] (data/README.md)
WIKITEXT_DIR = PACKAGE_DATA / "wikitext-2"  # WikiText-2's test and validation splits, gzipped
ORGANISM = "mini-gpt2"
ORGANISM_DIR = PACKAGE_DATA / ORGANISM  # the trained organism; its tokenizer is also the compiled models'
# the compiled GPT-2s (gpt2_posheads.organism.compiled), built on first use into models_dir()/<name>
COMPILED_MODELS = ("route-gpt2", "lookalike-wpos", "lookalike-boost", "lookalike-decoy", "lookalike-none")
SHIPPED_MODELS = (*COMPILED_MODELS, ORGANISM)


def source_checkout() -> Path | None:
    """The root of the source checkout the package runs from, or ``None`` for an installed package."""
    ok = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "gpt2_posheads").resolve() == PACKAGE_DIR
    return REPO_ROOT if ok else None


def cache_dir() -> Path:
    """``$GPT2_POSHEADS_CACHE``, else ``$XDG_CACHE_HOME/gpt2_posheads``, else ``~/.cache/gpt2_posheads``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "gpt2_posheads"


def models_dir() -> Path:
    """Where compiled models are built (module doc); not created here."""
    if os.environ.get(MODELS_ENV):
        return Path(os.environ[MODELS_ENV]).expanduser()
    root = source_checkout()
    if root is not None and os.access(root / "data", os.W_OK):
        return root / "data"
    return cache_dir() / "models"


# errno -> what it means for a file being written; every place that writes says these in one line
CANNOT_WRITE = {
    errno.ENOSPC: "no space left: the disk is full",
    errno.EDQUOT: "no space left: disk quota exceeded",
    errno.EFBIG: "a file would pass this process's file-size limit (ulimit -f)",
    errno.EROFS: "a read-only file system",
}
PERMISSION = (errno.EACCES, errno.EPERM)  # cannot write only where the file is one being written


def cannot_write(e: BaseException, written: tuple[Path, ...] = ()) -> str | None:
    """Why ``e`` says a file cannot be written (:data:`CANNOT_WRITE`, or ``permission denied`` under one of the
    folders ``written``), else ``None``."""
    if not isinstance(e, OSError):
        return None
    if e.errno in CANNOT_WRITE:
        return CANNOT_WRITE[e.errno]
    if e.errno in PERMISSION and e.filename and written:
        path = Path(os.fsdecode(e.filename)).absolute()
        if any(path == w or w in path.parents for w in (Path(w).absolute() for w in written)):
            return "permission denied"
    return None


STAGING = re.compile(r"^\.(?P<name>.+)\.(?:partial|replaced)-(?P<pid>\d+)$")  # .<name>.partial-<pid>: a run's own


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (one of another user counts)."""
    try:
        return pid > 0 and os.kill(pid, 0) is None
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's
        return True


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``, counted after the
    name's last ``)``): with the pid, what names one process (pids are reused); ``None`` where ``/proc`` cannot tell."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


TOOLKIT = "gpt2_posheads"  # the marker of a lock file this toolkit wrote


def lock_record(**what) -> dict:
    """What a lock file says of its holder: the toolkit's marker, pid and start, machine, and ``what``."""
    pid = os.getpid()
    return {"toolkit": TOOLKIT, "pid": pid, "pid_start": process_start(pid), "host": socket.gethostname(), **what}


def holder_state(holder: dict) -> str:
    """Whether a lock's holder (:func:`lock_holder`) can be a live run of this toolkit: ``"live"`` (running here, by
    its start time the writer), ``"dead"`` (gone), ``"reused"`` (its pid names a process started at another time),
    ``"elsewhere"`` (another machine), ``"unreadable"`` (no lock of this toolkit)."""
    pid, host = holder.get("pid"), holder.get("host")
    if type(pid) is not int or pid <= 0 or not isinstance(host, str) or holder.get("toolkit", TOOLKIT) != TOOLKIT:
        return "unreadable"
    if host != socket.gethostname():
        return "elsewhere"
    if not pid_alive(pid):
        return "dead"
    start = holder.get("pid_start")
    return "reused" if start is not None and process_start(pid) not in (None, start) else "live"


def remove_dead_staging(parent: Path, name: str | None = None) -> list[Path]:
    """Remove (saying each) the staging folders in ``parent`` (of ``name`` only, when given) whose process is gone;
    the paths removed. Only the holder of the folder's lock calls this (no live run then stages for it)."""
    removed = []
    try:
        entries = sorted(parent.iterdir())
    except OSError:
        return removed
    for p in entries:
        m = STAGING.match(p.name)
        if not m or (name is not None and m["name"] != name) or not p.is_dir() or p.is_symlink():
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or pid_alive(pid):
            continue
        shutil.rmtree(p, ignore_errors=True)
        if not p.exists():
            print(f"note: removed {p}, left by a run that ended without finishing (pid {pid})", file=sys.stderr)
            removed.append(p)
    return removed


@contextlib.contextmanager
def held(lock: Path, what: str) -> Iterator[None]:
    """Hold ``lock`` (``flock`` on the file, which names this process), waiting while another holds it and saying
    once whom for. Removed on release; one left by a process that died is taken over, and said; a path replaced
    meanwhile is locked again."""
    import fcntl

    said = False
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not said:
                    holder = lock_holder(lock)
                    print(f"waiting for {holder.get('what', 'another process')} (pid {holder.get('pid', '?')}) to "
                          f"finish ({lock})", file=sys.stderr, flush=True)  # fmt: skip
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(lock).st_ino
            except FileNotFoundError:  # its holder removed it on release: lock the path anew
                same = False
            if not same:
                os.close(fd)
                continue
            holder = lock_holder(lock)
            if holder.get("pid") not in (None, os.getpid()):  # a holder that released would have removed it: it died
                print(f"note: took over {lock}, left by {holder.get('what', 'a run')} that ended without finishing "
                      f"(pid {holder['pid']})", file=sys.stderr)  # fmt: skip
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(lock_record(what=what)).encode())
        except BaseException:
            os.close(fd)
            raise
        break
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)  # still held: a waiter sees the path gone and locks anew
        os.close(fd)


def lock_holder(lock: Path) -> dict:
    """What a lock file says of its holder, empty when it cannot be read."""
    with contextlib.suppress(OSError, ValueError):
        d = json.loads(lock.read_text() or "{}")
        return d if isinstance(d, dict) else {}
    return {}


def shipped_model_dir(name: str, build: bool = True) -> Path:
    """The folder of a shipped model (``mini-gpt2`` in the package; a compiled one in :func:`models_dir`, with
    ``build`` built first when missing or failing its check); ``ValueError`` for a name not shipped."""
    if name == ORGANISM:
        return ORGANISM_DIR
    if name not in COMPILED_MODELS:
        raise ValueError(f"model: {name!r} is not a shipped model; shipped: {', '.join(SHIPPED_MODELS)}")
    folder = models_dir() / name
    if not (build and _builder()) or (problem := _problem(folder)) is None:
        return folder
    hint = f"gpt2-posheads build_compiled_models --only {name} builds it"
    writable = f"set ${MODELS_ENV} to a writable folder"

    def unwritable(why: str) -> UsageError:
        return UsageError("model", f"{name} is built on first use, and {why}", "a writable models folder", writable)

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # an unwritable or missing home, a file where a folder should be
        tried, root = folder.parent, source_checkout()  # and data/ of a source checkout, passed over if not writable
        if root is not None and tried != root / "data" and not os.environ.get(MODELS_ENV):
            state = "not writable" if (root / "data").is_dir() else "absent"
            tried = f"{tried} (and {root / 'data'}, {state})"
        why = f"no models folder can be made: tried {tried} ({cannot_write(e) or e.strerror})"
        raise unwritable(why) from None
    try:
        with folder_lock(folder, f"the build of {name}"):
            problem = _problem(folder)
            if problem is None:  # built by the process this one waited for
                return folder
            if folder.exists():
                foreign = sorted(p.name for p in folder.iterdir() if p.name not in _BUILDER["files"])
                if foreign:  # not only what a build writes: someone else's, kept
                    why = f"{folder} fails the check of a compiled model ({problem}) and holds files a build does not "
                    why += f"write ({', '.join(foreign[:5])})"
                    raise UsageError("model", why, "the folder a build wrote", f"move it away; {hint}")
                print(f"note: {name} in {folder} fails its check ({problem}): rebuilding it (a compiled model, "
                      "deterministic, seconds)", file=sys.stderr, flush=True)  # fmt: skip
            else:
                print(f"building {name} into {folder} (a compiled model, deterministic, seconds)", flush=True)

            def make(staging: Path) -> None:
                _BUILDER["build"](name, staging)
                bad = _BUILDER["check"](staging)
                if bad is not None:
                    raise RuntimeError(f"the build of {name} fails its own check: {bad}")

            write_whole(folder, make)
    except OSError as e:
        why = cannot_write(e, (folder.parent,))
        if why is None:
            raise
        if folder.exists():
            why = f"{folder} fails the check of a compiled model ({problem}) and cannot be rebuilt there ({why})"
            hint = f"{hint} (run by a user who can write {folder.parent}), or {writable}"
            raise UsageError("model", why, "a complete compiled model", hint) from None
        raise unwritable(f"{folder.parent} cannot be written ({why})") from None
    return folder


def _problem(folder: Path) -> str | None:
    """What is wrong with a compiled model's folder (``missing`` when there is none), or ``None``."""
    return _builder()["check"](folder) if folder.is_dir() else "missing"


def folder_lock(folder: Path, what: str):
    """:func:`held` on ``.<name>.lock`` beside ``folder``: the lock every writer of a built folder takes."""
    return held(folder.parent / f".{folder.name}.lock", what)


def write_whole(folder: Path, make: Callable[[Path], object]) -> None:
    """Write ``folder`` whole or not at all: ``make(staging)`` fills ``.<name>.partial-<pid>``, which then replaces
    it, removed whatever happens (dead processes' first). The caller holds :func:`folder_lock`."""
    remove_dead_staging(folder.parent, folder.name)
    staging = folder.parent / f".{folder.name}.partial-{os.getpid()}"
    aside = folder.parent / f".{folder.name}.replaced-{os.getpid()}"
    try:
        make(staging)
        # an existing folder (the toolkit's own, checked by the caller) is renamed aside first and removed once the
        # new one is in place, so ``folder`` is never half written
        if folder.exists():
            os.rename(folder, aside)
        try:
            os.rename(staging, folder)
        except BaseException:
            if aside.exists() and not folder.exists():
                os.rename(aside, folder)
            raise
        shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_whole_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8, its folder made) whole or not at all, through ``.<name>.tmp-<pid>`` (the
    name ``cli.output`` clears after a killed process) renamed over it: every text file the toolkit writes whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# The compiler lives above this layer (organism.compiled); the package registers a loader for it, called when first
# needed, so this layer never imports it and `import gpt2_posheads` does not load the organism.
_BUILDER: dict = {}  # "build", "check", "files": see register_builder
_BUILDER_LOADER: list[Callable[[], None]] = []


def register_builder_loader(load: Callable[[], None]) -> None:
    """Set the function that imports the compiler and gives it to :func:`register_builder`, on first use."""
    _BUILDER_LOADER[:] = [load]


def _builder() -> dict:
    if not _BUILDER and _BUILDER_LOADER:
        _BUILDER_LOADER[0]()
    return _BUILDER


def register_builder(
    build: Callable[[str, Path], Path], check: Callable[[Path], str | None] | None = None, files=()
) -> None:
    """Set ``build(name, folder)``, the ``check(folder)`` a built folder passes (what is wrong, or ``None``), and the
    files a build writes (a failed folder holding only those is rebuilt; anything else is left to its owner)."""
    _BUILDER.update(build=build, check=check or (lambda folder: None), files=frozenset(files))


def shared_dir(required: bool = False) -> Path | None:
    """``$GPT2_POSHEADS_SHARED``, else ``../shared`` beside a source checkout or the current folder; ``None`` (with
    ``required``, ``FileNotFoundError``) when none exists."""
    candidates = []
    if os.environ.get(SHARED_ENV):
        candidates.append(Path(os.environ[SHARED_ENV]))
    if source_checkout() is not None:
        candidates.append(REPO_ROOT.parent / "shared")
    candidates += [Path.cwd().parent / "shared", Path.cwd() / "shared"]
    for c in candidates:
        if (c / "gpt2-small").is_dir() or (c / "corpus").is_dir():
            return c.resolve()
    if required:
        raise FileNotFoundError(
            f"No shared/ data folder found (looked at {[str(c) for c in candidates]}). "
            f"Set ${SHARED_ENV} to the folder holding gpt2-small/ and corpus/."
        )
    return None


def shared_file(*parts: str) -> Path | None:
    """A file under ``shared/`` if it exists, else ``None``."""
    p = None if (root := shared_dir()) is None else root.joinpath(*parts)
    return p if p is not None and p.exists() else None
