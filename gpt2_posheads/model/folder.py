"""What a local Hugging Face model folder must hold before it is loaded, checked from its files alone.

A folder that loads but is broken gives wrong numbers, not an error (weights with a NaN give patterns of zeros and
confident verdicts; without tokenizer files every text becomes ``[0]``; GPT-2 weights under another architecture's
config load as that architecture freshly initialised). :func:`folder_problem` says so before any model is built, in
one line naming the file and the field; weights are matched to the config's model as ``from_pretrained`` matches them
(base-model prefix, tied weights, ignore lists, renamings) and their sizes checked against that model built on the
``meta`` device. The loader checks the names again (``memory.CheckpointLoader``).

**A folder's fingerprint** (:func:`folder_fingerprint`) tells two models of one folder name apart (results are filed
by model name, and ``cli.output`` refuses a results folder to a model of another fingerprint): SHA-256 over
``config.json`` and every weight file, each hashed whole, so a model that differs anywhere has another. Hashing GPT-2
XL's 6 GB takes seconds, so each file's hash is remembered by (path, size, modification time) in
:func:`~gpt2_posheads.model.paths.cache_dir`: a rerun reads none, a rewritten file is hashed again."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import struct
from functools import lru_cache
from pathlib import Path

from .paths import cache_dir, write_whole_text

TOKENIZER_SETS = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("tokenizer.model",), ("spiece.model",))
WEIGHT_FILES = tuple(w + index for w in ("model.safetensors", "pytorch_model.bin") for index in ("", ".index.json"))


def safetensors_files(folder: Path) -> list[Path]:
    """The folder's safetensors weight files (one, or the shards an index names)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError):
            return []
        return [folder / n for n in names]
    return [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else []


def safetensors_header(path: Path) -> dict:
    """The header of a safetensors file (``{name: {"dtype", "shape", "data_offsets"}}``), checked against its size
    (a ``ValueError`` saying what is wrong)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path.name} is {size} bytes: not a safetensors file")
        n = struct.unpack("<Q", head)[0]
        if n > size - 8 or n > 100_000_000:
            raise ValueError(f"{path.name} is truncated or not a safetensors file (its header claims {n:,} bytes)")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise ValueError(f"{path.name} has an unreadable header: truncated or not a safetensors file") from None
    header.pop("__metadata__", None)
    end = max((v["data_offsets"][1] for v in header.values()), default=0)
    if 8 + n + end > size:
        raise ValueError(
            f"{path.name} is truncated: {size:,} bytes where its tensors need {8 + n + end:,} (re-download or re-save)"
        )
    return header


def meta_model(config: dict):
    """The model ``config`` describes on the ``meta`` device (no memory); ``None`` where transformers cannot build it
    (the loader's own checks then apply)."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.for_model(**config)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg)
    except Exception:  # noqa: BLE001 - an architecture we cannot build here: leave the check to the loader
        return None


def shape_problem(shapes: dict[str, tuple[int, ...]], model) -> str | None:
    """The first weight whose shape disagrees with ``model`` (the one ``config.json`` describes), or ``None``."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    prefix = getattr(model, "base_model_prefix", "")
    for name, shape in shapes.items():
        want = expected.get(name, expected.get(f"{prefix}.{name}"))
        if want is not None and tuple(shape) != want:
            return f"config.json does not match the weights: {name} is {list(shape)}, the config makes it {list(want)}"
    return None


def architecture_problem(config: dict) -> str | None:
    """``architectures`` naming a transformers class of another ``model_type`` than the config's."""
    model_type = config.get("model_type")
    archs = config.get("architectures") or []
    if not isinstance(model_type, str) or not isinstance(archs, list):
        return None
    import transformers

    for arch in archs:
        cls = getattr(transformers, arch, None) if isinstance(arch, str) else None
        other = getattr(getattr(cls, "config_class", None), "model_type", None)
        if isinstance(other, str) and other and other != model_type:
            return (
                f"config.json: architectures names {arch} (a {other!r} model) but model_type is {model_type!r}; "
                "one of the two fields is wrong, and each would load a different model"
            )
    return None


def heads_problem(config: dict) -> str | None:
    """A head count that does not divide the model width, where the config gives no explicit ``head_dim``."""
    if not isinstance(config.get("model_type"), str):  # transformers then guesses the type from the folder's name
        return None
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.for_model(**config)
    except Exception as e:  # noqa: BLE001 - transformers refuses the config itself: say why, in its words
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"config.json is not a valid {config.get('model_type', 'model')!r} config: {first}"
    heads, width = getattr(cfg, "num_attention_heads", None), getattr(cfg, "hidden_size", None)
    if not isinstance(heads, int) or not isinstance(width, int) or config.get("head_dim") is not None:
        return None
    # the config.json keys (GPT-2 writes n_head for num_attention_heads)
    h, w = (getattr(type(cfg), "attribute_map", {}).get(k, k) for k in ("num_attention_heads", "hidden_size"))
    if heads < 1:
        return f"config.json: {h} is {heads}; a model needs at least one attention head"
    if width % heads:
        return (
            f"config.json: {h} {heads} does not divide {w} {width} (each head gets {w} / {h} dimensions); "
            f"allowed {h}: {', '.join(str(d) for d in range(1, width + 1) if width % d == 0 and d <= 64)}"
        )
    return None


def tokenizer_size(folder: Path) -> tuple[int, str] | None:
    """One more than the largest token id the tokenizer files define, and the file defining most (``None`` for a
    SentencePiece model or unreadable files)."""
    ids: list[int] = []
    read = lambda name: json.loads((folder / name).read_text(encoding="utf-8"))  # noqa: E731
    try:
        if (folder / "tokenizer.json").is_file():
            source, data = "tokenizer.json", read("tokenizer.json")
            vocab = (data.get("model") or {}).get("vocab")
            if isinstance(vocab, dict):
                ids += [int(v) for v in vocab.values()]
            elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, ids by position
                ids.append(len(vocab) - 1)
            ids += [int(t["id"]) for t in data.get("added_tokens") or []]
        elif (folder / "vocab.json").is_file():
            source, ids = "vocab.json", [int(v) for v in read("vocab.json").values()]
        else:
            return None
        if (folder / "added_tokens.json").is_file():
            ids += [int(v) for v in read("added_tokens.json").values()]
        if (folder / "tokenizer_config.json").is_file():
            ids += [int(k) for k in (read("tokenizer_config.json").get("added_tokens_decoder") or {})]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return (max(ids) + 1, source) if ids else None


def vocab_problem(folder: Path, config: dict) -> str | None:
    """A ``vocab_size`` too small for the tokenizer's ids (a larger one is common: vocabularies padded for speed)."""
    vocab, size = config.get("vocab_size"), tokenizer_size(folder)
    if not isinstance(vocab, int) or isinstance(vocab, bool) or size is None:
        return None
    n, source = size
    if vocab < n:
        return (
            f"config.json: vocab_size {vocab:,} is smaller than the tokenizer's {n:,} tokens ({source}): "
            f"token ids {vocab:,}..{n - 1:,} would have no embedding row; the tokenizer files and the config are "
            "from different models"
        )
    return None


# Buffers that checkpoints written by some transformers versions hold and the models rebuild: causal masks and their
# fill value, rotary frequencies, position ids. No model computes with the checkpoint's copy: not unused weights.
LEGACY_BUFFERS = re.compile(r"(^|\.)(masked_bias|attn\.bias|attention\.bias|rotary_emb\.inv_freq|position_ids)$")


def unused_weights(unexpected) -> list[str]:
    """The checkpoint tensors no parameter takes, less the rebuilt buffers (:data:`LEGACY_BUFFERS`)."""
    return sorted(k for k in unexpected if not LEGACY_BUFFERS.search(k))


def _names(keys, n: int = 3) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:n]) + (", ..." if len(keys) > n else "")


