"""Measures the sparse-attention posts use on toy models."""

from __future__ import annotations

import math

import torch


def effective_rank(m: torch.Tensor) -> float:
    """``exp(H(p))`` with ``p = s / sum(s)`` the normalised singular values of ``m`` (Roy & Vetterli).

    1 for a rank-one matrix; ``min(m.shape)`` for a matrix with equal singular values (e.g. identity).
    """
    s = torch.linalg.svdvals(m.double())
    if float(s.sum()) == 0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def relative_perplexity(loss: float, V: int) -> float:
    """``(exp(loss) - 1) / V``: 0 for a solved task, about 1 for uniform guessing over ``V`` tokens."""
    return (math.exp(loss) - 1) / V


def wq_wk(Wq: torch.Tensor, Wk: torch.Tensor) -> torch.Tensor:
    """``W_Q W_K^T`` ``[d_model, d_model]``: the bilinear form scoring ``x_q^T (W_Q W_K^T) x_k``."""
    return Wq.double() @ Wk.double().T


def separation_direction(pos: torch.Tensor, target_offset: int = 1) -> torch.Tensor:
    """Unit direction separating the positional embedding ``target_offset`` back from the last position
    from all the others: ``p_{-o} - mean(p_others)``, normalised. ``pos``: ``[C, d]``."""
    C = pos.shape[0]
    idx = C - 1 - target_offset
    others = torch.cat([pos[:idx], pos[idx + 1 :]])
    s = pos[idx] - others.mean(0)
    return s / s.norm().clamp_min(1e-12)


def bilinear(s: torch.Tensor, m: torch.Tensor) -> float:
    """``s^T M s``."""
    return float(s.double() @ m.double() @ s.double())
