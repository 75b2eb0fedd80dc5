"""What a local Hugging Face model folder must hold before it is loaded, checked from its files alone.

A folder that loads but is broken gives wrong numbers, not an error: weights with a NaN give patterns of zeros and
confident verdicts, a folder without tokenizer files loads with a one-token tokenizer (every text becomes ``[0]``).
:func:`folder_problem` finds, from the files and before any model is built, what would go wrong:

* no tokenizer files (``tokenizer.json``, or ``vocab.json`` with ``merges.txt``, or a SentencePiece model);
* no weights, or a weights file that is truncated or not a weights file;
* a ``config.json`` whose sizes disagree with the weights (each tensor's shape against the model the config
  describes, built on PyTorch's ``meta`` device: no memory, no time);
* a weight that is not finite (named, with its count of NaN/inf entries).
"""

from __future__ import annotations

import json
import struct
from functools import lru_cache
from pathlib import Path

TOKENIZER_SETS = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("tokenizer.model",), ("spiece.model",))
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def tokenizer_problem(folder: Path) -> str | None:
    if any(all((folder / f).is_file() for f in files) for files in TOKENIZER_SETS):
        return None
    return (
        f"{folder} has no tokenizer files (tokenizer.json, or vocab.json and merges.txt, or tokenizer.model): "
        "the model would load with a tokenizer that cannot read text"
    )


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
    """The header of a safetensors file (``{name: {"dtype", "shape", "data_offsets"}}``), checked against the file's
    size; raises ``ValueError`` saying what is wrong."""
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


def shape_problem(config: dict, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """The first weight whose shape disagrees with the model ``config`` describes (``None`` when all agree, or when
    the config names no architecture transformers can build)."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
    except Exception:  # noqa: BLE001 - an architecture we cannot build here: leave the check to the loader
        return None
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    prefix = getattr(model, "base_model_prefix", "")
    for name, shape in shapes.items():
        want = expected.get(name, expected.get(f"{prefix}.{name}"))
        if want is not None and tuple(shape) != want:
            return f"config.json does not match the weights: {name} is {list(shape)}, the config makes it {list(want)}"
    return None


def nonfinite_problem(files: list[Path]) -> str | None:
    """The first weight holding NaN or infinite entries, named, with how many."""
    import torch
    from safetensors import safe_open

    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not iterable
                t = f.get_tensor(name)
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    bad = int((~torch.isfinite(t)).sum())
                    return f"weight {name} has {bad:,} non-finite entries (NaN or inf) of {t.numel():,}"
    return None


def folder_problem(folder: str | Path, check_values: bool = True) -> str | None:
    """What is wrong with a local model folder, in one sentence, or ``None`` (see the module doc). Reads the
    safetensors headers (and, with ``check_values``, every weight) and ``config.json``; builds nothing. The answer
    is remembered until a file of the folder changes (the command line checks before loading, the loader again)."""
    folder = Path(folder).resolve()
    stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(folder.iterdir()) if f.is_file())
    return _folder_problem(folder, stamp, check_values)


@lru_cache(maxsize=32)
def _folder_problem(folder: Path, stamp: tuple, check_values: bool) -> str | None:
    problem = tokenizer_problem(folder)
    if problem:
        return problem
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
        problem = shape_problem(config, shapes)
        if problem:
            return problem
    return nonfinite_problem(files) if check_values else None
