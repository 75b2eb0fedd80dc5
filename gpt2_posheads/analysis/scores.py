"""Raw attention scores and the score profile that separates the two kinds of previous-token head.

The GPT-2 post looks at raw scores ``S[q, k] = q_q · k_k / sqrt(d_head)`` *before* the causal mask (on a rotary
model the queries and keys rotated; with grouped-query attention each query head's shared key head): the engine's
``"q"``, ``"k"`` and ``"pattern"`` reads, with the scale of :func:`~gpt2_posheads.model.engine.scale_from_pattern`
(a trace, the strict fast path and stored activations cannot read them). Early previous-token heads (L2H2, L3H3, ...)
show a *dark main diagonal*: ``S[q, q]`` dips below the trend of its neighbours (negative self-attention), and with the
future masked off the previous token is left as the most advanced key. L4H11 instead shows a *bright previous
diagonal*: ``S[q, q-1]`` is a peak. :func:`score_profile` turns this into numbers, :func:`classify_prev_heads` labels.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from ..model.engine import (
    Reduction,
    as_token_batches,
    attn_scale,
    engine_for,
    keep_reads,
    raw_scores_from_qk,
    scale_from_pattern,
    single_prompt,
)
from ..model.state import measures_caller_model
from ..model.validation import UsageError, check_head, check_int_range, check_model, checked, require_finite
from .diagonals import head_columns


@measures_caller_model
def attention_scores(model, prompt, layer: int, head: int, edits=(), engine: str = "auto") -> dict[str, torch.Tensor]:
    """One head on one prompt: ``raw`` (before the causal mask), ``masked`` (future = -inf) and ``pattern``, each
    ``[pos, pos]``, under ``edits``. ``raw = (q . k) * scale``, the scale read off the model's own pattern
    (``softmax(raw + mask)`` must reproduce it to 1e-4; a position bias is an error)."""
    check_head(model, layer, head)
    toks = single_prompt(model, prompt)
    reads = {"q": [layer], "k": [layer], "pattern": [layer]}
    acts = engine_for(model, engine).activations([toks], reads, Reduction(keep_reads, dict), edits)[layer]
    dot = raw_scores_from_qk(acts["q"], acts["k"], 1.0)[0, head].cpu()
    pattern = acts["pattern"][0, head].float().cpu()
    scale, mask, err = scale_from_pattern(dot, pattern, attn_scale(model.cfg, layer))
    if err > 1e-4:
        raise UsageError(
            "model",
            f"layer {layer}'s attention is not softmax(scale * q . k + mask) (off by {err:.2e})",
            "models whose scores are q . k times a constant",
            "raw scores need the pre-mask scores",
        )
    raw = (dot.double() * scale).float()
    return {"raw": raw, "masked": raw.masked_fill(mask, float("-inf")), "pattern": pattern}


def _profile_step(state: dict, layer: int, acts: dict) -> None:
    """Fold one layer's queries and keys ``[batch, pos, head, d_head]`` into ``state["sums"][layer]`` ``[head,
    2w+1]``; the layer's scale read off its pattern on the first batch."""
    q, k, w, scales = acts["q"], acts["k"], state["window"], state["scales"]
    if layer not in scales:
        dot = raw_scores_from_qk(q, k, 1.0).cpu()
        scales[layer] = scale_from_pattern(dot, acts["pattern"].float().cpu(), state["declared"][layer])[0]
    qs = torch.arange(max(w, state["skip_first"]), k.shape[1] - w, device=k.device)
    keys = qs[:, None] + torch.arange(-w, w + 1, device=k.device)[None, :]  # [n_q, 2w+1]
    kk = k[:, keys]  # [batch, n_q, 2w+1, head, d_head]
    s = torch.einsum("bqhd,bqohd->bhqo", q[:, qs].float(), kk.float()) * scales[layer]
    s = s - s.mean(-1, keepdim=True)  # softmax ignores a shift per query
    state["sums"][layer] += s.sum((0, 2)).double().cpu()


