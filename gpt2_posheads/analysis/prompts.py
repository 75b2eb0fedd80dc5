"""Natural-text prompts of a fixed token length, deterministic given a seed.

Sources: the hub dataset ``stas/openwebtext-10k`` (what the GPT-2 post used), local ``.txt`` / ``.jsonl`` files, or
the WikiText-2 text shipped in ``data/wikitext-2``. ``"auto"`` takes the hub dataset when it can be read (cached, or
the hub answers) and WikiText-2 otherwise, and says which it used and why.

The hub dataset is read from the hub's own parquet conversion (revision ``refs/convert/parquet``), not through
``datasets.load_dataset``: the repository holds a loading script, which ``datasets`` 4 and later refuse and 3.x runs
only with ``trust_remote_code``. The files are read through ``huggingface_hub`` (its cache, proxies, token), so a
second run reads them from the cache without asking the network.
"""

from __future__ import annotations

import fnmatch
import functools
import gzip
import itertools
import json
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from ..model.engine import bos_token_id
from ..model.hub import HubTimeout, download, error_chain, first_line, http_status, hub_endpoint, hub_problem
from ..model.paths import WIKITEXT_DIR
from ..model.validation import UsageError, checked, note

OPENWEBTEXT = "stas/openwebtext-10k"
PARQUET_REVISION = "refs/convert/parquet"  # where the hub keeps its parquet conversion of a dataset
PARQUET_FILES = "plain_text/train/*.parquet"  # openwebtext-10k's one config and split
WIKITEXT_OFFLINE = "wikitext-2 (offline stand-in for openwebtext-10k)"


class HubDatasetError(RuntimeError):
    """The hub dataset could not be read (the message says why). ``offline``: no connection to the hub at all
    (``HF_HUB_OFFLINE``, no network), as against a hub that stalls or fails."""

    def __init__(self, message: str, offline: bool = False):
        super().__init__(message)
        self.offline = offline


@functools.lru_cache(maxsize=4)
def _openwebtext(dataset: str, endpoint: str) -> tuple[str, ...]:
    """Documents (the ``text`` column, blank ones dropped) of ``dataset``'s parquet conversion: a complete cached copy
    without the network, else downloaded (:mod:`gpt2_posheads.model.hub`); a cached file that does not read as parquet
    is downloaded again. Every failure is a :class:`HubDatasetError`. Read once per process and endpoint."""
    try:
        cached = _parquet_snapshot(dataset, local_only=True)
    except HubDatasetError:
        cached = []  # not in the cache: ask the hub
    if cached:
        try:
            return _parquet_texts(cached)
        except HubDatasetError as e:
            note(f"prompts: the cached copy of {dataset} does not read ({e}); downloading it again")
    problem = hub_problem(dataset, "dataset", PARQUET_REVISION)
    if problem is not None:
        raise HubDatasetError(f"{dataset} is not in the Hugging Face cache and {problem.why}", problem.offline)
    return _parquet_texts(_parquet_snapshot(dataset, local_only=False, again=bool(cached)))


def _parquet_snapshot(dataset: str, local_only: bool, again: bool = False) -> list[Path]:
    """The parquet files from the cache only (``local_only``) or from the hub (``again``: over a broken cached copy)."""
    from huggingface_hub import snapshot_download

    try:
        if local_only:
            folder = snapshot_download(
                dataset,
                repo_type="dataset",
                revision=PARQUET_REVISION,
                allow_patterns=[PARQUET_FILES],
                local_files_only=True,
            )
            files = sorted(Path(folder).glob(PARQUET_FILES))
        else:
            got = download(
                dataset, lambda names: fnmatch.filter(names, PARQUET_FILES), "dataset", PARQUET_REVISION, again
            )
            files = sorted(got.values())
    except Exception as e:  # noqa: BLE001 - every way of failing becomes one reason in words
        raise HubDatasetError(_hub_failure(dataset, e)) from None
    if not files:
        raise HubDatasetError(f"{dataset}'s parquet conversion ({PARQUET_REVISION}) has no {PARQUET_FILES}")
    return files


def _parquet_texts(files: list[Path]) -> tuple[str, ...]:
    import pyarrow.parquet as pq

    docs: list[str] = []
    for f in files:
        try:
            column = pq.read_table(f, columns=["text"]).column("text").to_pylist()
        except Exception as e:  # noqa: BLE001 - a truncated or foreign file: say which and why
            raise HubDatasetError(f"{f.name} does not read as parquet with a 'text' column ({first_line(e)})") from None
        docs += [t for t in column if isinstance(t, str) and t.strip()]
    if not docs:
        raise HubDatasetError(f"{', '.join(f.name for f in files)} hold no text")
    return tuple(docs)


