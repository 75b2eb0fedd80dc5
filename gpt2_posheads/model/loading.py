"""Loading TransformerLens models from the hub or a local Hugging Face directory, offline-safe.

Analysis code in this package only touches TransformerLens hook names and ``model.cfg``, so the
model returned here (a TL 4.x ``TransformerBridge`` in compatibility mode) and a TL 3.x
``HookedTransformer`` are interchangeable.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import warnings
from pathlib import Path
from urllib.parse import urlparse

import torch

from .folder import folder_problem, mismatch_message, safetensors_files
from .memory import CheckpointLoader, layerwise_processing, release_source_copies
from .paths import SHIPPED_MODELS, shared_file, shipped_model_dir


class ModelLoadError(RuntimeError):
    """The model could not be loaded; the message says how to point at a local copy."""


# --------------------------------------------------------------------------------------------
# Hub reachability: decide in seconds instead of letting HTTP clients retry for minutes.
# --------------------------------------------------------------------------------------------
def hub_reachable(timeout: float = 3.0) -> bool:
    """True when the Hugging Face endpoint accepts a TCP connection within ``timeout`` seconds."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT")
    if not endpoint:
        try:
            from huggingface_hub import constants

            endpoint = constants.ENDPOINT
        except Exception:  # pragma: no cover - huggingface_hub always ships with transformers
            return False
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def _cached_snapshot(repo_id: str) -> Path | None:
    """A complete local snapshot of ``repo_id`` in the HF cache, if one exists."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:
        return None


_ALIASES = {"gpt2-small": "gpt2", "openai-community/gpt2": "gpt2"}


def resolve_model_source(name_or_path: str | os.PathLike) -> str:
    """A local directory path, or a hub id that is cached or reachable; else :class:`ModelLoadError`."""
    s = str(name_or_path)
    p = Path(s).expanduser()
    if not p.is_dir() and s in SHIPPED_MODELS:  # a shipped model by name (a compiled one is built on first use)
        p = shipped_model_dir(s)
    if p.is_dir():
        if not (p / "config.json").exists():
            raise ModelLoadError(f"model directory {p} has no config.json (expected a Hugging Face-format folder)")
        problem = folder_problem(p)
        if problem:
            raise ModelLoadError(problem)
        return str(p.resolve())
    looks_like_path = s.startswith((".", "/", "~")) or os.sep in s and not _looks_like_repo_id(s)
    if looks_like_path:
        raise ModelLoadError(f"model directory {s!r} does not exist")
    repo_id = _ALIASES.get(s, s)
    snap = _cached_snapshot(repo_id)
    if snap is not None:
        return str(snap)
    if not hub_reachable():
        raise ModelLoadError(
            f"cannot load {s!r}: the Hugging Face hub is unreachable (offline) and no cached copy exists. "
            f"Point at a local Hugging Face-format directory instead, e.g. "
            f"load_model('path/to/gpt2') or --model-dir path/to/gpt2 (a folder with config.json, "
            f"model.safetensors and tokenizer files; `huggingface-cli download gpt2 --local-dir gpt2` "
            f"makes one on a machine with internet). "
            f"The package ships models that load offline by name: {', '.join(SHIPPED_MODELS)}."
        )
    return repo_id


def _looks_like_repo_id(s: str) -> bool:
    parts = s.split("/")
    return len(parts) == 2 and all(parts) and not s.startswith((".", "/", "~"))


def load_model(
    name_or_path: str | os.PathLike = "gpt2",
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    fold_ln: bool = True,
    center_writing_weights: bool = True,
    center_unembed: bool = True,
):
    """A TransformerLens model from a hub name (``"gpt2"``) or a local Hugging Face directory.

    On TransformerLens 4.x this is ``TransformerBridge.boot_transformers`` followed by
    ``enable_compatibility_mode`` (HookedTransformer-equivalent weight processing: LayerNorm folded,
    writing weights centred, so ``W_pos`` rows have zero mean over ``d_model``). On TL 3.x it is
    ``HookedTransformer.from_pretrained``. Offline with no local or cached copy it raises
    :class:`ModelLoadError` within seconds.
    """
    source = resolve_model_source(name_or_path)
    try:  # transformers' "Loading weights" bar is noise on every script's stderr
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except Exception:  # pragma: no cover
        pass
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    local = Path(source).is_dir()
    try:
        from transformer_lens.model_bridge import TransformerBridge
    except ImportError:  # TransformerLens 3.x
        TransformerBridge = None
    loader = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if TransformerBridge is not None:
            tokenizer = _local_tokenizer(source) if local else None
            files = safetensors_files(Path(source)) if local else []
            if files:  # read once into memory and processed layer by layer: one copy of the weights (model.memory)
                loader = CheckpointLoader(files, on_mismatch=lambda *keys: _refuse_mismatch(source, files, *keys))
            model = TransformerBridge.boot_transformers(
                source,
                device=device,
                dtype=dtype,
                tokenizer=tokenizer,
                **({"model_class": loader} if loader is not None else {}),
            )
            with layerwise_processing(model, loader) if loader is not None else contextlib.nullcontext():
                model.enable_compatibility_mode(
                    disable_warnings=True,
                    fold_ln=fold_ln,
                    center_writing_weights=center_writing_weights,
                    center_unembed=center_unembed,
                )
        else:  # pragma: no cover - exercised only with TransformerLens 3.x installed
            from transformer_lens import HookedTransformer
            from transformers import AutoModelForCausalLM, AutoTokenizer

            hf = AutoModelForCausalLM.from_pretrained(source) if local else None
            model = HookedTransformer.from_pretrained(
                "gpt2" if local else source,
                hf_model=hf,
                tokenizer=AutoTokenizer.from_pretrained(source) if local else None,
                device=device,
                dtype=dtype,
                fold_ln=fold_ln,
                center_writing_weights=center_writing_weights,
                center_unembed=center_unembed,
            )
    model.eval()
    if TransformerBridge is not None:  # the processed weights are the one copy kept (model.memory)
        release_source_copies(model, loader)
    return model


def _refuse_mismatch(source: str, files: list[Path], missing: list[str], unexpected: list[str], mismatched: list[str]):
    """:class:`ModelLoadError` when the checkpoint did not provide every parameter or a tensor went unused."""
    if missing or unexpected or mismatched:
        weights = files[0].name if len(files) == 1 else "model.safetensors.index.json"
        kind = json.loads((Path(source) / "config.json").read_text(encoding="utf-8")).get("model_type", "?")
        raise ModelLoadError(mismatch_message(f"{Path(source) / weights}", kind, missing, unexpected, mismatched))


def _local_tokenizer(path: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# The GPT-2 tokenizer from vocab.json + merges.txt, and small model directories for tests/demos.
# --------------------------------------------------------------------------------------------
_REPAIRED_WARNED: set[str] = set()


def _read_merges(vocab: dict[str, int], merges_path: Path) -> list[tuple[str, str]]:
    """Merge pairs, repairing lines whose left part is not a vocabulary token.

    Every merge ``a b`` must produce ``a+b`` from two existing tokens. A corrupted line (the copy in
    ``shared/`` has four, where ``Run``/``Config`` were rewritten) is repaired when exactly one
    vocabulary token with the same right part is produced by no merge; otherwise it is dropped.
    """
    lines = [ln for ln in merges_path.read_text(encoding="utf-8").split("\n") if ln and not ln.startswith("#version")]
    pairs = [tuple(ln.split(" ")) for ln in lines]
    produced = {a + b for a, b in pairs if a in vocab and b in vocab}
    orphans = [t for t in vocab if len(t) > 1 and t not in produced]
    fixed: list[tuple[str, str]] = []
    n_bad = 0
    for a, b in pairs:
        if a in vocab and b in vocab:
            fixed.append((a, b))
            continue
        n_bad += 1
        cands = [t for t in orphans if t.endswith(b) and t[: -len(b)] in vocab] if b in vocab else []
        if len(cands) >= 1:
            t = cands[0]
            orphans.remove(t)
            fixed.append((t[: -len(b)], b))
    if n_bad and str(merges_path) not in _REPAIRED_WARNED:  # once per process is enough
        _REPAIRED_WARNED.add(str(merges_path))
        warnings.warn(
            f"{merges_path}: repaired or dropped {n_bad} merge line(s) naming tokens outside the vocabulary",
            stacklevel=2,
        )
    return fixed


def gpt2_tokenizer(vocab_file: str | os.PathLike | None = None, merges_file: str | os.PathLike | None = None):
    """The GPT-2 byte-level BPE tokenizer from ``vocab.json``/``merges.txt`` (default: ``shared/gpt2-small``)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    vocab_file = Path(vocab_file) if vocab_file else shared_file("gpt2-small", "vocab.json")
    merges_file = Path(merges_file) if merges_file else shared_file("gpt2-small", "merges.txt")
    if vocab_file is None or merges_file is None or not vocab_file.exists() or not merges_file.exists():
        raise FileNotFoundError(
            "GPT-2 tokenizer files not found: pass vocab_file and merges_file, or set $GPT2_POSHEADS_SHARED"
        )
    vocab = json.loads(Path(vocab_file).read_text(encoding="utf-8"))
    tk = Tokenizer(BPE(vocab=vocab, merges=_read_merges(vocab, Path(merges_file))))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    eot = "<|endoftext|>"
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=eot, eos_token=eot, unk_token=eot)


