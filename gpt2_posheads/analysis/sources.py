"""Which upstream heads make a head previous-token: composition scores and direct-path ablation.

The GPT-2 post's central claim is that L4H11 *aggregates* what earlier previous-token heads wrote,
while early heads such as L2H2 compute position themselves. Two ways to ask a target head ``(L, H)``
which upstream head it reads, and through which side of its attention:

**Weight-based composition** (Elhage et al. 2021, "A Mathematical Framework for Transformer
Circuits"). In TransformerLens's row-vector convention an upstream head ``u`` writes
``x W_OV^u`` with ``W_OV^u = W_V^u W_O^u`` ``[d_model, d_model]``, and the target scores keys with
``x_q W_QK x_k^T``, ``W_QK = W_Q W_K^T``. The three composition scores are Frobenius-norm ratios

    Q:  ||W_OV^u W_QK||  / (||W_OV^u|| ||W_QK||)      (u's output read as the target's query)
    K:  ||W_QK W_OV^u^T|| / (||W_OV^u|| ||W_QK||)     (... as its key)
    V:  ||W_OV^u W_OV||  / (||W_OV^u|| ||W_OV||)      (... as its value)

each in ``[0, 1]``; 0 for circuits whose row and column spaces are orthogonal. :func:`composition_baseline` gives
the mean score of random Gaussian matrices of the same shapes (the same low ranks), so ``score / baseline`` reads as
above or below chance. LayerNorm: the weights as loaded (scale folded into the reading weights); the per-token
division by the residual's norm is a positive scalar and is left out, as in the paper.

**Causal direct-path ablation.** One forward captures the residual stream entering layer ``L`` and every upstream
head's output ``o^u = z^u W_O^u`` ``[batch, pos, d_model]``; the target's pattern is recomputed from that residual with
one output replaced *only in its query input* (or only in its key input): ``x_q <- x - (o^u - ablated o^u)``; every
other path, including that head's effect on later heads, is untouched. The recomputed clean pattern is checked against
the model's own (to 1e-4). Ablations: ``mean`` (over prompts and positions), ``zero``, ``resample`` (the same position
of another prompt). The positional route is ablated the same way: ``W_pos`` less its group average.
"""

from __future__ import annotations

import itertools
import math
import random
import warnings
from collections.abc import Mapping, Sequence
from typing import Literal

import pandas as pd
import torch
import torch.nn.functional as F

from ..model.engine import Reduction, as_token_batches, attn_scale, engine_for, residual_write, scale_from_pattern
from ..model.engine_fast import ln_params, unsupported_reason
from ..model.loading import has_learned_positions, position_kind
from ..model.state import measures_caller_model
from ..model.validation import HEAD_NAME, UsageError, check_head, checked, head_name
from .diagonals import diagonal_counts, diagonal_sums, prev_token_stats
from .interventions import average_pos_embed, group_average_rows
from .posembed import load_w_pos

Ablation = Literal["mean", "zero", "resample"]
ABLATIONS = ("mean", "zero", "resample")


