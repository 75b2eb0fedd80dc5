"""Positional embeddings for the organism: initialisations (random, sinusoidal, GPT-2's own helix, none), a
roughness penalty, and group averaging as training augmentation."""

from __future__ import annotations

import torch

from .config import MiniConfig
from .weights import gpt2_w_pos


def sinusoidal_positions(n_ctx: int, d_model: int, rms: float) -> torch.Tensor:
    """``[n_ctx, d_model]`` sines and cosines of geometric frequencies (Vaswani et al.), scaled to ``rms``.

    A shift by one position is a rotation in each (sin, cos) pair, so "the previous position" is a
    linear map of the current one: an initialisation from which previous-token attention is easy to learn.
    """
    pos = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    freq = 10_000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    out = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return (out / out.pow(2).mean().sqrt() * rms).float()


def gpt2_positions(n_ctx: int, d_model: int, rms: float, w_pos: torch.Tensor | None = None) -> torch.Tensor:
    """``[n_ctx, d_model]``: GPT-2 small's own positional geometry at this size.

    The first ``n_ctx`` rows of GPT-2's ``W_pos`` ``[1024, 768]`` (``w_pos``, default the shipped
    ``data/gpt2-small/W_pos.npy``), mean-centred and projected onto their top ``d_model`` principal components, scaled
    to ``rms``. Neighbouring rows stay almost the same vector (cosine ~0.99, the smooth helix), so a head cannot read
    "the previous position" off them as sharply as off a learned ``W_pos`` whose neighbours alternate in sign.
    """
    if w_pos is None:
        w_pos = torch.from_numpy(gpt2_w_pos())
    if n_ctx > w_pos.shape[0] or d_model > min(n_ctx, w_pos.shape[1]):
        raise ValueError(f"GPT-2's W_pos {tuple(w_pos.shape)} cannot give {n_ctx} positions x {d_model} components")
    w = w_pos[:n_ctx].double()
    w = w - w.mean(0)
    _, _, vh = torch.linalg.svd(w, full_matrices=False)
    x = w @ vh[:d_model].T
    return (x / x.pow(2).mean().sqrt() * rms).float()


def pos_roughness(w: torch.Tensor) -> torch.Tensor:
    """``mean_p |W[p+1] - W[p]|^2 / mean_p |W[p] - mean W|^2`` of ``W`` ``[n_ctx, d_model]`` (scale-free).

    About 2 for independent random rows, ``2 (1 - c)`` for a curve whose neighbours have cosine ``c``
    (GPT-2's helix: ~0.02), up to 4 for rows alternating in sign. ``pos_smooth`` adds it to the loss.
    """
    step = (w[1:] - w[:-1]).pow(2).sum(-1).mean()
    spread = (w - w.mean(0)).pow(2).sum(-1).mean()
    return step / spread.clamp_min(1e-12)


def pos_average_at(cfg: MiniConfig, step: int) -> tuple[int, int] | None:
    """``(group size, offset)`` when step ``step`` trains on group-averaged ``W_pos`` (from step ``pos_avg_start``
    on, chance ``pos_avg_prob``; size uniform in 2..``pos_avg_max``, offset uniform below it), else ``None``;
    seeded by the step."""
    if cfg.pos_avg_prob <= 0 or step < cfg.pos_avg_start:
        return None
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step + 777_777)
    if float(torch.rand(1, generator=gen)) >= cfg.pos_avg_prob:
        return None
    g = int(torch.randint(2, cfg.pos_avg_max + 1, (1,), generator=gen))
    return g, int(torch.randint(0, g, (1,), generator=gen))
