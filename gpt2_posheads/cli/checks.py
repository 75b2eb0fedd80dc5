"""The checks a command makes before its model loads (:func:`precheck`: model folder, device, prompt source, numbers,
``--heads`` and layers against the folder's ``config.json``), and with it loaded (:func:`postcheck`: against
``model.cfg``). Each failure is one :class:`~gpt2_posheads.model.validation.UsageError` naming the option.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch

from ..analysis.heads import HeadSpec
from ..model.folder import WEIGHT_FILES, folder_problem
from ..model.loading import hub_model_cached, hub_model_problem
from ..model.paths import COMPILED_MODELS, SHIPPED_MODELS, models_dir, shipped_model_dir
from ..model.validation import UsageError, path_kind, positive
from .args import PROMPT_SOURCES, int_list


def _nearest_dir(path: Path) -> str | None:
    """A model folder beside ``path`` (or in the models folder), else a shipped model, whose name is ``path``'s with a
    typo (not ``data/route-gpt2`` for ``data/mini-gpt``)."""
    parent = path.parent if path.parent.is_dir() else models_dir()
    cands = [c for c in parent.iterdir() if c.is_dir() and (c / "config.json").exists()] if parent.is_dir() else []
    best = difflib.get_close_matches(path.name, [c.name for c in cands], n=1, cutoff=0.8)
    if best:
        return str(parent / best[0])
    shipped = difflib.get_close_matches(path.name, SHIPPED_MODELS, n=1, cutoff=0.8)
    return f"--model {shipped[0]} (a shipped model, by name)" if shipped else None


WITH_WEIGHTS = "a folder with config.json and model weights"
RESAVE = "re-save the model with save_pretrained"


def check_model_dir(model_dir: str | None) -> dict | None:
    """The parsed ``config.json`` of a ``--model-dir`` (never a hub name), a complete Hugging Face folder."""
    if model_dir is None:
        return None
    p = Path(model_dir).expanduser()
    kind, bad = path_kind(p), partial(UsageError, "--model-dir")
    if kind == "file":
        raise bad(f"{model_dir} is a file, not a folder", WITH_WEIGHTS, f"its folder is {p.parent}")
    if kind not in ("folder", "missing"):  # /dev/null, a FIFO, a symlink loop: say what it is, suggest nothing
        raise bad(f"{model_dir} is {kind}, not a folder", "a folder with config.json and weights")
    if kind == "missing":
        near = _nearest_dir(p)
        hint = f"did you mean {near}?" if near else "shipped models load by name: --model mini-gpt2, --model route-gpt2"
        if p.name in SHIPPED_MODELS:
            how = "builds it on first use (seconds)" if p.name in COMPILED_MODELS else "loads the shipped one by name"
            hint = f"--model {p.name} {how}"
        raise bad(f"{model_dir} does not exist", WITH_WEIGHTS, hint)
    if not (p / "config.json").is_file():
        shipped = "or a shipped model by name: --model mini-gpt2"
        raise bad(f"{model_dir} has no config.json", "a Hugging Face-format model folder", shipped)
    try:
        cfg = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        problem = f"{p / 'config.json'} is not valid JSON ({type(e).__name__})"
        raise bad(problem, "a Hugging Face config.json", RESAVE) from None
    if not isinstance(cfg, dict):
        raise bad(f"{p / 'config.json'} is not a JSON object", "a Hugging Face config.json")
    if not any((p / w).is_file() for w in WEIGHT_FILES) and not list(p.glob("*.safetensors")):
        raise bad(f"{model_dir} holds no model weights", f"one of {', '.join(WEIGHT_FILES)}", RESAVE)
    problem = folder_problem(p)
    if problem:
        raise bad(problem, "a complete Hugging Face model folder", RESAVE)
    return cfg


def check_model_dirs(text: str, param: str = "--model-dirs") -> list[str]:
    """Comma-separated model folders, each checked; a folder whose name holds a comma is one (from each piece on, the
    most pieces that joined name an existing path). A mistake names the piece and the text it was split from."""
    pieces, dirs, i = text.split(","), [], 0
    while i < len(pieces):
        j = next(
            (j for j in range(len(pieces), i + 1, -1) if path_kind(",".join(pieces[i:j]).strip()) != "missing"), i + 1
        )
        d, i = ",".join(pieces[i:j]).strip(), j
        if not d:
            continue
        try:
            check_model_dir(d)
        except UsageError as e:
            split = f" (a piece of {text!r}, split at its commas)" if d != text.strip() else ""
            raise UsageError(param, e.problem + split, e.allowed, e.hint) from None
        dirs.append(d)
    return dirs


def model_folder(args) -> Path | None:
    """``--model-dir``, or the folder of a shipped ``--model`` (built on first use); ``None`` for a hub name."""
    if getattr(args, "model_dir", None):
        return Path(args.model_dir)
    name = getattr(args, "model", None)
    if name in SHIPPED_MODELS:
        with said_of("--model"):  # a compiled model that cannot be built or rebuilt
            return shipped_model_dir(name)
    return None


def check_hub_names(hub: Sequence[str]) -> None:
    """Refuse hub names (``--models``) not cached, within seconds, when the hub does not answer."""
    missing = [name for name in hub if not hub_model_cached(name)]  # a complete cached copy loads offline
    problem = next(filter(None, map(hub_model_problem, missing)), None)  # asked of each model's API, in turn
    if problem is not None:
        hub = (
            f"{', '.join(missing)} need the Hugging Face hub, which does not answer ({problem.why}), and are not cached"
        )
        raise UsageError("--models", hub, "hub names on a machine with internet", "or --model-dirs with local copies")


def check_device(device: str | None) -> None:
    """``--device``: a device torch names that this machine has."""
    if device is None:
        return
    bad = partial(UsageError, "--device")
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", device):
        raise bad(f"{device!r} is not a device", "allowed cpu, cuda, cuda:N, mps")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise bad(f"{device} asked but CUDA is not available on this machine", "use --device cpu")
        if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
            raise bad(f"{device} does not exist", f"allowed cuda:0..cuda:{torch.cuda.device_count() - 1}")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise bad("mps asked but not available", "use --device cpu")


@contextmanager
def said_of(param: str) -> Iterator[None]:
    """A :class:`UsageError` raised inside is said of ``param``, the option the user gave."""
    try:
        yield
    except UsageError as e:
        raise UsageError(param, e.problem, e.allowed, e.hint) from None


def check_prompt_source(source: str) -> None:
    """A known source or a non-empty UTF-8 ``.txt``/``.jsonl`` file or folder; ``openwebtext`` is read here (then
    remembered): a dataset that cannot be read is said before any model loads."""
    from ..analysis.prompts import documents, file_documents

    if source == "openwebtext":
        with said_of("--prompts"):
            documents(source)
    if source in PROMPT_SOURCES:
        return
    p, bad = Path(source), partial(UsageError, "--prompts")
    kind = path_kind(p)
    if kind not in ("file", "folder", "missing"):  # a FIFO would block the read; /dev/null reads as nothing
        raise bad(f"{source} is {kind}, not a file or folder", "a .txt/.jsonl file or a folder of them")
    if kind == "missing":
        near = difflib.get_close_matches(source, PROMPT_SOURCES, n=1)
        allowed = "allowed auto, openwebtext, wikitext, or a path to .txt/.jsonl files"
        hint = f"did you mean {near[0]}?" if near else "check the path"
        raise bad(f"{source!r} is neither a known source nor an existing file", allowed, hint)
    documents_in = "documents separated by blank lines, or .jsonl with a 'text' field"
    if p.is_file():
        if p.suffix not in (".txt", ".jsonl"):
            raise bad(f"{source} is a {p.suffix or 'suffix-less'} file", "allowed .txt or .jsonl files")
        raw = p.read_bytes()
        if b"\x00" in raw[:65536]:
            raise bad(f"{source} is a binary file", f"UTF-8 text: .txt of {documents_in}")
        if not raw.decode("utf-8", errors="replace").strip():
            raise bad(f"{source} is empty", f"a .txt of {documents_in}")
    with said_of("--prompts"):
        file_documents([p])  # reads and checks every document (a .jsonl line without 'text', ...)


def config_shape(cfg: dict | None) -> SimpleNamespace | None:
    """``n_layers`` and ``n_heads`` from a Hugging Face ``config.json`` (GPT-2, GPT-Neo(X), OPT, Llama names);
    ``None`` unless it states both and a context length (such a model's options are checked once it is loaded)."""
    names = (("n_layer", "num_hidden_layers", "num_layers"), ("n_head", "num_attention_heads", "num_heads"))
    names += (("n_positions", "max_position_embeddings", "n_ctx"),)
    shape = [next((cfg[k] for k in ks if isinstance(cfg.get(k), int)), None) for ks in names] if cfg else [None]
    return SimpleNamespace(n_layers=shape[0], n_heads=shape[1]) if None not in shape else None


@dataclass(frozen=True)
class CheckedArgs:
    """What :func:`precheck` parsed (``args`` is never changed)."""

    shape: SimpleNamespace | None = None
    heads: HeadSpec | None = None
    layers: tuple[int, ...] | None = None


def _check_shaped(args, shape, layer_final: bool) -> CheckedArgs:
    """``--heads``, ``--layer`` (``layer_final``: the final residual stream counts) and ``--layers`` against ``shape``
    (``n_layers``, ``n_heads``; ``None``: what needs no shape)."""
    heads = HeadSpec.parse(getattr(args, "heads", None))
    if heads is not None:
        heads.check(shape)
    layer = getattr(args, "layer", None)
    if shape is not None and layer is not None:
        top = shape.n_layers if layer_final else shape.n_layers - 1
        if not 0 <= layer <= top:
            what = f"allowed 0..{top}" + (" (the last is the final residual stream)" if layer_final else "")
            raise UsageError("--layer", f"{layer} is out of range for this {shape.n_layers}-layer model", what)
    layers = None
    if getattr(args, "layers", None) is not None:
        layers = tuple(int_list("--layers", args.layers, 0, shape.n_layers - 1 if shape else None))
    return CheckedArgs(shape, heads, layers)


def precheck(args, *, layer_final: bool = False) -> CheckedArgs:
    """Every check that needs no model (the module's docstring)."""
    shape = None
    if hasattr(args, "model_dir"):
        folder = model_folder(args)
        shape = config_shape(check_model_dir(None if folder is None else str(folder)))
        check_device(args.device)
    if hasattr(args, "prompts"):
        check_prompt_source(args.prompts)
    if hasattr(args, "n_prompts"):
        positive("--n-prompts", args.n_prompts)
    if getattr(args, "seq_len", None) is not None:
        positive("--seq-len", args.seq_len, 2)
    return _check_shaped(args, shape, layer_final)


def postcheck(args, checked: CheckedArgs, model, *, layer_final: bool = False) -> None:
    """The checks of :func:`precheck` that needed the model (a hub model has no ``config.json``)."""
    _check_shaped(args, model.cfg, layer_final)
