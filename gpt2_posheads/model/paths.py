"""Where data lives: what ships in the repository (``data/``: a GPT-2 ``W_pos``, WikiText-2's test and validation
text, the organism) and the larger folder beside the project in development (``../shared``), found at run time."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "data"
SHARED_ENV = "GPT2_POSHEADS_SHARED"
GPT2_W_POS = DATA_DIR / "gpt2-small" / "W_pos.npy"  # GPT-2 small's real W_pos [1024, 768], shipped (data/README.md)
WIKITEXT_DIR = DATA_DIR / "wikitext-2"  # WikiText-2's test and validation splits, gzipped, shipped
# the compiled GPT-2s (gpt2_posheads.organism.compiled), built into data/<name> by experiments/build_compiled_models.py
COMPILED_MODELS = ("route-gpt2", "lookalike-wpos", "lookalike-boost", "lookalike-decoy", "lookalike-none")


def shared_dir(required: bool = False) -> Path | None:
    """The ``shared/`` folder: ``$GPT2_POSHEADS_SHARED``, else ``../shared`` beside the repo or cwd.

    Returns ``None`` (or raises, with ``required=True``) when none exists.
    """
    candidates = []
    if os.environ.get(SHARED_ENV):
        candidates.append(Path(os.environ[SHARED_ENV]))
    candidates += [REPO_ROOT.parent / "shared", Path.cwd().parent / "shared", Path.cwd() / "shared"]
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
