"""Attention plumbing every analysis shares: the one home of the score scale (``scores = (q . k) *
attn_scale(cfg, layer)``), which hooks hold the queries and keys, and grouped-query keys per query head."""

from __future__ import annotations

import math

import torch


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