def matched_names(model, names: list[str]) -> tuple[set[str], set[str], set[str]] | None:
    """``(loaded, missing, unexpected)`` names as ``from_pretrained`` would match checkpoint tensor ``names`` to
    ``model`` (renamings, base-model prefix, tied weights, ignore lists); ``None`` where a name needs a conversion
    (fused or split tensors) only the loader can judge."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

        mapping = get_model_conversion_mapping(model, None, None)
    except Exception:  # noqa: BLE001 - transformers 4 or a changed API: prefix handling alone
        mapping, rename_source_key = [], None
        WeightConverter = WeightRenaming = ()  # noqa: N806
    renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
    converters = [m for m in mapping if isinstance(m, WeightConverter)]
    meta, prefix = model.state_dict(), getattr(model, "base_model_prefix", "") or ""
    loaded, unexpected = set(), set()
    for name in names:
        if rename_source_key is not None:
            key, converter = rename_source_key(name, renamings, converters, prefix, meta)
            if key not in meta and name in meta:
                key, converter = rename_source_key(name, [], [], prefix, meta)
            if converter is not None:
                return None
        else:  # the name as it is, under the base-model prefix, or without it
            key = next((k for k in (name, f"{prefix}.{name}", name.removeprefix(f"{prefix}.")) if k in meta), name)
        (loaded if key in meta else unexpected).add(key)
    tied = getattr(model, "all_tied_weights_keys", None)
    if not isinstance(tied, dict):  # transformers 4: a list of targets, tied when the config says so
        targets = getattr(model, "_tied_weights_keys", None) or []
        tie = getattr(model.config, "tie_word_embeddings", True)
        tied = dict.fromkeys(targets) if tie else {}
    params = {k for k, _ in model.named_parameters(remove_duplicate=False)}
    missing = {
        k
        for k in meta
        if k in params and k not in loaded and not (k in tied and (tied[k] is None or tied[k] in loaded))
    }
    ignore_missing = set(getattr(model, "_keys_to_ignore_on_load_missing", None) or ())
    ignore_unexpected = set(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    for patterns, keys in ((ignore_missing, missing), (ignore_unexpected, unexpected)):
        if patterns:
            regex = re.compile("|".join(f"({p})" for p in patterns))
            keys.difference_update({k for k in keys if regex.search(k)})
    return loaded, missing, set(unused_weights(unexpected))  # rebuilt buffers (rotary frequencies, ...) left out


def mismatch_message(weights: str, kind: str, missing, unexpected, mismatched=()) -> str:
    """One line naming (a few of each, with counts) parameters without a tensor, tensors without a parameter,
    tensors of another shape."""
    said = {"parameter(s) of the model have no tensor": missing, "tensor(s) are no parameter of it": unexpected}
    said["tensor(s) have another shape"] = mismatched
    parts = [f"{len(keys):,} {what} ({_names(keys)})" for what, keys in said.items() if keys]
    return (
        f"{weights} does not hold the weights of the model config.json describes ({kind!r}): "
        + " and ".join(parts)
        + "; loading it would leave parameters freshly initialised or drop weights"
    )


def weights_problem(config: dict, model, names: list[str], weights: str) -> str | None:
    """Weights (in file ``weights``) that are not the model ``config.json`` describes: no tensor a parameter of it,
    or a parameter without a tensor (freshly initialised) or a tensor without a parameter (dropped)."""
    matched = matched_names(model, names)
    if matched is None:
        return None
    loaded, missing, unexpected = matched
    kind = config.get("model_type", "?")
    if not loaded and names:
        return (
            f"config.json: model_type {kind!r} ({type(model).__name__}) does not match the weights in {weights}: "
            f"none of its {len(names):,} tensors is a parameter of that model (it holds {_names(names, 2)}; the "
            f"model expects {_names(model.state_dict(), 2)}); the config is another architecture's"
        )
    if missing or unexpected:
        return mismatch_message(weights, kind, missing, unexpected)
    return None


# safetensors dtype names -> torch dtype names (the file format's own table)
SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64"}
SAFETENSORS_DTYPES |= {"I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
SAFETENSORS_DTYPES |= {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def iter_safetensors(path: Path, names=None):
    """``(name, tensor)`` of each tensor of a safetensors file (or those in ``names``), in file order, read with
    plain reads into its own tensor (no mapping: the file's pages stay outside the process's resident set)."""
    import sys

    import torch

    if sys.byteorder != "little":  # safetensors is little-endian
        raise ValueError("reading safetensors into memory needs a little-endian machine")
    header = safetensors_header(path)
    with path.open("rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
        for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            if names is not None and name not in names:
                continue
            dtype = getattr(torch, SAFETENSORS_DTYPES.get(info["dtype"], ""), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{path.name}: {name} has dtype {info['dtype']}, which is not read here")
            t = torch.empty(info["shape"], dtype=dtype)
            lo, hi = info["data_offsets"]
            raw = t.reshape(-1).view(torch.uint8)
            if raw.numel() != hi - lo:
                raise ValueError(f"{path.name}: {name} holds {hi - lo:,} bytes, its shape needs {raw.numel():,}")
            if raw.numel():
                f.seek(start + lo)
                buf, done = memoryview(raw.numpy()), 0
                while done < len(buf):  # readinto may return less than asked: one read(2) is capped near 2 GiB
                    n = f.readinto(buf[done:])
                    if not n:
                        raise ValueError(f"{path.name} ended {len(buf) - done:,} bytes early")
                    done += n
            yield name, t


def nonfinite_problem(files: list[Path]) -> str | None:
    """The first weight holding NaN or infinite entries, named, with how many."""
    import torch

    for name, t in (nt for path in files for nt in iter_safetensors(path)):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            return f"weight {name} has {bad:,} non-finite entries (NaN or inf) of {t.numel():,}"
    return None


def folder_problem(folder: str | Path, check_values: bool = True) -> str | None:
    """What is wrong with a local model folder in one sentence, or ``None`` (module doc), from the safetensors headers
    (every weight with ``check_values``) and ``config.json``; remembered until a file of the folder changes."""
    folder = Path(folder).resolve()
    stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(folder.iterdir()) if f.is_file())
    return _folder_problem(folder, stamp, check_values)


@lru_cache(maxsize=32)
def _folder_problem(folder: Path, stamp: tuple, check_values: bool) -> str | None:
    if not any(all((folder / f).is_file() for f in files) for files in TOKENIZER_SETS):
        return (
            f"{folder} has no tokenizer files (tokenizer.json, or vocab.json and merges.txt, or tokenizer.model): "
            "the model would load with a tokenizer that cannot read text"
        )
    files = safetensors_files(folder)
    if not files:
        if not any((folder / w).is_file() for w in WEIGHT_FILES):
            return f"{folder} holds no model weights (one of {', '.join(WEIGHT_FILES)})"
        return None  # .bin weights: the loader reads (and checks) them
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        if not path.is_file():
            return f"{path.name}, named by the index, is missing"
        try:
            shapes.update({k: tuple(v["shape"]) for k, v in safetensors_header(path).items()})
        except (OSError, ValueError, KeyError, TypeError) as e:
            return str(e)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict):
        problem = architecture_problem(config) or heads_problem(config) or vocab_problem(folder, config)
        model = None if problem else meta_model(config)
        if model is not None:
            weights = files[0].name if len(files) == 1 else "model.safetensors.index.json"
            problem = weights_problem(config, model, list(shapes), weights) or shape_problem(shapes, model)
        if problem:
            return problem
    return nonfinite_problem(files) if check_values else None


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


def folder_fingerprint(folder: str | os.PathLike) -> str:
    """``"sha256:<16 hex digits>"``: SHA-256 over the name, size and whole-file hash of each file it covers
    (``config.json``, the weight files and their indexes)."""
    h = hashlib.sha256()
    for f in sorted(Path(folder).expanduser().iterdir()):
        covered = f.name == "config.json" or f.suffix in (".safetensors", ".bin") or f.name.endswith(".index.json")
        if covered and f.is_file():
            h.update(f"{f.name}:{f.stat().st_size}:{cached_file_sha256(f)}\n".encode())
    return f"{SCHEME}:{h.hexdigest()[:16]}"
