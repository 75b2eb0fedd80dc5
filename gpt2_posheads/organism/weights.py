"""A GPT-2's weights written feature by feature: the residual stream cut into named blocks, heads and MLPs set in them.

The residual stream is cut into named *blocks* of coordinates; a block of ``m + 1`` coordinates carries ``m``
features along a Helmert basis (orthonormal vectors whose coordinates sum to zero), so LayerNorm's centring never
mixes blocks. A large constant feature ``C`` in every token embedding makes LayerNorm's scaling constant to
``|signal|^2 / (2 C^2) < 1e-6``; every LayerNorm's gain is ``C / sqrt(d_model)``, so each LayerNorm is the identity
on the features to that precision and a head reads exactly what the blocks hold. What the heads do and the models
built from them are :mod:`~gpt2_posheads.organism.compiled`'s.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..model.paths import GPT2_W_POS

N_LAYERS, N_HEADS, D_MODEL, N_CTX, D_MLP = 4, 4, 512, 256, 512
K_TOK = 96  # dimension of the token codes: cross-talk between two codes ~ N(0, 1/K_TOK)
N_BUCKETS = 64  # the early heads' self-match reads a one-hot bucket per token: exact, 1/N_BUCKETS of pairs collide
C = 1.0e4  # the constant feature: LayerNorm's scale varies by |signal|^2 / (2 C^2)
SEED = 2024
BOS = 0
SMALL = 0.05  # count, pos, waves and W_pos's fine components are this small: the extended embeddings stay GPT-2's helix
OUT_GAIN = 25.0  # logit of the copied token
N_WAVES_MLP, N_WAVES_WPOS = 8, 4  # frequencies pi (j + 1/2) / n: their kernel is exactly 0 at 0 < |m| < 2n


@dataclass(frozen=True)
class Shape:
    """A compiled model's sizes (the shipped models: the defaults). ``n_ctx`` is at most GPT-2's 1,024 (the helix is
    its first ``n_ctx`` ``W_pos`` rows) and ``d_mlp >= n_ctx`` (the position MLP has one hidden unit per position)."""

    n_layers: int = N_LAYERS
    n_heads: int = N_HEADS
    d_model: int = D_MODEL
    k_tok: int = K_TOK
    n_buckets: int = N_BUCKETS
    d_mlp: int = D_MLP
    n_ctx: int = N_CTX  # positions: W_pos rows, the counted position's range (pos = SMALL p / n_ctx)
    d_head = property(lambda self: self.d_model // self.n_heads)


SHAPE = Shape()


def helmert(m: int) -> np.ndarray:
    """``[m - 1, m]``: an orthonormal basis of the vectors of ``R^m`` whose coordinates sum to zero."""
    k, j = np.arange(1, m)[:, None], np.arange(m)[None, :]
    return np.where(j < k, 1.0, np.where(j == k, -k, 0.0)) / np.sqrt(k * (k + 1.0))


@dataclass
class Residual:
    """Blocks of residual coordinates; ``basis(name)`` ``[n_features, d_model]`` maps a block's features in."""

    shape: Shape = SHAPE
    blocks: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (first coordinate, n_features)
    used: int = 0

    d_model = property(lambda self: self.shape.d_model)

    def size(self, name: str) -> int:
        return self.blocks[name][1]

    def add(self, name: str, n: int) -> None:
        if self.used + n + 1 > self.d_model:
            raise ValueError(f"block {name!r} ({n} features) does not fit: {self.used} of {self.d_model} used")
        self.blocks[name] = (self.used, n)
        self.used += n + 1

    def basis(self, name: str) -> np.ndarray:
        start, n = self.blocks[name]
        b = np.zeros((n, self.d_model))
        b[:, start : start + n + 1] = helmert(n + 1)
        return b


