"""Natural-text prompts of a fixed token length, deterministic given a seed.

Sources: the hub dataset ``stas/openwebtext-10k`` (what the GPT-2 post used), local ``.txt`` /
``.jsonl`` files, or the offline WikiText-2 copy in ``shared/corpus/wikitext-2``. ``"auto"`` takes the
hub dataset when the hub is reachable or cached and WikiText-2 otherwise, and says which it used.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Iterable, Sequence

import torch

from ._paths import shared_dir
from .loading import hub_reachable

OPENWEBTEXT = "stas/openwebtext-10k"


def openwebtext_documents(dataset: str = OPENWEBTEXT, split: str = "train") -> list[str]:
    """Documents of a hub text dataset (``text`` column); raises quickly when offline and uncached."""
    import datasets

    if not hub_reachable():
        # datasets' own retries can take minutes offline; fail in seconds instead.
        raise RuntimeError(
            f"dataset {dataset!r} needs the Hugging Face hub, which is unreachable; "
            f"use prompts from local files (--prompts path/to/file.txt) or --prompts wikitext (offline copy)"
        )
    ds = datasets.load_dataset(dataset, split=split)
    return [t for t in ds["text"] if t and t.strip()]


def wikitext_documents(path: str | Path | None = None) -> list[str]:
    """WikiText-2 articles (split at top-level `` = Title = `` headings), from ``shared/corpus``."""
    if path is None:
        root = shared_dir()
        if root is None or not (root / "corpus" / "wikitext-2").is_dir():
            raise FileNotFoundError("WikiText-2 copy not found: set $GPT2_POSHEADS_SHARED or pass a path")
        files = [root / "corpus" / "wikitext-2" / n for n in ("test.txt", "valid.txt")]
    else:
        p = Path(path)
        files = sorted(p.glob("*.txt")) if p.is_dir() else [p]
    docs: list[str] = []
    for f in files:
        if not f.exists():
            continue
        current: list[str] = []
        for line in f.read_text(encoding="utf-8").split("\n"):
            if re.match(r"^ = [^=].* = $", line):
                if current:
                    docs.append(_detok_wikitext("\n".join(current)))
                current = [line.strip(" =")]
            elif line.strip():
                current.append(line.strip())
        if current:
            docs.append(_detok_wikitext("\n".join(current)))
    return docs


def _detok_wikitext(text: str) -> str:
    """Undo WikiText's spaced punctuation so the text reads like web text to a BPE tokenizer."""
    text = text.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    text = re.sub(r" ([.,;:!?)\]'])", r"\1", text)
    text = re.sub(r"([(\[]) ", r"\1", text)
    return text.replace(" n't", "n't").replace(" 's", "'s")


def file_documents(paths: Iterable[str | Path]) -> list[str]:
    """Documents from ``.txt`` files (one document per file; blank-line-separated chunks) or ``.jsonl`` (``text`` field)."""
    docs: list[str] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            docs += file_documents(sorted(list(p.glob("*.txt")) + list(p.glob("*.jsonl"))))
        elif p.suffix == ".jsonl":
            for line in p.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    docs.append(json.loads(line)["text"])
        elif p.exists():
            docs += [c for c in re.split(r"\n\s*\n", p.read_text(encoding="utf-8")) if c.strip()]
        else:
            raise FileNotFoundError(f"prompt source {p} does not exist")
    return docs


def documents(source: str | Sequence[str] = "auto") -> tuple[list[str], str]:
    """``(documents, description)`` for ``"auto"``, ``"openwebtext"``, ``"wikitext"``, or file paths."""
    if isinstance(source, (list, tuple)):
        return file_documents(source), f"files:{','.join(map(str, source))}"
    if source == "auto":
        if hub_reachable():
            return openwebtext_documents(), OPENWEBTEXT
        return wikitext_documents(), "wikitext-2 (offline stand-in for openwebtext-10k)"
    if source == "openwebtext":
        return openwebtext_documents(), OPENWEBTEXT
    if source == "wikitext":
        return wikitext_documents(), "wikitext-2"
    return file_documents([source]), f"files:{source}"


def make_prompts(
    tokenizer,
    n_prompts: int,
    seq_len: int,
    source: str | Sequence[str] = "auto",
    seed: int = 0,
    prepend_bos: bool = True,
    docs: list[str] | None = None,
) -> torch.Tensor:
    """Token ids ``[n_prompts, seq_len]`` from documents long enough to fill ``seq_len``.

    Documents are shuffled with ``seed`` and each contributes its first ``seq_len`` tokens (BOS first
    when ``prepend_bos``), so the same seed gives the same prompts. Raises if too few documents are
    long enough.
    """
    if n_prompts < 1:
        raise ValueError(f"n_prompts={n_prompts} must be >= 1")
    if seq_len < 2:
        raise ValueError(f"seq_len={seq_len} must be >= 2")
    if docs is None:
        docs, _ = documents(source)
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_text = seq_len - int(prepend_bos)
    out = []
    for i in order:
        ids = tokenizer(docs[i], add_special_tokens=False)["input_ids"]
        if len(ids) >= n_text:
            out.append(([tokenizer.bos_token_id] if prepend_bos else []) + ids[:n_text])
            if len(out) == n_prompts:
                return torch.tensor(out, dtype=torch.long)
    raise ValueError(f"only {len(out)} documents have >= {n_text} tokens; asked for n_prompts={n_prompts}")
