"""Raw attention scores and the score profile that separates the two kinds of previous-token head.

The GPT-2 post looks at raw scores ``S[q, k] = q_q · k_k / sqrt(d_head)`` *before* the causal mask (on a rotary
model the queries and keys rotated as the model rotates them; with grouped-query attention each query head's
shared key head: :class:`~gpt2_posheads.model.attention.QKCapture`).
Early previous-token heads (L2H2, L3H3, ...) show a *dark main diagonal*: ``S[q, q]`` dips below the
trend of its neighbours (negative self-attention), and with the future masked off the previous token
is left as the most advanced key. L4H11 instead shows a *bright previous diagonal*: ``S[q, q-1]`` is
a peak. :func:`score_profile` turns this into numbers: the mean raw score at key offset
``o = k - q`` in ``-w..+w`` around each query, centred per query (softmax ignores per-row shifts).
"""

from __future__ import annotations

import math

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..model.attention import QKCapture, attn_scale, expand_kv, scale_from_pattern
from ..model.forward import run_until
from ..model.state import measures_caller_model
from ..model.tokens import as_token_batches, model_device, single_prompt
from ..model.validation import UsageError, check_head, check_int_range, check_model, head_name, require_finite


def raw_scores_from_qk(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``[batch, pos, head, d_head]`` queries and keys (as :class:`~gpt2_posheads.model.attention.QKCapture` gives
    them) → pre-mask scores ``[batch, head, q, k]`` = ``(q . k) * scale`` (``scale``:
    :func:`~gpt2_posheads.model.attention.attn_scale`)."""
    return torch.einsum("bqhd,bkhd->bhqk", q.float(), expand_kv(k, q.shape[2]).float()) * scale


@measures_caller_model
def attention_scores(model, prompt, layer: int, head: int, fwd_hooks=()) -> dict[str, torch.Tensor]:
    """One head on one prompt: ``raw`` (before the causal mask, the upper triangle included), ``masked`` (future =
    -inf) and ``pattern`` (softmax), each ``[pos, pos]``. ``fwd_hooks`` apply interventions upstream.

    ``raw = (q . k) * scale`` with the queries and keys as the model uses them, the scale checked (or read off)
    against the model's own pattern (:func:`~gpt2_posheads.model.attention.scale_from_pattern`: ``softmax(raw +
    mask)`` must reproduce it to 1e-4); a model whose attention is not of that form (a position bias) is an error.
    """
    check_head(model, layer, head)
    toks = single_prompt(model, prompt)
    box: dict[str, torch.Tensor] = {}

    def grab(name):
        def hook(x, hook):
            box[name] = x.detach()

        return hook

    pre = f"blocks.{layer}.attn."
    qk = QKCapture(model, layer)
    with torch.inference_mode():  # to the end of the block: some bridges fire hook_pattern after the output
        run_until(
            model,
            toks,
            list(fwd_hooks) + qk.hooks() + [(pre + "hook_pattern", grab("pattern"))],
            stop_at=f"blocks.{layer}.hook_resid_post",
        )
    dot = raw_scores_from_qk(qk.q, qk.k, 1.0)[0, head].cpu()
    pattern = box["pattern"][0, head].float().cpu()
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


@measures_caller_model
def score_profile(
    model, prompts, window: int = 3, batch_size: int = 4, skip_first: int = 8, progress: bool = False
) -> torch.Tensor:
    """Mean centred raw score at key offset ``o = k - q`` for ``o`` in ``-window..+window``:
    ``[n_layers, n_heads, 2 * window + 1]`` (index ``window`` is the current token, ``window - 1`` the
    previous one, larger indices are future keys, which raw scores still have).

    For every query ``q`` with all ``2*window+1`` keys inside the prompt (and ``q >= skip_first``, to
    leave out the BOS-dominated start) the scores in the window are centred on their mean, then
    averaged over queries and prompts. Scores are ``scale * q . k`` with each layer's scale read off its own
    pattern on the first batch (:func:`~gpt2_posheads.model.attention.scale_from_pattern`), not the configuration's
    (the TransformerLens 4 bridge misstates GPT-Neo's), so the profile is in the logits the softmax sees.
    """
    check_model(model)
    check_int_range("window", window, 1, 64)
    L, H, w = model.cfg.n_layers, model.cfg.n_heads, window
    sums = torch.zeros(L, H, 2 * w + 1, dtype=torch.float64)
    scales: dict[int, float] = {}
    count = 0

    def make_hooks(layer):
        qk = QKCapture(model, layer)
        pattern_name = f"blocks.{layer}.attn.hook_pattern"

        def ready() -> bool:
            return qk.ready() and (layer in scales or "pattern" in qk.box)

        def then(hook_fn):  # the captures may arrive in any order: reduce once all are in
            def hook(x, hook):
                hook_fn(x, hook)
                if ready():
                    reduce(qk.q, qk.k, qk.box.get("pattern"))
                    qk.box.clear()

            return hook

        def grab_pattern(x, hook):
            if layer not in scales:
                qk.box["pattern"] = x.detach()

        def reduce(q, k, pattern):  # [batch, pos, head, d_head] each; pattern [batch, head, q, k] on the first batch
            if layer not in scales:
                dot = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()).cpu()
                scales[layer] = scale_from_pattern(dot, pattern.float().cpu(), attn_scale(model.cfg, layer))[0]
            n = k.shape[1]
            qs = torch.arange(max(w, skip_first), n - w, device=k.device)
            offs = torch.arange(-w, w + 1, device=k.device)
            keys = qs[:, None] + offs[None, :]  # [n_q, 2w+1]
            kk = k[:, keys]  # [batch, n_q, 2w+1, head, d_head]
            s = torch.einsum("bqhd,bqohd->bhqo", q[:, qs].float(), kk.float()) * scales[layer]
            s = s - s.mean(-1, keepdim=True)
            sums[layer] += s.sum((0, 2)).double().cpu()

        return [(name, then(fn)) for name, fn in qk.hooks()] + [(pattern_name, then(grab_pattern))]

    hooks = [h for l in range(L) for h in make_hooks(l)]
    device = model_device(model)
    with torch.inference_mode():
        for toks in tqdm(
            list(as_token_batches(model, prompts, batch_size)), desc="score profile", disable=not progress
        ):
            n_q = max(0, toks.shape[1] - w - max(w, skip_first))
            if n_q == 0:
                continue
            count += toks.shape[0] * n_q
            run_until(model, toks.to(device), hooks, stop_at=f"blocks.{L - 1}.hook_resid_post")
    if count == 0:
        raise ValueError(f"prompts are too short for window={window} and skip_first={skip_first}")
    return require_finite(sums / count, "the raw attention scores").float()


# A feature of the profile decides where a head attends only if it changes the attention odds by a factor 2 or more.
LABEL_THRESHOLD = math.log(2.0)
LABELS = ("self_suppressing", "prev_boosting", "neither")


def profile_features(p: torch.Tensor) -> dict[str, float]:
    """The numbers a head's label rests on, from one profile ``p`` ``[2w+1]`` (``w >= 3``; see
    :func:`classify_prev_heads`): ``trend`` (slope of the line through the keys ``o = -w..-2``, logits per position),
    ``spike`` (``s(-1)`` above that line), ``dip`` (``s(0)`` below it) and ``lead`` (``s(-1) - s(0)``)."""
    w = len(p) // 2
    if w < 3:
        raise ValueError(f"a profile needs window >= 3 (two keys before the previous one), got {w}")
    s = p.double()
    x = torch.arange(-w, -1, dtype=torch.float64)  # o = -w .. -2
    y = s[: w - 1]
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
    line = lambda o: float(y.mean()) + slope * (o - float(x.mean()))  # noqa: E731
    return {
        "trend": slope,
        "spike": float(s[w - 1]) - line(-1),
        "dip": line(0) - float(s[w]),
        "lead": float(s[w - 1] - s[w]),
    }


def label_profile(f: dict[str, float], threshold: float = LABEL_THRESHOLD) -> str:
    """``prev_boosting``, ``self_suppressing`` or ``neither`` from :func:`profile_features` (see
    :func:`classify_prev_heads`)."""
    if f["lead"] <= 0:
        return "neither"  # the previous key does not even beat the current one
    if f["spike"] >= threshold:
        return "prev_boosting"
    if f["trend"] > 0 and f["dip"] >= threshold:
        return "self_suppressing"
    return "neither"


def classify_prev_heads(profile: torch.Tensor, threshold: float = LABEL_THRESHOLD) -> pd.DataFrame:
    """Label every head from :func:`score_profile` ``[n_layers, n_heads, 2w+1]`` (``w >= 3``), in logits.

    The post: an early previous-token head (L2H2) scores *more advanced keys higher* and has a *dark main diagonal*
    (its own token pushed down), so with the future masked the previous key is left as the best; L4H11 instead has a
    *bright previous diagonal*. Only the visible keys (``o <= 0``) decide: the future is masked before the softmax.
    With ``s(o)`` the profile and the trend the least-squares line through the keys before the previous one
    (``o = -w..-2``):

    * ``spike = s(-1) - line(-1)``: how far the previous key stands above the trend of older keys;
    * ``dip = line(0) - s(0)``: how far the current key falls below it;
    * ``lead = s(-1) - s(0)``: how far the previous key beats the current one.

    ``prev_boosting`` when ``lead > 0`` and ``spike >= threshold`` (a bright previous diagonal);
    ``self_suppressing`` when ``lead > 0``, ``spike < threshold``, the trend rises and ``dip >= threshold`` (the
    previous key wins because the current one, which the rising trend would favour, is pushed down); else
    ``neither``. ``threshold``: ln 2 logits, a change of the attention odds by a factor 2 (a smaller feature does not
    decide where the head attends). Limitation: within a window of 3 a bump centred on ``p-1`` (falling on both
    sides) looks like a rising trend with a dip; a wider ``window`` shows its curvature.
    """
    L, H, n = profile.shape
    rows = []
    for l in range(L):
        for h in range(H):
            f = profile_features(profile[l, h])
            rows.append(dict(layer=l, head=h, name=head_name(l, h), **f, label=label_profile(f, threshold)))
    return pd.DataFrame(rows)
