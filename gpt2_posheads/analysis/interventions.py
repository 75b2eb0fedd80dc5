"""Causal interventions of the GPT-2 post, as data.

Each factory validates its arguments at once and returns an :class:`~gpt2_posheads.model.engine.Edit` that any
analysis takes in its ``edits`` and every engine applies, or refuses in one place; layers and heads are checked against
the model when it is applied.

Maths, per intervention (``A`` a head's attention pattern ``[q, k]``, ``g`` a group size):

* ``average_pos_embed(g)``: ``W_pos[p] <- mean(W_pos[k : k+g])`` for ``p`` in group ``[k, k+g)``,
  ``k = g * floor(p / g)``; the last group of ``n_ctx`` averages the rows it has. ``g = 1`` is the identity.
* ``average_ext_pos_embed(L, g)``: ``resid_pre_L[p] += Ē[p] - E[p]`` where ``E`` is the extended
  positional embedding at layer ``L`` (measured after BOS, as the prompts it is added to start with BOS) and ``Ē``
  its group average over the positions after BOS (``[1, 1+g)``, ``[1+g, 1+2g)``, ...; the BOS row is left alone) —
  position information at ``L`` is blurred to ``g``-wide blocks while everything else in the residual stream is kept.
* ``mask_previous_attention(every, layers)``: ``A[p, p-1] <- 0`` for queries ``p > 0`` with ``p % every == 0``
  in every head of ``layers`` (post-softmax; rows optionally renormalised to sum to 1).
* ``edit_head_pattern(L, H, mapping)``: row ``A[q]`` of head ``(L, H)`` becomes one-hot at ``mapping[q]``
  (or the given distribution over keys, normalised to sum to 1; keys must not lie after their query).
* ``scale_head_output(L, H, f)``: ``z_{L,H} <- f * z_{L,H}`` (``hook_z``); the head's write to the residual
  stream, ``z W_O``, scales by ``f`` exactly.

Pattern edits are exact on every model, and no edit can silently do nothing (:mod:`~gpt2_posheads.model.engine_hooks`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial

import einops
import torch

from ..model.engine import Edit, as_edits
from ..model.engine_nnsight import is_traced
from ..model.state import measures_caller_model
from ..model.validation import (
    UsageError,
    check_head,
    check_int_range,
    check_layer,
    check_layers,
    check_learned_pos_embed,
    checked,
)
from .posembed import default_bos, extended_pos_embeddings


@measures_caller_model
def hooks_for(model, *interventions: Edit) -> list[tuple]:
    """The TransformerLens hooks of several interventions, in order, for ``model.run_with_hooks``."""
    from ..model.engine_hooks import hook_tuples

    if is_traced(model):
        raise TypeError("hooks_for gives TransformerLens hooks: pass the interventions to an analysis, edits=[...]")
    return hook_tuples(model, as_edits(interventions))


def group_average_rows(x: torch.Tensor, group_size: int, offset: int = 0) -> torch.Tensor:
    """``[pos, d]`` → same shape, rows replaced by the mean of their group: ``[0, offset)`` (when ``offset > 0``), then
    ``[offset + k g, offset + (k+1) g)``, the last one partial. Differentiable (the organism trains through it)."""
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


def _check_positions(model) -> None:
    if is_traced(model):
        if model.arch.pos_embed is None:
            raise UsageError("model", f"has {model.cfg.positional_embedding_type!r} positions", "learned W_pos")
    else:
        check_learned_pos_embed(model)


@checked
def average_pos_embed(group_size: int, w_pos: torch.Tensor | None = None) -> Edit:
    """Average the rows of ``W_pos`` (the model's, or ``w_pos``) in consecutive groups of ``group_size``."""
    fn = (  # runs where the model runs, on its own W_pos
        partial(group_average_rows, group_size=group_size)
        if w_pos is None
        else partial(_given_rows, rows=w_pos, group_size=group_size)
    )
    return Edit(f"average W_pos in groups of {group_size}", "pos_embed", fn, check=_check_positions)


def _given_rows(w: torch.Tensor, rows: torch.Tensor, group_size: int) -> torch.Tensor:
    return group_average_rows(rows.float(), group_size)


def _ext_delta(model, layer: int, group_size: int, ext, bos, ext_kwargs: dict) -> torch.Tensor:  # Ē - E [pos, d]
    b = default_bos(model) if bos is None else bool(bos)
    e = extended_pos_embeddings(model, layer, bos=b, **ext_kwargs) if ext is None else ext.float()
    return group_average_rows(e, group_size, offset=int(b)) - e


@checked
def average_ext_pos_embed(
    layer: int, group_size: int, ext: torch.Tensor | None = None, bos: bool | None = None, **ext_kwargs
) -> Edit:
    """The module doc's ``average_ext_pos_embed``; ``ext`` ``[pos, d_model]`` defaults to
    :func:`extended_pos_embeddings` ``(model, layer, bos=bos, **ext_kwargs)``; ``bos`` keeps row 0 out of the groups."""
    fn = partial(_ext_delta, layer=layer, group_size=group_size, ext=ext, bos=bos, ext_kwargs=ext_kwargs)
    name = f"average extended pos emb at layer {layer} in groups of {group_size}"
    return Edit(name, "resid_add", fn, (layer,), partial(check_layer, layer=layer))


MASK_EVERY = 5  # the post's masking: every 5th query loses its attention to the previous position


def masked_queries(every: int, n_pos: int) -> torch.Tensor:
    """The queries :func:`mask_previous_attention` touches in an ``n_pos``-token prompt."""
    return torch.arange(every, max(n_pos, every), every)  # none in a prompt shorter than ``every``


@checked
def mask_previous_attention(
    every: int = MASK_EVERY, layers: Iterable[int] = range(4), renormalize: bool = False
) -> Edit:
    """``A[p, p-1] <- 0`` in all heads of ``layers`` (module doc)."""
    layers = list(layers)
    edit = partial(_mask_previous, every=every, renormalize=renormalize)
    name = f"mask attention to p-1 every {every} positions in layers {layers}"
    return Edit(name, "pattern", edit, tuple(layers), partial(check_layers, layers=layers))


def _mask_previous(pattern: torch.Tensor, every: int, renormalize: bool) -> torch.Tensor:
    n = pattern.shape[-1]
    q = masked_queries(every, n).to(pattern.device)
    pattern = pattern.clone()
    pattern[..., q, q - 1] = 0.0
    if renormalize:
        pattern = pattern / pattern.sum(-1, keepdim=True).clamp_min(1e-12)
    return pattern


def _set_rows(pattern: torch.Tensor, head: int, rows: dict[int, dict[int, float]]) -> torch.Tensor:  # [b, h, q, k]
    pattern = pattern.clone()
    for q, dist in rows.items():
        if q >= pattern.shape[-2]:
            raise ValueError(f"mapping query position {q} is beyond the prompt length {pattern.shape[-2]}")
        pattern[:, head, q, :] = 0.0
        for k, w in dist.items():
            pattern[:, head, q, k] = w
    return pattern


def _check_rows(model, layer: int, head: int, rows) -> None:
    check_head(model, layer, head)
    for q in rows:
        check_int_range("mapping query position", q, 0, model.cfg.n_ctx - 1)


@checked
def edit_head_pattern(layer: int, head: int, mapping: Mapping[int, int | Mapping[int, float]]) -> Edit:
    """Make query ``q`` of head ``(layer, head)`` attend to ``mapping[q]``: a key or ``{key: weight}`` (module doc)."""
    rows: dict[int, dict[int, float]] = {}
    for q, target in mapping.items():
        dist = {int(target): 1.0} if not isinstance(target, Mapping) else {int(k): float(w) for k, w in target.items()}
        if any(k > int(q) or k < 0 for k in dist):
            raise ValueError(f"mapping[{q}] = {target}: key positions must lie in 0..{q} (causal attention)")
        total = sum(dist.values())
        if total <= 0:
            raise ValueError(f"mapping[{q}] weights must sum to a positive number")
        rows[int(q)] = {k: w / total for k, w in dist.items()}
    fn = partial(_set_rows, head=head, rows=rows)
    check = partial(_check_rows, layer=layer, head=head, rows=rows)
    return Edit(f"edit L{layer}H{head} pattern {dict(mapping)}", "pattern", fn, (layer,), check)


def _scale_head(z: torch.Tensor, head: int, factor: float) -> torch.Tensor:
    z = z.clone()  # z: [batch, pos, head, d_head]
    z[:, :, head, :] *= factor
    return z


@checked
def scale_head_output(layer: int, head: int, factor: float) -> Edit:
    fn, check = partial(_scale_head, head=head, factor=factor), partial(check_head, layer=layer, head=head)
    return Edit(f"scale L{layer}H{head} output by {factor}", "z", fn, (layer,), check)
