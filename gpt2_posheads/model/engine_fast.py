"""A hook-free forward pass for the two read-only workloads: attention patterns and the residual stream.

Through TransformerLens hooks both pay for machinery they do not use (the 4.x bridge forces eager attention, checks its
masks on every call, and under ``torch.autocast`` re-casts every weight on every call), so this module recomputes the
GPT-2 block straight from the model's TransformerLens weights (4.x bridge and 3.x ``HookedTransformer`` alike):

    resid_0      = W_E[tok] + W_pos[pos]
    x            = LN1(resid_l)
    q, k, v      = x W_Q + b_Q, x W_K + b_K, x W_V + b_V          per head, [batch, head, pos, d_head]
    A            = softmax(q k^T * scale + causal mask)            [batch, head, q, k]
    resid_mid    = resid_l + sum_h (A v)_h W_O[h] + b_O
    resid_{l+1}  = resid_mid + act(LN2(resid_mid) W_in + b_in) W_out + b_out

When only the residual is wanted, ``A v`` goes through ``scaled_dot_product_attention`` (never storing ``A``). Weights
are gathered once per model and dtype until a parameter changes, sharing the model's storage in float32 except the
fused QKV matrix (``bf16`` adds a bfloat16 copy); above :data:`FUSED_QKV_CACHE_BYTES` (GPT-2 large, XL) each layer's
fusion is built when it runs, in one reused buffer. :func:`release` drops them.

*Verified, not trusted*: the first time it meets a model it runs a short random prompt both ways and compares every
pattern and the final residual with the hooked pass; a model it does not reproduce falls back to the hooks with a
warning, so results never depend on which path ran. Edits, and hooks the caller left on the model, take the hooked
path."""

from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import einops
import torch
import torch.nn.functional as F

from .engine import Engine, Reduction, applied, as_edits, attn_scale, keep_reads, materialise, model_device, z_gap
from .engine_hooks import HooksEngine, params_key
from .state import caller_hooks

ENGINES = ("auto", "fast", "hooks")
_GELU_C = 2.0 * math.sqrt(2.0 / math.pi)