def composition_score(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``||left @ right|| / (||left|| ||right||)`` (Frobenius); broadcasts over leading axes."""
    fro = lambda x: x.double().flatten(-2).norm(dim=-1)  # noqa: E731
    return fro(left.double() @ right.double()) / (fro(left) * fro(right)).clamp_min(1e-30)


def _circuits(model, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``W_OV`` and ``W_QK`` ``[n_heads, d_model, d_model]`` (float64)."""
    a = model.blocks[layer].attn
    W_V, W_O, W_Q, W_K = (t.detach().double().cpu() for t in (a.W_V, a.W_O, a.W_Q, a.W_K))
    return W_V @ W_O, W_Q @ W_K.transpose(-1, -2)


def _check_upstream(model, layer: int, head: int) -> None:
    check_head(model, layer, head)
    if layer == 0:
        raise UsageError("head", f"{head_name(layer, head)} is in layer 0", "a head in layer >= 1 has upstream heads")


@checked
def composition_scores(model, layer: int, head: int) -> pd.DataFrame:
    """Q-, K- and V-composition of every head in layers ``< layer`` into ``(layer, head)``, with the
    random baseline and each score's ratio to it; one row per upstream head, sorted by max(Q, K) ratio."""
    _check_upstream(model, layer, head)
    if position_kind(model) == "rotary":
        raise UsageError(
            "model",
            "has rotary positions: W_Q W_K^T depends on the relative position, so weight-based "
            "Q/K composition is not defined",
            "models with learned or no positions",
            "path_ablation measures the same question causally on any model",
        )
    ov_t, qk_t = (c[head] for c in _circuits(model, layer))
    base = composition_baseline(model.cfg.d_model, model.cfg.d_head)
    rows = []
    for l in range(layer):
        ov_u, _ = _circuits(model, l)
        q = composition_score(ov_u, qk_t)
        k = composition_score(qk_t, ov_u.transpose(-1, -2))
        v = composition_score(ov_u, ov_t)
        for h in range(model.cfg.n_heads):
            c = {f"{s}_comp": float(x[h]) for s, x in zip("qkv", (q, k, v))}
            ratios = {f"{s}_ratio": c[f"{s}_comp"] / base for s in "qkv"}
            rows.append(dict(source=head_name(l, h), layer=l, head=h, **c, baseline=base, **ratios))
    df = pd.DataFrame(rows)
    df["qk_ratio_max"] = df[["q_ratio", "k_ratio"]].max(axis=1)
    return df.sort_values("qk_ratio_max", ascending=False, kind="stable").reset_index(drop=True)


def composition_baseline(d_model: int, d_head: int, n_samples: int = 64, seed: int = 0) -> float:
    """Mean score of random Gaussian ``W_OV = A B``, ``W_QK = C D^T`` (``A, C, D`` ``[d_model, d_head]``)."""
    g = torch.Generator().manual_seed(seed)
    ov, qk = (
        torch.randn(n_samples, d_model, d_head, generator=g, dtype=torch.float64)
        @ torch.randn(n_samples, d_head, d_model, generator=g, dtype=torch.float64)
        for _ in range(2)
    )
    return float(composition_score(ov, qk).mean())


def _prev_stats(pattern: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums over batch and queries of ``A[q, q - d]`` of ``[batch, q, k]`` (key 0 left out), and their counts."""
    n = pattern.shape[-1]
    return diagonal_sums(pattern[:, None], n, True)[0], pattern.shape[0] * diagonal_counts(n, n, True)


def _read(engine, toks: torch.Tensor, reads: dict, edits=()) -> dict:
    """One batch's ``reads`` ``{kind: layers}`` as ``{layer: {kind: float32 CPU tensor}}``."""

    def keep(state: dict, layer: int, acts: dict) -> None:
        state[layer] = {kind: x.float().cpu() for kind, x in acts.items()}

    return engine.activations([toks], reads, Reduction(keep, dict, bulk="every token's activations"), edits)


class _Target:
    """The target head's queries and keys ``[batch, pos, d_head]`` from a residual ``x`` ``[batch, pos, d_model]``.

    From the weights (``engine`` None): ``LN(x) W_Q + b_Q`` and ``LN(x) W_K + b_K`` (GPT-2's form), cheap, and checked
    against the model's own pattern on every batch. From the model: as the scores use them (rotated, a shared key
    head), one pass with the residual entering ``layer`` replaced by ``x``; exact for any attention whose scores are a
    scaled ``q . k`` plus a mask, mask and scale read off the clean pattern (masked entries are exactly 0, and within
    a row ``log A[q, k] - mean = scale * (q . k - mean)``)."""

    def __init__(self, model, layer: int, head: int, engine=None):
        self.layer, self.head, self.engine = layer, head, engine
        self.declared = self.scale = attn_scale(model.cfg, layer)
        self.mask = None  # causal
        if engine is not None:
            return
        a = model.blocks[layer].attn
        self.w, self.b = (t.cpu() if t is not None else None for t in ln_params(model.blocks[layer].ln1))
        self.eps, self.d_model = float(getattr(model.cfg, "eps", 1e-5)), model.cfg.d_model
        self.W_Q, self.b_Q, self.W_K, self.b_K = (t[head].detach().float().cpu() for t in (a.W_Q, a.b_Q, a.W_K, a.b_K))

    def start(self, toks: torch.Tensor, clean_pattern: torch.Tensor) -> None:
        """The batch's tokens, and (from the model) its mask and scale from ``clean_pattern`` ``[batch, q, k]``."""
        if self.engine is not None:
            self.toks = toks
            q, k = self.qk(None)
            self.scale, self.mask, _ = scale_from_pattern(q @ k.transpose(1, 2), clean_pattern, self.declared)

    def qk(self, x: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.engine is None:
            ln = F.layer_norm(x.float(), (self.d_model,), self.w, self.b, self.eps)
            return ln @ self.W_Q + self.b_Q, ln @ self.W_K + self.b_K
        edits = [] if x is None else [residual_write(self.layer, x)]
        acts = _read(self.engine, self.toks, {"q": [self.layer], "k": [self.layer]}, edits)[self.layer]
        return acts["q"][:, :, self.head], acts["k"][:, :, self.head]

    def pattern(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """``softmax(q k^T * scale + mask)`` ``[batch, q, k]``."""
        n = q.shape[1]
        mask = self.mask if self.mask is not None else torch.ones(n, n, dtype=torch.bool).triu(1)
        return ((q @ k.transpose(1, 2)) * self.scale).masked_fill(mask, float("-inf")).softmax(-1)


def _ablated(out: torch.Tensor, how: Ablation, mean: torch.Tensor | None) -> torch.Tensor:
    """What replaces a head's output ``out`` ``[batch, pos, d_model]`` (``resample``: batches of two or more)."""
    if how == "zero":
        return torch.zeros_like(out)
    if how == "mean":
        return mean.expand_as(out)
    return out[torch.roll(torch.arange(out.shape[0]), 1)]  # a derangement: every prompt takes the next one's output


BELOW = "layers below"  # the group of everything the layers below write (heads, MLPs and biases)


def below_relayed(pos_group: int) -> str:
    """The source name of the relay row: the layers below fed ``W_pos`` averaged in groups of ``pos_group``."""
    return f"{BELOW} fed W_pos/{pos_group}"


@measures_caller_model
def path_ablation(
    model,
    prompts,
    layer: int,
    head: int,
    ablation: Ablation = "mean",
    pos_group: int = 10,
    batch_size: int = 8,
    groups: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    below: bool = False,
    engine: str = "auto",
) -> pd.DataFrame:
    """Effect on ``(layer, head)``'s previous-token attention of removing each upstream head's output (and ``W_pos``
    less its average in groups of ``pos_group``) from only its query or only its key input (module doc).

    One row per (source, side): ``prev_mass`` and ``ratio`` (:func:`prev_token_stats`, key 0 left out) under the
    ablation, the clean values, ``drop = clean prev_mass - ablated prev_mass`` and ``relative_drop = drop / clean``;
    rows ``"none"`` (clean) and ``"W_pos/<g>"`` included, sorted by ``drop``, largest first. ``groups`` ``{name:
    [(layer, head), ...]}`` add one row each, side ``"both"``: the group's outputs replaced together in both inputs.
    ``below`` adds the row ``"layers below"``: everything blocks ``0 .. layer-1`` wrote ablated; and, with learned
    ``W_pos`` and ``pos_group > 1``, the row ``below_relayed(pos_group)``: the embeddings plus what those blocks write
    when *they* run on ``W_pos`` averaged in groups (does the head read computation, or ``W_pos`` relayed?).
    """
    check_head(model, layer, head)
    if ablation not in ABLATIONS:
        raise UsageError("ablation", f"{ablation!r} is not an ablation", f"allowed {', '.join(ABLATIONS)}")
    _check_upstream(model, layer, head)
    sources = [(l, h) for l in range(layer) for h in range(model.cfg.n_heads)]
    index = {s: i for i, s in enumerate(sources)}
    groups = {name: list(g) for name, g in (groups or {}).items()}
    for name, g in groups.items():
        outside = [head_name(l, h) for l, h in g if (l, h) not in index]
        if not g or outside:
            raise UsageError(
                "groups", f"group {name!r} holds {outside or 'no heads'}", f"heads in layers below {layer}"
            )
    eng = engine_for(model, engine)
    target = _Target(model, layer, head, None if unsupported_reason(model) is None else eng)
    W_O = [model.blocks[l].attn.W_O.detach().float() for l in range(layer)]  # [head, d_head, d_model]
    w_pos = load_w_pos(model) if pos_group > 1 and has_learned_positions(model) else None
    pos_delta = None if w_pos is None else w_pos - group_average_rows(w_pos, pos_group)
    relay_edits = [average_pos_embed(pos_group)] if below and pos_delta is not None else None

    def capture(toks):
        """``(resid [b,p,d], head outputs [S,b,p,d], written below [b,p,d], the target's pattern [b,q,k])``."""
        got = _read(eng, toks, {"z": range(layer), "resid": [0, layer], "pattern": [layer]})
        outs = torch.stack([torch.einsum("bpd,dm->bpm", got[l]["z"][:, :, h], W_O[l][h].cpu()) for l, h in sources])
        resid = got[layer]["resid"]
        return resid, outs, resid - got[0]["resid"], got[layer]["pattern"][:, head]

    batches = list(as_token_batches(model, prompts, batch_size))
    if ablation == "resample":
        # every prompt takes another prompt's output, so no batch may hold a single prompt: a lone last batch
        # joins the one before it (prompts of different lengths batch separately, so check each batch)
        merged: list[torch.Tensor] = []
        for b in batches:
            if b.shape[0] == 1 and merged and merged[-1].shape[1] == b.shape[1]:
                merged[-1] = torch.cat([merged[-1], b])
            else:
                merged.append(b)
        if any(b.shape[0] < 2 for b in merged):
            raise UsageError(
                "ablation", "resample needs at least two prompts of each length", "use mean or zero, or more prompts"
            )
        batches = merged
    means = mean_below = None
    if ablation == "mean":
        total, total_below, count = 0, 0, 0
        for toks in batches:
            _, outs, written, _ = capture(toks)
            total, total_below = total + outs.sum((1, 2)), total_below + written.sum((0, 1))
            count += outs.shape[1] * outs.shape[2]
        means, mean_below = total / count, total_below / count  # [S, d_model], [d_model]

    # (source, side) -> diagonal sums, in the order the rows are made: none, each head's query and key, W_pos's, groups
    sums, counts, max_err = {}, 0, 0.0

    def add(key, pat):
        sums[key] = sums.get(key, 0) + _prev_stats(pat)[0]

    for toks in batches:
        resid, outs, written, pattern = capture(toks)
        for _ in range(2):  # from the weights first; where they do not give this model's attention, from the model
            target.start(toks, pattern)
            q0, k0 = target.qk(resid)
            clean = target.pattern(q0, k0)
            err = float((clean - pattern).abs().max())
            if err <= 1e-4 or target.engine is not None:
                break
            warnings.warn(
                f"path_ablation: recomputing {head_name(layer, head)}'s attention from the weights is off by "
                f"{err:.1e}; running one pass of the model per source instead (exact, slower)",
                stacklevel=2,
            )
            target = _Target(model, layer, head, eng)
        max_err = max(max_err, err)
        counts = counts + _prev_stats(clean)[1]
        add(("none", "-"), clean)
        # what removing each head (and the fine-grained part of W_pos) takes away from the residual, [b, p, d] each
        change = [o - _ablated(o, ablation, None if means is None else means[i]) for i, o in enumerate(outs)]
        removed = [(head_name(l, h), change[i]) for i, (l, h) in enumerate(sources)]
        removed += [(f"W_pos/{pos_group}", pos_delta[: resid.shape[1]])] if pos_delta is not None else []
        for name, delta in removed:
            q1, k1 = target.qk(resid - delta)
            add((name, "query"), target.pattern(q1, k0))
            add((name, "key"), target.pattern(q0, k1))
        both = {name: resid - sum(change[index[s]] for s in g) for name, g in groups.items()}
        if below:
            both[BELOW] = resid - written + _ablated(written, ablation, mean_below)
        if relay_edits is not None:  # what blocks 0 .. layer-1 write when they run on averaged W_pos
            got = _read(eng, toks, {"resid": [0, layer]}, relay_edits)
            both[below_relayed(pos_group)] = resid - written + (got[layer]["resid"] - got[0]["resid"])
        for name, x in both.items():
            add((name, "both"), target.pattern(*target.qk(x)))
    if max_err > 1e-4:
        raise RuntimeError(
            f"recomputed pattern of {head_name(layer, head)} differs from the model's by {max_err:.2e}: "
            f"its attention is not a scaled q . k plus a mask"
        )

    def stats(v):
        st = prev_token_stats(v / counts)
        return float(st["prev_mass"]), float(st["ratio"]) if int(st["top_offset"]) == 1 else float("nan")

    def layer_of(src: str) -> int | None:
        return int(src[1 : src.index("H")]) if HEAD_NAME.match(src) else (-1 if src == "none" else None)

    clean_prev, clean_ratio = stats(sums[("none", "-")])
    rows = [
        dict(source=s, side=d, layer=layer_of(s), prev_mass=pm, ratio=r)
        for (s, d), (pm, r) in zip(sums, map(stats, sums.values()))
    ]
    df = pd.DataFrame(rows).assign(clean_prev_mass=clean_prev, clean_ratio=clean_ratio)
    df["drop"] = clean_prev - df["prev_mass"]
    df["relative_drop"] = df["drop"] / clean_prev if clean_prev > 0 else math.nan
    df = df.sort_values("drop", ascending=False, kind="stable").reset_index(drop=True)
    df.attrs.update(target=head_name(layer, head), ablation=ablation, pattern_check_max_abs_err=max_err)
    return df


EARLY_GROUP = "early previous-token heads"  # the group of the target's early heads in path_ablation's rows
CHANCE_GROUP = "random group"  # the prefix of the groups of as many other heads from below (chance)


def early_and_chance_groups(
    early: Sequence[tuple[int, int]], layer: int, n_heads: int, seed: int = 0
) -> dict[str, list[tuple[int, int]]]:
    """``path_ablation``'s ``groups`` for "does the head aggregate its early heads?": the early heads together
    (:data:`EARLY_GROUP`) and up to 64 random groups of as many heads from the layers below ``layer`` (the chance
    level: every such group where there are no more than 64; the early group itself left out); empty when there is
    no early head."""
    if not early:
        return {}
    others, size, seen = [(a, b) for a in range(layer) for b in range(n_heads)], len(early), set()
    if size <= len(others) and math.comb(len(others), size) <= 64:
        seen = set(itertools.combinations(others, size))
    elif size <= len(others):
        rng = random.Random(seed)
        while len(seen) < 64:
            seen.add(tuple(sorted(rng.sample(others, size))))
    chance = [list(g) for g in sorted(seen) if sorted(g) != sorted(early)]
    return {EARLY_GROUP: list(early), **{f"{CHANCE_GROUP} {j + 1}": g for j, g in enumerate(chance)}}


def _is_head(df: pd.DataFrame) -> pd.Series:
    return df.source.str.match(r"^L\d+H\d+$")


def upstream_summary(df: pd.DataFrame, early: Sequence[tuple[int, int]]) -> dict:
    """What removing the early heads together costs the target (``group_drop``, relative), against the median and
    range of the random groups (``chance``, ``chance_range``), from ``path_ablation``'s rows with the groups of
    :func:`early_and_chance_groups`; and the largest single (source, side) drop. ``{"early_heads": []}`` without
    early heads."""
    if not early:
        return {"early_heads": []}
    rel = df.set_index(["source", "side"])["relative_drop"]
    chance = [float(v) for (src, side), v in rel.items() if side == "both" and str(src).startswith(CHANCE_GROUP)]
    heads = df[df.side.isin(["query", "key"]) & _is_head(df)]
    top = heads.iloc[0] if len(heads) else None
    return {
        "early_heads": [head_name(a, b) for a, b in early],
        "group_drop": float(rel[(EARLY_GROUP, "both")]),
        "chance": float(pd.Series(chance).median()) if chance else float("nan"),
        "chance_range": [min(chance), max(chance)] if chance else [],
        "n_early": len(early),
        "n_groups": len(chance),
        "top_single": f"{top.source} ({top.side}) {top.relative_drop:.0%}" if top is not None else "-",
    }


def top_sources(df: pd.DataFrame, n: int = 5) -> list[str]:
    """The ``n`` upstream heads with the largest drop on either side (heads only, positional route excluded)."""
    heads = df[_is_head(df)]
    best = heads.groupby("source")["drop"].max().sort_values(ascending=False)
    return best.head(n).index.tolist()


def drop_grid(df: pd.DataFrame, n_layers: int, n_heads: int, side: str) -> torch.Tensor:
    """``[n_layers, n_heads]`` drops of one side (NaN for layers at or above the target)."""
    g = torch.full((n_layers, n_heads), float("nan"))
    for r in df[(df.side == side) & _is_head(df)].itertuples():
        l, h = (int(x) for x in r.source[1:].split("H"))
        g[l, h] = r.drop
    return g


def sources_summary(df: pd.DataFrame, prev_heads: Sequence[str], n: int = 5) -> dict:
    """Top sources, how many are previous-token heads, the side that carries the signal, the W_pos route."""
    top = top_sources(df, n)
    by = df.set_index(["source", "side"])["drop"]
    sides = {s: ("query" if by.get((s, "query"), 0) >= by.get((s, "key"), 0) else "key") for s in top}
    pos = df[df.source.str.startswith("W_pos")]
    return {
        "top_sources": top,
        "sides": sides,
        "n_prev_token_among_top": sum(s in set(prev_heads) for s in top),
        "top_drop": float(df[_is_head(df)]["drop"].max()),
        "wpos_drop": float(pos["drop"].max()) if len(pos) else float("nan"),
        "clean_prev_mass": float(df.clean_prev_mass.iloc[0]),
    }