def token_codes(n_vocab: int, k: int = K_TOK, seed: int = SEED) -> np.ndarray:
    """``[n_vocab, k]`` random unit codes (PCG64, stable across platforms); BOS gets the zero code."""
    g = np.random.Generator(np.random.PCG64(seed))
    codes = g.standard_normal((n_vocab, k))
    codes /= np.linalg.norm(codes, axis=1, keepdims=True)
    codes[BOS] = 0.0
    return codes


def token_buckets(n_vocab: int, n: int = N_BUCKETS, seed: int = SEED + 1) -> np.ndarray:
    """``[n_vocab, n]`` one-hot random buckets (BOS in none): two tokens share one with probability ``1/n``."""
    g = np.random.Generator(np.random.PCG64(seed))
    out = np.zeros((n_vocab, n))
    out[np.arange(n_vocab), g.integers(0, n, n_vocab)] = 1.0
    out[BOS] = 0.0
    return out


def gpt2_w_pos() -> np.ndarray:
    """GPT-2 small's real ``W_pos`` ``[1024, 768]`` (``data/gpt2-small``): the one source every build uses."""
    return np.load(GPT2_W_POS)


@functools.lru_cache(maxsize=4)
def gpt2_helix(n_ctx: int = N_CTX, k: int = 8) -> np.ndarray:
    """``[n_ctx, k]``: GPT-2's first ``n_ctx`` ``W_pos`` rows (:func:`gpt2_w_pos`), centred, on their top ``k``
    principal components (each component's sign fixed so that its largest entry is positive); read-only, shared by
    every model of that context."""
    x = gpt2_w_pos()[:n_ctx].astype(np.float64)
    x = x - x.mean(0)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    proj = u[:, :k] * s[:k]
    signs = np.sign(proj[np.abs(proj).argmax(0), np.arange(k)])
    out = proj * signs
    out.setflags(write=False)
    return out


def waves(n_ctx: int, freqs: np.ndarray) -> np.ndarray:
    """``[n_ctx, 2 * len(freqs)]``: ``cos(w p), sin(w p)`` for each frequency ``w`` (interleaved)."""
    p = np.arange(n_ctx)[:, None] * freqs[None, :]
    out = np.zeros((n_ctx, 2 * len(freqs)))
    out[:, 0::2], out[:, 1::2] = np.cos(p), np.sin(p)
    return out


def shift_rotation(freqs: np.ndarray, shift: int) -> np.ndarray:
    """``[2F, 2F]`` block-diagonal ``R``: ``waves(p) @ R == waves(p - shift)`` (each pair rotated by ``-w shift``)."""
    r = np.zeros((2 * len(freqs), 2 * len(freqs)))
    for i, w in enumerate(freqs):
        c, s = math.cos(w * shift), math.sin(w * shift)
        # [cos(wp), sin(wp)] -> [cos(w(p - t)), sin(w(p - t))] = [cos c + sin s, sin c - cos s]
        r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return r


def kernel_freqs(n: int) -> np.ndarray:
    """``pi (j + 1/2) / n``, ``j < n``: ``sum_j cos(w_j m) = 0`` for every integer ``0 < |m| < 2n``."""
    return math.pi * (np.arange(n) + 0.5) / n


