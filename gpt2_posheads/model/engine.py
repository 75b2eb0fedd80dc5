"""One interface to every way this toolkit runs a model: TransformerLens hooks, the hook-free fast path, an nnsight
trace, and stored activations.

An analysis asks an :class:`Engine` for at most four things and never asks which engine it has:

* ``patterns(batches, reduction, edits)``: every layer's attention pattern ``[batch, head, q, k]`` (float32 rows that
  sum to 1) handed to ``reduction.step(state, layer, pattern)``; with ``reduction.logits`` the whole model runs and
  each batch's logits go to the reduction in the same pass (patterns and what the model predicts from them, e.g. the
  induction score and the copying loss, without a second pass);
* ``residuals(batches, layers, reduction, edits)``: the residual stream entering each block of ``layers``
  ``[batch, pos, d_model]`` (``layer == n_layers``: the final residual, before the final norm). It is the one
  TransformerLens's processed model holds: on a LayerNorm model each row is centred over ``d_model`` (TransformerLens
  centres every write to the stream), whichever engine ran;
* ``activations(batches, reads, reduction, edits)``: the activations ``reads`` names (``{kind: layers}``, kinds
  :data:`READS`), one dict per layer: what an analysis that recomputes attention itself reads (raw pre-mask scores, a
  head's score profile, a path ablation, with the residual entering a layer replaced first: :func:`residual_write`);
* ``run(tokens, edits)``: the logits ``[batch, pos, d_vocab]`` (to a constant per position: TransformerLens centres its
  unembedding, a Hugging Face model does not; softmax and KL see no difference).

Each returns ``reduction.finish(state)``. ``edits`` are :class:`Edit` s, interventions as data (what they edit, where,
how): each engine applies those of the sites it edits (``engine.sites``) in its own way and refuses the others in one
place (:func:`applied`).

Why reductions, not activations: an nnsight trace may run on NDIF, far from here, and a pattern of a long prompt is too
big to bring back; so an analysis hands over a :class:`Reduction` (a small ``state`` dict and two pure functions) that
runs where the model runs, and only ``finish``'s small tensors come back. The local engines call the same two functions
on the same tensors, so an analysis is written once and gets the same numbers everywhere
(``tests/model/test_engines.py`` checks every analysis on every engine).

Why lazy inputs: ``batches`` may be a list of ``[batch, pos]`` token tensors or a function returning one. Stored
activations never run a model; they answer a reduction that says how to read its result off a store
(``Reduction.stored``), so the prompts (and the checks against the model's context that making them needs) are made only
by an engine that runs a model.

Each engine is one module: TransformerLens hooks (:mod:`~gpt2_posheads.model.engine_hooks`), the hook-free fast path
(:mod:`~gpt2_posheads.model.engine_fast`), an nnsight trace (:mod:`~gpt2_posheads.model.engine_nnsight`); stored
activations (:class:`StoredEngine`) are here, with :func:`engine_for`, which picks one per call of an analysis:

==============  ==========================================================================================
``"auto"``      the fast path for passes without edits when it reproduces the model (verified on first use,
                :func:`~gpt2_posheads.model.engine_fast.fast_forward`) and the model carries no hooks of the
                caller's (it would skip them), else TransformerLens hooks
``"fast"``      the fast path or an error (it applies no edits and runs no hook)
``"hooks"``     TransformerLens hooks
``"nnsight"``   an nnsight-traced model (:class:`~gpt2_posheads.model.engine_nnsight.TracedModel`), here or on NDIF;
                a traced model gets this engine whatever is asked for ``"auto"``
``"stored"``    stored activations (:class:`StoredActivations`); a store gets this engine under ``"auto"``
==============  ==========================================================================================

An operation that does not apply to an engine (running a store, editing it, bringing every token's residual back from a
trace, reading queries and keys off a trace or the fast path) raises :class:`EngineError` naming the engine and the
operation.

The attention maths every engine and analysis shares lives here too, the one home of the score scale (``scores =
(q . k) * attn_scale(cfg, layer)``) with grouped-query keys per query head and the rotary rotation, as does the turning
of the prompts users pass (token tensors, lists of them, or strings) into checked batches."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from tqdm.auto import tqdm

from .state import resolve_bf16
from .validation import UsageError, check_int_range, check_model, note

NNSIGHT, STORED = "nnsight", "stored"
ENGINES = ("auto", "fast", "hooks", NNSIGHT, STORED)

Batches = Sequence[torch.Tensor] | Callable[[], Sequence[torch.Tensor]]
Step = Callable[[dict, int, Any], None]
LogitsStep = Callable[[dict, torch.Tensor, torch.Tensor], None]

# What ``activations`` reads at a layer (shapes per batch):
#   "resid"   [batch, pos, d_model]        the residual entering the block (layer n_layers: the final residual)
#   "q", "k"  [batch, pos, head, d_head]   queries and keys as the scores use them: q . k * attn_scale is the score
#                                          (rotated with the model's own cos/sin on a rotary model; one key per query
#                                          head under grouped-query attention)
#   "z"       [batch, pos, head, d_head]   each head's attention-weighted values; the head writes z W_O
#   "pattern" [batch, head, q, k]          the attention pattern
READS = ("resid", "q", "k", "z", "pattern")


class EngineError(ValueError):
    """An operation this engine cannot do (``engine``, ``operation``: what was asked)."""

    def __init__(self, engine: str, operation: str, why: str, hint: str = ""):
        self.engine, self.operation = engine, operation
        super().__init__(f"the {engine} engine cannot {operation}: {why}" + (f"; {hint}" if hint else ""))


@dataclass
class Reduction:
    """What a pass keeps of each layer's activation, as a small state and two pure functions. ``step(state, layer, x)``
    folds one layer's activation of one batch into ``state`` (it must not keep ``x`` itself: local engines reuse its
    buffer for the next layer); ``finish(state)`` turns the state into the ``{name: tensor}`` result. Under nnsight both
    run where the model runs (shipped by value) and only ``finish``'s tensors come back. ``stored(store)``: the same
    result read off stored activations (``None``: a store cannot answer it). ``bulk``: what the state keeps per token,
    if anything (e.g. every prompt's residual stream); an engine that would have to ship it back from where the model
    runs refuses it. ``layers``: the only layers whose patterns ``step`` reads (``None``: every layer); an engine may
    skip the others and stop after the last. ``logits(state, tokens, logits)``: for ``patterns``, each batch's logits
    ``[batch, pos, d_vocab]`` with its tokens ``[batch, pos]`` (both on the model's device), after that batch's patterns
    (``None``: the pass stops after the last pattern). Under ``activations``, ``step``'s third argument is the layer's
    ``{kind: tensor}`` reads."""

    step: Step
    finish: Callable[[dict], dict]
    state: dict = field(default_factory=dict)
    stored: Callable[[Any], dict] | None = None
    bulk: str = ""
    layers: Sequence[int] | None = None
    logits: LogitsStep | None = None


@runtime_checkable
class StoredActivations(Protocol):
    """Stored activations in place of a model: ``diagonals`` ``[n_layers, n_heads, n_offsets]`` (per-diagonal
    attention masses, key 0 left out) and ``ext_pos(layer)`` ``[n_ctx, d_model]`` (the extended positional embedding
    at ``layer``, centred over all ``n_ctx`` positions). :class:`~gpt2_posheads.store.cache.PosheadsCache` is one."""

    @property
    def diagonals(self) -> torch.Tensor: ...

    def ext_pos(self, layer: int) -> torch.Tensor: ...


# What an :class:`Edit` changes (its ``site``), and what its ``fn`` is there:
SITES = {
    "pos_embed": "the positional embedding",  # fn(W_pos [n_ctx, d_model]) -> the rows the positions read instead
    "resid_add": "an addition to the residual stream",  # fn(model) -> [pos, d_model], added entering each block
    "resid_set": "a replacement of the residual stream",  # fn(model) -> [batch, pos, d_model], entering the block
    "pattern": "attention patterns",  # fn(A [batch, head, q, k]) -> the pattern the block attends with instead
    "z": "head outputs",  # fn(z [batch, pos, head, d_head]) -> the head outputs (before W_O) instead
}


@dataclass(frozen=True, eq=False)
class Edit:
    """An intervention as data: what it edits (``site``, one of :data:`SITES`, with what ``fn`` is there), where
    (``layers``: the blocks, none for the positional embedding) and how (``fn``). Every engine applies it in its own
    way (TransformerLens hooks, an nnsight trace) or refuses it in one place (:func:`applied`). ``fn`` must not change
    its input in place; ``check(model)``, run before anything is applied, raises where the model cannot take the edit
    (a layer or head it lacks, no learned positions)."""

    name: str
    site: str
    fn: Callable
    layers: tuple[int, ...] = ()
    check: Callable[[Any], None] | None = None

    def hooks(self, model) -> list:
        """TransformerLens hooks ``[(hook_name, fn), ...]`` of this edit, for ``model.run_with_hooks``."""
        from .engine_hooks import hook_tuples

        return hook_tuples(model, [self])


def as_edits(edits) -> list[Edit]:
    """``edits`` (an :class:`Edit`, or a sequence of them) as a list; anything else is a ``TypeError`` naming it."""
    edits = [edits] if isinstance(edits, Edit) else list(edits or ())
    for e in edits:
        if not isinstance(e, Edit):
            raise TypeError(
                f"edits: interventions (e.g. gpt2_posheads.mask_previous_attention(5, range(4))), got {e!r}; "
                "pass the intervention itself, not its TransformerLens hooks"
            )
    return edits


def applied(engine, edits) -> list[Edit]:
    """``edits`` checked for ``engine`` (anything with ``name``, ``model``, ``sites`` and ``refuse_hint``): the one
    place an engine refuses an edit of a site it does not edit (:class:`EngineError`), and where each edit checks
    the model."""
    edits = as_edits(edits)
    for e in edits:
        if e.site not in engine.sites:
            edited = ", ".join(SITES[s] for s in SITES if s in engine.sites) or "nothing"
            raise EngineError(
                engine.name, f"apply an intervention ({e.name})", f"it edits {edited}", engine.refuse_hint
            )
        if e.check is not None:
            e.check(engine.model)
    return edits


def bind_all(engine, edits, bind: Callable[[Edit], list]) -> list:
    """What ``bind(edit)`` makes of each of ``edits`` (checked: :func:`applied`), in order; each edit is bound once
    per engine (an analysis may run it on many batches, and an addition to the stream may take passes to compute)."""
    cache = engine.__dict__.setdefault("_bound", weakref.WeakKeyDictionary())
    out = []
    for e in applied(engine, edits):
        if e not in cache:
            cache[e] = bind(e)
        out += cache[e]
    return out


def replace_positions(pos_out, w_new: torch.Tensor):
    """The rows of ``w_new`` a position embedding's output ``[.., pos, d]`` stands for (positions ``0..pos-1``)."""
    n = pos_out.shape[-2]
    return w_new[:n].to(pos_out.dtype).expand_as(pos_out).clone()


def residual_write(layer: int, value: torch.Tensor) -> Edit:
    """An edit that replaces the residual stream entering block ``layer`` by ``value`` ``[batch, pos, d_model]``
    (the batch it runs on must have that shape): what a head would compute from a residual the model never made
    (a path ablation asks a head for its queries and keys with one upstream output taken out of its input). Blocks
    below ``layer`` still run; their result is discarded. TransformerLens hooks apply it; a trace does not (its edits
    add to the stream, they do not replace it)."""
    check = lambda model: check_int_range("layer", layer, 0, model.cfg.n_layers)  # noqa: E731
    return Edit("a residual write", "resid_set", lambda model: value, (layer,), check)


class Engine(Protocol):
    """What an analysis may ask of a model (see the module doc for shapes and meaning)."""

    name: str
    model: Any
    sites: frozenset  # the sites of SITES whose edits it applies
    refuse_hint: str  # what to do instead, when it refuses an edit

    # each returns reduction.finish(state) (module doc); progress: a bar with this label over the batches
    def patterns(self, batches: Batches, reduction: Reduction, edits=(), progress: str | None = None) -> dict: ...

    def residuals(
        self, batches: Batches, layers: Sequence[int], reduction: Reduction, edits=(), progress=None
    ) -> dict: ...

    def activations(self, batches: Batches, reads: Mapping, reduction: Reduction, edits=(), progress=None) -> dict: ...

    def run(self, tokens: torch.Tensor, edits=()) -> torch.Tensor: ...


def materialise(batches: Batches) -> Sequence[torch.Tensor]:
    return batches() if callable(batches) else batches


def progress_bar(batches: Sequence[torch.Tensor], progress: str | None):
    return tqdm(batches, desc=progress, disable=progress is None)


def pattern_layers(model, reduction: Reduction) -> list[int]:
    return sorted(range(model.cfg.n_layers) if reduction.layers is None else set(reduction.layers))


def only_layers(layers: Sequence[int], step: Step, state: dict, layer: int, x: torch.Tensor) -> None:
    if layer in layers:
        step(state, layer, x)


def layers_read(model, reads: Mapping[str, Iterable[int]]) -> dict[int, set[str]]:
    """``{layer: kinds}`` of ``reads`` ``{kind: layers}``, checked: kinds of :data:`READS`, layers ``0..n_layers-1``
    (``0..n_layers`` for ``"resid"``), at least one read."""
    n, out = model.cfg.n_layers, {}
    for kind, layers in reads.items():
        if kind not in READS:
            raise ValueError(f"cannot read {kind!r}: the reads are {READS}")
        for l in layers:
            out.setdefault(check_int_range(f"{kind} layer", l, 0, n if kind == "resid" else n - 1), set()).add(kind)
    if not out:
        raise ValueError("no activation to read")
    return out


def keep_reads(state: dict, layer: int, acts: dict) -> None:
    """A ``step`` keeping each layer's reads (one batch's worth): with ``finish=dict``, ``{layer: {kind: tensor}}``."""
    state[layer] = acts


def read_kinds(reads: Mapping[str, Iterable[int]]) -> str:
    return "activations (" + ", ".join(sorted(reads)) + ")"


class StoredEngine:
    """Stored activations (:class:`StoredActivations`): they answer the reductions that say how to read their result off
    a store (``Reduction.stored``) and nothing else: no pattern or residual of new inputs, no run, no edit."""

    name = STORED
    sites = frozenset()
    refuse_hint = "stored activations were measured once, unedited: pass the model instead"

    def __init__(self, store):
        self.model = store

    def _answer(self, reduction: Reduction, operation: str, edits) -> dict:
        applied(self, edits)
        if reduction.stored is None:
            raise EngineError(
                self.name,
                operation,
                "a store holds per-diagonal masses and extended positional embeddings, not activations of new inputs",
                "pass the model instead",
            )
        return reduction.stored(self.model)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, "reduce attention patterns", edits)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, "reduce residual streams", edits)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, f"read {read_kinds(reads)}", edits)

    def run(self, tokens, edits=()) -> torch.Tensor:
        raise EngineError(self.name, "run a model", "stored activations hold no model", "pass the model instead")


