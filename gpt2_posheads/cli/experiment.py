"""The set-up every model script shares (:func:`setup`): checks, output folder, model, prompts, ranking, heads;
``--engine nnsight`` (``--remote``: on NDIF) checked before any work."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import torch

from ..analysis.diagonals import diagonal_attention, rank_from_diagonals
from ..analysis.heads import HeadDefault, require_above_layer0, resolve_heads
from ..analysis.prompts import documents, make_prompts
from ..claims.catalogue import Option
from ..model.engine_nnsight import ENGINE as NNSIGHT
from ..model.engine_nnsight import check_remote, load_traced, require_nnsight
from ..model.folder import folder_fingerprint
from ..model.loading import ModelLoadError, compiled_standin, is_gpt2_small, load_model, position_kind
from ..model.validation import UsageError, capped_seq_len, check_fast_engine, head_name
from .checks import CheckedArgs, model_folder, postcheck, precheck
from .output import Output, check_one_model_per_name, default_target

_SHARED: dict | None = None  # the memos of :func:`shared_setup`; None outside it


@contextmanager
def shared_setup() -> Iterator[None]:
    """Within this block (the main job) :func:`setup` reuses what an earlier command made from the same inputs: the
    model of one source and device, the prompts of one model and options, the ranking of one set of prompts. Each
    memo's key holds every input its result depends on, so a command measures the numbers it does alone; a command
    must not change the model it is given (none does: interventions are hooks)."""
    global _SHARED
    previous, _SHARED = _SHARED, {"models": {}, "prompts": {}, "rankings": {}}
    try:
        yield
    finally:
        _SHARED = previous


def _shared(kind: str, key: tuple, make):
    """``make()``, made once per ``key`` of memo ``kind`` inside :func:`shared_setup`."""
    if _SHARED is None:
        return make()
    if key not in _SHARED[kind]:
        _SHARED[kind][key] = make()
    return _SHARED[kind][key]


def engine_options(engines: tuple[str, ...], help: str) -> tuple[Option, ...]:
    """``--engine`` (``engines`` and nnsight) and ``--remote``."""
    nnsight = "; nnsight: every pattern computed and reduced inside an nnsight trace (a local Hugging Face folder, or "
    remote = "run the nnsight traces on NDIF (needs --engine nnsight, NDIF_API_KEY and a hub name in --model/--models)"
    return (
        Option("--engine", "auto", help + nnsight + "an NDIF-hosted model with --remote)", choices=(*engines, NNSIGHT)),
        Option("--remote", False, remote),
    )


def check_engine_args(args, model_dir_flag: str = "--model-dir") -> None:
    """``--remote`` needs ``--engine nnsight``, a hub name and NDIF; a local nnsight run needs nnsight installed."""
    if not getattr(args, "remote", False):
        if getattr(args, "engine", None) == NNSIGHT:
            require_nnsight("--engine", "or --engine auto")
        return
    if getattr(args, "engine", None) != NNSIGHT:
        raise UsageError("--remote", "needs --engine nnsight", "--engine nnsight --remote", "or drop --remote")
    if getattr(args, model_dir_flag.lstrip("-").replace("-", "_"), None):
        problem = f"runs a model hosted on NDIF, named by its hub id, not a local folder ({model_dir_flag})"
        hint = f"or drop --remote to run {model_dir_flag} through nnsight here"
        raise UsageError("--remote", problem, "--model <hub id> --remote", hint)
    check_remote("--remote")


def load_engine_model(name: str, args, param: str = "--model"):
    """A :class:`~gpt2_posheads.model.engine_nnsight.TracedModel` with ``--engine nnsight`` (on NDIF with
    ``--remote``), else ``None`` (the caller loads its TransformerLens model)."""
    if getattr(args, "engine", None) != NNSIGHT:
        return None
    try:
        return load_traced(name, remote=bool(getattr(args, "remote", False)), device=getattr(args, "device", None))
    except UsageError:
        raise
    except (OSError, ValueError) as e:
        raise UsageError(param, f"{name} could not be loaded through nnsight ({type(e).__name__}: {e})") from None


def model_from_args(args):
    """Load ``--model-dir`` or ``--model`` (traced with ``--engine nnsight``); a load failure is one line."""
    source = str(model_folder(args) or args.model)
    traced = load_engine_model(source, args, "--model-dir" if args.model_dir else "--model")
    if traced is not None:
        return traced

    def load():
        try:
            return load_model(source, device=args.device)
        except (ModelLoadError, FileNotFoundError) as e:
            raise UsageError("--model-dir" if args.model_dir else "--model", str(e)) from None

    model = _shared("models", (source, args.device), load)
    if getattr(args, "engine", None) == "fast":  # the fast path on a model it cannot run (rotary, ALiBi): one line now
        check_fast_engine(model, "--engine")
    return model


def model_label(args) -> str:
    """The model as the user named it: ``--model-dir`` or ``--model``."""
    return str(args.model_dir or args.model)


def model_slug(args) -> str:
    """A folder name for the model: the directory's name or the hub id with '/' → '--'."""
    folder = model_folder(args)
    if folder is not None:
        return folder.resolve().name
    return str(getattr(args, "model", "model")).replace("/", "--")


