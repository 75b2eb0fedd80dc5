"""Small GPT-2s whose weights are set by hand to carry a known mechanism: ground truth for the verdicts.

Each model is an ordinary Hugging Face GPT-2 folder (4 layers, 4 heads, ``d_model`` 512, ``n_ctx`` 256, the shipped
4,096-token tokenizer) built deterministically in seconds. The residual stream is cut into named *blocks* of
coordinates; a block of ``m + 1`` coordinates carries ``m`` features along a Helmert basis (orthonormal vectors
whose coordinates sum to zero), so LayerNorm's centring never mixes blocks. A large constant feature ``C`` in every
token embedding makes LayerNorm's scaling constant to ``|signal|^2 / (2 C^2) < 1e-6``; every LayerNorm's gain is
``C / sqrt(d_model)``, so each LayerNorm is the identity on the features to that precision and a head reads exactly
what the blocks hold.

Blocks (features): ``const`` (C), ``bos`` (1 on the BOS token), ``helix`` (GPT-2's own ``W_pos``: the top eight
principal components of its first 256 rows), ``tok`` (a random unit code per token), ``bucket`` (a one-hot bucket
per token: what a self-suppressing head matches), ``count`` (SMALL/(p+1), written by the layer-0 counter), ``pos``
(SMALL p/256, written by the layer-0 MLP), ``est`` (the early heads' estimate of the previous token), ``prev`` (the
sharp head's previous-token code), ``out`` (the induction head's copy, read by the unembedding), and per model
``waves`` (sines and cosines of the counted position) or ``fine`` (a ramp and waves added to ``W_pos``).

Each head is built by a small function that says what it reads and writes (:func:`counter`, :func:`self_suppressing`,
:func:`boosting`, :func:`aggregator`, :func:`wpos_reader`, :func:`induction`, :func:`self_attending`), each model by
one function of :data:`BUILDERS`. :func:`build` writes a folder with its card (``README.md``): the blocks, every
head's role, the verdict each claim must get (:mod:`~gpt2_posheads.organism.known_answers`, written down before
anything was measured) and the numbers the toolkit measured on it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..model.paths import GPT2_W_POS, ORGANISM_DIR, register_builder

N_LAYERS, N_HEADS, D_MODEL, N_CTX, D_MLP = 4, 4, 512, 256, 512
D_HEAD = D_MODEL // N_HEADS
K_TOK = 96  # dimension of the token codes: cross-talk between two codes ~ N(0, 1/96)
N_BUCKETS = 64  # the early heads' self-match reads a one-hot bucket per token: exact, 1/64 of pairs collide
C = 1.0e4  # the constant feature: LayerNorm's scale varies by |signal|^2 / (2 C^2)
SEED = 2024
TOKENIZER_DIR = ORGANISM_DIR
BOS = 0


# --- the residual stream as named blocks --------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A compiled model's sizes. The shipped models use the defaults; :mod:`~gpt2_posheads.organism.generator`
    draws others and builds any asked for. ``n_ctx`` is at most GPT-2's 1,024 (the helix is its first ``n_ctx``
    ``W_pos`` rows) and ``d_mlp >= n_ctx`` (the layer-0 position MLP has one hidden unit per position)."""

    n_layers: int = N_LAYERS
    n_heads: int = N_HEADS
    d_model: int = D_MODEL
    k_tok: int = 96  # dimension of the token codes: cross-talk between two codes ~ N(0, 1/k_tok)
    n_buckets: int = 64  # the self-match reads a one-hot bucket per token: 1/n_buckets of pairs collide
    d_mlp: int = D_MLP
    n_ctx: int = N_CTX  # positions: W_pos rows, the counted position's range (pos = SMALL p / n_ctx)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


SHAPE = Shape()


def helmert(m: int) -> np.ndarray:
    """``[m - 1, m]``: an orthonormal basis of the vectors of ``R^m`` whose coordinates sum to zero."""
    out = np.zeros((m - 1, m))
    for k in range(1, m):
        out[k - 1, :k] = 1.0
        out[k - 1, k] = -k
        out[k - 1] /= math.sqrt(k * (k + 1))
    return out


@dataclass
class Residual:
    """Blocks of residual coordinates; ``basis(name)`` ``[n_features, d_model]`` maps a block's features to the
    stream."""

    shape: Shape = SHAPE
    blocks: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (first coordinate, n_features)
    used: int = 0

    @property
    def d_model(self) -> int:
        return self.shape.d_model

    def size(self, name: str) -> int:
        """The number of features of block ``name``."""
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

    def describe(self) -> list[tuple[str, int, int]]:
        return [(name, start, n) for name, (start, n) in self.blocks.items()]


# --- the ingredients every model shares ----------------------------------------------------------------------------


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


def gpt2_helix(w_pos: np.ndarray, n_ctx: int = N_CTX, k: int = 8) -> np.ndarray:
    """``[n_ctx, k]``: GPT-2's first ``n_ctx`` ``W_pos`` rows, centred, on their top ``k`` principal components
    (each component's sign fixed so that its largest entry is positive)."""
    x = w_pos[:n_ctx].astype(np.float64)
    x = x - x.mean(0)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    proj = u[:, :k] * s[:k]
    signs = np.sign(proj[np.abs(proj).argmax(0), np.arange(k)])
    return proj * signs


def waves(n_ctx: int, freqs: np.ndarray) -> np.ndarray:
    """``[n_ctx, 2 * len(freqs)]``: ``cos(w p), sin(w p)`` for each frequency ``w`` (interleaved)."""
    p = np.arange(n_ctx)[:, None] * freqs[None, :]
    out = np.zeros((n_ctx, 2 * len(freqs)))
    out[:, 0::2], out[:, 1::2] = np.cos(p), np.sin(p)
    return out


