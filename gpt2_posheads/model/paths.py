"""Where data lives, found from the installed package — never from the folder a user stands in or a checkout's root.

* **Package data** (:data:`PACKAGE_DATA`, ``gpt2_posheads/data/``, inside the wheel): GPT-2 small's ``W_pos``,
  WikiText-2's test and validation text, the trained organism ``mini-gpt2`` (``gpt2_posheads/data/README.md``).
* **The models folder** (:func:`models_dir`): where the compiled models are built on first use.
  ``$GPT2_POSHEADS_MODELS`` when set; else ``data/`` of a source checkout (the package sits in a clone beside its
  ``pyproject.toml``); else the user cache, ``$GPT2_POSHEADS_CACHE`` or ``$XDG_CACHE_HOME/gpt2_posheads`` or
  ``~/.cache/gpt2_posheads``, under ``models/``.
* **Shipped models by name** (:func:`shipped_model_dir`): ``mini-gpt2`` and the compiled ``route-gpt2``,
  ``lookalike-*`` resolve to their folders (a compiled one is built first when missing).
* ``../shared`` in development (:func:`shared_dir`): the larger data beside the project (full GPT-2 tokenizer).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

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
    """The root of the source checkout the package runs from (an editable install or ``PYTHONPATH``), or ``None``
    for an installed package."""
    root = REPO_ROOT
    if (root / "pyproject.toml").is_file() and (root / "gpt2_posheads").resolve() == PACKAGE_DIR:
        return root
    return None


def cache_dir() -> Path:
    """The user's cache folder for this toolkit (``$GPT2_POSHEADS_CACHE``, ``$XDG_CACHE_HOME/gpt2_posheads``,
    ``~/.cache/gpt2_posheads``); not created here."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "gpt2_posheads"


def models_dir() -> Path:
    """Where compiled models are built (see the module doc); not created here."""
    if os.environ.get(MODELS_ENV):
        return Path(os.environ[MODELS_ENV]).expanduser()
    root = source_checkout()
    if root is not None and os.access(root / "data", os.W_OK):
        return root / "data"
    return cache_dir() / "models"


def shipped_model_dir(name: str, build: bool = True) -> Path:
    """The folder of a shipped model: ``mini-gpt2`` inside the package, a compiled model in :func:`models_dir`
    (built there first when missing and ``build``). ``ValueError`` for a name that is not shipped."""
    if name == ORGANISM:
        return ORGANISM_DIR
    if name not in COMPILED_MODELS:
        raise ValueError(f"model: {name!r} is not a shipped model; shipped: {', '.join(SHIPPED_MODELS)}")
    folder = models_dir() / name
    if build and not (folder / "model.safetensors").exists():
        print(f"building {name} into {folder} (a compiled model, deterministic, seconds)", flush=True)
        _BUILDER[0](name, folder)
    return folder


# The compiler of the compiled models lives above this layer (gpt2_posheads.organism.compiled); it registers itself
# here when the package is imported, so that a model asked for by name is built without this layer importing it.
_BUILDER: list[Callable[[str, Path], Path]] = []


def register_builder(build: Callable[[str, Path], Path]) -> None:
    """Set the function that builds a compiled model ``build(name, folder)`` (the organism layer's compiler)."""
    _BUILDER[:] = [build]


def shared_dir(required: bool = False) -> Path | None:
    """The ``shared/`` folder: ``$GPT2_POSHEADS_SHARED``, else ``../shared`` beside a source checkout or the
    current folder.

    Returns ``None`` (or raises, with ``required=True``) when none exists.
    """
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
    root = shared_dir()
    if root is None:
        return None
    p = root.joinpath(*parts)
    return p if p.exists() else None