def _hub_failure(dataset: str, e: BaseException) -> str:
    from huggingface_hub import errors

    chain, status, text = error_chain(e), http_status(e), first_line(e)
    root, has = chain[-1], lambda kind: any(isinstance(c, kind) for c in chain)  # noqa: E731
    if isinstance(e, HubTimeout):
        return f"reading {dataset} from the hub stopped: {e}"
    if has(errors.GatedRepoError):
        return f"{dataset} is gated on the hub (HTTP {status}): log in with `hf auth login` after accepting its terms"
    if has(errors.RepositoryNotFoundError):
        return f"the hub has no dataset {dataset} (HTTP {status})"
    if has(errors.RevisionNotFoundError):
        return f"the hub has no parquet conversion of {dataset} ({PARQUET_REVISION})"
    if status is not None:
        return f"the hub answered HTTP {status} for {dataset} ({text})"
    if "timeout" in type(root).__name__.lower() or "timed out" in str(root).lower():
        return f"reading {dataset} from the hub timed out ({text})"
    if type(root).__name__ == "JSONDecodeError" or isinstance(root, ValueError) and "json" in str(root).lower():
        return f"the endpoint did not answer as the Hugging Face hub does for {dataset} ({text})"
    if len(chain) == 1 and isinstance(root, errors.LocalEntryNotFoundError):
        return f"{dataset} is not in the Hugging Face cache"
    return f"reading {dataset} from the hub failed: {type(root).__name__}: {text}"


def wikitext_documents(path: str | Path | None = None) -> list[str]:
    """WikiText-2 articles (split at top-level `` = Title = `` headings): by default the test and validation splits
    shipped in ``data/wikitext-2`` (gzipped; the same text as ``shared/corpus/wikitext-2``); ``path``: a ``.txt`` or
    ``.txt.gz`` file or a folder of them."""
    if path is None:
        files = [WIKITEXT_DIR / f"{n}.txt.gz" for n in ("test", "valid")]
    else:
        p = Path(path)
        files = _corpus_files(p, "*.txt", "*.txt.gz") if p.is_dir() else [p]
    docs = [
        d for f in files if f.exists() for d in _wikitext_file(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns)
    ]
    if not docs:
        raise FileNotFoundError(f"no WikiText-2 text found in {', '.join(map(str, files))}")
    return docs


@functools.lru_cache(maxsize=8)
def _wikitext_file(path: str, size: int, mtime_ns: int) -> tuple[str, ...]:
    """The articles of one WikiText file, detokenised; remembered by path, size and modification time (every prompt
    set of every model asks)."""
    f = Path(path)
    text = gzip.decompress(f.read_bytes()).decode("utf-8") if f.suffix == ".gz" else f.read_text(encoding="utf-8")
    articles: list[list[str]] = [[]]  # the lines of each article, the first one's before any heading
    for line in text.split("\n"):
        if re.match(r"^ = [^=].* = $", line):
            articles.append([line.strip(" =")])
        elif line.strip():
            articles[-1].append(line.strip())
    return tuple(_detok_wikitext("\n".join(lines)) for lines in articles if lines)


def _detok_wikitext(text: str) -> str:  # WikiText's spaced punctuation undone: web text to a BPE tokenizer
    text = text.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    text = re.sub(r" ([.,;:!?)\]'])", r"\1", text)
    text = re.sub(r"([(\[]) ", r"\1", text)
    return text.replace(" n't", "n't").replace(" 's", "'s")


def _corpus_files(folder: Path, *patterns: str) -> list[Path]:
    """``folder``'s files matching ``patterns``, sorted, without its notes (``SOURCE.txt``, ``README.txt``)."""
    files = sorted(f for pattern in patterns for f in folder.glob(pattern))
    return [f for f in files if f.name not in ("SOURCE.txt", "README.txt")]