def shift_rotation(freqs: np.ndarray, shift: int) -> np.ndarray:
    """``[2F, 2F]`` block-diagonal ``R`` with ``waves(p) @ R == waves(p - shift)`` (each pair rotated by
    ``-w shift``)."""
    r = np.zeros((2 * len(freqs), 2 * len(freqs)))
    for i, w in enumerate(freqs):
        c, s = math.cos(w * shift), math.sin(w * shift)
        # [cos(wp), sin(wp)] -> [cos(w(p - t)), sin(w(p - t))] = [cos c + sin s, sin c - cos s]
        r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return r


def gelu_new(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU (the tanh form), in float64."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def position_mlp(targets: np.ndarray, n_ctx: int = N_CTX) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A GELU MLP that maps the count ``c = 1/(p+1)`` to ``targets[p]`` ``[n_ctx, n_out]`` exactly at every integer p.

    Hidden unit ``j`` (``j = 0 .. n_ctx - 2``) is ``gelu(lam_j (c_j - c))`` with a knot at ``c_j = 1/(j+1)``: on for
    the positions after ``j``, zero at ``j`` itself, and linear (a ReLU, to 1e-4) at every other position, since
    ``lam_j = 4 / (c_j - c_{j+1})`` puts the nearest other position four units away. A last unit makes the output
    flat below the last position's count: a prompt without BOS (count 0) gets the last position's features rather
    than an extrapolation. The output weights solve the (triangular) interpolation exactly in float64, the GELU's
    small tails included. Returns ``(w_in [n_hidden], b_in [n_hidden], w_out [n_hidden, n_out], b_out [n_out])`` for
    ``hidden = gelu(c * w_in + b_in)``, ``out = hidden @ w_out + b_out``.
    """
    p = np.arange(n_ctx)
    c = np.append(1.0 / (p + 1.0), 0.0)  # the positions' counts, and 0: a prompt without BOS (no count at all)
    knots = c[:-1]  # c_0 .. c_{n_ctx-1}
    lam = 4.0 / (c[:-1] - c[1:])  # each unit's own slope: the next count sits 4 units into its linear part
    w_in = -lam
    b_in = lam * knots
    hidden = gelu_new(c[:, None] * w_in[None, :] + b_in[None, :])  # [n_ctx + 1, n_hidden]
    a = np.concatenate([hidden, np.ones((n_ctx + 1, 1))], axis=1)  # the last column: the output bias
    # without BOS nothing is counted: the MLP writes what it writes at the last position (flat beyond it)
    sol = np.linalg.solve(a, np.concatenate([targets, targets[-1:]], axis=0))
    return w_in, b_in, sol[:-1], sol[-1]


# --- heads, MLPs and the model ---------------------------------------------------------------------------------------


@dataclass
class Head:
    """One head's weights in the real basis: ``q = x Wq + bq`` etc. ``[d_model, d_head]``, ``Wo [d_head, d_model]``.

    Built from features: :meth:`query` / :meth:`key` / :meth:`value` add ``basis(block).T @ M`` for a block's
    features ``M [n_features, d_head]``; :meth:`output` adds ``M @ basis(block)``. Query weights are multiplied by
    ``sqrt(d_head)`` so that the score ``q . k / sqrt(d_head)`` GPT-2 computes is the dot product of the features.
    """

    res: Residual
    Wq: np.ndarray = None
    bq: np.ndarray = None
    Wk: np.ndarray = None
    bk: np.ndarray = None
    Wv: np.ndarray = None
    Wo: np.ndarray = None
    role: str = "inert: attends uniformly (zero query and key) and writes nothing"

    def __post_init__(self):
        d, dh = self.res.d_model, self.d_head
        self.Wq, self.Wk, self.Wv = np.zeros((d, dh)), np.zeros((d, dh)), np.zeros((d, dh))
        self.bq, self.bk = np.zeros(dh), np.zeros(dh)
        self.Wo = np.zeros((dh, d))

    @property
    def d_head(self) -> int:
        return self.res.shape.d_head

    def _wide(self, m: np.ndarray) -> np.ndarray:
        """``m`` ``[n_features, width <= d_head]`` padded with zero columns to ``d_head``."""
        if m.shape[1] > self.d_head:
            raise ValueError(f"a head of {self.d_head} dimensions cannot hold {m.shape[1]}")
        return np.pad(m, ((0, 0), (0, self.d_head - m.shape[1])))

    def query(self, block: str, m: np.ndarray) -> Head:
        self.Wq += self.res.basis(block).T @ self._wide(m) * math.sqrt(self.d_head)
        return self

    def query_bias(self, dim: int, value: float) -> Head:
        self.bq[dim] += value * math.sqrt(self.d_head)
        return self

    def key(self, block: str, m: np.ndarray) -> Head:
        self.Wk += self.res.basis(block).T @ self._wide(m)
        return self

    def value(self, block: str, m: np.ndarray) -> Head:
        self.Wv += self.res.basis(block).T @ self._wide(m)
        return self

    def output(self, m: np.ndarray, block: str) -> Head:
        self.Wo += self._wide(m.T).T @ self.res.basis(block)
        return self


def slot(n_features: int, dim: int, scale: float = 1.0, width: int | None = None) -> np.ndarray:
    """``[n_features, width]`` that puts feature 0 of a block at head dimension ``dim`` (``width`` default: ``dim +
    1``; a :class:`Head` pads to its ``d_head``)."""
    m = np.zeros((n_features, dim + 1 if width is None else width))
    m[0, dim] = scale
    return m


def onto(n_features: int, first: int, scale: float = 1.0, width: int | None = None) -> np.ndarray:
    """``[n_features, width]``: feature ``i`` at head dimension ``first + i``, times ``scale`` (``width`` default:
    ``first + n_features``)."""
    m = np.zeros((n_features, first + n_features if width is None else width))
    m[np.arange(n_features), first + np.arange(n_features)] = scale
    return m


@dataclass
class Mlp:
    """A layer's MLP in the real basis (``c_fc`` ``[d_model, d_mlp]`` and its bias, ``c_proj`` ``[d_mlp, d_model]``)."""

    res: Residual
    role: str = "zero"
    w_fc: np.ndarray = None
    b_fc: np.ndarray = None
    w_proj: np.ndarray = None
    b_proj: np.ndarray = None

    def __post_init__(self):
        d, d_mlp = self.res.d_model, self.res.shape.d_mlp
        self.w_fc, self.b_fc = np.zeros((d, d_mlp)), np.zeros(d_mlp)
        self.w_proj, self.b_proj = np.zeros((d_mlp, d)), np.zeros(d)


@dataclass
class Compiled:
    """A whole model: embeddings, ``n_layers x n_heads`` heads (``res.shape``), one MLP per layer, the
    unembedding."""

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
            sd[pre + "ln_1.weight"] = gain
            sd[pre + "ln_1.bias"] = np.zeros(d)
            sd[pre + "ln_2.weight"] = gain
            sd[pre + "ln_2.bias"] = np.zeros(d)
            sd[pre + "attn.c_attn.weight"] = np.concatenate(
                [np.concatenate([h.Wq for h in hs], 1), np.concatenate([h.Wk for h in hs], 1)]
                + [np.concatenate([h.Wv for h in hs], 1)],
                axis=1,
            )
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
            "attn_pdrop": 0.0,
            "bos_token_id": BOS,
            "embd_pdrop": 0.0,
            "eos_token_id": BOS,
            "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05,
            "model_type": "gpt2",
            "n_embd": shape.d_model,
            "n_head": shape.n_heads,
            "n_inner": shape.d_mlp,
            "n_layer": shape.n_layers,
            "n_positions": shape.n_ctx,
            "resid_pdrop": 0.0,
            "scale_attn_by_inverse_layer_idx": False,
            "scale_attn_weights": True,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "use_cache": True,
            "vocab_size": n_vocab,
        }


