"""One interface to every way this toolkit runs a model: TransformerLens hooks, the hook-free fast path, an nnsight
trace, and stored activations. An analysis asks an :class:`Engine` for at most four things, never which it has:

* ``patterns(batches, reduction, edits)``: every layer's attention pattern ``[batch, head, q, k]`` (float32 rows that
  sum to 1) handed to ``reduction.step(state, layer, pattern)``; with ``reduction.logits`` the whole model runs and
  each batch's logits go to the reduction in the same pass (e.g. the induction score and the copying loss at once);
* ``residuals(batches, layers, reduction, edits)``: the residual stream entering each block of ``layers``
  ``[batch, pos, d_model]`` (``layer == n_layers``: the final residual, before the final norm), as TransformerLens's
  processed model holds it whichever engine ran: on a LayerNorm model each row centred over ``d_model``;
* ``activations(batches, reads, reduction, edits)``: the activations ``reads`` names (``{kind: layers}``, kinds
  :data:`READS`), one dict per layer, for an analysis that recomputes attention itself (raw scores, a score profile,
  a path ablation with the residual entering a layer replaced first: :func:`residual_write`);
* ``run(tokens, edits)``: the logits ``[batch, pos, d_vocab]`` (to a constant per position: TransformerLens centres its
  unembedding, a Hugging Face model does not; softmax and KL see no difference).

Each returns ``reduction.finish(state)``. ``edits`` are :class:`Edit` s, interventions as data, that each engine
applies in its own way at the sites it edits (``engine.sites``) and refuses elsewhere (:func:`applied`).

Why reductions: an nnsight trace may run on NDIF, and a long prompt's pattern is too big to bring back, so a
:class:`Reduction` (a small ``state`` dict and two pure functions) runs where the model runs and only ``finish``'s small
tensors come back; the local engines call the same functions on the same tensors, so every engine gives the same
numbers (``tests/model/test_engines.py``). Why lazy inputs: ``batches`` (``[batch, pos]`` token tensors) may be a
function returning them, so that stored activations, which answer from the store (``Reduction.stored``), never make
prompts. :func:`engine_for` picks one engine per call:

==============  ==========================================================================================
``"auto"``      the fast path for passes without edits when it reproduces the model (verified on first use,
                :func:`~gpt2_posheads.model.engine_fast.fast_forward`) and the model carries no hooks of the
                caller's (it would skip them), else TransformerLens hooks
``"fast"``      the fast path or an error (it applies no edits and runs no hook)
``"hooks"``     TransformerLens hooks (:mod:`~gpt2_posheads.model.engine_hooks`)
``"nnsight"``   an nnsight-traced model (:class:`~gpt2_posheads.model.engine_nnsight.TracedModel`), here or on NDIF;
                a traced model gets this engine whatever is asked for ``"auto"``
``"stored"``    stored activations (:class:`StoredActivations`); a store gets this engine under ``"auto"``
==============  ==========================================================================================

An operation an engine cannot do raises :class:`EngineError`. The attention maths every engine shares lives here too
(``scores = (q . k) * attn_scale(cfg, layer)``, grouped-query keys, the rotary rotation)."""

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
    """What a pass keeps of each layer's activation: a small ``state``, ``step(state, layer, x)`` folding one layer's
    activation of one batch into it (never keeping ``x``: local engines reuse its buffer), ``finish(state)`` making the
    ``{name: tensor}`` result (under nnsight both run where the model runs and only ``finish``'s tensors come back).
    ``stored(store)``: the same result read off stored activations (``None``: a store cannot answer). ``bulk``: what the
    state keeps per token, if anything (an engine that would ship it back from where the model runs refuses it).
    ``layers``: the only layers ``step`` reads (``None``: all; an engine may stop after the last). ``logits(state,
    tokens, logits)``: for ``patterns``, each batch's logits ``[batch, pos, d_vocab]`` with its tokens, after its
    patterns (``None``: the pass stops after the last pattern). Under ``activations``, ``x`` is ``{kind: tensor}``."""

    step: Callable[[dict, int, Any], None]
    finish: Callable[[dict], dict]
    state: dict = field(default_factory=dict)
    stored: Callable[[Any], dict] | None = None
    bulk: str = ""
    layers: Sequence[int] | None = None
    logits: Callable[[dict, torch.Tensor, torch.Tensor], None] | None = None