def engine_for(model, engine: str = "auto", bf16: bool = False, with_edits: bool = False) -> Engine:
    """The :class:`Engine` that runs ``model`` (a TransformerLens model, a traced model, or stored activations).
    ``engine``: one of :data:`ENGINES` (module doc). ``bf16``: matmuls in bfloat16 where the CPU or GPU has native
    support (else float32, said once: :func:`~gpt2_posheads.model.state.resolve_bf16`); a trace runs the model in
    its own dtype. ``with_edits``: the analysis compares passes with and without edits, so under ``"auto"`` both run
    through the engine that applies the edits (TransformerLens hooks): their difference is then the edits' alone, with
    no difference between two ways of computing the clean pass in it."""
    from .engine_fast import FastEngine
    from .engine_hooks import HooksEngine
    from .engine_nnsight import TracedEngine, is_traced

    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not one of {ENGINES}")
    if isinstance(model, StoredActivations):
        if engine not in ("auto", STORED):
            raise ValueError(
                f"stored activations fix engine (they were measured once): engine={engine!r} needs the model itself"
            )
        return StoredEngine(model)
    if is_traced(model):
        if engine not in ("auto", NNSIGHT):
            raise ValueError(f"engine={engine!r} runs a TransformerLens model; this model is traced by nnsight")
        return TracedEngine(model)
    if engine in (NNSIGHT, STORED):
        raise ValueError(
            f"engine={engine!r} needs "
            + (
                "a traced model (gpt2_posheads.model.engine_nnsight.load_traced)"
                if engine == NNSIGHT
                else "stored activations"
            )
            + "; this is a TransformerLens model"
        )
    check_model(model)  # a plain transformers model (no ``cfg``) is named here, before any work
    bf16 = resolve_bf16(bf16, model_device(model))
    if engine == "hooks" or (engine == "auto" and with_edits):
        return HooksEngine(model, bf16)
    return FastEngine(model, strict=engine == "fast", bf16=bf16)