# --- the models ----------------------------------------------------------------------------------------------------

# Head dimensions: 0 carries a position term, 1 a BOS term, 2.. a code (token, bucket or waves).
POS_DIM, BOS_DIM, CODE = 0, 1, 2
SMALL = 0.05  # count, pos, waves and W_pos's fine components are this small: the extended embeddings stay GPT-2's helix
EARLY_SLOPES = (0.65, 0.8, 0.95, 1.1)  # logits per position of the layer-1 heads' rise towards recent keys
INERT_SLOPES = (0.72, 0.87, 1.02)  # the layer-2 heads that attend like early heads but write nothing
SELF_PENALTY = 6.0  # logits a self-suppressing head takes off a key whose token (bucket) is the query's own
BOOST_MARGINS = (0.7, 0.8, 0.95, 1.1)  # a boosting head's bump at p-1 exceeds its rise by this much
AVOID_BOS = 30.0  # logits the early heads take off BOS (so a repeated token gives the same write everywhere)
AGG_GAIN, AGG_RECENCY = 6.0, 2.0  # the aggregator: weight of the early heads' estimate, and of recency
READER_GAIN, READER_RECENCY = 12.0, 3.0  # a W_pos reader: height of its kernel at p-1, and its rise per position
IND_GAIN, IND_RECENCY, IND_SINK = 30.0, 0.3, 8.0  # induction: the match, the most recent match first, BOS otherwise
OUT_GAIN = 25.0  # logit of the copied token
N_WAVES_MLP, N_WAVES_WPOS = 8, 4  # frequencies pi (j + 1/2) / n: their kernel is exactly 0 at 0 < |m| < 2n


def kernel_freqs(n: int) -> np.ndarray:
    """``pi (j + 1/2) / n``, ``j < n``: ``sum_j cos(w_j m) = 0`` for every integer ``0 < |m| < 2n``."""
    return math.pi * (np.arange(n) + 0.5) / n


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


def parts(
    w_pos_gpt2: np.ndarray,
    n_vocab: int,
    blocks: list[tuple[str, int]],
    shape: Shape = SHAPE,
    helix: np.ndarray | None = None,
    first: int = 0,
) -> Parts:
    """The residual layout (``const``, ``bos``, ``helix``, ``tok``, then ``blocks``), token codes and buckets of the
    shape's sizes, GPT-2's helix (``helix``: :func:`gpt2_helix` of ``w_pos_gpt2`` computed once by the caller),
    inert heads and zero MLPs; W_pos's fine components where ``blocks`` has ``fine``. ``first``: the blocks start at
    this coordinate, the ones before it belong to no block (no head or MLP reads or writes them)."""
    res = Residual(shape, used=first)
    for name, n in [("const", 1), ("bos", 1), ("helix", 8), ("tok", shape.k_tok)] + blocks:
        res.add(name, n)
    heads = [[Head(res) for _ in range(shape.n_heads)] for _ in range(shape.n_layers)]
    p = Parts(
        res,
        token_codes(n_vocab, shape.k_tok),
        token_buckets(n_vocab, shape.n_buckets),
        gpt2_helix(w_pos_gpt2, shape.n_ctx) if helix is None else helix,
        heads,
        [Mlp(res) for _ in heads],
    )
    if "fine" in res.blocks:
        n_ctx = shape.n_ctx
        ramp = np.arange(n_ctx)[:, None] / n_ctx
        p.fine = SMALL * np.concatenate([ramp, waves(n_ctx, kernel_freqs(N_WAVES_WPOS))], axis=1)
    return p


