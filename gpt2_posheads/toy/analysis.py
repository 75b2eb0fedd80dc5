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


def learned(ppl: float, V: int) -> bool:
    """The posts' "learned": final perplexity <= 1.5, or relative perplexity (ppl - 1) / V <= 0.05."""
    return bool(ppl <= 1.5 or (ppl - 1) / V <= 0.05)


def fails(ppl: float, V: int) -> bool:
    """The posts' "cannot be learned": relative perplexity (ppl - 1) / V >= 0.5."""
    return bool((ppl - 1) / V >= 0.5)


def v_half_plateau(steps, ppl, V: int, tol: float = 0.2, min_points: int = 5) -> dict | None:
    """The sticky plateau at V/2: the first run of >= ``min_points`` consecutive logged steps with
    perplexity within ``±tol`` of ``V/2``, counted only after perplexity first falls below ``0.8 V``
    (so the initial phase at perplexity ~V is never taken for it). ``None`` when there is none."""
    steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
    below = np.nonzero(ppl < 0.8 * V)[0]
    if not len(below):
        return None
    near = np.abs(ppl - V / 2) <= tol * V / 2
    i = int(below[0])
    while i < len(ppl):
        if near[i]:
            j = i
            while j + 1 < len(ppl) and near[j + 1]:
                j += 1
            if j - i + 1 >= min_points:
                return {"start_step": int(steps[i]), "end_step": int(steps[j]), "n_points": j - i + 1,
                        "length_steps": int(steps[j] - steps[i]), "perplexity": float(np.median(ppl[i : j + 1]))}
            i = j + 1
        else:
            i += 1
    return None


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


def order_swaps(snapshots: list[dict], key: str = "W_E", min_norm_fraction: float = 0.5) -> int:
    """How many times the cyclic order of token embeddings changes between consecutive snapshots, counted
    only once tokens are separated: from the first snapshot whose mean embedding norm reaches
    ``min_norm_fraction`` of the last one's (near zero, the angular order is noise, not a swap)."""
    embs = [torch.tensor(s[key], dtype=torch.float64) for s in snapshots]
    if not embs:
        return 0
    final = float(embs[-1].norm(dim=-1).mean())
    start = next((i for i, e in enumerate(embs) if float(e.norm(dim=-1).mean()) >= min_norm_fraction * final), len(embs))
    orders = [angular_order(e.float()) for e in embs[start:]]
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