def make_random_model_dir(
    out_dir: str | os.PathLike,
    n_layers: int = 2,
    n_heads: int = 4,
    d_model: int = 64,
    n_ctx: int = 128,
    tokenizer=None,
    seed: int = 0,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a GPT-2-architecture model directory (config, ``model.safetensors``, tokenizer files).

    Weights are GPT-2's random initialisation under ``seed``; entries of ``state_dict`` (Hugging Face
    ``GPT2LMHeadModel`` names, e.g. ``transformer.wpe.weight``) overwrite them, which is how tests
    set heads by hand. ``tokenizer`` defaults to the real GPT-2 tokenizer from ``shared/``.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    for name, v, lo in (
        ("n_layers", n_layers, 1),
        ("n_heads", n_heads, 1),
        ("d_model", d_model, 1),
        ("n_ctx", n_ctx, 2),
    ):
        if v < lo:
            raise ValueError(f"{name}={v} must be >= {lo}")
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    tok = tokenizer if tokenizer is not None else gpt2_tokenizer()
    cfg = GPT2Config(
        n_layer=n_layers,
        n_head=n_heads,
        n_embd=d_model,
        n_positions=n_ctx,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg).eval()
    if state_dict:
        missing = set(state_dict) - set(model.state_dict())
        if missing:
            raise KeyError(f"unknown parameter names in state_dict: {sorted(missing)}")
        with torch.no_grad():
            for k, v in state_dict.items():
                model.state_dict()[k].copy_(v)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