# --- layer 0: counting from BOS -------------------------------------------------------------------------------------


def counter(p: Parts) -> Head:
    """Zero query and key: attends uniformly to every position so far. Reads the BOS flag, so it writes
    ``SMALL / (p + 1)`` to ``count``: a position from the causal mask alone."""
    h = Head(
        p.res,
        role="counter: attends uniformly (zero query and key); reads the BOS flag and writes count = "
        f"{SMALL:g} / (p + 1), position from the causal mask alone",
    )
    return h.value("bos", slot(1, 0)).output(slot(1, 0, SMALL).T, "count")


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


def counted_position(p: Parts, freqs: np.ndarray | None = None) -> None:
    """Layer 0 of every model that counts: the counter in head 0, the MLP writing ``pos`` (and ``waves``)."""
    p.heads[0][0] = counter(p)
    n_ctx = p.res.shape.n_ctx
    outputs = {"pos": SMALL * np.arange(n_ctx)[:, None] / n_ctx}
    role = f"turns count into pos = {SMALL:g} p / {n_ctx}"
    if freqs is not None:
        outputs["waves"] = SMALL * waves(n_ctx, freqs)
        role += f" and waves = {SMALL:g} (cos, sin)(w p) for w = pi (j + 1/2) / {len(freqs)}"
    p.mlps[0] = positions_mlp(p, outputs, role + ", exact at every position")


# --- layers 1-2: previous-token heads -------------------------------------------------------------------------------


def rising(h: Head, slope: float, block: str = "pos") -> Head:
    """``slope`` logits per position towards recent keys, read off ``pos`` (or off W_pos's ramp, ``block="fine"``)."""
    return h.query_bias(POS_DIM, slope * h.res.shape.n_ctx / SMALL).key(block, slot(h.res.blocks[block][1], POS_DIM))


def avoiding_bos(h: Head) -> Head:
    return h.query_bias(BOS_DIM, -AVOID_BOS).key("bos", slot(1, BOS_DIM))


def copies_into(h: Head, block: str) -> Head:
    """Value: the attended token's code; output: into ``block``."""
    k = h.res.size("tok")
    return h.value("tok", onto(k, CODE)).output(onto(k, CODE).T, block)


def self_suppressing(p: Parts, slope: float, writes: bool = True, penalty: float = SELF_PENALTY) -> Head:
    """Score ``slope * k - penalty * [bucket_k == bucket_q]``: rising towards recent keys with a dip at the
    query's own token (and at the 1/n_buckets of tokens sharing its bucket); BOS avoided."""
    h = Head(
        p.res,
        role=f"self-suppressing previous-token head: score {slope:g} x (key position) - {penalty:g} where the "
        "key's token is the query's own (read off pos and bucket); "
        + ("writes the attended token's code to est" if writes else "writes nothing"),
    )
    rising(h, slope)
    avoiding_bos(h)
    n = p.res.size("bucket")
    h.query("bucket", onto(n, CODE, -penalty)).key("bucket", onto(n, CODE))
    return copies_into(h, "est") if writes else h


def boosting(p: Parts, slope: float, margin: float, writes: bool = True) -> Head:
    """Score ``slope * k + (slope + margin) * K(p - 1 - k)`` with ``K`` the waves' kernel (1 at 0, 0 within 15
    positions): rising towards recent keys with a bump at p-1 that beats the current key by ``margin``."""
    freqs = kernel_freqs(N_WAVES_MLP)
    bump = slope + margin
    h = Head(
        p.res,
        role=f"boosting previous-token head: score {slope:g} x (key position) + {bump:g} at p-1 (the waves of the "
        "counted position, rotated by one step); "
        + ("writes the attended token's code to est" if writes else "writes nothing"),
    )
    rising(h, slope)
    avoiding_bos(h)
    scale = bump / (SMALL**2 * len(freqs))  # <waves(p-1), waves(k)> = SMALL^2 sum_j cos(w_j (p-1-k))
    h.query("waves", _rotated(freqs, scale)).key("waves", onto(2 * len(freqs), CODE))
    return copies_into(h, "est") if writes else h


def _rotated(freqs: np.ndarray, scale: float, shift: int = 1, first: int = CODE) -> np.ndarray:
    """``[2F, first + 2F]``: the query's waves turned back ``shift`` positions, ``waves(p) -> waves(p - shift)``, at
    dims ``first..``."""
    m = np.zeros((2 * len(freqs), first + 2 * len(freqs)))
    m[:, first:] = scale * shift_rotation(freqs, shift)
    return m


def aggregator(p: Parts, gain: float = AGG_GAIN, recency: float = AGG_RECENCY) -> Head:
    """Score ``gain * <est_q, code_k> + recency * k``: attends to the nearest key whose token the early heads point
    at; copies its code into ``prev``."""
    h = Head(
        p.res,
        role=f"aggregator: score {gain:g} x <est, key's token code> + {recency:g} x (key position); writes "
        "the attended token's code to prev",
    )
    rising(h, recency)
    k = p.res.size("tok")
    h.query("est", onto(k, CODE, gain)).key("tok", onto(k, CODE))
    return copies_into(h, "prev")