def attn_scale(cfg, layer: int) -> float:
    """Multiplier of ``q . k`` in ``layer``: ``1 / attn_scale`` (TransformerLens's default ``attn_scale`` is
    ``sqrt(d_head)``; the 4.x bridge stores ``-1`` for "default"), ``1`` when ``use_attn_scale`` is off, and a further
    ``1 / (layer + 1)`` with ``scale_attn_by_inverse_layer_idx`` (GPT-2's option, used by some checkpoints)."""
    if not getattr(cfg, "use_attn_scale", True):
        scale = 1.0
    else:
        given = float(getattr(cfg, "attn_scale", -1.0) or -1.0)
        scale = 1.0 / (given if given > 0 else math.sqrt(cfg.d_head))
    if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
        scale /= layer + 1
    return scale


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` ``[batch, pos, head, d_head]`` with the model's own ``cos``/``sin``
    ``[batch, pos, r]`` (GPT-NeoX's rotate-half on the first ``r`` dimensions; ``r < d_head`` for Pythia's partial
    rotary): ``x_r cos + rotate_half(x_r) sin``, the rest unchanged."""
    r = cos.shape[-1]
    xr, rest = x[..., :r], x[..., r:]
    half = r // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    c, s = cos[:, :, None, :].to(x.dtype), sin[:, :, None, :].to(x.dtype)
    return torch.cat([xr * c + rotated * s, rest], dim=-1)


def expand_kv(k: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Keys ``[batch, pos, n_kv_heads, d_head]`` of grouped-query attention → one per query head ``[batch, pos,
    n_heads, d_head]`` (query head ``h`` reads key head ``h // (n_heads / n_kv_heads)``, as the models compute it)."""
    if k.shape[2] == n_heads:
        return k
    return k.repeat_interleave(n_heads // k.shape[2], dim=2)


def scale_from_pattern(dot: torch.Tensor, pattern: torch.Tensor, declared: float) -> tuple[float, torch.Tensor, float]:
    """``(scale, mask, error)``: how a head turns ``dot = q . k`` ``[..., q, k]`` into its own ``pattern`` (same shape).
    The mask is where the pattern is exactly 0 (the future, and any attention window). The scale is ``declared``
    (:func:`attn_scale`) when ``softmax(dot * declared + mask)`` reproduces the pattern; otherwise it is read off the
    pattern (within each row ``log A - mean = scale * (dot - mean)``, a least-squares fit), which is how a configuration
    that misstates the scale is caught (the TransformerLens 4 bridge gives GPT-Neo, which does not scale its scores, the
    default 1/sqrt(d_head)). ``error``: the largest difference of the reproduced pattern. Never read a bridge's
    ``hook_attn_scores`` for this: on GPT-Neo and OPT it holds the pattern."""
    dot, pattern = dot.double(), pattern.double()
    mask = pattern <= 0

    def error(scale: float) -> float:
        return float((torch.softmax((dot * scale).masked_fill(mask, float("-inf")), -1) - pattern).abs().max())

    if error(declared) <= 1e-4:
        return declared, mask, error(declared)
    keep = (~mask).double()
    n_keep = keep.sum(-1, keepdim=True).clamp_min(1)
    logp = torch.where(mask, torch.zeros_like(dot), pattern.clamp_min(1e-300).log())
    centred_logp = (logp - (logp * keep).sum(-1, keepdim=True) / n_keep) * keep
    centred_dot = (dot - (dot * keep).sum(-1, keepdim=True) / n_keep) * keep
    fitted = float((centred_dot * centred_logp).sum() / (centred_dot**2).sum().clamp_min(1e-30))
    return fitted, mask, error(fitted)


def raw_scores_from_qk(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``[batch, pos, head, d_head]`` queries and keys (as an engine's ``"q"`` and ``"k"`` reads give them) →
    pre-mask scores ``[batch, head, q, k]`` = ``(q . k) * scale`` (``scale``: :func:`attn_scale`)."""
    return torch.einsum("bqhd,bkhd->bhqk", q.float(), expand_kv(k, q.shape[2]).float()) * scale


def attention_pattern(q: torch.Tensor, k: torch.Tensor, scale: float, window: int | None) -> torch.Tensor:
    """``softmax(q k^T * scale + mask)`` ``[batch, head, q, k]`` float32: keys after the query masked, and keys
    ``window`` or more positions back where the layer has a window."""
    n = q.shape[1]
    pos = torch.arange(n, device=q.device)
    dist = pos[:, None] - pos[None, :]
    mask = dist < 0
    if window is not None:
        mask = mask | (dist >= window)
    scores = raw_scores_from_qk(q, k, scale)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)


def z_gap(mine: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
    """Relative gap of a recomputed activation to the model's own (a 0-d tensor): ``max |mine - theirs| / (1 + max
    |theirs|)``."""
    return (mine - theirs.float()).abs().max() / (1.0 + theirs.float().abs().max())


_EOS_FOR_BOS_SAID: weakref.WeakSet = weakref.WeakSet()  # the tokenizers whose missing BOS was said


def bos_token_id(tokenizer) -> int:
    """The id a prompt starts with: the tokenizer's BOS token. A tokenizer without one (or whose BOS TransformerLens
    set to its EOS when it loaded the model: none was declared) starts prompts with its EOS token, as TransformerLens's
    own ``to_tokens`` does, said once per tokenizer; one with neither is a :class:`UsageError`."""
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    declared = getattr(tokenizer, "init_kwargs", {}).get("bos_token")
    if bos is not None and (declared is not None or bos != eos):
        return bos
    first = bos if bos is not None else eos
    if first is None:
        raise UsageError("tokenizer", "has neither a BOS nor an EOS token to start a prompt with", "prepend_bos=False")
    if tokenizer not in _EOS_FOR_BOS_SAID:
        _EOS_FOR_BOS_SAID.add(tokenizer)
        name = tokenizer.convert_ids_to_tokens(first)
        note(f"the tokenizer has no BOS token: prompts start with its EOS token {name!r} (id {first}) in its place")
    return first


def as_token_batches(model, prompts, batch_size: int) -> Iterator[torch.Tensor]:
    """Yield ``[batch, pos]`` token tensors; prompts of equal length share a batch. ``prompts``: a ``[n, pos]``
    tensor, a list of 1-D tensors, or a list of strings (tokenized with the model's tokenizer, BOS prepended as
    ``model.to_tokens`` does). Raises on an empty list or a prompt longer than ``n_ctx``."""
    check_int_range("batch_size", batch_size, 1, 1 << 30)
    by_len: dict[int, list[torch.Tensor]] = {}
    for s in to_token_list(model, prompts):
        by_len.setdefault(len(s), []).append(s)
    for _, group in sorted(by_len.items()):
        for i in range(0, len(group), batch_size):
            yield torch.stack(group[i : i + batch_size])


def to_token_list(model, prompts) -> list[torch.Tensor]:
    if isinstance(prompts, torch.Tensor):
        if prompts.ndim == 1:
            prompts = prompts[None]
        if prompts.ndim != 2:
            raise ValueError(f"prompts tensor must be [batch, pos], got shape {tuple(prompts.shape)}")
        seqs = list(prompts)
    elif isinstance(prompts, Sequence) and not isinstance(prompts, str):
        seqs = [model.to_tokens(p)[0] if isinstance(p, str) else torch.as_tensor(p) for p in prompts]
    else:
        raise TypeError("prompts must be a [batch, pos] tensor, a list of token tensors, or a list of strings")
    if len(seqs) == 0:
        raise ValueError("prompts is empty: pass at least one prompt")
    n_ctx, d_vocab = model.cfg.n_ctx, model.cfg.d_vocab
    for s in seqs:
        if s.dtype.is_floating_point or s.dtype.is_complex or s.dtype == torch.bool:
            raise UsageError(
                "prompts",
                f"token ids are {s.dtype}",
                "an integer tensor of token ids",
                "e.g. model.to_tokens(text), or tensor.long() if the values are whole numbers",
            )
        if len(s) > n_ctx:
            raise UsageError(
                "prompts", f"prompt length {len(s)} exceeds the model's context", f"allowed 1..{n_ctx} tokens (n_ctx)"
            )
        if len(s) < 1:
            raise UsageError("prompts", "a prompt has length 0", "at least one token")
        lo, hi = int(s.min()), int(s.max())
        if lo < 0 or hi >= d_vocab:
            raise UsageError(
                "prompts",
                f"token id {hi if hi >= d_vocab else lo} is outside the vocabulary",
                f"allowed 0..{d_vocab - 1} (d_vocab {d_vocab})",
            )
    return [s.long() for s in seqs]


def single_prompt(model, prompt) -> torch.Tensor:
    """One prompt (a string or a 1-D token tensor) as a checked ``[1, pos]`` batch on the model's device."""
    return to_token_list(model, [prompt] if isinstance(prompt, str) else prompt)[0][None].to(model_device(model))


def model_device(model) -> torch.device:
    return next(model.parameters()).device
