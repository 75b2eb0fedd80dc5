"""Loading TransformerLens models from the hub or a local Hugging Face directory, offline-safe (a TL 4.x
``TransformerBridge`` in compatibility mode and a TL 3.x ``HookedTransformer`` are interchangeable to the analyses).

**What kind of model this is** (:func:`is_gpt2_small`, :func:`position_kind`). The GPT-2 post's head names (L4H11, ...)
mean something only on GPT-2 small, so they are defaults only when :func:`is_gpt2_small` is sure: shape is not enough
(a random model has it, even one carrying GPT-2's ``W_pos``), so it also checks token-embedding values and the
tokenizer, up to one offset per row (compatibility mode centres the rows of ``W_E`` and ``W_pos``)."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import warnings
from pathlib import Path
from typing import Literal

import torch

from .folder import folder_problem, mismatch_message, safetensors_files
from .hub import HubTimeout, download, error_chain, first_line, http_status, hub_problem, snapshot_folder
from .hub import hub_reachable as hub_reachable  # where the command line and the package's top level find it
from .memory import CheckpointLoader, layerwise_processing, release_source_copies
from .paths import SHIPPED_MODELS, shared_file, shipped_model_dir
from .validation import checked


class ModelLoadError(RuntimeError):
    """The model could not be loaded; the message says how to point at a local copy."""


# what a model is loaded from; the hub's other files (other frameworks' weights, ONNX, ...) are never downloaded
_MODEL_FILES = ["*.json", "*.txt", "*.model", "*.tiktoken", "tokenizer*", "vocab*", "merges*"]
_WEIGHT_PATTERNS = (["*.safetensors"], ["pytorch_model*.bin"])  # safetensors when the repository has them


def _cached_copy(repo_id: str) -> tuple[Path | None, str | None]:
    """``(snapshot, what it lacks)``: ``repo_id``'s ``main`` snapshot in the Hugging Face cache (or ``None``), and
    what :func:`folder_problem` says of an incomplete one."""
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.file_download import repo_folder_name

        snap = Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, or cached in part
        try:
            storage = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
            snap = storage / "snapshots" / (storage / "refs" / "main").read_text().strip()
            snap = snap if snap.is_dir() else None
        except Exception:  # noqa: BLE001
            snap = None
    return snap, folder_problem(snap, check_values=False) if snap is not None else None


def hub_model_cached(name: str) -> bool:
    """A complete copy of the hub model ``name`` is in the Hugging Face cache (it loads without the network)."""
    snap, incomplete = _cached_copy(_ALIASES.get(name, name))
    return snap is not None and incomplete is None


def hub_model_problem(name: str):
    """Why the hub's API does not answer for ``name`` (:func:`~.hub.hub_problem`), or ``None``."""
    return hub_problem(_ALIASES.get(name, name))


def _download(name: str, repo_id: str) -> Path:
    """The model's files downloaded (:func:`.hub.download`); every failure a one-line :class:`ModelLoadError`."""

    def model_files(names: list[str]) -> list[str]:
        weights = next((w for w in _WEIGHT_PATTERNS if any(fnmatch.fnmatch(f, w[0]) for f in names)), [])
        return [f for f in names if any(fnmatch.fnmatch(f, p) for p in _MODEL_FILES + weights)]

    try:
        files = download(repo_id, model_files)
    except Exception as e:  # noqa: BLE001 - every way of failing is said in one line
        raise ModelLoadError(_download_failure(name, e)) from None
    if not files:
        raise ModelLoadError(f"cannot load {name!r}: the hub's {repo_id} holds none of the files a model is made of")
    return snapshot_folder(*next(iter(files.items())))