def position_kernel(h: Head, block: str, gain: float, shift: int = 1, first: int = CODE) -> Head:
    """Add ``gain * K(p - shift - k)`` to the score, read off the waves of ``block`` (``fine`` or ``relay``: a ramp,
    then ``2 N_WAVES_WPOS`` waves), the query's turned back ``shift`` positions, at head dims ``first..``. ``K`` is
    1 at 0 and 0 at ``0 < |m| < 8`` (it returns at every 16 positions: a rise per position must break the tie)."""
    freqs = kernel_freqs(N_WAVES_WPOS)
    n = 2 * len(freqs)
    q = np.zeros((1 + n, first + n))
    q[1:] = _rotated(freqs, gain / (SMALL**2 * len(freqs)), shift, first)
    k = np.zeros((1 + n, first + n))
    k[1:] = onto(n, first)
    return h.query(block, q).key(block, k)


def wpos_reader(
    p: Parts, block: str = "fine", gain: float = READER_GAIN, recency: float = READER_RECENCY, writes: str = "prev"
) -> Head:
    """Score ``gain * K(p - 1 - k) + recency * k`` read straight off W_pos's fine components (waves rotated back one
    position, and the ramp), or off their copy in ``block="relay"``; copies the attended token's code into
    ``writes``."""
    where = "W_pos's" if block == "fine" else f"the {block} block's copy of W_pos's"
    h = Head(
        p.res,
        role=f"{'W_pos' if block == 'fine' else 'relay'} reader: score {gain:g} at p-1 ({where} waves rotated back "
        f"one position) + {recency:g} x (key position, {where} ramp); writes the attended token's code to {writes}",
    )
    rising(h, recency, block=block)
    position_kernel(h, block, gain)
    return copies_into(h, writes)


def relay(p: Parts, gain: float = READER_GAIN, recency: float = READER_RECENCY, share: float = 1.0) -> Head:
    """Score ``gain * K(p - k) + recency * k`` off W_pos's fine components: attends to its own position; copies
    ``share`` of the fine components it reads there into ``relay`` (relaying W_pos: nothing is computed)."""
    h = Head(
        p.res,
        role=f"relay: score {gain:g} at its own position (W_pos's waves) + {recency:g} x (key position, W_pos's "
        f"ramp); copies {share:g} x W_pos's fine components into relay",
    )
    rising(h, recency, block="fine")
    position_kernel(h, "fine", gain, shift=0)
    n = p.res.size("fine")
    return h.value("fine", onto(n, CODE)).output(onto(n, CODE, share).T, "relay")


def induction(p: Parts, position: str = "pos") -> Head:
    """Score ``IND_GAIN * <code_q, prev_k> + IND_RECENCY * k``, and ``IND_SINK + IND_RECENCY * q`` on BOS: attends to
    the token after the most recent earlier occurrence of the current token, to BOS when there is none; copies the
    attended token's code into ``out``."""
    h = Head(
        p.res,
        role=f"induction head: score {IND_GAIN:g} x <query's token code, prev> + {IND_RECENCY:g} x (key position), "
        f"{IND_SINK:g} above the current position on BOS; writes the attended token's code to out (the unembedding "
        "reads it)",
    )
    rising(h, IND_RECENCY, block=position)
    n = p.res.blocks[position][1]
    h.query(position, slot(n, BOS_DIM, IND_RECENCY * p.res.shape.n_ctx / SMALL)).query_bias(BOS_DIM, IND_SINK)
    h.key("bos", slot(1, BOS_DIM))
    k = p.res.size("tok")
    h.query("tok", onto(k, CODE, IND_GAIN)).key("prev", onto(k, CODE))
    return copies_into(h, "out")


def self_attending(p: Parts, slope: float | None, penalty: float = SELF_PENALTY, writes: str | None = None) -> Head:
    """Score ``slope * k + penalty * [bucket_k == bucket_q]``: attends to its own token (``slope=None``: no rise,
    every earlier key of its bucket alike); writes nothing, or the attended token's first code dimensions into
    ``writes`` (work nothing reads)."""
    rise = f"{slope:g} x (key position) + " if slope is not None else ""
    h = Head(
        p.res,
        role=f"attends to its own token (score {rise}{penalty:g} on its own token); "
        + (f"writes the attended token's code into {writes} (nothing reads it)" if writes else "writes nothing"),
    )
    if slope is not None:
        rising(h, slope)
    avoiding_bos(h)
    n = p.res.size("bucket")
    h.query("bucket", onto(n, CODE, penalty)).key("bucket", onto(n, CODE))
    return _junk(h, writes) if writes else h


def uniform_writer(p: Parts, writes: str = "junk") -> Head:
    """Zero query and key: attends uniformly to every position so far; writes the mean of the codes it sees into
    ``writes`` (work nothing reads)."""
    h = Head(
        p.res, role=f"attends uniformly; writes the mean code of the tokens so far into {writes} (nothing reads it)"
    )
    return _junk(h, writes)


def _junk(h: Head, block: str) -> Head:
    """Value: the attended token's first ``size(block)`` code dimensions; output: into ``block``."""
    n = h.res.size(block)
    return h.value("tok", onto(h.res.size("tok"), CODE)[:, : CODE + n]).output(onto(n, CODE).T, block)


# --- the five models --------------------------------------------------------------------------------------------

_ROUTE_BLOCKS = [("bucket", N_BUCKETS), ("count", 1), ("pos", 1), ("est", K_TOK), ("prev", K_TOK), ("out", K_TOK)]