@measures_caller_model
def score_profile(
    model,
    prompts,
    window: int = 3,
    batch_size: int = 4,
    skip_first: int = 8,
    progress: bool = False,
    engine: str = "auto",
) -> torch.Tensor:
    """Mean centred raw score at key offset ``o = k - q`` for ``o`` in ``-window..+window``: ``[n_layers, n_heads, 2
    * window + 1]`` (index ``window`` is the current token, ``window - 1`` the previous one; raw scores have the
    future keys too).

    For every query ``q`` with all ``2*window+1`` keys inside the prompt (and ``q >= skip_first``, to leave out the
    BOS-dominated start) the scores in the window are centred on their mean, then averaged over queries and prompts.
    Each layer's scale is read off its own pattern, not the configuration's (the TransformerLens 4 bridge misstates
    GPT-Neo's), so the profile is in the logits the softmax sees.
    """
    check_model(model)
    check_int_range("window", window, 1, 64)
    L, H, w = model.cfg.n_layers, model.cfg.n_heads, window
    batches, count = [], 0
    for toks in as_token_batches(model, prompts, batch_size):
        n_q = max(0, toks.shape[1] - w - max(w, skip_first))  # queries with the whole window inside the prompt
        if n_q:
            batches.append(toks)
            count += toks.shape[0] * n_q
    if count == 0:
        raise ValueError(f"prompts are too short for window={window} and skip_first={skip_first}")
    state = dict(sums=torch.zeros(L, H, 2 * w + 1, dtype=torch.float64), scales={}, window=w, skip_first=skip_first)
    state["declared"] = [attn_scale(model.cfg, l) for l in range(L)]
    reads = dict.fromkeys(("q", "k", "pattern"), list(range(L)))  # every layer's queries, keys and pattern
    bar = "score profile" if progress else None
    got = engine_for(model, engine).activations(batches, reads, Reduction(_profile_step, dict, state), progress=bar)
    return require_finite(got["sums"] / count, "the raw attention scores").float()


# A feature of the profile decides where a head attends only if it changes the attention odds by a factor 2 or more.
LABEL_THRESHOLD = math.log(2.0)


def _profile_row(p: torch.Tensor, threshold: float) -> dict:
    """``trend``, ``spike``, ``dip``, ``lead`` and ``label`` of one profile ``p`` ``[2w+1]`` (module doc)."""
    w = len(p) // 2
    if w < 3:
        raise ValueError(f"a profile needs window >= 3 (two keys before the previous one), got {w}")
    s = p.double()
    x = torch.arange(-w, -1, dtype=torch.float64)  # o = -w .. -2
    y = s[: w - 1]
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
    line = lambda o: float(y.mean()) + slope * (o - float(x.mean()))  # noqa: E731
    f = dict(trend=slope, spike=float(s[w - 1]) - line(-1), dip=line(0) - float(s[w]), lead=float(s[w - 1] - s[w]))
    if f["lead"] <= 0:
        label = "neither"  # the previous key does not even beat the current one
    elif f["spike"] >= threshold:
        label = "prev_boosting"
    else:
        label = "self_suppressing" if f["trend"] > 0 and f["dip"] >= threshold else "neither"
    return {**f, "label": label}


@checked
def classify_prev_heads(profile: torch.Tensor, threshold: float = LABEL_THRESHOLD) -> pd.DataFrame:
    """Label every head from :func:`score_profile` ``[n_layers, n_heads, 2w+1]`` (``w >= 3``), in logits.

    Only the visible keys (``o <= 0``) decide (module doc). With ``s(o)`` the profile and the trend the least-squares
    line through the keys before the previous one (``o = -w..-2``):

    * ``spike = s(-1) - line(-1)``: how far the previous key stands above the trend of older keys;
    * ``dip = line(0) - s(0)``: how far the current key falls below it;
    * ``lead = s(-1) - s(0)``: how far the previous key beats the current one.

    ``prev_boosting`` when ``lead > 0`` and ``spike >= threshold`` (a bright previous diagonal);
    ``self_suppressing`` when ``lead > 0``, ``spike < threshold``, the trend rises and ``dip >= threshold`` (the
    previous key wins because the current one, which the rising trend would favour, is pushed down); else
    ``neither``. ``threshold``: :data:`LABEL_THRESHOLD`. Limitation: within a window of 3 a bump centred on ``p-1``
    (falling on both sides) looks like a rising trend with a dip; a wider ``window`` shows its curvature.
    """
    rows = [_profile_row(p, threshold) for p in profile.flatten(0, 1)]
    return pd.DataFrame({**head_columns(*profile.shape[:2]), **pd.DataFrame(rows).to_dict("list")})