def read_text(path: Path) -> str:
    """A text file as UTF-8 (a byte-order mark dropped); any other encoding is refused: guessing one would put wrong
    characters into the prompts without a word."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(
            "prompts",
            f"{path} is not UTF-8 text (byte {e.start})",
            "UTF-8 .txt or .jsonl files",
            f"convert it, e.g. iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8{path.suffix}",
        ) from None


def file_documents(paths: Iterable[str | Path]) -> list[str]:
    """Documents from ``.txt`` files (blank-line-separated chunks) or ``.jsonl`` files (a ``text`` field per line)."""
    docs: list[str] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = _corpus_files(p, "*.txt", "*.jsonl")
            if not files:
                raise UsageError(
                    "prompts", f"folder {p} holds no .txt or .jsonl files", "a folder of .txt/.jsonl files"
                )
            docs += file_documents(files)
        elif p.suffix == ".jsonl":
            for i, line in enumerate(read_text(p).splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise UsageError("prompts", f"{p} line {i} is not JSON", "one JSON object per line") from None
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    keys = sorted(row) if isinstance(row, dict) else type(row).__name__
                    raise UsageError(
                        "prompts",
                        f"{p} line {i} has no 'text' string (keys: {keys})",
                        'each line must be {"text": "..."}',
                    )
                docs.append(row["text"])
        elif p.exists():
            docs += [c for c in re.split(r"\n\s*\n", read_text(p)) if c.strip()]
        else:
            raise UsageError("prompts", f"{p} does not exist", "auto, openwebtext, wikitext, or a .txt/.jsonl path")
    return docs


def documents(source: str | Sequence[str] = "auto") -> tuple[list[str], str]:
    """``(documents, description)`` for ``"auto"``, ``"openwebtext"``, ``"wikitext"``, or file paths (module doc); a
    fallback for any reason but being offline is said in one line, and the description says why."""
    if isinstance(source, (list, tuple)):
        return file_documents(source), f"files:{','.join(map(str, source))}"
    if source in ("auto", "openwebtext"):
        try:
            return list(_openwebtext(OPENWEBTEXT, hub_endpoint())), OPENWEBTEXT
        except HubDatasetError as e:
            if source == "openwebtext":
                raise UsageError(
                    "prompts",
                    f"{OPENWEBTEXT} could not be read: {e}",
                    "allowed auto, openwebtext, wikitext, or a path to .txt/.jsonl files",
                    "--prompts auto falls back to the shipped WikiText-2; --prompts wikitext uses it",
                ) from None
            if e.offline:
                return wikitext_documents(), WIKITEXT_OFFLINE
            why = str(e)
            note(f"prompts: {OPENWEBTEXT} could not be read ({why}); using the shipped WikiText-2 instead")
            return wikitext_documents(), f"wikitext-2 (stand-in for {OPENWEBTEXT}, which could not be read: {why})"
    if source == "wikitext":
        return wikitext_documents(), "wikitext-2"
    if not Path(source).exists():
        raise UsageError(
            "prompts",
            f"{source!r} is neither a known source nor an existing file",
            "allowed auto, openwebtext, wikitext, or a path to .txt/.jsonl files",
        )
    return file_documents([source]), f"files:{source}"


@checked
def make_prompts(
    tokenizer,
    n_prompts: int,
    seq_len: int,
    source: str | Sequence[str] = "auto",
    seed: int = 0,
    prepend_bos: bool = True,
    docs: list[str] | None = None,
    model=None,
) -> torch.Tensor:
    """Token ids ``[n_prompts, seq_len]``: documents shuffled with ``seed``, each long enough contributing its first
    ``seq_len`` tokens (BOS first when ``prepend_bos``); when too few are long enough, the long ones give further,
    non-overlapping windows. Raises, saying how many could be made, when even that is not enough. With ``model``
    ``seq_len`` is checked against its context."""
    if seq_len < 2:
        raise UsageError("seq_len", f"{seq_len} is out of range", "allowed >= 2")
    if model is not None and seq_len > model.cfg.n_ctx:
        raise UsageError("seq_len", f"{seq_len} exceeds the model's context", f"allowed 2..{model.cfg.n_ctx} (n_ctx)")
    if docs is None:
        docs, _ = documents(source)
    if not docs:
        raise UsageError("prompts", "the source holds no documents (empty file?)", "give a file with text in it")
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_text = seq_len - int(prepend_bos)
    bos = [bos_token_id(tokenizer)] if prepend_bos else []
    out: list[list[int]] = []
    encoded: list[list[int]] = []  # the long documents, in the shuffled order, for further windows
    longest = 0
    for i in order:
        ids = tokenizer(docs[i], add_special_tokens=False)["input_ids"]
        longest = max(longest, len(ids))
        if len(ids) >= n_text:
            out.append(bos + ids[:n_text])
            encoded.append(ids)
            if len(out) == n_prompts:
                return torch.tensor(out, dtype=torch.long)
    for window in itertools.count(1):  # further non-overlapping windows of the long documents, in the same order
        more = [
            bos + ids[window * n_text : (window + 1) * n_text] for ids in encoded if len(ids) >= (window + 1) * n_text
        ]
        out += more
        if not more or len(out) >= n_prompts:
            break
    if len(out) >= n_prompts:
        return torch.tensor(out[:n_prompts], dtype=torch.long)
    if not out:
        raise UsageError(
            "seq_len",
            f"none of the source's {len(docs)} documents has the {n_text} tokens a prompt of {seq_len} needs "
            f"(the longest has {longest})",
            f"allowed seq_len <= {longest + int(prepend_bos)} for this source",
            "lower --seq-len, or use a source with longer documents",
        )
    raise UsageError(
        "n_prompts",
        f"the source gives only {len(out)} prompts of {seq_len} tokens ({len(encoded)} of its {len(docs)} documents "
        f"are long enough, each cut into as many windows as it holds), {n_prompts} asked",
        f"allowed n_prompts <= {len(out)} at this seq_len",
        "lower --n-prompts or --seq-len, or add text to the source",
    )


def encode_stream(tok, docs: Sequence[str]) -> torch.Tensor:
    """All documents as one token stream, each preceded by ``<|endoftext|>`` as GPT-2 was trained."""
    encoded = tok(list(docs), add_special_tokens=False)["input_ids"]
    return torch.tensor([i for enc in encoded for i in [tok.bos_token_id, *enc]], dtype=torch.long)