def route_gpt2(w_pos_gpt2: np.ndarray, n_vocab: int) -> Compiled:
    """The post's route: count -> position -> self-suppressing early heads -> aggregator -> induction."""
    p = parts(w_pos_gpt2, n_vocab, _ROUTE_BLOCKS)
    counted_position(p)
    p.heads[1] = [self_suppressing(p, s) for s in EARLY_SLOPES]
    p.heads[2] = [aggregator(p)] + [self_suppressing(p, s, writes=False) for s in INERT_SLOPES]
    p.heads[3][0] = induction(p)
    return p.model("route-gpt2")


def lookalike_wpos(w_pos_gpt2: np.ndarray, n_vocab: int) -> Compiled:
    """The behaviour by another route: the sharp layer-2 head reads W_pos's fine components; layers 0-1 write
    nothing."""
    p = parts(w_pos_gpt2, n_vocab, [("fine", 1 + 2 * N_WAVES_WPOS), ("prev", K_TOK), ("out", K_TOK)])
    p.heads[2][0] = wpos_reader(p)
    p.heads[3][0] = induction(p, position="fine")
    return p.model("lookalike-wpos")


def lookalike_boost(w_pos_gpt2: np.ndarray, n_vocab: int) -> Compiled:
    """The route with early heads that boost p-1 (a bump from the counted position's waves) instead of suppressing
    their own token."""
    blocks = [("count", 1), ("pos", 1), ("waves", 2 * N_WAVES_MLP), ("est", K_TOK), ("prev", K_TOK), ("out", K_TOK)]
    p = parts(w_pos_gpt2, n_vocab, blocks)
    counted_position(p, kernel_freqs(N_WAVES_MLP))
    p.heads[1] = [boosting(p, s, m) for s, m in zip(EARLY_SLOPES, BOOST_MARGINS)]
    p.heads[2] = [aggregator(p)] + [boosting(p, s, m, writes=False) for s, m in zip(INERT_SLOPES, BOOST_MARGINS[1:])]
    p.heads[3][0] = induction(p)
    return p.model("lookalike-boost")


def lookalike_decoy(w_pos_gpt2: np.ndarray, n_vocab: int) -> Compiled:
    """The route's layers 0-1 (self-suppressing early heads writing their estimate), but the sharp layer-2 head
    ignores them and reads W_pos's fine components."""
    p = parts(w_pos_gpt2, n_vocab, _ROUTE_BLOCKS[:4] + [("fine", 1 + 2 * N_WAVES_WPOS)] + _ROUTE_BLOCKS[4:])
    counted_position(p)
    p.heads[1] = [self_suppressing(p, s) for s in EARLY_SLOPES]
    p.heads[2] = [wpos_reader(p)] + [self_suppressing(p, s, writes=False) for s in INERT_SLOPES]
    p.heads[3][0] = induction(p)
    return p.model("lookalike-decoy")


def lookalike_none(w_pos_gpt2: np.ndarray, n_vocab: int) -> Compiled:
    """Positions are counted, heads attend to their own token, nothing attends to the previous one or copies."""
    p = parts(w_pos_gpt2, n_vocab, [("bucket", N_BUCKETS), ("count", 1), ("pos", 1)])
    counted_position(p)
    for layer in (1, 2, 3):
        p.heads[layer] = [self_attending(p, s) for s in EARLY_SLOPES]
    return p.model("lookalike-none")


BUILDERS: dict[str, Callable[[np.ndarray, int], Compiled]] = {  # keys: model.paths.COMPILED_MODELS
    "route-gpt2": route_gpt2,
    "lookalike-wpos": lookalike_wpos,
    "lookalike-boost": lookalike_boost,
    "lookalike-decoy": lookalike_decoy,
    "lookalike-none": lookalike_none,
}


# --- folders, cards, measurements -----------------------------------------------------------------------------------

SUMMARIES = {
    "route-gpt2": (
        "the GPT-2 post's route, compiled",
        "Layer 0 counts positions from BOS with a uniform head and an MLP; four layer-1 heads rise towards recent keys "
        "and dip at their own token (self-suppressing, ratios 0.3-0.5); a layer-2 aggregator matches their estimate "
        "of the previous token against each key's token and attends precisely to it; a layer-3 induction head reads "
        "the aggregator. W_pos is GPT-2's own helix and nothing reads it.",
    ),
    "lookalike-wpos": (
        "a look-alike: the sharp head reads W_pos",
        "The same behaviour (a sharp previous-token head in layer 2, induction, copying) by another route: the sharp "
        "head reads the previous position straight off fine components of W_pos (a ramp and four waves added to "
        "GPT-2's helix); layers 0-1 write nothing.",
    ),
    "lookalike-boost": (
        "a look-alike: early heads that boost the previous position",
        "route-gpt2 with layer-1 heads that boost p-1 (a bump in their score, from waves of the counted position) "
        "instead of suppressing their own token; the aggregator and induction head are route-gpt2's.",
    ),
    "lookalike-decoy": (
        "a look-alike: self-suppressing early heads that the sharp head ignores",
        "route-gpt2's layers 0-1 (the counter, and self-suppressing early heads that write their estimate), but the "
        "sharp layer-2 head ignores them and reads fine components of W_pos, as in lookalike-wpos.",
    ),
    "lookalike-none": (
        "a look-alike: no previous-token mechanism",
        "Positions are counted as in route-gpt2, every later head attends to its own token, nothing copies and the "
        "unembedding is zero.",
    ),
}

