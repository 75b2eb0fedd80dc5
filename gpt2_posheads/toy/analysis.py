"""What the sparse-attention posts measure on toy models: training curves (spikes, order swaps), ranks and
geometry of the weights (plateaus of a curve are read with the rules, :mod:`gpt2_posheads.claims.toy`)."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..claims.toy import spearman


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


def perplexity(loss: float) -> float:
    """``exp(loss)``, ``inf`` past the largest float (a run that diverged, or barely trained from a wide init)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def relative_perplexity(loss: float, V: int) -> float:
    """``(exp(loss) - 1) / V``: 0 for a solved task, about 1 for uniform guessing over ``V`` tokens."""
    return (perplexity(loss) - 1) / V


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


def perplexity_curve(result: dict) -> np.ndarray:
    return np.exp(np.asarray(result["eval_loss"], dtype=float))


def loss_spikes(losses, factor: float = 2.0, min_jump: float = 0.1) -> list[int]:
    """Indices where the loss jumps above ``factor`` x its running minimum (and by ``min_jump`` nats)
    after having come down: the "confidently wrong" spikes of a too-large learning rate."""
    out, low, in_spike = [], math.inf, False
    for i, l in enumerate(losses):
        if l > factor * low and l - low > min_jump:
            if not in_spike:
                out.append(i)
            in_spike = True
        else:
            in_spike = False
        low = min(low, l)
    return out


def angular_order(emb: torch.Tensor) -> list[int]:
    """Tokens sorted by the angle of their (2-D projected) embedding: their order around the circle."""
    e = torch.as_tensor(emb, dtype=torch.float64)
    e = e - e.mean(0)
    if e.shape[1] > 2:
        e = e @ torch.linalg.svd(e, full_matrices=False)[2][:2].T
    ang = torch.atan2(e[:, 1], e[:, 0])
    return ang.argsort().tolist()


def same_cyclic_order(a: list[int], b: list[int]) -> bool:
    """Whether two orders around a circle agree up to rotation and reflection."""
    if len(a) != len(b):
        return False
    return any(o[o.index(a[0]) :] + o[: o.index(a[0])] == a for o in (b, b[::-1]))


def order_swaps(snapshots: list[dict], key: str = "W_E", min_norm_fraction: float = 0.5) -> int:
    """How many times the cyclic order of token embeddings changes between consecutive snapshots, counted
    only once tokens are separated: from the first snapshot whose mean embedding norm reaches
    ``min_norm_fraction`` of the last one's (near zero, the angular order is noise, not a swap)."""
    embs = [torch.tensor(s[key], dtype=torch.float64) for s in snapshots]
    norms = [float(e.norm(dim=-1).mean()) for e in embs]
    start = next((i for i, n in enumerate(norms) if n >= min_norm_fraction * norms[-1]), len(embs))
    orders = [angular_order(e.float()) for e in embs[start:]]
    return sum(not same_cyclic_order(orders[i], orders[i + 1]) for i in range(len(orders) - 1))


def pairing(emb: torch.Tensor, cos_threshold: float = 0.95) -> int:
    """Number of direction clusters: tokens whose embeddings have cosine > threshold share a cluster.

    Used for the two-stage branching of 003: on the sticky plateau V=4 tokens form 2 clusters."""
    e = torch.as_tensor(emb, dtype=torch.float64)
    e = e / e.norm(dim=1, keepdim=True).clamp_min(1e-12)
    linked = (e @ e.T > cos_threshold) | torch.eye(len(e), dtype=torch.bool)  # the diagonal: numerically ~1
    for _ in range(len(e).bit_length()):  # squaring doubles the paths' reach: the clusters' closure
        linked = linked.double() @ linked.double() > 0
    return len({tuple(row.tolist()) for row in linked})


def distance_rank_correlation(emb: torch.Tensor) -> float:
    """Spearman correlation between ``|i - j|`` and ``||e_i - e_j||`` over token pairs: near 1 when
    numerically close tokens are embedded close together (001's "continuous structure")."""
    e = torch.as_tensor(emb, dtype=torch.float64)
    i, j = torch.triu_indices(len(e), len(e), 1)
    return spearman((i - j).abs().numpy(), (e[i] - e[j]).norm(dim=1).numpy())