def gelu_new(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU (the tanh form), in float64."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def position_mlp(targets: np.ndarray, n_ctx: int = N_CTX) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A GELU MLP that maps the count ``c = 1/(p+1)`` to ``targets[p]`` ``[n_ctx, n_out]`` exactly at every integer p.
    Hidden unit ``j`` (``j = 0 .. n_ctx - 2``) is ``gelu(lam_j (c_j - c))`` with a knot at ``c_j = 1/(j+1)``: on for the
    positions after ``j``, zero at ``j`` itself, and linear (a ReLU, to 1e-4) at every other position, since ``lam_j = 4
    / (c_j - c_{j+1})`` puts the nearest other position four units away. A last unit makes the output flat below the
    last position's count: a prompt without BOS (count 0) gets the last position's features rather than an
    extrapolation. The output weights solve the (triangular) interpolation exactly in float64, the GELU's small tails
    included. Returns ``(w_in [n_hidden], b_in [n_hidden], w_out [n_hidden, n_out], b_out [n_out])`` for ``hidden =
    gelu(c * w_in + b_in)``, ``out = hidden @ w_out + b_out``."""
    c = np.append(1.0 / (np.arange(n_ctx) + 1.0), 0.0)  # the positions' counts, and 0: a prompt without BOS
    lam = 4.0 / (c[:-1] - c[1:])  # each unit's own slope: the next count sits 4 units into its linear part
    w_in, b_in = -lam, lam * c[:-1]  # knots at c_0 .. c_{n_ctx-1}
    hidden = gelu_new(c[:, None] * w_in[None, :] + b_in[None, :])  # [n_ctx + 1, n_hidden]
    a = np.concatenate([hidden, np.ones((n_ctx + 1, 1))], axis=1)  # the last column: the output bias
    # without BOS nothing is counted: the MLP writes what it writes at the last position (flat beyond it)
    sol = np.linalg.solve(a, np.concatenate([targets, targets[-1:]], axis=0))
    return w_in, b_in, sol[:-1], sol[-1]


@dataclass
class Head:
    """One head's weights in the real basis: ``q = x Wq + bq`` etc. ``[d_model, d_head]``, ``Wo [d_head, d_model]``.
    Built from features: :meth:`query` / :meth:`key` / :meth:`value` add ``basis(block).T @ M`` for a block's features
    ``M [n_features, d_head]``; :meth:`output` adds ``M @ basis(block)``. Query weights are multiplied by
    ``sqrt(d_head)`` so that the score ``q . k / sqrt(d_head)`` GPT-2 computes is the dot product of the features."""

    res: Residual
    role: str = "inert: attends uniformly (zero query and key) and writes nothing"

    def __post_init__(self):  # the weights, zero until a builder adds features
        d, dh = self.res.d_model, self.d_head
        self.Wq, self.Wk, self.Wv, self.Wo = np.zeros((d, dh)), np.zeros((d, dh)), np.zeros((d, dh)), np.zeros((dh, d))
        self.bq, self.bk = np.zeros(dh), np.zeros(dh)

    d_head = property(lambda self: self.res.shape.d_head)

    def _wide(self, m: np.ndarray) -> np.ndarray:  # [n_features, width <= d_head] padded with zeros to d_head
        if m.shape[1] > self.d_head:
            raise ValueError(f"a head of {self.d_head} dimensions cannot hold {m.shape[1]}")
        return np.pad(m, ((0, 0), (0, self.d_head - m.shape[1])))

    def _add(self, w: np.ndarray, block: str, m: np.ndarray, scale: float = 1.0) -> Head:
        w += self.res.basis(block).T @ self._wide(m) * scale
        return self

    def query(self, block: str, m: np.ndarray) -> Head:
        return self._add(self.Wq, block, m, math.sqrt(self.d_head))

    def query_bias(self, dim: int, value: float) -> Head:
        self.bq[dim] += value * math.sqrt(self.d_head)
        return self

    def key(self, block: str, m: np.ndarray) -> Head:
        return self._add(self.Wk, block, m)

    def value(self, block: str, m: np.ndarray) -> Head:
        return self._add(self.Wv, block, m)

    def output(self, m: np.ndarray, block: str) -> Head:
        self.Wo += self._wide(m.T).T @ self.res.basis(block)
        return self


def slot(n_features: int, dim: int, scale: float = 1.0) -> np.ndarray:
    """``[n_features, dim + 1]``: feature 0 of a block at head dimension ``dim`` (a :class:`Head` pads the rest)."""
    m = np.zeros((n_features, dim + 1))
    m[0, dim] = scale
    return m


def onto(n_features: int, first: int, scale: float = 1.0) -> np.ndarray:
    """``[n_features, first + n_features]``: feature ``i`` at head dimension ``first + i``, times ``scale``."""
    m = np.zeros((n_features, first + n_features))
    m[np.arange(n_features), first + np.arange(n_features)] = scale
    return m


@dataclass
class Mlp:
    """A layer's MLP in the real basis (``c_fc`` ``[d_model, d_mlp]`` and its bias, ``c_proj`` ``[d_mlp, d_model]``)."""

    res: Residual
    role: str = "zero"

    def __post_init__(self):
        d, d_mlp = self.res.d_model, self.res.shape.d_mlp
        self.w_fc, self.b_fc = np.zeros((d, d_mlp)), np.zeros(d_mlp)
        self.w_proj, self.b_proj = np.zeros((d_mlp, d)), np.zeros(d)


def positions_mlp(p: Parts, outputs: dict[str, np.ndarray], role: str) -> Mlp:
    """The layer-0 MLP: reads ``count`` and writes ``outputs[block]`` ``[n_ctx, n_features]`` at position p."""
    names = list(outputs)
    w_in, b_in, w_out, b_out = position_mlp(np.concatenate([outputs[n] for n in names], axis=1), p.res.shape.n_ctx)
    mlp, n = Mlp(p.res, role), len(w_in)
    mlp.w_fc[:, :n] = p.res.basis("count").T @ (w_in[None, :] / SMALL)
    mlp.b_fc[:n] = b_in
    col = 0
    for name in names:
        k = outputs[name].shape[1]
        mlp.w_proj[:n] += w_out[:, col : col + k] @ p.res.basis(name)
        mlp.b_proj += b_out[col : col + k] @ p.res.basis(name)
        col += k
    return mlp


@dataclass
class Compiled:
    """A whole model: embeddings, ``n_layers x n_heads`` heads (``res.shape``), one MLP per layer, the unembedding."""

    name: str
    res: Residual
    W_E: np.ndarray  # [d_vocab, d_model]
    W_pos: np.ndarray  # [n_ctx, d_model]
    heads: list[list[Head]]
    mlps: list[Mlp]
    W_U: np.ndarray  # [d_vocab, d_model] (lm_head.weight; untied)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Hugging Face ``GPT2LMHeadModel`` parameter names (Conv1D weights are ``[in, out]``), float32."""
        d = self.res.d_model
        gain = np.full(d, C / math.sqrt(d))
        sd = {
            "transformer.wte.weight": self.W_E,
            "transformer.wpe.weight": self.W_pos,
            "transformer.ln_f.weight": gain,
            "transformer.ln_f.bias": np.zeros(d),
            "lm_head.weight": self.W_U,
        }
        for l in range(self.res.shape.n_layers):
            hs = self.heads[l]
            pre = f"transformer.h.{l}."
            for ln in ("ln_1", "ln_2"):
                sd[f"{pre}{ln}.weight"], sd[f"{pre}{ln}.bias"] = gain, np.zeros(d)
            sd[pre + "attn.c_attn.weight"] = np.concatenate([getattr(h, w) for w in ("Wq", "Wk", "Wv") for h in hs], 1)
            sd[pre + "attn.c_attn.bias"] = np.concatenate(
                [np.concatenate([h.bq for h in hs]), np.concatenate([h.bk for h in hs]), np.zeros(d)]
            )
            sd[pre + "attn.c_proj.weight"] = np.concatenate([h.Wo for h in hs], 0)
            sd[pre + "attn.c_proj.bias"] = np.zeros(d)
            m = self.mlps[l]
            sd[pre + "mlp.c_fc.weight"], sd[pre + "mlp.c_fc.bias"] = m.w_fc, m.b_fc
            sd[pre + "mlp.c_proj.weight"], sd[pre + "mlp.c_proj.bias"] = m.w_proj, m.b_proj
        return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in sorted(sd.items())}

    def config(self, n_vocab: int) -> dict:
        shape = self.res.shape
        return {
            "activation_function": "gelu_new",
            "architectures": ["GPT2LMHeadModel"],
            **dict.fromkeys(("attn_pdrop", "embd_pdrop", "resid_pdrop"), 0.0),
            **dict.fromkeys(("bos_token_id", "eos_token_id"), BOS),
            "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05,
            "model_type": "gpt2",
            "n_embd": shape.d_model,
            "n_head": shape.n_heads,
            "n_inner": shape.d_mlp,
            "n_layer": shape.n_layers,
            "n_positions": shape.n_ctx,
            "scale_attn_by_inverse_layer_idx": False,
            "scale_attn_weights": True,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "use_cache": True,
            "vocab_size": n_vocab,
        }