def _download_failure(name: str, e: BaseException) -> str:
    from huggingface_hub import errors

    chain, status = error_chain(e), http_status(e)
    local = f"or point at a local Hugging Face folder (--model-dir path/to/{name.split('/')[-1]})"
    if isinstance(e, HubTimeout):
        return (
            f"cannot load {name!r}: {e}; run again when the hub answers (a file cut short is never used), {local}, "
            f"{_NO_HUB}"
        )
    if any(isinstance(c, errors.GatedRepoError) for c in chain):
        return (
            f"cannot load {name!r}: the model is gated on the hub (HTTP {status}); accept its terms on its hub page "
            f"and log in (`hf auth login` or $HF_TOKEN), {local}"
        )
    if any(isinstance(c, errors.RepositoryNotFoundError) for c in chain):
        return f"cannot load {name!r}: the hub has no model of that name (HTTP {status}); check the name, {local}"
    if status is not None:
        return f"cannot load {name!r}: the hub answered HTTP {status} ({first_line(e)}); try again later, {local}"
    return (
        f"cannot load {name!r}: downloading it failed ({type(chain[-1]).__name__}: {first_line(e)}); run again to "
        f"download the rest (a file cut short is never used), {local}"
    )


_NO_HUB = "or run without the hub (HF_HUB_OFFLINE=1) on local or shipped models"
_ALIASES = {"gpt2-small": "gpt2", "openai-community/gpt2": "gpt2"}


def resolve_model_source(name_or_path: str | os.PathLike) -> str:
    """The local folder to load: the one given, a shipped model's, or a hub model's complete cached copy (downloaded
    first when the hub answers); else :class:`ModelLoadError` in one line."""
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
    repo_like = s.count("/") == 1 and all(s.split("/"))  # owner/name
    if s.startswith((".", "/", "~")) or os.sep in s and not repo_like:
        raise ModelLoadError(f"model directory {s!r} does not exist")
    repo_id = _ALIASES.get(s, s)
    snap, incomplete = _cached_copy(repo_id)
    if snap is not None and incomplete is None:
        return str(snap)
    problem = hub_problem(repo_id)
    if problem is not None:
        local = f"--model-dir path/to/{s.split('/')[-1]}"
        if snap is not None:
            raise ModelLoadError(
                f"cannot load {s!r}: its copy in the Hugging Face cache is incomplete ({incomplete}) and "
                f"{problem.why}; run once with the hub answering to download the rest, or point at a complete local "
                f"folder ({local})"
            )
        make = f"`hf download {repo_id} --local-dir {s.split('/')[-1]}` makes one on a machine with internet"
        if not problem.offline:
            raise ModelLoadError(
                f"cannot load {s!r}: {problem.why}; run again when the hub answers, point at a local Hugging Face "
                f"folder ({local}; {make}), {_NO_HUB}"
            )
        raise ModelLoadError(
            f"cannot load {s!r}: the Hugging Face hub is unreachable ({problem.why}) and no cached copy exists. "
            f"Point at a local Hugging Face-format directory instead, e.g. load_model('path/to/gpt2') or "
            f"--model-dir path/to/gpt2 (a folder with config.json, model.safetensors and tokenizer files; "
            f"`hf download gpt2 --local-dir gpt2` makes one on a machine with internet). "
            f"The package ships models that load offline by name: {', '.join(SHIPPED_MODELS)}."
        )
    snap = _download(s, repo_id)
    problem = folder_problem(snap)
    if problem:
        raise ModelLoadError(f"cannot load {s!r}: what the hub served is not a loadable model ({problem})")
    return str(snap)


