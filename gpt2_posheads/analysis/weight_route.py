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

**Cost.** With ``M_h = D W_K^h W_Q^h^T D`` and ``A_u = D_u W_V^u W_O^u C`` (``[d_model, d_model]`` each), the copy
coefficients are Frobenius products, ``c_Q(u) = <Sigma' A_u, M_h>``, ``c_K(u) = <Sigma' A_u, M_h^T>`` and ``c_self =
<Sigma', M_h>`` (the traces above, turned cyclically): one matmul per pair of layers, all computed first, memory
bounded by bytes (:data:`CACHE_BYTES` of ``Sigma' A_u``, :data:`QK_BYTES` of ``M``, ``M^T`` rows), not by the model.
Where one block holds every row (every model up to GPT-2 medium) each coefficient is one dot product; else its partial
sums over the blocks are added in float32. Everything is float32; the token moments are summed in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import einops
import pandas as pd
import torch

from ..model.engine import attn_scale
from ..model.engine_fast import ACTIVATIONS, ln_params
from ..model.loading import has_learned_positions, position_kind
from ..model.validation import UsageError, check_head, head_name
from .diagonals import diagonal_counts, diagonal_sums, head_columns, prev_token_stats
from .posembed import default_bos

N_POSITIONS = 256  # positions the circuits span (capped at n_ctx): the length of the toolkit's natural-text prompts
ROWS = 4096  # embedding rows per block when the token moments are summed
CACHE_BYTES = 2**28  # the upstream side of the copy coefficients held at once (256 MiB: one layer of GPT-2 XL)
QK_BYTES = 2**27  # M and M^T of a layer's heads held at once (128 MiB: every row up to GPT-2 medium)


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
    """Every head's positional circuits from the weights (module doc)."""

    direct: dict[str, torch.Tensor]  # prev_token_stats (prev_mass, ratio, top_offset, ...) [n_layers, n_heads] each
    composed: dict[str, torch.Tensor]
    patterns: torch.Tensor  # the composed patterns [n_layers, n_heads, n, n]
    stream: torch.Tensor  # the composed mean stream entering each layer [n_layers + 1, n, d_model]
    sigma: torch.Tensor  # its typical norms [n_layers, n]
    bos: bool  # row 0 is BOS
    _weights: _Weights | None = field(default=None, repr=False)  # what they were read from, for the contributions

    def table(self) -> pd.DataFrame:
        """One row per head: ``direct_``/``composed_`` ``prev`` and ``ratio``, ``composed_top`` (greatest diagonal)."""
        c = head_columns(*self.composed["prev_mass"].shape)
        columns = dict(head=c["name"], layer=c["layer"], index=c["head"])
        for name, key in (("prev", "prev_mass"), ("ratio", "ratio")):
            for side, st in (("direct", self.direct), ("composed", self.composed)):
                columns[f"{side}_{name}"] = st[key].flatten().tolist()
        columns["composed_top"] = self.composed["top_offset"].flatten().tolist()
        return pd.DataFrame(columns)


def _f32(t: torch.Tensor) -> torch.Tensor:  # the same storage where it is a float32 CPU tensor already
    return t.detach().to("cpu", torch.float32)


class _Weights:
    """Float32 views of the weights, the token statistics (``mu``, ``Sigma'``) and every layer's copy coefficients."""

    def __init__(self, model, n: int, bos: bool):
        cfg = model.cfg
        self.model, self.cfg, self.n, self.bos = model, cfg, n, bos
        norm = getattr(cfg, "normalization_type", "LN")
        self.has_norm, self.centres = norm is not None, norm in ("LN", "LNPre")
        self.eps = float(getattr(cfg, "eps", 1e-5))
        W_E, W_pos = _f32(model.W_E), _f32(model.W_pos)
        # the tokens after BOS: a model that counts from BOS reads a flag no other token has
        keep = torch.ones(W_E.shape[0], dtype=torch.bool)
        if bos:
            keep[model.tokenizer.bos_token_id] = False
        blocks = [(W_E[i : i + ROWS], keep[i : i + ROWS]) for i in range(0, W_E.shape[0], ROWS)]
        self.mu = (sum(rows.double().T @ k.double() for rows, k in blocks) / keep.sum()).float()
        cov = sum((((rows - self.mu) * k[:, None]).T @ (rows - self.mu)).double() for rows, k in blocks)
        self.cov = self.centre(self.centre((cov / keep.sum()).float()).T)  # Sigma' = C Sigma C [d_model, d_model]
        self.tok_var = float(self.cov.trace()) / cfg.d_model  # a token's share of sigma^2
        self.m0 = W_pos[:n] + self.mu
        if bos:
            self.m0[0] = W_E[model.tokenizer.bos_token_id] + W_pos[0]
        self.has_tok = torch.ones(n) if not bos else (torch.arange(n) > 0).float()  # positions whose token varies
        self._copies: list[tuple[torch.Tensor, list]] | None = None

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        """``x C``: each row of ``x`` ``[..., d_model]`` less its mean (unchanged where the norm does not centre)."""
        return x - x.mean(-1, keepdim=True) if self.centres else x

    def attn(self, l: int) -> dict:
        """Layer ``l``'s attention weights (``W_Q``, ``W_K``, ``W_V`` ``[H, d, dh]``, ``W_O`` ``[H, dh, d]``, biases),
        its LayerNorm's gain ``w`` and bias ``b`` ``[d]`` and its score scale."""
        a = self.model.blocks[l].attn
        out = {k: _f32(getattr(a, k)) for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}
        out["w"], out["b"] = self.ln(self.model.blocks[l], "ln1")
        out["scale"] = attn_scale(self.cfg, l)
        return out

    def ln(self, block, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``block``'s LayerNorm ``name``'s gain and bias ``[d_model]`` (1 and 0 where it has none, or is folded)."""
        w, b = ln_params(getattr(block, name)) if self.has_norm else (None, None)
        d = self.cfg.d_model
        return torch.ones(d) if w is None else _f32(w), torch.zeros(d) if b is None else _f32(b)

    def sigma(self, m: torch.Tensor) -> torch.Tensor:
        """Typical norms ``[n]`` of the mean stream ``m`` ``[n, d_model]`` with a token's deviation added."""
        if not self.has_norm:
            return torch.ones(m.shape[0])
        return (self.centre(m).pow(2).mean(-1) + self.tok_var * self.has_tok + self.eps).sqrt()

    def norm(self, m: torch.Tensor, sigma: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``w * C m / sigma + b`` row by row: ``m`` ``[..., n, d_model]``, ``sigma`` ``[n]``."""
        if not self.has_norm:
            return m
        return self.centre(m) / sigma[:, None] * w + b

    def copy_terms(self, l: int) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """``(c_self [n_heads], [(c_Q, c_K) [n_heads(u), n_heads(l)] for u < l])`` of layer ``l``, the module doc's
        Frobenius products (every layer's computed at the first call)."""
        if self._copies is None:
            L = self.cfg.n_layers
            c_self, pairs = [None] * L, [[None] * k for k in range(L)]
            add = lambda acc, x: x if acc is None else acc + x  # noqa: E731 - a block's partial sums
            group = max(1, CACHE_BYTES // (self.cfg.n_heads * self.cfg.d_model**2 * 4))
            for start in range(0, max(L - 1, 1), group):  # upstream layers start.. (the last layer is no one's)
                written = [self.written(u) for u in range(start, min(start + group, L - 1))]  # [U, d * d] each
                for k in range(start + 1 if start else 0, L):
                    for rows, QK in self.qk_blocks(k):
                        if not start:
                            c_self[k] = add(c_self[k], QK[: len(QK) // 2] @ self.cov.flatten()[rows])
                        for u in range(start, min(k, start + len(written))):
                            pairs[k][u] = add(pairs[k][u], written[u - start][:, rows] @ QK.T)  # [U, 2H]
                        del QK  # one block held at a time: freed before the next is built
                del written  # one group held at a time
            self._copies = [
                (c.double(), [(x[:, : len(c)], x[:, len(c) :]) for x in map(torch.Tensor.double, p)])
                for c, p in zip(c_self, pairs, strict=True)
            ]
        return self._copies[l]

    def qk_blocks(self, l: int):
        """``(columns, QK [2 n_heads, rows * d_model])``: blocks of rows of layer ``l``'s ``M`` then ``M^T``, flattened,
        as many as fit :data:`QK_BYTES`; ``columns`` their slice of a flattened ``[d_model, d_model]``."""
        a = self.attn(l)
        K, Q = a["W_K"] * a["w"][:, None], a["W_Q"] * a["w"][:, None]  # D W_K, D W_Q [H, d, dh]
        H, d = K.shape[:2]
        step = max(1, QK_BYTES // (2 * H * d * 4))
        for r in range(0, d, step):
            QK = torch.empty(2, H, min(step, d - r), d)
            torch.matmul(K[:, r : r + step], Q.transpose(-1, -2), out=QK[0])
            if step >= d:
                QK[1] = QK[0].transpose(-1, -2)
            else:
                torch.matmul(Q[:, r : r + step], K.transpose(-1, -2), out=QK[1])
            yield slice(r * d, (r + step) * d), QK.view(2 * H, -1)
            del QK

    def written(self, u: int) -> torch.Tensor:
        """``Sigma' A_u`` of every head of layer ``u``, flattened ``[n_heads, d_model * d_model]``."""
        a = self.attn(u)
        return ((self.cov @ (a["W_V"] * a["w"][:, None])) @ self.centre(a["W_O"])).flatten(1)


def _scores(W: _Weights, l: int, x: torch.Tensor, sigma: torch.Tensor, heads=slice(None)) -> torch.Tensor:
    """The mean-stream scores ``[..., H, n, n]`` (scaled) of the heads ``heads`` of layer ``l`` on ``x`` ``[..., n,
    d_model]`` normalised by ``sigma`` ``[n]``."""
    a = W.attn(l)
    ln = W.norm(x, sigma, a["w"], a["b"])[..., None, :, :]
    q = ln @ a["W_Q"][heads] + a["b_Q"][heads][:, None]
    k = ln @ a["W_K"][heads] + a["b_K"][heads][:, None]
    return a["scale"] * (q @ k.transpose(-1, -2))


def _softmax(s: torch.Tensor) -> torch.Tensor:
    n = s.shape[-1]
    return s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def _diagonals(A: torch.Tensor) -> torch.Tensor:
    """The diagonal means ``[..., n]`` of patterns ``[..., n, n]`` over every query, key 0 left out."""
    n = A.shape[-1]
    sums = diagonal_sums(A.reshape(1, -1, n, n), n, True)
    return (sums / diagonal_counts(n, n, True)).reshape(*A.shape[:-2], n)


def _token_terms(W: _Weights, l: int, patterns: list[torch.Tensor], sigmas: list[torch.Tensor]) -> torch.Tensor:
    """The covariance part of layer ``l``'s scores ``[H, n, n]`` (scaled; see the module doc), from the composed
    patterns ``[H, n, n]`` and typical norms ``[n]`` of the layers below."""
    s, n = sigmas[l], W.n
    c_self, pairs = W.copy_terms(l)
    t = torch.zeros(len(c_self), n, n)
    idx = torch.arange(n)
    t[:, idx, idx] = c_self.float()[:, None] * W.has_tok
    for u, (c_q, c_k) in enumerate(pairs):
        Au = patterns[u] * (W.has_tok / sigmas[u])[None, None, :]  # a token's copy, as u's LayerNorm scales it
        t += einops.einsum(c_q.float(), Au, "u h, u p k -> h p k")
        t[:, idx, idx] += einops.einsum(c_k.float(), Au[:, idx, idx], "u h, u p -> h p")
    return W.attn(l)["scale"] * t / (s[:, None] * s[None, :])


def _head_values(W: _Weights, l: int, m: torch.Tensor, sigma: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """Each head's ``A^h (LN(m) W_V^h + b_V^h)`` ``[H, n, d_head]``: times ``W_O^h`` its write (``b_O`` apart)."""
    a = W.attn(l)
    return A @ (W.norm(m, sigma, a["w"], a["b"]) @ a["W_V"] + a["b_V"][:, None])


def _mlp(W: _Weights, l: int, x: torch.Tensor) -> torch.Tensor:
    """Block ``l``'s MLP on the mean stream ``x`` ``[n, d_model]``: ``act(LN2(x) W_in + b_in) W_out + b_out`` from
    its weights (zeros on an attention-only model)."""
    blk = W.model.blocks[l]
    if getattr(W.cfg, "attn_only", False) or getattr(blk, "mlp", None) is None:
        return torch.zeros_like(x)
    mlp = blk.mlp
    hidden = ACTIVATIONS[W.cfg.act_fn](W.norm(x, W.sigma(x), *W.ln(blk, "ln2")) @ _f32(mlp.W_in) + _f32(mlp.b_in))
    return hidden @ _f32(mlp.W_out) + _f32(mlp.b_out)


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
    m = W.m0.clone()
    P = torch.empty(model.cfg.n_layers, model.cfg.n_heads, n, n)  # the composed patterns, filled layer by layer
    streams, sigmas, patterns, direct = [m], [], [], []
    for l in range(model.cfg.n_layers):
        s = W.sigma(m)
        sigmas.append(s)
        t = _token_terms(W, l, patterns, sigmas)
        # the direct circuit: the embedding stream and the token's self-match, at this layer's typical norm
        self_only = W.attn(l)["scale"] * torch.diag_embed(W.copy_terms(l)[0].float()[:, None] * W.has_tok / s**2)
        direct.append(_diagonals(_softmax(_scores(W, l, W.m0, s) + self_only)))
        A = P[l] = _softmax(_scores(W, l, m, s) + t)
        patterns.append(A)
        a = W.attn(l)
        attn_out = einops.einsum(_head_values(W, l, m, s, A), a["W_O"], "h p k, h k d -> p d") + a["b_O"]
        mlp_in = m if getattr(W.cfg, "parallel_attn_mlp", False) else m + attn_out
        m = m + attn_out + _mlp(W, l, mlp_in)
        streams.append(m)
    return PositionalCircuits(
        prev_token_stats(torch.stack(direct)),
        prev_token_stats(_diagonals(P)),
        P,
        torch.stack(streams),
        torch.stack(sigmas),
        W.bos,
        W,
    )


def upstream_contributions(model, circuits: PositionalCircuits, layer: int, head: int) -> tuple[pd.DataFrame, float]:
    """``(table, without_heads)`` for head ``(layer, head)``: one row per upstream head, ``prev_without`` the head's
    composed previous-token mass with that head's write (its mean-stream write and its copy terms) removed from its
    input only, ``drop`` composed minus that, sorted by ``drop`` descending; ``without_heads``: the mass with every
    upstream head's write removed (MLPs kept). The circuits must be ``model``'s (:func:`positional_circuits`)."""
    check_head(model, layer, head)
    n = circuits.patterns.shape[-1]
    W = circuits._weights if circuits._weights is not None else _Weights(model, n, circuits.bos)
    P, sig = list(circuits.patterns), list(circuits.sigma)
    m, s = circuits.stream[layer], circuits.sigma[layer]
    base = float(circuits.composed["prev_mass"][layer, head])
    t = _token_terms(W, layer, P, sig)[head]
    idx, scale = torch.arange(n), W.attn(layer)["scale"] / (s[:, None] * s[None, :])
    c_self, pairs = W.copy_terms(layer)
    rows, writes = [], torch.zeros_like(m)
    for u, (c_q, c_k) in enumerate(pairs):
        outs = _head_values(W, u, circuits.stream[u], sig[u], P[u]) @ W.attn(u)["W_O"]  # [U, n, d]
        writes += outs.sum(0) + W.attn(u)["b_O"]
        Au = P[u] * (W.has_tok / sig[u])[None, None, :]
        own = c_q[:, head, None, None].float() * Au  # each upstream head's copy terms in the head's scores [U, n, n]
        own[:, idx, idx] += c_k[:, head, None].float() * Au[:, idx, idx]
        # every upstream head of layer u removed in turn: [U, n, n] patterns of the one head
        A = _softmax(_scores(W, layer, m - outs, s, heads=slice(head, head + 1))[:, 0] + t - own * scale)
        prev = prev_token_stats(_diagonals(A))["prev_mass"]
        rows += [
            dict(source=head_name(u, j), layer=u, head=j, prev_without=float(p), drop=base - float(p))
            for j, p in enumerate(prev)
        ]
    s_only = W.attn(layer)["scale"] * c_self[head].float() * W.has_tok / s**2
    A = _softmax(_scores(W, layer, m - writes, s, heads=slice(head, head + 1))[0] + torch.diag(s_only))
    without = float(prev_token_stats(_diagonals(A))["prev_mass"])
    df = pd.DataFrame(rows, columns=["source", "layer", "head", "prev_without", "drop"])
    return df.sort_values("drop", ascending=False, kind="stable").reset_index(drop=True), without