@dataclass
class Parts:
    """What the builders share: the residual layout, token codes and buckets, GPT-2's helix, an empty model."""

    res: Residual
    codes: np.ndarray  # [d_vocab, k_tok]
    buckets: np.ndarray  # [d_vocab, n_buckets]
    helix: np.ndarray  # [n_ctx, 8]
    heads: list[list[Head]]
    mlps: list[Mlp]
    fine: np.ndarray | None = None  # [n_ctx, 1 + 2 N_WAVES_WPOS]: W_pos's fine components (ramp, waves), or None

    def embeddings(self) -> np.ndarray:
        """``W_E``: the constant C, the BOS flag on BOS, every other token's code in ``tok`` (and bucket)."""
        w = np.zeros((len(self.codes), self.res.d_model))
        w += C * self.res.basis("const")[0]
        w[BOS] += self.res.basis("bos")[0]
        w += self.codes @ self.res.basis("tok")
        if "bucket" in self.res.blocks:
            w += self.buckets @ self.res.basis("bucket")
        return w

    def positions(self) -> np.ndarray:
        """``W_pos``: GPT-2's helix, plus the fine components where the model has them."""
        w = self.helix @ self.res.basis("helix")
        return w if self.fine is None else w + self.fine @ self.res.basis("fine")

    def unembedding(self) -> np.ndarray:
        """``W_U``: each token's code read off ``out`` (zero where nothing writes ``out``: nothing is predicted)."""
        if "out" not in self.res.blocks:
            return np.zeros((len(self.codes), self.res.d_model))
        return OUT_GAIN * self.codes @ self.res.basis("out")

    def model(self, name: str) -> Compiled:
        return Compiled(name, self.res, self.embeddings(), self.positions(), self.heads, self.mlps, self.unembedding())


def parts(n_vocab: int, blocks: list[tuple[str, int]], shape: Shape = SHAPE, first: int = 0) -> Parts:
    """The residual layout (``const``, ``bos``, ``helix``, ``tok``, then ``blocks``, from coordinate ``first``: none
    reads or writes the ones before it), token codes and buckets, GPT-2's helix, inert heads and zero MLPs; W_pos's
    fine components where ``blocks`` has ``fine``."""
    res = Residual(shape, used=first)
    for name, n in [("const", 1), ("bos", 1), ("helix", 8), ("tok", shape.k_tok)] + blocks:
        res.add(name, n)
    heads = [[Head(res) for _ in range(shape.n_heads)] for _ in range(shape.n_layers)]
    codes, buckets = token_codes(n_vocab, shape.k_tok), token_buckets(n_vocab, shape.n_buckets)
    p = Parts(res, codes, buckets, gpt2_helix(shape.n_ctx), heads, [Mlp(res) for _ in heads])
    if "fine" in res.blocks:
        n_ctx = shape.n_ctx
        ramp = np.arange(n_ctx)[:, None] / n_ctx
        p.fine = SMALL * np.concatenate([ramp, waves(n_ctx, kernel_freqs(N_WAVES_WPOS))], axis=1)
    return p
