"""A toy attention-only transformer, written once for a whole stack of models.

Every parameter carries a leading *model* axis ``m``: ``M`` models of one shape train as one batched
computation (einsum over ``m``), and ``M = 1`` is the ordinary single model. Parameters of different
models never mix, so each model's gradients — and, with the element-wise AdamW of ``train.py``, its
whole trajectory — are those it would have alone.

Architecture (each part optional, as in the sparse-attention posts)::

    h = W_E[x] (+ W_pos[:C])
    for each layer:  a = Attn(LN?(h));  h = h + a  (residual)  or  h = a
                     (MLP: h = h + MLP(LN?(h))  or  h = MLP(h))
    logits = LN?(h[:, -1]) @ W_U

Only the last position reaches the logits, so without recorded patterns the last layer attends from the
last query alone (:func:`last_query_attention`); with ``return_pattern`` every position is computed.

Attention kernels (scores before the causal mask and softmax):

* ``dot``:       ``q·k / sqrt(d_head)``
* ``distance``:  ``-||q - k||²``  (attention ∝ a Gaussian of the query–key distance)
* ``harmonic``:  ``-n · log ||q - k||``  (attention ∝ ``1 / ||q - k||^n``; the posts' proposed fix)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import einops
import torch

KERNELS = ("dot", "distance", "harmonic")


@dataclass(frozen=True)
class ToyShape:
    V: int
    C: int
    n_embd: int
    n_layers: int = 1
    n_heads: int = 1
    pos_emb: bool = False
    residual: bool = False
    mlp: bool = False
    layernorm: bool = False
    kernel: str = "dot"
    harmonic_n: float = 2.0
    out_proj: bool = False  # an attention output matrix W_O; the posts' model has none (embed, attend, unembed)

    def validate(self) -> None:
        for name, lo in (("V", 2), ("C", 2), ("n_embd", 1), ("n_layers", 1), ("n_heads", 1)):
            if getattr(self, name) < lo:
                raise ValueError(f"{name}={getattr(self, name)} must be >= {lo}")
        if self.n_embd % self.n_heads:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_heads={self.n_heads}")
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel {self.kernel!r} is unknown: allowed {KERNELS}")


def init_params(
    shape: ToyShape, gens: list[torch.Generator], init_std: float | Sequence[float] = 0.02
) -> dict[str, torch.Tensor]:
    """Parameters for ``len(gens)`` models, model ``i`` drawn from N(0, init_std[i]²) with ``gens[i]`` alone
    (one ``init_std`` for all models, or one per model)."""
    shape.validate()
    stds = [float(init_std)] * len(gens) if isinstance(init_std, (int, float)) else [float(s) for s in init_std]
    if len(stds) != len(gens):
        raise ValueError(f"{len(stds)} init stds for {len(gens)} models")
    D, H, V, C = shape.n_embd, shape.n_heads, shape.V, shape.C
    dh = D // H
    sizes: dict[str, tuple[int, ...]] = {"W_E": (V, D), "W_U": (D, V)}
    if shape.pos_emb:
        sizes["W_pos"] = (C, D)
    for l in range(shape.n_layers):
        for n in ("Q", "K", "V"):
            sizes[f"{l}.W_{n}"] = (H, D, dh)
        if shape.out_proj:
            sizes[f"{l}.W_O"] = (H, dh, D)
        if shape.mlp:
            sizes[f"{l}.W_in"] = (D, 4 * D)
            sizes[f"{l}.W_out"] = (4 * D, D)
    # one generator per model, fixed name order: independent of M
    out = {
        n: torch.stack([torch.randn(sz, generator=g) * std for g, std in zip(gens, stds)]) for n, sz in sizes.items()
    }
    if shape.mlp:
        for l in range(shape.n_layers):
            out[f"{l}.b_in"] = torch.zeros(len(gens), 4 * shape.n_embd)
            out[f"{l}.b_out"] = torch.zeros(len(gens), shape.n_embd)
    return out


def _ln(h: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(h, h.shape[-1:])


def _kernel(
    dot: torch.Tensor, q_sq: torch.Tensor, k_sq: torch.Tensor, kernel: str, harmonic_n: float, d_head: int
) -> torch.Tensor:
    """Scores from ``q·k`` and the squared norms ``|q|²``, ``|k|²`` (broadcastable to ``dot``)."""
    if kernel == "dot":
        return dot / math.sqrt(d_head)
    sq = (q_sq + k_sq - 2 * dot).clamp_min(0.0)
    if kernel == "distance":
        return -sq
    if kernel == "harmonic":
        return -0.5 * harmonic_n * torch.log(sq + 1e-8)
    raise ValueError(f"kernel {kernel!r} is unknown: allowed {KERNELS}")


def attention_scores(q: torch.Tensor, k: torch.Tensor, kernel: str, harmonic_n: float = 2.0) -> torch.Tensor:
    """Scores ``[..., q, k]`` from queries/keys ``[..., pos, d_head]`` under ``kernel`` (before the mask)."""
    norms = kernel != "dot"  # |q|², |k|² only where the kernel uses them
    q_sq = (q * q).sum(-1)[..., :, None] if norms else None
    k_sq = (k * k).sum(-1)[..., None, :] if norms else None
    return _kernel(q @ k.transpose(-1, -2), q_sq, k_sq, kernel, harmonic_n, q.shape[-1])


# Below this many keys the softmax runs along a leading axis (see causal_softmax); from SDPA_MIN_C keys on,
# dot-product attention without recorded patterns runs fused (F.scaled_dot_product_attention). Measured on
# one AVX2 core, 29 models x batch 128, forward + backward: 4 keys 2.6 ms (leading axis) vs 3.8 (last);
# 16 keys 43 vs 21; 64 keys 1,286 (leading) vs 648 (last) vs 403 ms (fused). On one core of a 2-core AMD EPYC
# (AVX-512), 30 models x batch 128, scores + softmax + values, forward + backward: 10 keys 53 (leading) vs 117 ms
# (last), 12 keys 61 vs 102, 16 keys 101 vs 65 (a shared, busy machine: read the ratios): the leading axis wins up
# to 12 keys (002's C=10 among them).
LEADING_AXIS_MAX_C = 12
SDPA_MIN_C = 32


def key_softmax(s: torch.Tensor) -> torch.Tensor:
    """Softmax over the last (key) axis of ``[..., k]`` scores.

    For a few keys (<= :data:`LEADING_AXIS_MAX_C`) the key axis is moved to the front first: a softmax
    along a very short last axis does not vectorise on CPUs, one along the leading axis does. For more
    keys the transposing copy costs more than it saves.
    """
    if s.shape[-1] > LEADING_AXIS_MAX_C:
        return s.softmax(-1)
    return s.movedim(-1, 0).contiguous().softmax(0).movedim(0, -1)


@functools.lru_cache(maxsize=16)
def _causal_bias(C: int, device: str) -> torch.Tensor:
    """``[C, C]``: 0 on and below the diagonal, -inf above it (keys after the query)."""
    return torch.full((C, C), float("-inf"), device=device).triu_(1)


def causal_softmax(s: torch.Tensor) -> torch.Tensor:
    """Softmax over keys of ``[..., q, k]`` scores with future keys masked (:func:`key_softmax`).

    ``s`` is overwritten: the mask is added in place (``s + 0 = s`` and ``s - inf = -inf`` exactly, so the
    pattern and its gradients are bit for bit those of a masked fill, for finite scores). Every kernel's
    scores are a fresh tensor whose producer does not keep it for backward; one [M, batch, head, C, C]
    tensor and one mask fewer per layer made training steps 2-10% faster.
    """
    return key_softmax(s.add_(_causal_bias(s.shape[-1], str(s.device))))


def last_query_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: str, harmonic_n: float = 2.0
) -> torch.Tensor:
    """The attention output of the last position alone: query ``[..., d_head]`` against keys and values
    ``[..., C, d_head]`` -> ``[..., d_head]``. The last position sees every key, so nothing is masked.

    One query row instead of C: in the last layer only the last position reaches the logits. With few keys
    the products run element-wise — a batched matmul of thousands of 1 x C matrices pays a per-matrix
    cost larger than its arithmetic; from :data:`SDPA_MIN_C` keys on the matmul wins. Measured on one AVX2
    core, 30 models x batch 128, forward + backward of the last layer's attention against the full C x C
    pattern: C=10, d_head 2: 2.7 vs 16.4 ms; C=64, d_head 2: 14 vs 590 ms.
    """
    C = k.shape[-2]
    wide = C >= SDPA_MIN_C
    dot = (q[..., None, :] @ k.transpose(-1, -2))[..., 0, :] if wide else (q[..., None, :] * k).sum(-1)  # [..., C]
    q_sq, k_sq = ((q * q).sum(-1, keepdim=True), (k * k).sum(-1)) if kernel != "dot" else (None, None)
    a = key_softmax(_kernel(dot, q_sq, k_sq, kernel, harmonic_n, q.shape[-1]))
    return (a[..., None, :] @ v)[..., 0, :] if wide else (a[..., None] * v).sum(-2)


def forward(params: dict[str, torch.Tensor], x: torch.Tensor, shape: ToyShape, return_pattern: bool = False):
    """Logits at the last position ``[M, batch, V]`` for tokens ``x`` ``[M, batch, C]``.

    With ``return_pattern`` also each layer's attention ``[M, batch, head, C, C]``.
    """
    M, B, C = x.shape
    h = params["W_E"][torch.arange(M, device=x.device)[:, None, None], x]  # [M, B, C, D]
    if shape.pos_emb:
        h = h + params["W_pos"][:, None, :C]
    patterns = []
    for l in range(shape.n_layers):
        hin = _ln(h) if shape.layernorm else h
        # one einsum for Q, K and V: these matrices are tiny (d_head ~ 1-16), so the batched matmul's
        # per-call cost dominates and one call of 3x the width is ~40% cheaper than three (fwd + bwd)
        w_qkv = torch.cat([params[f"{l}.W_{n}"] for n in "QKV"], dim=-1)  # [M, head, D, 3 d_head]
        q, k, v = torch.einsum("mbcd,mhde->mbhce", hin, w_qkv).chunk(3, dim=-1)
        if l == shape.n_layers - 1 and not return_pattern:
            # only the last position reaches the logits (MLPs act per position): from here on, one position
            z = last_query_attention(q[..., -1, :], k, v, shape.kernel, shape.harmonic_n)[..., None, :]
            h = h[:, :, -1:]  # [M, B, 1, D]
        elif shape.kernel == "dot" and not return_pattern and C >= SDPA_MIN_C:
            z = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # same maths, fused
        else:
            a = causal_softmax(attention_scores(q, k, shape.kernel, shape.harmonic_n))  # [M, B, head, q, k]
            if return_pattern:
                patterns.append(a.detach())
            z = a @ v  # [M, B, head, q, d_head]
        if shape.out_proj:
            out = torch.einsum("mbhqe,mhed->mbqd", z, params[f"{l}.W_O"])
        else:  # heads' outputs side by side: the value vectors are written to the residual as they are
            out = einops.rearrange(z, "m b h q e -> m b q (h e)")
        h = h + out if shape.residual else out
        if shape.mlp:
            hin = _ln(h) if shape.layernorm else h
            mid = torch.nn.functional.gelu(
                torch.einsum("mbcd,mdf->mbcf", hin, params[f"{l}.W_in"]) + params[f"{l}.b_in"][:, None, None]
            )
            mo = torch.einsum("mbcf,mfd->mbcd", mid, params[f"{l}.W_out"]) + params[f"{l}.b_out"][:, None, None]
            h = h + mo if shape.residual else mo
    last = _ln(h[:, :, -1]) if shape.layernorm else h[:, :, -1]
    logits = torch.einsum("mbd,mdv->mbv", last, params["W_U"])
    return (logits, patterns) if return_pattern else logits


def per_model_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per model ``[M]`` from logits ``[M, batch, V]`` and targets ``[M, batch]``."""
    lp = logits.log_softmax(-1)
    return -einops.reduce(lp.gather(-1, y[..., None])[..., 0], "m b -> m", "mean")