def model_identity(args) -> dict:
    """``{"label", "fingerprint"}``: what tells two models of one name apart (a folder's config and weights' hash, a
    hub model's name)."""
    folder = model_folder(args)
    if folder is None:
        return {"label": model_label(args), "fingerprint": model_label(args)}
    return {"label": str(folder.expanduser().resolve()), "fingerprint": folder_fingerprint(folder.expanduser())}


def check_model_names(models: list[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``{value: (the name its results are filed under, its weights fingerprint)}`` for ``(--model or --model-dir,
    value)`` pairs; two of one name with other weights are refused (:func:`.output.check_one_model_per_name`), named
    by the second's option (``--models``, ``--model-dirs``)."""
    first, names = {}, {}
    for flag, value in models:
        args = SimpleNamespace(model_dir=value if flag == "--model-dir" else None, model=value)
        name, this = model_slug(args), model_identity(args)
        hint = "rename one of the model folders (results are filed by the model's name)"
        check_one_model_per_name(first.setdefault(name, this), this, flag + "s", f"{value} is", hint)
        names[value] = (name, this["fingerprint"])
    return names


def open_output(args, script_file: str, per_model: bool = True, quick: bool = False) -> Output:
    """The run's output folder (:class:`Output`): ``--out`` or ``results/<script>/<model>/``."""
    script, has_model = Path(script_file).stem, per_model and hasattr(args, "model")
    target = Path(args.out) if args.out else default_target(script, model_slug(args) if has_model else None)
    model = model_identity(args) if has_model else None
    return Output.open(target, script, not args.no_png, quick, getattr(args, "force", False), model=model)


OPTION_OF = {"n_prompts": "--n-prompts", "seq_len": "--seq-len", "prompts": "--prompts"}


def corpus_prompts(model, args) -> tuple[torch.Tensor, str]:
    """``[n_prompts, seq_len]`` natural-text prompts and their source (a mistake named by its option)."""
    try:
        seq_len = capped_seq_len(model, args.seq_len)

        def make():
            docs, source = documents(args.prompts)
            return make_prompts(model.tokenizer, args.n_prompts, seq_len, seed=args.seed, docs=docs), source

        return _shared("prompts", (id(model), args.prompts, args.n_prompts, seq_len, args.seed), make)
    except UsageError as e:
        allowed = re.sub(r"\b(n_prompts|seq_len)\b", lambda m: OPTION_OF[m.group(1)], e.allowed)
        raise UsageError(OPTION_OF.get(e.param, e.param), e.problem, allowed, e.hint) from None


@dataclass
class Experiment:
    """Everything a model script measures on, set up and checked (:func:`setup`)."""

    args: object
    checked: CheckedArgs
    out: Output
    model: object
    prompts: torch.Tensor | None = None
    source: str = ""
    diag: torch.Tensor | None = None  # [n_layers, n_heads, n_offsets] on the prompts (every offset)
    ranking: pd.DataFrame | None = None  # the previous-token ranking from diag
    heads: list[tuple[int, int]] = field(default_factory=list)
    heads_chosen: str = ""

    @property
    def label(self) -> str:
        return model_label(self.args)

    def describe(self) -> dict:
        """The facts every summary of a model script records."""
        d = {"model": self.label, "is_gpt2_small": is_gpt2_small(self.model), "positions": position_kind(self.model)}
        d["seed"] = getattr(self.args, "seed", 0)
        standin = compiled_standin(self.model)
        if standin:  # a model built to pass for GPT-2 small: every reader of the results is told what it is
            d["compiled_standin"] = standin
        if self.prompts is not None:
            n_prompts, seq_len = self.prompts.shape
            d.update(prompt_source=self.source, n_prompts=int(n_prompts), seq_len=int(seq_len))
        if self.heads:
            d.update(heads=[head_name(l, h) for l, h in self.heads], heads_chosen=self.heads_chosen)
        return d


def setup(
    args,
    script_file: str,
    heads: HeadDefault | None = None,
    prompts: bool = True,
    ranking: bool = True,
    above_layer0: bool = False,
    layer_final: bool = False,
) -> Experiment:
    """Check every option that needs no model, open the output folder, load the model, check the rest, make the
    prompts, rank the heads (every offset) and choose them. ``above_layer0``: ``--heads`` in layer 0 are refused."""
    checked = precheck(args, layer_final=layer_final)
    if above_layer0:
        require_above_layer0(checked.heads)
    out = open_output(args, script_file)
    model = model_from_args(args)
    postcheck(args, checked, model, layer_final=layer_final)
    exp = Experiment(args, checked, out, model)
    out.context = exp.describe()
    if prompts:
        exp.prompts, exp.source = corpus_prompts(model, args)
        out.context = exp.describe()
    if ranking and exp.prompts is not None:  # every offset; once per prompts inside shared_setup

        def rank():
            diag = diagonal_attention(model, exp.prompts, progress=False)
            return diag, rank_from_diagonals(diag)

        exp.diag, exp.ranking = _shared("rankings", (id(model), id(exp.prompts)), rank)
    if heads is not None and exp.ranking is not None:
        exp.heads, exp.heads_chosen = resolve_heads(model, checked.heads, heads, exp.ranking)
    return exp