BLOCK_WORDS = {
    "const": f"the constant C = {C:g} in every token embedding (LayerNorm's scale)",
    "bos": "1 on the BOS token",
    "helix": "W_pos: GPT-2's first 256 rows on their top 8 principal components",
    "tok": f"the token's random unit code ({K_TOK} dimensions)",
    "bucket": f"the token's one-hot bucket ({N_BUCKETS}; what a self-suppressing head matches)",
    "count": f"{SMALL:g} / (p + 1), written by the layer-0 counter",
    "pos": f"{SMALL:g} p / {N_CTX}, written by the layer-0 MLP",
    "waves": f"{SMALL:g} (cos, sin)(w p) of the counted position, written by the layer-0 MLP",
    "fine": f"W_pos's fine components: {SMALL:g} p / {N_CTX} and {SMALL:g} (cos, sin)(w p), w = pi (j + 1/2) / 4",
    "est": "the early heads' estimate of the previous token (a mix of codes)",
    "prev": "the sharp head's previous-token code",
    "out": "the induction head's copy (read by the unembedding)",
    "relay": "a copy of W_pos's fine components, written by layer-0 heads that attend to their own position",
    "junk": "what heads doing unrelated work write (nothing reads it)",
}


def gpt2_w_pos(path: Path = GPT2_W_POS) -> np.ndarray:
    """GPT-2 small's real ``W_pos`` ``[1024, 768]``, shipped in ``data/gpt2-small``: the one source every build
    uses."""
    return np.load(path)


def compile_model(name: str, n_vocab: int | None = None) -> Compiled:
    """The compiled model ``name`` (one of :data:`BUILDERS`), for the shipped tokenizer's vocabulary."""
    if name not in BUILDERS:
        raise ValueError(f"unknown compiled model {name!r}; allowed {', '.join(BUILDERS)}")
    if n_vocab is None:
        n_vocab = tokenizer_vocab()
    return BUILDERS[name](gpt2_w_pos(), n_vocab)