def gelu_tanh_(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's ``gelu_new`` in place (``x`` overwritten and returned): ``0.5 x (1 + tanh(u)) = x * sigmoid(2u)``,
    ``u = sqrt(2/pi) (x + 0.044715 x^3)``; ``F.gelu(x, approximate="tanh")`` to ~5e-7 on N(0, 9), about twice as fast
    on a cache-sized chunk on AVX2 CPUs, where PyTorch's vectorised tanh is slow."""
    t = x * x
    t.mul_(_GELU_C * 0.044715).add_(_GELU_C).mul_(x)
    return x.mul_(t.sigmoid_())


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {  # may overwrite their (fresh) input
    "gelu_new": gelu_tanh_,
    "gelu_fast": gelu_tanh_,
    "gelu_pytorch_tanh": gelu_tanh_,
    "gelu": F.gelu,
    "relu": torch.relu_,
    "silu": lambda x: F.silu(x, inplace=True),
}
# MLP rows per chunk and per CPU thread: the [chunk, d_mlp] hidden activations stay in cache between the
# two matmuls and the activation (1024 rows x 3072 floats = 12 MB would not), while each thread still gets
# a full share of rows. Measured on 2 AVX2 cores (16 x 256 tokens, GPT-2-small shape, 3 alternating runs):
# 256 rows at 2 threads 6.86-7.54 s, 512 rows 5.92-6.61 s; at 1 thread 256 rows was best.
MLP_CHUNK_PER_THREAD = 256
# Fused QKV matrices of all layers are kept when they take at most this much (GPT-2 small 85 MB, medium
# 302 MB); above it (large 708 MB, XL 1.47 GB: a quarter of the block weights) each layer's is fused when it
# runs. The strided copy costs 2.5% of the layer's QKV matmul on a batch of 1,024 tokens (GPT-2-XL shape,
# 2-core Xeon, 1 or 2 threads alike).
FUSED_QKV_CACHE_BYTES = 512 * 2**20
# From this many positions on, the explicit-softmax pass computes its pattern in blocks of query rows against the keys
# each block can see (FastGPT2._pattern), skipping the masked half of the square.
CAUSAL_BLOCKS_FROM = 512
CAUSAL_BLOCK_ROWS = 128


@lru_cache(maxsize=8)
def _causal_bias(n: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """``[n, n]`` additive mask: 0 on and below the diagonal, -inf above (keys after the query)."""
    return torch.full((n, n), float("-inf"), dtype=dtype, device=device).triu_(1)


class FastPathUnsupported(ValueError):
    """The model is outside what the fast path reproduces; use ``engine="hooks"``."""


@dataclass
class _Block:
    """One block's weights in ``x @ W + b`` layout ([in, out]); only ``W_qkv`` is a copy, ``None`` when fused per call
    (``qkv`` then holds the model's own ``W_Q, W_K, W_V``, each ``[n_heads, d_model, d_head]``)."""

    ln1: tuple[torch.Tensor | None, torch.Tensor | None]
    W_qkv: torch.Tensor | None  # [d_model, 3 * n_heads * d_head]
    qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
    b_qkv: torch.Tensor  # [3 * n_heads * d_head]
    W_O: torch.Tensor  # [n_heads * d_head, d_model]
    b_O: torch.Tensor  # [d_model]
    scale: float
    ln2: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)  # the MLP's (none: attention only)
    W_in: torch.Tensor | None = None  # [d_model, d_mlp]
    b_in: torch.Tensor | None = None
    W_out: torch.Tensor | None = None  # [d_mlp, d_model]
    b_out: torch.Tensor | None = None


def _affine(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``x @ W + b`` for ``W`` [in, out], as one GEMM (``F.linear`` takes the transposed view, no copy)."""
    return F.linear(x, W.T, b)


def unsupported_reason(model) -> str | None:
    """Why the fast path cannot run ``model`` (``None`` when it can)."""
    cfg = model.cfg
    c = lambda name, default=None: getattr(cfg, name, default)  # noqa: E731
    learned = c("positional_embedding_type", "standard") == "standard"
    checks = [
        (learned, "positional embeddings are not learned absolute ones"),
        (c("normalization_type", "LN") in ("LN", "LNPre", None), f"normalization_type {c('normalization_type')!r}"),
        (c("attn_only", False) or c("act_fn") in ACTIVATIONS, f"act_fn {c('act_fn')!r}"),
        (not c("parallel_attn_mlp", False), "parallel attention and MLP"),
        (c("n_key_value_heads") in (None, cfg.n_heads), "grouped-query attention"),
        (not c("use_local_attn", False) and not c("window_size"), "local attention windows"),
        (getattr(model, "W_pos", None) is not None and getattr(model, "W_E", None) is not None, "no W_E/W_pos"),
    ]
    return next((why for ok, why in checks if not ok), None)


def ln_params(ln) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    w, b = getattr(ln, "w", None), getattr(ln, "b", None)
    return tuple(t.detach().float() if isinstance(t, torch.Tensor) else None for t in (w, b))


class FastGPT2:
    """The model's GPT-2 blocks as plain tensor maths, in ``dtype`` (matmuls) with float32 softmax and LN."""

    def __init__(self, model, dtype: torch.dtype = torch.float32):
        why = unsupported_reason(model)
        if why is not None:
            raise FastPathUnsupported(f"fast path does not support this model: {why}")
        cfg = model.cfg
        self.n_layers, self.n_heads, self.d_model = cfg.n_layers, cfg.n_heads, cfg.d_model
        self.eps = float(getattr(cfg, "eps", 1e-5))
        self.dtype = dtype
        self.act = None if getattr(cfg, "attn_only", False) else ACTIVATIONS[cfg.act_fn]
        d_qkv = 3 * cfg.n_heads * cfg.d_head
        self.fuse_per_call = cfg.n_layers * cfg.d_model * d_qkv * dtype.itemsize > FUSED_QKV_CACHE_BYTES
        with torch.no_grad():
            self.W_E = model.W_E.detach().float()
            self.W_pos = model.W_pos.detach().float()
            self.blocks = [self._gather(model, l) for l in range(cfg.n_layers)]

    def _gather(self, model, layer: int) -> _Block:
        blk, dt = model.blocks[layer], self.dtype
        a = blk.attn
        parts = (a.W_Q.detach().to(dt), a.W_K.detach().to(dt), a.W_V.detach().to(dt))  # [head, d_model, d_head]
        b = torch.stack([a.b_Q.detach(), a.b_K.detach(), a.b_V.detach()])  # [3, head, d_head]
        mlp = {}  # attention only: no MLP weights
        if self.act is not None:
            mlp = {k: getattr(blk.mlp, k).detach().to(dt) for k in ("W_in", "b_in", "W_out", "b_out")}
            mlp["ln2"] = ln_params(blk.ln2)
        fused = None if self.fuse_per_call else einops.rearrange(torch.stack(parts), "three h d dh -> d (three h dh)")
        return _Block(
            ln1=ln_params(blk.ln1),
            W_qkv=fused,
            qkv=parts if self.fuse_per_call else None,
            b_qkv=einops.rearrange(b, "three h dh -> (three h dh)").to(dt),
            W_O=einops.rearrange(a.W_O.detach(), "h dh d -> (h dh) d").to(dt),
            b_O=a.b_O.detach().to(dt),
            scale=attn_scale(model.cfg, layer),
            **mlp,
        )

    def _norm(self, x: torch.Tensor, wb) -> torch.Tensor:
        return F.layer_norm(x.float(), (self.d_model,), wb[0], wb[1], self.eps).to(self.dtype)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[batch, pos]`` ids → ``resid_pre`` of block 0, ``[batch, pos, d_model]`` float32."""
        return self.W_E[tokens] + self.W_pos[: tokens.shape[1]]

    def block(self, resid: torch.Tensor, layer: int, on_pattern=None, attn_only_patterns=False, workspace=None):
        """One block on the float32 residual ``[batch, pos, d_model]``; ``on_pattern(layer, pattern)`` gets the float32
        pattern ``[batch, head, q, k]`` (a ``workspace`` buffer the next layer overwrites), and with
        ``attn_only_patterns`` the block stops there (returns ``None``)."""
        w = self.blocks[layer]
        ws = workspace if workspace is not None else Workspace()
        qkv = _affine(self._norm(resid, w.ln1), self._fused_qkv(w, ws), w.b_qkv)
        q, k, v = einops.rearrange(qkv, "b p (three h dh) -> three b h p dh", three=3, h=self.n_heads)
        if on_pattern is None:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=w.scale)
        else:
            b, h, n, dh = q.shape
            pattern = self._pattern(q.reshape(b * h, n, dh), k.reshape(b * h, n, dh), w.scale, ws).view(b, h, n, n)
            on_pattern(layer, pattern)
            if attn_only_patterns:
                return None
            if v.dtype != pattern.dtype:
                pattern = ws.get("pattern_v", (b, h, n, n), v.dtype, v.device).copy_(pattern)
            z = self._attend(pattern, v)
        attn_out = _affine(einops.rearrange(z, "b h p dh -> b p (h dh)"), w.W_O, w.b_O)
        resid = resid + attn_out.float()
        if self.act is None:
            return resid
        return self._mlp(resid, w)

    @staticmethod
    def _pattern(q: torch.Tensor, k: torch.Tensor, scale: float, ws: Workspace) -> torch.Tensor:
        """``softmax(q k^T * scale + causal mask)`` ``[batch*head, n, n]`` float32 from ``q``, ``k`` ``[batch*head, n,
        d_head]``, in the workspace's ``pattern`` buffer. Scale and mask ride on the matmul (baddbmm) into reused
        buffers (fresh ones this large cost more in page faults than the softmax). From :data:`CAUSAL_BLOCKS_FROM`
        positions on, blocks of :data:`CAUSAL_BLOCK_ROWS` query rows ``r0..r1-1`` go against keys ``0..r1-1``, about
        half the work; the rest stays zero from allocation (a row's softmax over its visible keys is the softmax over
        all: the others are ``-inf``, exactly 0)."""
        bh, n, _ = q.shape
        bias = _causal_bias(n, q.dtype, str(q.device))
        if n < CAUSAL_BLOCKS_FROM:
            scores = torch.baddbmm(
                bias, q, k.transpose(1, 2), alpha=scale, out=ws.get("scores", (bh, n, n), q.dtype, q.device)
            )
            out = ws.get("pattern", (bh, n, n), torch.float32, q.device)
            return torch.softmax(scores, -1, dtype=torch.float32, out=out)
        pattern = ws.get("pattern", (bh, n, n), torch.float32, q.device, zeroed=True)
        flat = ws.get("scores", (bh, n, n), q.dtype, q.device).view(-1)
        for r0 in range(0, n, CAUSAL_BLOCK_ROWS):
            r1 = min(n, r0 + CAUSAL_BLOCK_ROWS)
            scores = torch.baddbmm(
                bias[r0:r1, :r1],
                q[:, r0:r1],
                k[:, :r1].transpose(1, 2),
                alpha=scale,
                out=flat[: bh * (r1 - r0) * r1].view(bh, r1 - r0, r1),
            )
            pattern[:, r0:r1, :r1] = torch.softmax(scores, -1, dtype=torch.float32)
        return pattern

    @staticmethod
    def _attend(pattern: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``pattern @ v`` ``[batch, head, n, d_head]``, on long prompts by :meth:`_pattern`'s query blocks."""
        n = pattern.shape[-1]
        if n < CAUSAL_BLOCKS_FROM:
            return torch.matmul(pattern, v)
        z = torch.empty(*pattern.shape[:-1], v.shape[-1], dtype=v.dtype, device=v.device)
        for r0 in range(0, n, CAUSAL_BLOCK_ROWS):
            r1 = min(n, r0 + CAUSAL_BLOCK_ROWS)
            torch.matmul(pattern[..., r0:r1, :r1], v[..., :r1, :], out=z[..., r0:r1, :])
        return z

    def _fused_qkv(self, w: _Block, ws: Workspace) -> torch.Tensor:
        """``[d_model, 3 * n_heads * d_head]``: the block's cached fusion, or one built now in ``ws``."""
        if w.W_qkv is not None:
            return w.W_qkv
        h, d, dh = w.qkv[0].shape
        buf = ws.get("W_qkv", (d, 3 * h * dh), w.qkv[0].dtype, w.qkv[0].device)
        view = buf.view(d, 3, h, dh)
        for i, W in enumerate(w.qkv):
            view[:, i].copy_(W.permute(1, 0, 2))  # [head, d_model, d_head] -> [d_model, head, d_head]
        return buf

    def _mlp(self, resid: torch.Tensor, w: _Block) -> torch.Tensor:
        """``resid + act(LN2(resid) W_in + b_in) W_out + b_out`` in chunks of :data:`MLP_CHUNK_PER_THREAD` rows per CPU
        thread, one chunk on a GPU (each row's MLP is independent: any chunking gives the same rows)."""
        flat = resid.reshape(-1, self.d_model)
        out = torch.empty_like(flat)
        chunk = MLP_CHUNK_PER_THREAD * torch.get_num_threads() if flat.device.type == "cpu" else max(flat.shape[0], 1)
        for i in range(0, flat.shape[0], chunk):
            rows = flat[i : i + chunk]
            hidden = self.act(_affine(self._norm(rows, w.ln2), w.W_in, w.b_in))
            torch.add(rows, _affine(hidden, w.W_out, w.b_out).float(), out=out[i : i + chunk])
        return out.view_as(resid)

    def residuals(self, tokens: torch.Tensor, layers) -> dict[int, torch.Tensor]:
        """``{layer: resid entering block layer}`` ``[batch, pos, d_model]`` float32 (``n_layers``: the final one);
        blocks after the largest layer never run."""
        want, last = set(layers), max(layers)
        out, resid, ws = {}, self.embed(tokens), Workspace()
        for l in range(last + 1):
            if l in want:
                out[l] = resid
            if l < last:
                resid = self.block(resid, l, workspace=ws)
        return out

    def patterns(self, tokens: torch.Tensor, on_pattern: Callable, workspace=None, last: int | None = None) -> None:
        """``on_pattern(layer, pattern [batch, head, q, k])`` for every layer up to ``last`` (default: all), stopping
        after that pattern; one ``workspace`` reuses its buffers across calls (each pattern overwritten by the next)."""
        last = self.n_layers - 1 if last is None else last
        resid, ws = self.embed(tokens), workspace if workspace is not None else Workspace()
        for l in range(last + 1):
            resid = self.block(resid, l, on_pattern, attn_only_patterns=l == last, workspace=ws)


class Workspace:
    """Named scratch buffers, reallocated only when the shape, dtype or device asked for changes."""

    def __init__(self):
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device, zeroed: bool = False) -> torch.Tensor:
        """The buffer ``name`` (``zeroed``: zeros when (re)allocated, for a caller that writes only part of it)."""
        buf = self._buffers.get(name)
        if buf is None or buf.shape != shape or buf.dtype != dtype or buf.device != torch.device(device):
            make = torch.zeros if zeroed else torch.empty
            buf = self._buffers[name] = make(shape, dtype=dtype, device=device)
        return buf


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _verify(model, fast: FastGPT2) -> str | None:
    """Why the fast path and the hooked pass disagree on two short random prompts, or ``None``: tolerance 1e-3
    (absolute on patterns, relative on the residual), 3e-2 for a half-precision model (its own pass is coarser)."""
    L = model.cfg.n_layers
    tol = 1e-3 if next(model.parameters()).dtype == torch.float32 else 3e-2
    n = min(6, model.cfg.n_ctx)  # 2 x 6 tokens: batch, mask and scale all exercised; the passes cost ~ tokens here
    gen = torch.Generator().manual_seed(0)
    toks = torch.randint(0, model.cfg.d_vocab, (2, n), generator=gen).to(model_device(model))
    fast_p: dict[int, torch.Tensor] = {}
    ws = Workspace()
    with torch.inference_mode():
        # one explicit-softmax pass gives every pattern and the final residual; the fused SDPA branch is checked on
        # the last block only (its scale differs most; a second whole pass cost a third of the check)
        resid = fast.embed(toks)
        for l in range(L):
            last_in = resid
            resid = fast.block(resid, l, lambda l, p: fast_p.__setitem__(l, p.clone()), workspace=ws)
        final, fused = resid, fast.block(last_in, L - 1)
    ref = HooksEngine(model).activations([toks], {"pattern": range(L), "resid": [L]}, Reduction(keep_reads, dict))
    for l in range(L):
        if not torch.allclose(fast_p[l], ref_p := ref[l]["pattern"].float(), atol=tol, rtol=tol):
            gap = float((fast_p[l] - ref_p).abs().max())
            return f"it does not reproduce it: layer {l} attention patterns differ by {gap:.2e}"
    if (err := float(z_gap(final, ref[L]["resid"]))) > tol:
        return f"it does not reproduce it: the final residual differs by {err:.2e} (relative)"
    if (err := float(z_gap(fused, final))) > tol:
        return f"its fused attention disagrees with its explicit softmax by {err:.2e} (relative)"
    return None


def fast_forward(model, engine: str = "auto", dtype: torch.dtype = torch.float32):
    """The :class:`FastGPT2` for ``model``, or ``None`` when the hooked pass must run (module doc). ``engine``:
    ``"auto"``, ``"fast"`` (raise instead of falling back), ``"hooks"`` (always ``None``)."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not one of {ENGINES}")
    if engine == "hooks":
        return None
    carried = caller_hooks(model)
    if carried:
        if engine == "fast":
            raise FastPathUnsupported(
                f"engine='fast' cannot run the hooks the model carries (on {', '.join(carried)}): use engine='auto' "
                "or 'hooks', or remove them (model.reset_hooks(including_permanent=True))"
            )
        return None
    state = params_key(model)
    entry = _CACHE.get(model)
    if entry is None or entry["state"] != state:
        entry = {"state": state, "by_dtype": {}, "problem": unsupported_reason(model)}
        if entry["problem"] is None:
            entry["by_dtype"][torch.float32] = FastGPT2(model, torch.float32)
            entry["problem"] = _verify(model, entry["by_dtype"][torch.float32])
        _CACHE[model] = entry
    if entry["problem"] is not None:
        if engine == "fast":
            raise FastPathUnsupported(f"fast path cannot run this model: {entry['problem']}")
        if not entry.get("warned"):
            warnings.warn(
                f"fast path disabled for this model ({entry['problem']}); using TransformerLens hooks", stacklevel=2
            )
            entry["warned"] = True
        return None
    if dtype not in entry["by_dtype"]:
        entry["by_dtype"][dtype] = FastGPT2(model, dtype)  # matmul weights in dtype; LayerNorm, embeddings float32
    return entry["by_dtype"][dtype]


def release(model) -> None:
    """Forget the fast path's weights (fused QKV, bfloat16 copies) and self-check for ``model``."""
    _CACHE.pop(model, None)


class FastEngine(Engine):
    """:class:`FastGPT2` for patterns and residuals without edits. It applies no edits, computes no logits and hands
    over no queries, keys or head outputs: with ``strict`` (``engine="fast"``) asking for any of these is an error;
    otherwise (``"auto"``) such a pass, ``run`` and a model the fast path does not reproduce go to the hooks."""

    name = "fast"
    refuse_hint = "use engine='auto' or 'hooks'"
    reads_refused = "it computes patterns and residuals in its own fused way, nothing else"

    def __init__(self, model, strict: bool = False, bf16: bool = False):
        self.model, self.strict, self.bf16 = model, strict, bf16
        self.hooks = HooksEngine(model, bf16)

    def _fast(self, edits):
        """The fast path, or ``None`` for the hooked pass (edits: refused under ``"fast"``, hooked under ``"auto"``)."""
        if as_edits(edits):
            if self.strict:
                applied(self, edits)
            return None
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        return fast_forward(self.model, "fast" if self.strict else "auto", dtype)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        if reduction.logits is not None and self.strict:
            self.refuse("hand logits to a reduction", "the fast path has no unembedding")
        fast = None if reduction.logits is not None else self._fast(edits)
        if fast is None:
            return self.hooks.patterns(batches, reduction, edits, progress)
        device, ws, st = model_device(self.model), Workspace(), reduction.state
        layers = self.pattern_layers(reduction)
        with torch.inference_mode():
            for toks in self.batches(batches, progress):
                fast.patterns(toks.to(device), lambda l, p: l in layers and reduction.step(st, l, p), ws, layers[-1])
        return reduction.finish(st)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        fast = self._fast(edits)
        if fast is None:
            return self.hooks.residuals(batches, layers, reduction, edits, progress)
        device, st = model_device(self.model), reduction.state
        with torch.inference_mode():
            for toks in self.batches(batches, progress):
                for l, resid in fast.residuals(toks.to(device), layers).items():
                    reduction.step(st, l, resid)
        return reduction.finish(st)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        if self.strict:
            super().activations(batches, reads, reduction, edits, progress)
        return self.hooks.activations(batches, reads, reduction, edits, progress)

    def run(self, tokens, edits=()) -> torch.Tensor:
        return self.hooks.run(tokens, edits)  # the fast path has no unembedding