@runtime_checkable
class StoredActivations(Protocol):
    """Stored activations in place of a model (:class:`~gpt2_posheads.store.cache.PosheadsCache`): ``diagonals``
    ``[n_layers, n_heads, n_offsets]`` (per-diagonal attention masses, key 0 left out) and ``ext_pos(layer)``
    ``[n_ctx, d_model]`` (the extended positional embedding at ``layer``, centred over all ``n_ctx`` positions)."""

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
    """An intervention as data: what it edits (``site`` of :data:`SITES`), where (``layers``: the blocks, none for the
    positional embedding) and how (``fn``, which must not change its input in place). ``check(model)``, run before
    anything is applied, raises where the model cannot take it (a layer or head it lacks, no learned positions)."""

    name: str
    site: str
    fn: Callable
    layers: tuple[int, ...] = ()
    check: Callable[[Any], None] | None = None

    def hooks(self, model) -> list:
        """TransformerLens hooks ``[(hook_name, fn), ...]`` of this edit, for ``model.run_with_hooks``."""
        from .engine_hooks import HooksEngine

        return HooksEngine(model).bind([self])


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
    """``edits`` checked for ``engine``: the one place an engine refuses an edit of a site it does not edit
    (:class:`EngineError`), and where each edit checks the model."""
    edits = as_edits(edits)
    for e in edits:
        if e.site not in engine.sites:
            edited = ", ".join(SITES[s] for s in SITES if s in engine.sites) or "nothing"
            engine.refuse(f"apply an intervention ({e.name})", f"it edits {edited}")
        if e.check is not None:
            e.check(engine.model)
    return edits


def replace_positions(pos_out, w_new: torch.Tensor):
    """The rows of ``w_new`` a position embedding's output ``[.., pos, d]`` stands for (positions ``0..pos-1``)."""
    n = pos_out.shape[-2]
    return w_new[:n].to(pos_out.dtype).expand_as(pos_out).clone()


def residual_write(layer: int, value: torch.Tensor) -> Edit:
    """An edit that replaces the residual stream entering block ``layer`` by ``value`` ``[batch, pos, d_model]`` (the
    batch it runs on must have that shape): what a head computes from a residual the model never made (a path ablation
    takes one upstream output out of a head's input). Blocks below ``layer`` still run, their result discarded.
    TransformerLens hooks apply it; a trace does not (its edits add to the stream, they do not replace it)."""
    check = lambda model: check_int_range("layer", layer, 0, model.cfg.n_layers)  # noqa: E731
    return Edit("a residual write", "resid_set", lambda model: value, (layer,), check)


def materialise(batches: Batches) -> Sequence[torch.Tensor]:
    return batches() if callable(batches) else batches


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


class Engine:
    """What an analysis may ask of a model (module doc for shapes and meaning), and what every engine shares: the
    refusal of what it cannot do (:meth:`refuse`, :func:`applied`), each edit bound once per engine (:meth:`bind`;
    a subclass's ``_bind(edit)`` makes its form of one edit), the progress bar over the batches and the layers a
    reduction reads. Each of ``patterns``, ``residuals``, ``activations`` returns ``reduction.finish(state)``."""

    name = ""
    sites: frozenset = frozenset()  # the sites of SITES whose edits it applies
    refuse_hint = ""  # what to do instead, when it refuses
    reads_refused = ""  # why it reads no activations (an engine that reads them overrides ``activations``)

    def __init__(self, model, bf16: bool = False):
        self.model, self.bf16 = model, bf16

    def refuse(self, operation: str, why: str, hint: str | None = None):
        raise EngineError(self.name, operation, why, self.refuse_hint if hint is None else hint)

    def bind(self, edits) -> list:
        """What ``_bind(edit)`` makes of each of ``edits`` (checked: :func:`applied`), in order; each edit is bound once
        per engine (an analysis may run it on many batches; an addition to the stream may take passes to compute)."""
        cache = self.__dict__.setdefault("_bound", weakref.WeakKeyDictionary())
        out = []
        for e in applied(self, edits):
            if e not in cache:
                cache[e] = self._bind(e)
            out += cache[e]
        return out

    def pattern_layers(self, reduction: Reduction) -> list[int]:
        return sorted(range(self.model.cfg.n_layers) if reduction.layers is None else set(reduction.layers))

    @staticmethod
    def batches(batches: Sequence[torch.Tensor], progress: str | None):
        """The batches, under a progress bar labelled ``progress`` (none when ``None``)."""
        return tqdm(batches, desc=progress, disable=progress is None)

    def patterns(self, batches: Batches, reduction: Reduction, edits=(), progress: str | None = None) -> dict: ...

    def residuals(
        self, batches: Batches, layers: Sequence[int], reduction: Reduction, edits=(), progress=None
    ) -> dict: ...

    def activations(self, batches: Batches, reads: Mapping, reduction: Reduction, edits=(), progress=None) -> dict:
        self.refuse(f"read {read_kinds(reads)}", self.reads_refused)

    def run(self, tokens: torch.Tensor, edits=()) -> torch.Tensor: ...


