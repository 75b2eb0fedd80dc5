"""Geometry of positional matrices ``[pos, d_model]``: principal directions, subspace angles,
sparsity and token dependence."""

from __future__ import annotations

import math

import torch


def pca(x: torch.Tensor, k: int = 3, center: bool = True):
    """Top-``k`` principal directions of the rows of ``x`` ``[n, d]``: ``(components [k, d],
    explained_variance_ratio [k], projections [n, k])``, projections of the centred rows when ``center``."""
    if k < 1 or k > min(x.shape):
        raise ValueError(f"k={k} must lie in 1..{min(x.shape)} for a matrix of shape {tuple(x.shape)}")
    x = x.double()
    xc = x - x.mean(0) if center else x
    _, s, vh = torch.linalg.svd(xc, full_matrices=False)
    var = s**2
    return vh[:k].float(), (var[:k] / var.sum()).float(), (xc @ vh[:k].T).float()


def project(x: torch.Tensor, components: torch.Tensor, center: bool = True) -> torch.Tensor:
    """Rows of ``x`` (centred on their own mean) in the basis ``components [k, d]`` → ``[n, k]``."""
    x = x.double()
    xc = x - x.mean(0) if center else x
    return (xc @ components.double().T).float()


def principal_angles(a: torch.Tensor, b: torch.Tensor, k: int = 3, center: bool = True) -> torch.Tensor:
    """Principal angles in degrees between the top-``k`` right singular subspaces of ``a`` and ``b`` (both ``[n,
    d]``), ascending: with ``Va``, ``Vb`` the ``[d, k]`` orthonormal bases, the cosines are the singular values of
    ``Va^T Vb`` (the post: 8°, 9°, 10° between ``W_pos`` and the layer-2 extended embeddings)."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b need the same number of columns, got {a.shape[1]} and {b.shape[1]}")
    va, vb = (pca(m, k, center)[0].double().T for m in (a, b))
    cos = torch.linalg.svdvals(va.T @ vb).clamp(-1.0, 1.0)
    return torch.rad2deg(torch.arccos(cos)).float()


def large_entry_fraction(x: torch.Tensor, k: float = 1.0) -> float:
    """Fraction of entries with ``|x| > k * RMS(x)``: scale-free, so that matrices at different layers compare. A
    Gaussian matrix gives 0.317 at ``k = 1``; a sparser one (energy in fewer entries) gives less."""
    x = x.double()
    rms = x.pow(2).mean().sqrt()
    if rms == 0:
        return 0.0
    return float((x.abs() > k * rms).double().mean())


def token_dependence(per_token: torch.Tensor) -> float:
    """Relative spread of per-token extended embeddings ``[n_tokens, pos, d]``:
    ``mean_t ||E_t - mean E|| / ||mean E||`` (Frobenius). 0 = independent of the token."""
    mean = per_token.double().mean(0)
    spread = (per_token.double() - mean).flatten(1).norm(dim=1).mean()
    denom = mean.norm()
    return float(spread / denom) if denom > 0 else math.inf


def neighbour_cosines(w: torch.Tensor, bounds: tuple[int, ...] = (1, 16, 64, 256)) -> list[float]:
    """Mean ``cos(w[p] - m, w[p+1] - m)`` (``m`` the mean row of ``w`` ``[n_pos, d]``) over each position range
    ``bounds[i]..bounds[i+1]`` (cut at ``n_pos``; empty ones NaN): near +1 for a smooth curve (GPT-2's ``W_pos``:
    0.991, 0.999, 0.999 over 1-16, 16-64, 64-255), negative where neighbours alternate in sign (a layer-0 head can
    then tell the previous position apart along one direction: the toy route of post 000)."""
    c = w.float() - w.float().mean(0)
    cos = torch.nn.functional.cosine_similarity(c[:-1], c[1:], dim=-1)  # [n_pos - 1]: rows p and p + 1
    parts = [cos[lo : min(hi, len(cos))] for lo, hi in zip(bounds[:-1], bounds[1:])]
    return [float(part.mean()) if len(part) else float("nan") for part in parts]
