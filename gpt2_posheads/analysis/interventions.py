"""Causal interventions of the GPT-2 post, as small hook factories.

Each factory validates its arguments at once and returns an :class:`Intervention`; binding it to a
model (``iv.hooks(model)``) checks layers/heads against ``model.cfg`` and returns the edits of the model's engine
(:func:`~gpt2_posheads.model.engines.engine_for`), for the ``fwd_hooks`` of any analysis: on a TransformerLens model
its ``fwd_hooks`` — ``[(hook_name, fn), ...]`` — ready for ``model.run_with_hooks(tokens, fwd_hooks=...)`` or
``with model.hooks(fwd_hooks=...)``; on an nnsight-traced model its traced edits. :func:`hooks_for` concatenates
several interventions.

Maths, per intervention (``A`` a head's attention pattern ``[q, k]``, ``g`` a group size):

* ``average_pos_embed(g)``: ``W_pos[p] <- mean(W_pos[k : k+g])`` for ``p`` in group ``[k, k+g)``,
  ``k = g * floor(p / g)``; the last group of ``n_ctx`` averages the rows it has. ``g = 1`` is the identity.
* ``average_ext_pos_embed(L, g)``: ``resid_pre_L[p] += Ē[p] - E[p]`` where ``E`` is the extended
  positional embedding at layer ``L`` (measured after BOS, as the prompts it is added to start with BOS) and ``Ē``
  its group average over the positions after BOS (``[1, 1+g)``, ``[1+g, 1+2g)``, ...; the BOS row is left alone) —
  position information at ``L`` is blurred to ``g``-wide blocks while everything else in the residual stream is kept.
* ``mask_previous_attention(every, layers)``: ``A[p, p-1] <- 0`` for queries ``p > 0`` with ``p % every == 0``
  in every head of ``layers`` (post-softmax; rows optionally renormalised to sum to 1).

Pattern edits go through :func:`~gpt2_posheads.model.patterns.pattern_edit_hooks`, exact on every model (through
``hook_z`` where ``hook_pattern`` does not feed the output); every other intervention first checks that its hook
changes the model's output (:func:`~gpt2_posheads.model.hooks.require_live`), so none can silently do nothing.
* ``edit_head_pattern(L, H, mapping)``: row ``A[q]`` of head ``(L, H)`` becomes one-hot at ``mapping[q]``
  (or the given distribution over keys).
* ``scale_head_output(L, H, f)``: ``z_{L,H} <- f * z_{L,H}`` (``hook_z``); the head's write to the residual
  stream, ``z W_O``, scales by ``f`` exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

import einops
import torch

from ..model.engines import engine_for
from ..model.hooks import require_live
from ..model.patterns import pattern_edit_hooks
from ..model.state import measures_caller_model
from ..model.tokens import model_device
from ..model.traced import TracedEdit, replace_positions
from ..model.validation import (
    UsageError,
    check_head,
    check_int_range,
    check_layer,
    check_layers,
    check_learned_pos_embed,
    checked,
)
from .posembed import default_bos, extended_pos_embeddings, load_w_pos

Hook = tuple[str, Callable]


@dataclass
class Intervention:
    """A named intervention; ``bind(model)`` returns its ``fwd_hooks``. ``traced(model)``, where the intervention
    has one, returns its edits inside an nnsight trace (:class:`~gpt2_posheads.model.traced.TracedEdit`);
    ``hooks(model)`` gives the edits of the model's engine (:meth:`gpt2_posheads.model.engine.Engine.edits`), for
    the ``fwd_hooks`` of any analysis."""

    name: str
    bind: Callable[[object], list[Hook]]
    traced: Callable[[object], list[TracedEdit]] | None = None

    @measures_caller_model
    def hooks(self, model, engine: str = "auto") -> list:
        return engine_for(model, engine).edits(self)


@measures_caller_model
def hooks_for(model, *interventions: Intervention) -> list[Hook]:
    """The ``fwd_hooks`` of several interventions, in order."""
    out: list[Hook] = []
    for iv in interventions:
        out += iv.hooks(model)
    return out


def group_average_rows(x: torch.Tensor, group_size: int, offset: int = 0) -> torch.Tensor:
    """``[pos, d]`` → same shape, rows replaced by the mean of their group of consecutive rows.

    Groups are ``[0, offset)`` (when ``offset > 0``), then ``[offset + k g, offset + (k+1) g)``; the last
    may be partial and averages the rows it has. The post's averaging is ``offset = 0``. Differentiable in
    ``x`` (the organism trains through it as augmentation).
    """
    check_int_range("group_size", group_size, 1, 1 << 30)
    n = x.shape[0]
    check_int_range("offset", offset, 0, max(n - 1, 0))
    out = x.clone()
    if offset:
        out[:offset] = x[:offset].mean(0, keepdim=True)
    rest = x[offset:]
    m = rest.shape[0]
    n_full = (m // group_size) * group_size
    if n_full:
        blocks = einops.reduce(rest[:n_full], "(g s) d -> g d", "mean", s=group_size)
        out[offset : offset + n_full] = einops.repeat(blocks, "g d -> (g s) d", s=group_size)
    if n_full < m:
        out[offset + n_full :] = rest[n_full:].mean(0, keepdim=True)
    return out


def _add_positions(delta: torch.Tensor):
    def hook(x, hook):  # x: [batch, pos, d_model]
        return x + delta[: x.shape[-2]].to(x.dtype)

    return hook


@checked
def average_pos_embed(group_size: int, w_pos: torch.Tensor | None = None) -> Intervention:
    """Average the rows of ``W_pos`` (the model's, or ``w_pos``) in consecutive groups of ``group_size``."""
    check_int_range("group_size", group_size, 1, 1 << 30)

    def bind(model):
        check_learned_pos_embed(model)
        require_live(model, "hook_pos_embed", "averaging W_pos")
        w = load_w_pos(model) if w_pos is None else w_pos.float()
        avg = group_average_rows(w, group_size).to(model.W_pos.device)
        return [("hook_pos_embed", lambda x, hook: replace_positions(x, avg))]  # x: [batch, pos, d_model]

    def traced(model):
        if model.arch.pos_embed is None:
            raise UsageError("model", f"has {model.cfg.positional_embedding_type!r} positions", "learned W_pos")
        fn = (
            partial(group_average_rows, group_size=group_size)
            if w_pos is None
            else partial(_given_rows, rows=w_pos, group_size=group_size)
        )
        return [TracedEdit("pos_embed", fn=fn)]

    return Intervention(f"average W_pos in groups of {group_size}", bind, traced)


def _given_rows(w: torch.Tensor, rows: torch.Tensor, group_size: int | None = None) -> torch.Tensor:
    return rows.float() if group_size is None else group_average_rows(rows.float(), group_size)


@checked
def average_ext_pos_embed(
    layer: int, group_size: int, ext: torch.Tensor | None = None, bos: bool | None = None, **ext_kwargs
) -> Intervention:
    """Replace the extended positional embedding at ``layer`` by its group average (see module doc).

    ``ext`` ``[pos, d_model]`` defaults to :func:`extended_pos_embeddings` ``(model, layer, bos=bos, **ext_kwargs)``;
    ``bos`` (default: the model has a BOS token, as the toolkit's prompts then start with it) keeps row 0 out of the
    groups. Prompts without BOS need ``bos=False``.
    """
    check_int_range("group_size", group_size, 1, 1 << 30)

    def delta(model) -> torch.Tensor:  # Ē - E [pos, d_model], added to the residual stream entering ``layer``
        b = default_bos(model) if bos is None else bool(bos)
        e = extended_pos_embeddings(model, layer, bos=b, **ext_kwargs) if ext is None else ext.float()
        return group_average_rows(e, group_size, offset=int(b)) - e

    def bind(model):
        check_layer(model, layer)
        require_live(model, "hook_resid_pre", "averaging the extended positional embeddings")
        return [(f"blocks.{layer}.hook_resid_pre", _add_positions(delta(model).to(model_device(model))))]

    def traced(model):
        check_layer(model, layer)
        return [TracedEdit("resid_add", layer, delta=delta(model))]

    return Intervention(f"average extended pos emb at layer {layer} in groups of {group_size}", bind, traced)


MASK_EVERY = 5  # the post's masking: every 5th query loses its attention to the previous position


def masked_queries(every: int, n_pos: int) -> torch.Tensor:
    """The queries :func:`mask_previous_attention` touches in an ``n_pos``-token prompt: ``p % every == 0``,
    ``p > 0``."""
    return torch.arange(every, max(n_pos, every), every)  # none in a prompt shorter than ``every``


@checked
def mask_previous_attention(
    every: int = MASK_EVERY, layers: Iterable[int] = range(4), renormalize: bool = False
) -> Intervention:
    """Zero attention from query ``p`` to key ``p-1`` for every ``p % every == 0`` (``p > 0``) in all heads of
    ``layers`` (through :func:`~gpt2_posheads.model.patterns.pattern_edit_hooks`: exact on every model)."""
    check_int_range("every", every, 1, 1 << 30)
    layers = list(layers)
    edit = partial(_mask_previous, every=every, renormalize=renormalize)

    def bind(model):
        return [h for l in check_layers(model, layers) for h in pattern_edit_hooks(model, l, edit)]

    def traced(model):
        return [TracedEdit("pattern", l, fn=edit) for l in check_layers(model, layers)]

    return Intervention(f"mask attention to p-1 every {every} positions in layers {layers}", bind, traced)


def _mask_previous(pattern: torch.Tensor, every: int, renormalize: bool) -> torch.Tensor:
    """``A[p, p-1] <- 0`` for ``p % every == 0``, ``p > 0`` (rows renormalised if asked); ``[batch, head, q, k]``."""
    n = pattern.shape[-1]
    q = masked_queries(every, n).to(pattern.device)
    pattern = pattern.clone()
    pattern[..., q, q - 1] = 0.0
    if renormalize:
        pattern = pattern / pattern.sum(-1, keepdim=True).clamp_min(1e-12)
    return pattern


@checked
def edit_head_pattern(layer: int, head: int, mapping: Mapping[int, int | Mapping[int, float]]) -> Intervention:
    """Make query ``q`` of head ``(layer, head)`` attend to ``mapping[q]``: a key position (one-hot) or a
    ``{key: weight}`` distribution (normalised to sum to 1). Keys must not lie after their query."""
    rows: dict[int, dict[int, float]] = {}
    for q, target in mapping.items():
        dist = {int(target): 1.0} if not isinstance(target, Mapping) else {int(k): float(w) for k, w in target.items()}
        if any(k > int(q) or k < 0 for k in dist):
            raise ValueError(f"mapping[{q}] = {target}: key positions must lie in 0..{q} (causal attention)")
        total = sum(dist.values())
        if total <= 0:
            raise ValueError(f"mapping[{q}] weights must sum to a positive number")
        rows[int(q)] = {k: w / total for k, w in dist.items()}

    def edit(pattern):  # pattern: [batch, head, q, k]
        pattern = pattern.clone()
        for q, dist in rows.items():
            if q >= pattern.shape[-2]:
                raise ValueError(f"mapping query position {q} is beyond the prompt length {pattern.shape[-2]}")
            pattern[:, head, q, :] = 0.0
            for k, w in dist.items():
                pattern[:, head, q, k] = w
        return pattern

    def bind(model):
        check_head(model, layer, head)
        for q in rows:
            check_int_range("mapping query position", q, 0, model.cfg.n_ctx - 1)
        return pattern_edit_hooks(model, layer, edit)

    return Intervention(f"edit L{layer}H{head} pattern {dict(mapping)}", bind)


@checked
def scale_head_output(layer: int, head: int, factor: float) -> Intervention:
    """Multiply head ``(layer, head)``'s output by ``factor`` (on ``hook_z``, before ``W_O``)."""

    def hook(z, hook):  # z: [batch, pos, head, d_head]
        z = z.clone()
        z[:, :, head, :] *= factor
        return z

    def bind(model):
        check_head(model, layer, head)
        require_live(model, "attn.hook_z", "scaling a head's output")
        return [(f"blocks.{layer}.attn.hook_z", hook)]

    return Intervention(f"scale L{layer}H{head} output by {factor}", bind)