class StoredEngine(Engine):
    """Stored activations (:class:`StoredActivations`): they answer the reductions that say how to read their result off
    a store (``Reduction.stored``) and nothing else: no pattern or residual of new inputs, no run, no edit."""

    name = STORED
    refuse_hint = "stored activations were measured once, unedited: pass the model instead"

    def _answer(self, reduction: Reduction, operation: str, edits) -> dict:
        applied(self, edits)
        if reduction.stored is None:
            why = "a store holds per-diagonal masses and extended positional embeddings, not activations of new inputs"
            self.refuse(operation, why, "pass the model instead")
        return reduction.stored(self.model)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, "reduce attention patterns", edits)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, "reduce residual streams", edits)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, f"read {read_kinds(reads)}", edits)

    def run(self, tokens, edits=()) -> torch.Tensor:
        self.refuse("run a model", "stored activations hold no model", "pass the model instead")


def engine_for(model, engine: str = "auto", bf16: bool = False, with_edits: bool = False) -> Engine:
    """The :class:`Engine` that runs ``model`` (module doc for ``engine``). ``bf16``: matmuls in bfloat16 where the
    hardware supports it natively (:func:`~gpt2_posheads.model.state.resolve_bf16`); a trace runs in the model's own
    dtype. ``with_edits``: the analysis compares passes with and without edits, so under ``"auto"`` both run through
    the engine that applies the edits (hooks), and their difference is the edits' alone."""
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
        need = "a traced model (gpt2_posheads.model.engine_nnsight.load_traced)" if engine == NNSIGHT else None
        raise ValueError(f"engine={engine!r} needs {need or 'stored activations'}; this is a TransformerLens model")
    check_model(model)  # a plain transformers model (no ``cfg``) is named here, before any work
    bf16 = resolve_bf16(bf16, model_device(model))
    if engine == "hooks" or (engine == "auto" and with_edits):
        return HooksEngine(model, bf16)
    return FastEngine(model, strict=engine == "fast", bf16=bf16)