@functools.lru_cache(maxsize=1)
def tokenizer_vocab() -> int:
    """The number of tokens of the shipped tokenizer (:data:`TOKENIZER_DIR`): every compiled model's default
    vocabulary."""
    return len(json.loads((TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])


FOLDER_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md")


def write_folder(model: Compiled, out: Path, card: str, tokenizer_dir: Path = TOKENIZER_DIR) -> Path:
    """A Hugging Face GPT-2 folder (:data:`FOLDER_FILES`): ``config.json``, ``model.safetensors`` (float32, keys
    sorted, fixed metadata), the tokenizer files of ``tokenizer_dir`` byte for byte, and the card ``README.md``."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n_vocab = model.W_E.shape[0]
    (out / "config.json").write_text(json.dumps(model.config(n_vocab), indent=2, sort_keys=True) + "\n")
    save_file(model.state_dict(), str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir / name, out / name)
    (out / "README.md").write_text(card, encoding="utf-8")
    return out


def weights_digest(folder: Path) -> str:
    """SHA-256 of the files a rebuild must reproduce byte for byte (weights, config, tokenizer)."""
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        h.update(name.encode())
        h.update((Path(folder) / name).read_bytes())
    return h.hexdigest()


def layout_lines(model: Compiled) -> list[str]:
    """The card's description of the architecture, the residual blocks and every head and MLP (Markdown lines)."""
    shape = model.res.shape
    n_vocab = model.W_E.shape[0]
    padded = f" (embedding and unembedding padded to {n_vocab:,} rows)" if n_vocab != tokenizer_vocab() else ""
    lines = [
        f"GPT-2 architecture: {shape.n_layers} layers x {shape.n_heads} heads, d_model {shape.d_model}, d_mlp "
        f"{shape.d_mlp}, n_ctx {shape.n_ctx}, the 4,096-token tokenizer of `data/mini-gpt2`{padded}, an untied "
        "unembedding. Every "
        f"LayerNorm has gain C / sqrt(d_model) with C = {C:g} in every embedding: the identity on the features to "
        "1e-6.",
        "",
        "## The residual stream",
        "",
        "Each block of coordinates carries its features along a Helmert basis (orthonormal, coordinates summing to "
        "zero), so LayerNorm's centring never mixes blocks.",
        "",
        "| block | coordinates | features | holds |",
        "| --- | --- | --- | --- |",
    ]
    n_ctx = shape.n_ctx
    words = {
        **BLOCK_WORDS,
        "helix": f"W_pos: GPT-2's first {n_ctx} rows on their top 8 principal components",
        "pos": f"{SMALL:g} p / {n_ctx}, written by the layer-0 MLP",
        "fine": f"W_pos's fine components: {SMALL:g} p / {n_ctx} and {SMALL:g} (cos, sin)(w p), w = pi (j + 1/2) / 4",
        "tok": f"the token's random unit code ({shape.k_tok} dimensions)",
        "bucket": f"the token's one-hot bucket ({shape.n_buckets}; what a self-suppressing head matches)",
    }
    for name, start, n in model.res.describe():
        lines.append(f"| `{name}` | {start}-{start + n} | {n} | {words[name]} |")
    lines += ["", "## Heads and MLPs", "", "| layer | head | what it does |", "| --- | --- | --- |"]
    for l, hs in enumerate(model.heads):
        for h, head in enumerate(hs):
            lines.append(f"| {l} | L{l}H{h} | {head.role} |")
    for l, m in enumerate(model.mlps):
        lines.append(f"| {l} | MLP | {m.role} |")
    return lines


def card(model: Compiled, measured: dict | None = None) -> str:
    """The model's card: what it is, which block holds what, which head reads and writes what, the verdicts its
    construction implies (:mod:`~gpt2_posheads.organism.known_answers`), and the numbers the toolkit measured."""
    from .known_answers import expected

    title, summary = SUMMARIES[model.name]
    lines = [
        f"# {model.name}: {title}",
        "",
        summary,
        "",
        "A GPT-2 whose weights are set by hand (`gpt2_posheads.organism.compiled`), built by "
        "`python experiments/build_compiled_models.py`: deterministic, the same bytes on every rebuild. A ground "
        "truth for the verdicts of the GPT-2 post's claims, not a language model (it predicts only copies).",
        "",
    ] + layout_lines(model)
    lines += [
        "",
        "## The verdict each claim must get",
        "",
        "Written down from the construction before anything was measured (`gpt2_posheads.organism.known_answers`); "
        "`tests/organism/test_known_answers.py` runs every claim and asserts them.",
        "",
        "| script | claim | verdict | why |",
        "| --- | --- | --- | --- |",
    ]
    for (script, key), (verdict, why) in expected(model.name).items():
        lines.append(f"| `{script}` | `{key}` | {verdict} | {why} |")
    if measured:
        lines += ["", "## Measured by the toolkit", ""]
        lines += [f"- {k}: {v}" for k, v in measured.items()]
    return "\n".join(lines) + "\n"


def measure(folder: Path, n_prompts: int = 16) -> dict[str, str]:
    """The numbers a card reports, measured by the toolkit on the built folder: the sharp head and its ratio, the
    early heads' ratios, what W_pos averaging (groups of 10) and masking p-1 every 5th query below leave of the sharp
    head's previous-token attention, induction, copying (WikiText-2 prompts, ``n_prompts`` x 256 tokens)."""
    from ..analysis.diagonals import choose_aggregator, diagonal_attention, early_prev_heads, rank_from_diagonals
    from ..analysis.induction import induction_scores
    from ..analysis.interventions import average_pos_embed, mask_previous_attention, masked_queries
    from ..analysis.measures import compare_head_patterns, next_token_probs
    from ..analysis.prompts import make_prompts, wikitext_documents
    from ..analysis.repeat_prompt import repeat_string_prompt, single_token_target
    from ..claims.verdicts import fmt
    from ..model.loading import load_model

    model = load_model(folder, device="cpu")
    prompts = make_prompts(model.tokenizer, n_prompts, N_CTX, docs=wikitext_documents())
    diag = diagonal_attention(model, prompts, progress=False)
    rank = rank_from_diagonals(diag)
    out: dict[str, str] = {"prompts": f"{n_prompts} WikiText-2 prompts of {N_CTX} tokens"}
    prev = rank[rank.is_prev_token]
    out["previous-token heads"] = f"{len(prev)} of {len(rank)}"
    if len(prev):
        l, h = choose_aggregator(rank)
        out["sharpest previous-token head"] = f"L{l}H{h}, ratio {fmt(prev.iloc[0].ratio)}"
        early = early_prev_heads(rank, l)
        if len(early):
            out["clear previous-token heads below it"] = ", ".join(
                f"{r.name} {fmt(r.ratio)}" for r in early.itertuples()
            )
        avg = diagonal_attention(model, prompts, fwd_hooks=average_pos_embed(10).hooks(model), progress=False)
        out["its previous-token mass under W_pos averaged in groups of 10"] = (
            f"{fmt(float(diag[l, h, 1]))} -> {fmt(float(avg[l, h, 1]))}"
        )
        if l > 0:
            rows = masked_queries(5, N_CTX)
            cmp = compare_head_patterns(
                model, prompts[:4], (l, h), mask_previous_attention(5, range(l)).hooks(model), rows=rows
            )
            out["... on the rows masked every 5th query below it"] = (
                f"{fmt(cmp['prev_rows_clean'])} -> {fmt(cmp['prev_rows_intervened'])}"
            )
    ind = induction_scores(model, n_seqs=16, seg_len=50)
    out["best induction head"] = f"{ind.best[0]}, score {fmt(ind.best[1])}"
    out["copy losses on BOS r r (first, second copy)"] = f"{fmt(ind.loss_first)}, {fmt(ind.loss_second)} nats"
    words = single_token_target(model.tokenizer, " ninja turtle pirate")
    rp = repeat_string_prompt(model.tokenizer, words, n_given=1, max_len=N_CTX)
    p = float(next_token_probs(model, rp.tokens)[0][rp.next_token_id(model.tokenizer)])
    out[f"P({rp.next_word.strip()} | {rp.words[0].strip()}) on the repeat-string prompt"] = fmt(p)
    return out


def build(name: str, out: Path, measured: bool = True) -> Path:
    """Write the compiled model ``name`` to ``out`` with its card (and, with ``measured``, the toolkit's numbers,
    measured on the folder just written)."""
    model = compile_model(name)
    write_folder(model, out, card(model))
    if measured:
        (Path(out) / "README.md").write_text(card(model, measure(out)), encoding="utf-8")
    return Path(out)


def check_folder(folder: Path) -> str | None:
    """What is wrong with a compiled model's folder, in a few words, or ``None``: a file a build writes is missing,
    or the folder fails :func:`~gpt2_posheads.model.folder.folder_problem` (a truncated weights file, a
    non-finite weight, a config that does not match the weights). A folder that fails is rebuilt on first use."""
    from ..model.folder import folder_problem

    missing = [f for f in FOLDER_FILES if not (Path(folder) / f).is_file()]
    if missing:
        return f"no {', '.join(missing)}"
    return folder_problem(folder)


# gpt2_posheads.model.paths builds a compiled model named by a user on first use, and rebuilds one that fails the check
register_builder(build, check_folder, FOLDER_FILES)