def load_model(
    name_or_path: str | os.PathLike = "gpt2",
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    fold_ln: bool = True,
    center_writing_weights: bool = True,
    center_unembed: bool = True,
):
    """A TransformerLens model from a hub name (``"gpt2"``) or a local Hugging Face folder: on TL 4.x
    :func:`boot_bridge` (LayerNorm folded, writing weights centred: ``W_pos`` rows have zero mean over ``d_model``),
    on TL 3.x ``HookedTransformer.from_pretrained``. Offline without a copy: :class:`ModelLoadError` within seconds."""
    source = resolve_model_source(name_or_path)
    quiet_loading()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    local = Path(source).is_dir()
    processing = dict(fold_ln=fold_ln, center_writing_weights=center_writing_weights, center_unembed=center_unembed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from transformer_lens.model_bridge import TransformerBridge  # noqa: F401 - TransformerLens 4.x
        except ImportError:  # pragma: no cover - exercised only with TransformerLens 3.x installed
            from transformer_lens import HookedTransformer
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = HookedTransformer.from_pretrained(
                "gpt2" if local else source,
                hf_model=AutoModelForCausalLM.from_pretrained(source) if local else None,
                tokenizer=AutoTokenizer.from_pretrained(source) if local else None,
                device=device,
                dtype=dtype,
                **processing,
            ).eval()
        else:
            files = safetensors_files(Path(source)) if local else []
            # read once into memory and processed layer by layer: one copy of the weights (model.memory)
            loader = CheckpointLoader(files, lambda *keys: _refuse_mismatch(source, files, *keys)) if files else None
            tokenizer = None
            if local:
                from transformers import AutoTokenizer

                with contextlib.suppress(Exception):
                    tokenizer = AutoTokenizer.from_pretrained(source)
            model = boot_bridge(source, tokenizer, loader, device=device, dtype=dtype, **processing)
            release_source_copies(model, loader)  # the processed weights are the one copy kept (model.memory)
    given = str(name_or_path)
    if not Path(given).expanduser().is_dir() and given not in SHIPPED_MODELS:
        model.cfg.model_name = given  # a hub model is named as the caller named it, not by its cache folder
    return model


def boot_bridge(
    source: str,
    tokenizer,
    loader: CheckpointLoader | None = None,
    hf_model=None,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    **processing,
):
    """A TL 4.x ``TransformerBridge`` in compatibility and eval mode: ``boot_transformers`` of ``source`` (a folder or
    hub name; with ``hf_model``, the module to wrap), ``loader`` as its model class (:mod:`.memory`), then
    ``enable_compatibility_mode(**processing)`` (``fold_ln``, ``center_writing_weights``, ``center_unembed``)."""
    from transformer_lens.model_bridge import TransformerBridge

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = TransformerBridge.boot_transformers(
            source, device=device, dtype=dtype, tokenizer=tokenizer, model_class=loader, hf_model=hf_model
        )
        with layerwise_processing(model, loader) if loader is not None else contextlib.nullcontext():
            model.enable_compatibility_mode(disable_warnings=True, **processing)
    return model.eval()


def quiet_loading() -> None:
    """Turn off transformers' "Loading weights" bar: noise on every script's stderr."""
    with contextlib.suppress(Exception):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _refuse_mismatch(source: str, files: list[Path], missing: list[str], unexpected: list[str], mismatched: list[str]):
    """:class:`ModelLoadError` when the checkpoint did not provide every parameter or a tensor went unused."""
    if missing or unexpected or mismatched:
        weights = files[0].name if len(files) == 1 else "model.safetensors.index.json"
        kind = json.loads((Path(source) / "config.json").read_text(encoding="utf-8")).get("model_type", "?")
        raise ModelLoadError(mismatch_message(f"{Path(source) / weights}", kind, missing, unexpected, mismatched))


# --- the GPT-2 tokenizer from vocab.json + merges.txt, and small model directories for tests/demos ---------------
_REPAIRED_WARNED: set[str] = set()


def _read_merges(vocab: dict[str, int], merges_path: Path) -> list[tuple[str, str]]:
    """Merge pairs, each ``a b`` producing ``a+b`` from two vocabulary tokens; a corrupted line (``shared/`` has four)
    is repaired when one vocabulary token with the same right part is produced by no merge, else dropped."""
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
        t = next((t for t in orphans if t.endswith(b) and t[: -len(b)] in vocab), None) if b in vocab else None
        if t is not None:
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
    """Write a GPT-2 model folder (config, ``model.safetensors``, tokenizer): GPT-2's random initialisation under
    ``seed``, overwritten by ``state_dict`` entries (``GPT2LMHeadModel`` names, e.g. ``transformer.wpe.weight``: how
    tests set heads by hand); ``tokenizer`` defaults to GPT-2's from ``shared/``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    for name, v in dict(n_layers=n_layers, n_heads=n_heads, d_model=d_model, n_ctx=n_ctx).items():
        if v < (lo := 2 if name == "n_ctx" else 1):
            raise ValueError(f"{name}={v} must be >= {lo}")
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    tok = tokenizer if tokenizer is not None else gpt2_tokenizer()
    ids = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg = GPT2Config(n_layer=n_layers, n_head=n_heads, n_embd=d_model, n_positions=n_ctx, **ids)
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


PositionKind = Literal["learned", "rotary", "alibi", "none", "other"]

GPT2_SMALL_SHAPE = (12, 12, 768, 1024, 50257)  # n_layers, n_heads, d_model, n_ctx, d_vocab
# Known entries of the real weights (Hugging Face ``gpt2``): row -> {column: value}.
GPT2_W_E = {
    0: {0: -0.1101, 1: -0.0393, 2: 0.0331, 765: -0.1364, 766: 0.0151, 767: 0.0453},
    1: {0: 0.0403, 1: -0.0486, 2: 0.0462, 765: 0.0861, 766: 0.0025, 767: 0.0432},
    2: {0: -0.1275, 1: 0.0479, 2: 0.1841, 765: 0.0899, 766: -0.1297, 767: -0.0879},
}
GPT2_W_POS = {0: {0: -0.0188, 1: -0.1974, 2: 0.0040}}
GPT2_TOKENS = ("Hello world", [15496, 995])
# config.json's key marking a compiled stand-in (organism.standin): it passes the check below by construction, for
# tests, and must never be taken for GPT-2 by whoever reads its results
STANDIN_KEY = "gpt2_posheads_compiled_standin"


def _rows_match(w: torch.Tensor, known: dict[int, dict[int, float]], tol: float = 2e-3) -> bool:
    """Each known row equals ``w``'s up to one offset per row (the compatibility-mode centring), to ``tol``."""
    for row, cols in known.items():
        diff = torch.tensor(list(cols.values())) - torch.tensor([float(w[row, c]) for c in cols])
        if float(diff.max() - diff.min()) > 2 * tol or float(diff.abs().max()) > 0.05:
            return False
    return True


@checked
def is_gpt2_small(model) -> bool:
    """True only for OpenAI's GPT-2 small: its shape, its token-embedding and positional-embedding values,
    and its tokenizer (``"Hello world"`` is ``[15496, 995]``)."""
    c = model.cfg
    if (c.n_layers, c.n_heads, c.d_model, c.n_ctx, c.d_vocab) != GPT2_SMALL_SHAPE:
        return False
    try:
        w_e, w_pos = model.W_E.detach().float().cpu(), model.W_pos.detach().float().cpu()
        if not (_rows_match(w_e, GPT2_W_E) and _rows_match(w_pos, GPT2_W_POS)):
            return False
        tok = getattr(model, "tokenizer", None)
        return tok is not None and list(tok(GPT2_TOKENS[0], add_special_tokens=False)["input_ids"]) == GPT2_TOKENS[1]
    except (AttributeError, IndexError, KeyError, RuntimeError, TypeError):
        return False


def compiled_standin(model) -> str | None:
    """What a compiled stand-in is (:data:`STANDIN_KEY` in the config it was loaded from), or ``None``."""
    for cfg in (getattr(getattr(model, "original_model", None), "config", None), getattr(model, "config", None)):
        marker = getattr(cfg, STANDIN_KEY, None) if cfg is not None else None
        if isinstance(marker, str) and marker:
            return marker
    return None


@checked
def position_kind(model) -> PositionKind:
    """How the model knows positions: ``learned`` absolute embeddings (``W_pos``; GPT-2, GPT-Neo, OPT),
    ``rotary`` (Pythia, Llama), ``alibi``, ``none``, or ``other``."""
    kind = getattr(model.cfg, "positional_embedding_type", "standard")
    if kind == "standard":
        w_pos = getattr(model, "W_pos", None)
        # a W_pos of zeros (a model trained without positions) adds nothing: averaging it would change nothing
        # and the W_pos claims would look held where the phenomenon is absent
        return "learned" if w_pos is not None and bool(w_pos.detach().abs().max() > 0) else "none"
    return {"rotary": "rotary", "alibi": "alibi", "shortformer": "learned"}.get(kind, "other")


def has_learned_positions(model) -> bool:
    """``W_pos`` exists and is added to the residual stream (what the ``W_pos`` interventions need)."""
    standard = getattr(model.cfg, "positional_embedding_type", "standard") == "standard"
    return standard and position_kind(model) == "learned"


def wpos_reason(model, label: str) -> str | None:
    """Why ``W_pos`` interventions do not apply to ``model`` (``None`` when they do)."""
    why = f"{label} has {position_kind(model)} positions; W_pos interventions need learned absolute positions"
    return None if has_learned_positions(model) else why
