"""The route read from the weights: every head's positional circuit, direct and composed, with no data run.

The causal route conclusion (:mod:`gpt2_posheads.claims.route`) intervenes on prompts; this module asks the same
question of the weights alone: does a head's query-key circuit find the previous position in the embeddings
(``W_pos``) directly, or only in what earlier heads wrote? TransformerLens's row-vector convention throughout.

**The input, with no prompt.** Position ``0`` holds BOS when the model's prompts start with it
(:func:`~gpt2_posheads.analysis.posembed.default_bos`), every other position the *mean token*: the residual entering
layer 0 is ``m_0[p] = mu + W_pos[p]`` with ``mu = mean_t W_E[t]`` over every token but BOS (``m_0[0] = W_E[BOS] +
W_pos[0]``). A real token adds ``delta_t = W_E[t] - mu``, of covariance ``Sigma = cov_t(W_E[t])`` ``[d_model,
d_model]`` (BOS left out of both: a model that counts from BOS reads a flag no other token has); tokens are taken
independent across positions, so every pre-softmax score below is the expectation over random token sequences of the
head's real score (a bilinear form: mean part plus covariance part), given the upstream patterns.

**LayerNorm, approximated.** ``LN(x) = w * C x / sigma + b`` with ``C`` the centring (none for RMS norm, and no
LayerNorm at all where the model has none) and ``sigma`` the row's *typical* norm: ``sigma_p^2 = |C m[p]|^2 / d +
tr(C Sigma C) / d + eps`` (the mean stream's own spread plus a token's; the BOS row has no token term). The same
``sigma_p`` scales a token's deviation, ``C delta / sigma_p`` (LayerNorm linearised at the typical norm). A model
loaded with LayerNorm folded (``ln.w``/``ln.b`` absent, the gain and bias in ``W_Q``, ``b_Q``, ...) is the same
formula with ``w = 1``, ``b = 0``.

**Scores.** For a head with ``W_QK = W_Q W_K^T`` the score of query ``p`` at key ``k`` is

    S[p, k] = s * (LN(m[p]) W_Q + b_Q) . (LN(m[k]) W_K + b_K)                  (the mean stream; s: attn scale)
            + s * [p = k] c_self / sigma_p^2                                     (a token matches itself)
            + s * sum_u A^u[p, k] c_Q(u) / (sigma^u_k sigma_p sigma_k)           (u copied k's token to p's query)
            + s * [p = k] sum_u A^u[p, p] c_K(u) / (sigma^u_p sigma_p^2)         (u copied p's token to its own key)

with ``c_self = tr(Sigma' D W_QK D)``, ``c_Q(u) = tr(Sigma' D_u W_OV^u C D W_QK D)``, ``c_K(u) = tr(Sigma' D
W_QK D C W_OV^u^T D_u)``, ``Sigma' = C Sigma C``, ``D`` (``D_u``) the diagonal of the head's (head u's) LayerNorm
gain and ``sigma^u`` the typical norm at u's layer. ``c_self < 0`` is the post's negative self-attention (L2H2's dark
diagonal); ``c_Q(u) > 0`` is an aggregator matching what earlier heads say the previous token is (L4H11). Left out:
a token copied twice (through two heads in a row) and a token's path through the MLPs. The pattern is the causal
softmax of ``S``; its previous-token statistics are :func:`~gpt2_posheads.analysis.diagonals.prev_token_stats` of its
diagonal means with key 0 left out (the toolkit's one definition), over ``n_positions`` positions.

* **direct**: the head reads only the embedding stream ``m_0`` (and the token self-match), normalised by its own
  layer's typical norm: the head's attention from ``W_pos`` alone;
* **composed**: ``m`` grows layer by layer. Each head of layer ``l`` writes ``A^h (LN(m_l) W_V^h + b_V^h) W_O^h``
  (plus ``b_O``) with its pattern from its own composed circuit; each MLP is applied, exactly, to the mean stream
  ``m_l + attention`` (not linearised: the post's counted position, 1/(p+1) turned into p, is no line). ``m_l``
  centred over the token rows is the post's extended positional embedding, built from the weights.

**Upstream contributions** to a head's composed previous-token mass: the mass lost when one upstream head's write is
removed from that head's input only (its mean-stream write and its copy terms; every other path kept), and
``without_heads``: the mass left when every upstream head's write is removed (the MLPs' writes kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import einops
import pandas as pd
import torch

from ..model.attention import attn_scale
from ..model.engine_fast import ACTIVATIONS, ln_params
from ..model.identity import has_learned_positions, position_kind
from ..model.validation import UsageError, check_head, head_name
from .diagonals import diagonal_counts, diagonal_sums, prev_token_stats
from .posembed import default_bos

N_POSITIONS = 256  # positions the circuits span (capped at n_ctx): the length of the toolkit's natural-text prompts


def not_applicable(model) -> str | None:
    """Why the weight circuits are not defined on ``model`` (``None`` when they are): they read learned absolute
    positions, ``W_pos``; a rotary or ALiBi model puts position in the score itself, a position-free one nowhere."""
    if has_learned_positions(model):
        return None
    kind = position_kind(model)
    return {
        "rotary": "rotary positions rotate queries and keys by their position: no W_pos to read, and W_Q W_K^T "
        "depends on the relative position",
        "alibi": "ALiBi adds a fixed linear bias per head to the score: position is not in the residual stream",
        "none": "the model has no positional embedding (W_pos absent or zero): position only from the causal mask",
    }.get(kind, f"the model's positions are of kind {kind!r}, not learned absolute W_pos")


@dataclass
class PositionalCircuits:
    """Every head's positional circuits from the weights (see the module doc).

    ``direct``/``composed``: per-head statistics of :func:`prev_token_stats` (``prev_mass``, ``ratio``,
    ``top_offset``, ...) ``[n_layers, n_heads]`` each; ``patterns`` the composed patterns ``[n_layers, n_heads, n, n]``;
    ``stream`` the composed mean stream entering each layer ``[n_layers + 1, n, d_model]`` (float64; row ``l`` centred
    over the token rows is the extended positional embedding at layer ``l``); ``sigma`` its typical norms
    ``[n_layers, n]``; ``bos`` whether row 0 is BOS."""

    direct: dict[str, torch.Tensor]
    composed: dict[str, torch.Tensor]
    patterns: torch.Tensor
    stream: torch.Tensor
    sigma: torch.Tensor
    bos: bool
    _weights: _Weights | None = field(default=None, repr=False)  # what they were read from, for the contributions

    def table(self) -> pd.DataFrame:
        """One row per head: ``head``, ``layer``, ``index``, ``direct_prev``, ``composed_prev``, ``direct_ratio``,
        ``composed_ratio``, ``composed_top`` (the composed pattern's greatest diagonal)."""
        L, H = self.composed["prev_mass"].shape
        return pd.DataFrame(
            [
                dict(
                    head=head_name(l, h),
                    layer=l,
                    index=h,
                    direct_prev=float(self.direct["prev_mass"][l, h]),
                    composed_prev=float(self.composed["prev_mass"][l, h]),
                    direct_ratio=float(self.direct["ratio"][l, h]),
                    composed_ratio=float(self.composed["ratio"][l, h]),
                    composed_top=int(self.composed["top_offset"][l, h]),
                )
                for l in range(L)
                for h in range(H)
            ]
        )


class _Weights:
    """The model's weights as float64 CPU tensors, and the token statistics (``mu``, ``Sigma'``)."""

    def __init__(self, model, n: int, bos: bool):
        cfg = model.cfg
        self.model, self.cfg, self.n, self.bos = model, cfg, n, bos
        norm = getattr(cfg, "normalization_type", "LN")
        self.has_norm, self.centres = norm is not None, norm in ("LN", "LNPre")
        self.eps = float(getattr(cfg, "eps", 1e-5))
        d = cfg.d_model
        f64 = lambda t: t.detach().double().cpu()  # noqa: E731
        W_E = f64(model.W_E)
        if bos:  # the tokens after BOS: a model that counts from BOS reads a flag no other token has
            W_E = W_E[torch.arange(W_E.shape[0]) != model.tokenizer.bos_token_id]
        self.mu = W_E.mean(0)
        dev = W_E - self.mu
        cov = (dev.T.float() @ dev.float()).double() / W_E.shape[0]  # [d_model, d_model]; float32: 50k rows
        self.cov = self.centre(self.centre(cov).T)  # Sigma' = C Sigma C
        self.tok_var = float(self.cov.trace()) / d  # a token's share of sigma^2
        self.m0 = f64(model.W_pos)[:n] + self.mu
        if bos:
            self.m0[0] = f64(model.W_E[model.tokenizer.bos_token_id]) + f64(model.W_pos[0])
        self.has_tok = torch.ones(n, dtype=torch.float64)  # positions whose token varies
        self.has_tok[0] = 0.0 if bos else 1.0
        self.attn = [self._attn(l) for l in range(cfg.n_layers)]
        self._copies: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        """``x C``: each row of ``x`` ``[..., d_model]`` less its mean (unchanged where the norm does not centre)."""
        return x - x.mean(-1, keepdim=True) if self.centres else x

    def _attn(self, l: int) -> dict:
        a, blk = self.model.blocks[l].attn, self.model.blocks[l]
        f64 = lambda t: t.detach().double().cpu()  # noqa: E731
        w, b = ln_params(blk.ln1) if self.has_norm else (None, None)
        out = {k: f64(getattr(a, k)) for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}
        out["w"] = torch.ones(self.cfg.d_model, dtype=torch.float64) if w is None else w.double().cpu()
        out["b"] = torch.zeros(self.cfg.d_model, dtype=torch.float64) if b is None else b.double().cpu()
        out["scale"] = attn_scale(self.cfg, l)
        return out

    def sigma(self, m: torch.Tensor) -> torch.Tensor:
        """Typical norms ``[n]`` of the mean stream ``m`` ``[n, d_model]`` with a token's deviation added."""
        if not self.has_norm:
            return torch.ones(m.shape[0], dtype=torch.float64)
        c = self.centre(m)
        return (c.pow(2).mean(-1) + self.tok_var * self.has_tok + self.eps).sqrt()

    def norm(self, m: torch.Tensor, sigma: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``w * C m / sigma + b`` row by row: ``m`` ``[..., n, d_model]``, ``sigma`` ``[n]``."""
        if not self.has_norm:
            return m
        return self.centre(m) / sigma[:, None] * w + b

    def self_match(self, l: int) -> torch.Tensor:
        """``c_self`` of every head of layer ``l`` ``[n_heads]``: ``tr(Sigma' D W_Q W_K^T D)``."""
        a = self.attn[l]
        Dq = a["W_Q"] * a["w"][:, None]  # D W_Q [H, d, dh]
        Dk = a["W_K"] * a["w"][:, None]
        return ((self.cov @ Dq) * Dk).sum((-1, -2))

    def copy_terms(self, u: int, l: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(c_Q, c_K)`` ``[n_heads(u), n_heads(l)]`` of every head of layer ``u < l`` into every head of layer
        ``l``: ``tr(Sigma' D_u W_V W_O C D W_Q W_K^T D)`` and ``tr(Sigma' D W_Q W_K^T D C W_O^T W_V^T D_u)``."""
        if (u, l) not in self._copies:
            self._copies[u, l] = self._copy_terms(u, l)
        return self._copies[u, l]

    def _copy_terms(self, u: int, l: int) -> tuple[torch.Tensor, torch.Tensor]:
        up, a = self.attn[u], self.attn[l]
        V = self.cov @ (up["W_V"] * up["w"][:, None])  # Sigma' D_u W_V [U, d, dh]
        OC = self.centre(up["W_O"])  # W_O C [U, dh, d]
        Dq, Dk = a["W_Q"] * a["w"][:, None], a["W_K"] * a["w"][:, None]  # [H, d, dh]

        # tr(Sigma' D_u W_V W_O C D W_Q W_K^T D) = tr((W_K^T D Sigma' D_u W_V) (W_O C D W_Q)): [dh, dh] per pair,
        # every pair of one layer pair from two matmuls over the stacked heads
        Vs = einops.rearrange(V, "u d v -> d (u v)")
        Os = einops.rearrange(OC, "u v d -> (u v) d")
        U = V.shape[0]

        def tr(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:  # [H, d, dh] each -> [U, H]
            x = einops.rearrange(left, "h d k -> (h k) d") @ Vs  # [(H dh), (U dh)]
            y = Os @ einops.rearrange(right, "h d k -> d (h k)")  # [(U dh), (H dh)]
            x = einops.rearrange(x, "(h k) (u v) -> u h k v", h=left.shape[0], u=U)
            y = einops.rearrange(y, "(u v) (h k) -> u h v k", h=left.shape[0], u=U)
            return einops.einsum(x, y, "u h k v, u h v k -> u h")

        c_q, c_k = tr(Dk, Dq), tr(Dq, Dk)
        return c_q, c_k


def _scores(W: _Weights, l: int, x: torch.Tensor, sigma: torch.Tensor, heads=slice(None)) -> torch.Tensor:
    """The mean-stream scores ``[..., H, n, n]`` (scaled) of the heads ``heads`` of layer ``l`` on ``x`` ``[..., n,
    d_model]`` normalised by ``sigma`` ``[n]``."""
    a = W.attn[l]
    ln = W.norm(x, sigma, a["w"], a["b"])[..., None, :, :]
    q = ln @ a["W_Q"][heads] + a["b_Q"][heads][:, None]
    k = ln @ a["W_K"][heads] + a["b_K"][heads][:, None]
    return a["scale"] * (q @ k.transpose(-1, -2))


def _softmax(s: torch.Tensor) -> torch.Tensor:
    n = s.shape[-1]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    return s.masked_fill(~mask, float("-inf")).softmax(-1)


def _stats(A: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`prev_token_stats` of patterns ``[..., H, n, n]``: diagonal means over every query, key 0 left out."""
    n = A.shape[-1]
    lead = A.shape[:-2]
    sums = diagonal_sums(A.reshape(1, -1, n, n).float(), n, True)
    return {k: v.reshape(lead) for k, v in prev_token_stats(sums / diagonal_counts(n, n, True)).items()}


def _token_terms(W: _Weights, l: int, patterns: list[torch.Tensor], sigmas: list[torch.Tensor]) -> torch.Tensor:
    """The covariance part of layer ``l``'s scores ``[H, n, n]`` (scaled; see the module doc), from the composed
    patterns ``[H, n, n]`` and typical norms ``[n]`` of the layers below."""
    a, s = W.attn[l], sigmas[l]
    H, n = W.cfg.n_heads, W.n
    t = torch.zeros(H, n, n, dtype=torch.float64)
    idx = torch.arange(n)
    t[:, idx, idx] = W.self_match(l)[:, None] * W.has_tok
    for u in range(l):
        c_q, c_k = W.copy_terms(u, l)
        Au = patterns[u] * (W.has_tok / sigmas[u])[None, None, :]  # a token's copy, as u's LayerNorm scales it
        t += einops.einsum(c_q, Au, "u h, u p k -> h p k")
        t[:, idx, idx] += einops.einsum(c_k, Au[:, idx, idx], "u h, u p -> h p")
    return a["scale"] * t / (s[:, None] * s[None, :])


def _head_outputs(W: _Weights, l: int, m: torch.Tensor, sigma: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """Each head's write ``A^h (LN(m) W_V^h + b_V^h) W_O^h`` ``[H, n, d_model]`` (``b_O`` apart)."""
    a = W.attn[l]
    v = W.norm(m, sigma, a["w"], a["b"]) @ a["W_V"] + a["b_V"][:, None]  # [H, n, dh]
    return (A @ v) @ a["W_O"]


def _mlp(W: _Weights, l: int, x: torch.Tensor) -> torch.Tensor:
    """Block ``l``'s MLP on the mean stream ``x`` ``[n, d_model]``: ``act(LN2(x) W_in + b_in) W_out + b_out`` from
    its weights (zeros on an attention-only model)."""
    blk = W.model.blocks[l]
    if getattr(W.cfg, "attn_only", False) or getattr(blk, "mlp", None) is None:
        return torch.zeros_like(x)
    w, b = ln_params(blk.ln2) if W.has_norm else (None, None)
    ones, zeros = torch.ones(x.shape[-1], dtype=torch.float64), torch.zeros(x.shape[-1], dtype=torch.float64)
    ln = W.norm(x, W.sigma(x), ones if w is None else w.double().cpu(), zeros if b is None else b.double().cpu())
    mlp = blk.mlp
    f64 = lambda t: t.detach().double().cpu()  # noqa: E731
    hidden = ACTIVATIONS[W.cfg.act_fn](ln @ f64(mlp.W_in) + f64(mlp.b_in))
    return hidden @ f64(mlp.W_out) + f64(mlp.b_out)


def positional_circuits(model, n_positions: int = N_POSITIONS, bos: bool | None = None) -> PositionalCircuits:
    """Every head's direct and composed positional circuit (the module doc's maths) over the first ``n_positions``
    positions (capped at the model's context); ``bos``: row 0 holds BOS (default: the model's prompts start with
    it). A model without learned absolute positions is a ``UsageError`` (:func:`not_applicable` says why)."""
    why = not_applicable(model)
    if why is not None:
        raise UsageError("model", why, "a model with learned absolute positions (W_pos)")
    if not isinstance(n_positions, int) or isinstance(n_positions, bool) or n_positions < 3:
        raise ValueError(f"n_positions: {n_positions!r} is not an int >= 3 (a query with a previous non-BOS key)")
    n = min(n_positions, model.cfg.n_ctx)
    W = _Weights(model, n, default_bos(model) if bos is None else bool(bos))
    L = model.cfg.n_layers
    m = W.m0.clone()
    streams, sigmas, patterns, direct = [m.clone()], [], [], []
    for l in range(L):
        s = W.sigma(m)
        sigmas.append(s)
        t = _token_terms(W, l, patterns, sigmas)
        # the direct circuit: the embedding stream and the token's self-match, at this layer's typical norm
        self_only = W.attn[l]["scale"] * torch.diag_embed(W.self_match(l)[:, None] * W.has_tok / s**2)
        direct.append(_softmax(_scores(W, l, W.m0, s) + self_only))
        A = _softmax(_scores(W, l, m, s) + t)
        patterns.append(A)
        attn_out = _head_outputs(W, l, m, s, A).sum(0) + W.attn[l]["b_O"]
        mlp_in = m if getattr(W.cfg, "parallel_attn_mlp", False) else m + attn_out
        m = m + attn_out + _mlp(W, l, mlp_in)
        streams.append(m.clone())
    P = torch.stack(patterns)
    return PositionalCircuits(
        _stats(torch.stack(direct)), _stats(P), P.float(), torch.stack(streams), torch.stack(sigmas), W.bos, W
    )


def upstream_contributions(model, circuits: PositionalCircuits, layer: int, head: int) -> tuple[pd.DataFrame, float]:
    """``(table, without_heads)`` for head ``(layer, head)``: one row per upstream head (``source``, ``layer``,
    ``head``, ``prev_without``: the head's composed previous-token mass with that head's write removed from its input,
    ``drop``: composed minus that), sorted by ``drop`` descending; ``without_heads``: the mass with every upstream
    head's write removed (MLPs kept). The circuits must be ``model``'s (:func:`positional_circuits`)."""
    check_head(model, layer, head)
    n = circuits.patterns.shape[-1]
    W = circuits._weights if circuits._weights is not None else _Weights(model, n, circuits.bos)
    P = [p.double() for p in circuits.patterns]
    sig = list(circuits.sigma)
    m, s = circuits.stream[layer], circuits.sigma[layer]
    base = float(circuits.composed["prev_mass"][layer, head])
    t = _token_terms(W, layer, P, sig)[head]
    idx, scale = torch.arange(n), W.attn[layer]["scale"] / (s[:, None] * s[None, :])
    rows, writes = [], torch.zeros_like(m)
    for u in range(layer):
        outs = _head_outputs(W, u, circuits.stream[u], sig[u], P[u])  # [U, n, d]
        writes += outs.sum(0) + W.attn[u]["b_O"]
        c_q, c_k = W.copy_terms(u, layer)
        Au = P[u] * (W.has_tok / sig[u])[None, None, :]
        own = c_q[:, head, None, None] * Au  # each upstream head's copy terms in the head's scores [U, n, n]
        own[:, idx, idx] += c_k[:, head, None] * Au[:, idx, idx]
        own *= scale
        for j in range(W.cfg.n_heads):
            A = _softmax(_scores(W, layer, m - outs[j], s, heads=slice(head, head + 1))[0] + t - own[j])
            prev = float(_stats(A[None])["prev_mass"][0])
            rows.append(dict(source=head_name(u, j), layer=u, head=j, prev_without=prev, drop=base - prev))
    s_only = W.attn[layer]["scale"] * W.self_match(layer)[head] * W.has_tok / s**2
    A = _softmax(_scores(W, layer, m - writes, s, heads=slice(head, head + 1))[0] + torch.diag(s_only))
    without = float(_stats(A[None])["prev_mass"][0])
    df = pd.DataFrame(rows, columns=["source", "layer", "head", "prev_without", "drop"])
    return df.sort_values("drop", ascending=False, kind="stable").reset_index(drop=True), without
