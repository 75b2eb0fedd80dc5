"""Reading training curves and embeddings of toy models: plateaus, spikes, order swaps, geometry."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch


def perplexity_curve(result: dict, which: str = "eval_loss") -> np.ndarray:
    return np.exp(np.asarray(result[which], dtype=float))


def plateaus(steps, ppl, tol: float = 0.1, floor: float = 1.5, min_steps: int = 1) -> list[dict]:
    """Every stretch, in order, where perplexity stays within ``±tol`` (relative) of its value at the
    stretch's start while above ``floor`` (a solved task sitting at 1 does not count), lasting at
    least ``min_steps``. Each: ``{"length_steps", "start_step", "end_step", "perplexity"}`` (median)."""
    steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
    out, i = [], 0
    while i < len(ppl):
        j = i
        while j + 1 < len(ppl) and abs(ppl[j + 1] - ppl[i]) <= tol * ppl[i] and ppl[j + 1] > floor:
            j += 1
        length = int(steps[j] - steps[i])
        if ppl[i] > floor and length >= max(min_steps, 1):
            out.append({"length_steps": length, "start_step": int(steps[i]), "end_step": int(steps[j]),
                        "perplexity": float(np.median(ppl[i : j + 1]))})
        i = j + 1
    return out


def plateau(steps, ppl, tol: float = 0.1, floor: float = 1.5) -> dict:
    """The longest of :func:`plateaus` (length 0 and NaN perplexity when there is none)."""
    found = plateaus(steps, ppl, tol, floor)
    if not found:
        return {"length_steps": 0, "start_step": None, "end_step": None, "perplexity": math.nan}
    return max(found, key=lambda p: p["length_steps"])


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
    n = len(a)
    if n != len(b):
        return False
    i = b.index(a[0])
    rot = b[i:] + b[:i]
    rev = list(reversed(b))
    j = rev.index(a[0])
    return rot == a or rev[j:] + rev[:j] == a


def order_swaps(snapshots: list[dict], key: str = "W_E") -> int:
    """How many times the cyclic order of token embeddings changes between consecutive snapshots."""
    orders = [angular_order(torch.tensor(s[key])) for s in snapshots]
    return sum(not same_cyclic_order(orders[i], orders[i + 1]) for i in range(len(orders) - 1))


def pairing(emb: torch.Tensor, cos_threshold: float = 0.95) -> int:
    """Number of direction clusters: tokens whose embeddings have cosine > threshold share a cluster.

    Used for the two-stage branching of 003: on the sticky plateau V=4 tokens form 2 clusters."""
    e = torch.as_tensor(emb, dtype=torch.float64)
    e = e / e.norm(dim=1, keepdim=True).clamp_min(1e-12)
    cos = e @ e.T
    n, seen, clusters = len(e), set(), 0
    for i in range(n):
        if i in seen:
            continue
        clusters += 1
        stack = [i]
        while stack:
            a = stack.pop()
            if a in seen:
                continue
            seen.add(a)
            stack += [b for b in range(n) if b not in seen and cos[a, b] > cos_threshold]
    return clusters


def spearman(a, b) -> float:
    """Spearman rank correlation: Pearson on ranks, tied values sharing their average rank (as
    ``scipy.stats.spearmanr``, without needing scipy)."""
    return float(pd.Series(np.asarray(a, dtype=float)).rank().corr(pd.Series(np.asarray(b, dtype=float)).rank()))


def distance_rank_correlation(emb: torch.Tensor) -> float:
    """Spearman correlation between ``|i - j|`` and ``||e_i - e_j||`` over token pairs: near 1 when
    numerically close tokens are embedded close together (001's "continuous structure")."""
    e = torch.as_tensor(emb, dtype=torch.float64)
    i, j = torch.triu_indices(len(e), len(e), 1)
    return spearman((i - j).abs().numpy(), (e[i] - e[j]).norm(dim=1).numpy())