def attn_scale(cfg, layer: int) -> float:
    """Multiplier of ``q . k`` in ``layer``: ``1 / attn_scale`` (default ``sqrt(d_head)``; the 4.x bridge stores ``-1``
    for it), ``1`` without ``use_attn_scale``, times ``1 / (layer + 1)`` with ``scale_attn_by_inverse_layer_idx``."""
    if not getattr(cfg, "use_attn_scale", True):
        scale = 1.0
    else:
        given = float(getattr(cfg, "attn_scale", -1.0) or -1.0)
        scale = 1.0 / (given if given > 0 else math.sqrt(cfg.d_head))
    if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
        scale /= layer + 1
    return scale


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` ``[batch, pos, head, d_head]`` with the model's ``cos``/``sin`` ``[batch, pos, r]``:
    ``x_r cos + rotate_half(x_r) sin`` on the first ``r`` dimensions (Pythia's partial rotary: ``r < d_head``)."""
    r = cos.shape[-1]
    xr, rest = x[..., :r], x[..., r:]
    half = r // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    c, s = cos[:, :, None, :].to(x.dtype), sin[:, :, None, :].to(x.dtype)
    return torch.cat([xr * c + rotated * s, rest], dim=-1)


def expand_kv(k: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Grouped-query keys ``[batch, pos, n_kv_heads, d_head]`` → ``[batch, pos, n_heads, d_head]`` (query head ``h``
    reads key head ``h // (n_heads / n_kv_heads)``)."""
    return k if k.shape[2] == n_heads else k.repeat_interleave(n_heads // k.shape[2], dim=2)


def scale_from_pattern(dot: torch.Tensor, pattern: torch.Tensor, declared: float) -> tuple[float, torch.Tensor, float]:
    """``(scale, mask, error)``: how a head turns ``dot = q . k`` ``[..., q, k]`` into its ``pattern``. The mask is
    where the pattern is exactly 0 (the future, any window); the scale is ``declared`` (:func:`attn_scale`) when
    ``softmax(dot * declared + mask)`` reproduces the pattern, else read off it (per row ``log A - mean = scale * (dot -
    mean)``, least squares): how a misstated scale is caught (the 4.x bridge gives GPT-Neo, which does not scale, the
    default). ``error``: the largest difference reproduced. (A bridge's ``hook_attn_scores`` holds the pattern on
    GPT-Neo and OPT: never read it for this.)"""
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
    """Queries and keys ``[batch, pos, head, d_head]`` (an engine's reads) → scores ``[batch, head, q, k]`` = ``(q . k)
    * scale``."""
    return torch.einsum("bqhd,bkhd->bhqk", q.float(), expand_kv(k, q.shape[2]).float()) * scale


def attention_pattern(q: torch.Tensor, k: torch.Tensor, scale: float, window: int | None) -> torch.Tensor:
    """``softmax(q k^T * scale + mask)`` ``[batch, head, q, k]`` float32, masking keys after the query and those
    ``window`` or more back."""
    pos = torch.arange(q.shape[1], device=q.device)
    dist = pos[:, None] - pos[None, :]
    mask = (dist < 0) | (dist >= window) if window is not None else dist < 0
    return torch.softmax(raw_scores_from_qk(q, k, scale).masked_fill(mask, float("-inf")), dim=-1)


def z_gap(mine: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
    """``max |mine - theirs| / (1 + max |theirs|)`` (a 0-d tensor): a recomputed activation's gap to the model's."""
    return (mine - theirs.float()).abs().max() / (1.0 + theirs.float().abs().max())


_EOS_FOR_BOS_SAID: weakref.WeakSet = weakref.WeakSet()  # the tokenizers whose missing BOS was said


def bos_token_id(tokenizer) -> int:
    """The tokenizer's BOS id; without a declared one (TransformerLens sets BOS to EOS), its EOS, as ``to_tokens``
    does, said once per tokenizer; neither is a :class:`UsageError`."""
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
    """``[batch, pos]`` token tensors, prompts of equal length together, of ``prompts`` (:func:`to_token_list`)."""
    check_int_range("batch_size", batch_size, 1, 1 << 30)
    by_len: dict[int, list[torch.Tensor]] = {}
    for s in to_token_list(model, prompts):
        by_len.setdefault(len(s), []).append(s)
    for _, group in sorted(by_len.items()):
        for i in range(0, len(group), batch_size):
            yield torch.stack(group[i : i + batch_size])


def to_token_list(model, prompts) -> list[torch.Tensor]:
    """``prompts`` (a ``[n, pos]`` tensor, 1-D tensors, or strings: tokenized with BOS as ``model.to_tokens`` does) as
    checked 1-D ``long`` tensors: integers in the vocabulary, 1 to ``n_ctx`` long, at least one."""
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
            hint = "e.g. model.to_tokens(text), or tensor.long() if the values are whole numbers"
            raise UsageError("prompts", f"token ids are {s.dtype}", "an integer tensor of token ids", hint)
        if len(s) > n_ctx:
            raise UsageError(
                "prompts", f"prompt length {len(s)} exceeds the model's context", f"allowed 1..{n_ctx} tokens (n_ctx)"
            )
        if len(s) < 1:
            raise UsageError("prompts", "a prompt has length 0", "at least one token")
        lo, hi = int(s.min()), int(s.max())
        if lo < 0 or hi >= d_vocab:
            why = f"token id {hi if hi >= d_vocab else lo} is outside the vocabulary"
            raise UsageError("prompts", why, f"allowed 0..{d_vocab - 1} (d_vocab {d_vocab})")
    return [s.long() for s in seqs]


def single_prompt(model, prompt) -> torch.Tensor:
    """One prompt (a string or a 1-D token tensor) as a checked ``[1, pos]`` batch on the model's device."""
    return to_token_list(model, [prompt] if isinstance(prompt, str) else prompt)[0][None].to(model_device(model))


def model_device(model) -> torch.device:
    return next(model.parameters()).device
