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

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..model.attention import QKCapture, attn_scale, expand_kv, scale_from_pattern
from ..model.forward import run_until
from ..model.tokens import as_token_batches, model_device, single_prompt
from ..model.validation import UsageError, check_head, check_int_range, head_name


def raw_scores_from_qk(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``[batch, pos, head, d_head]`` queries and keys (as :class:`~gpt2_posheads.model.attention.QKCapture` gives
    them) → pre-mask scores ``[batch, head, q, k]`` = ``(q . k) * scale`` (``scale``:
    :func:`~gpt2_posheads.model.attention.attn_scale`)."""
    return torch.einsum("bqhd,bkhd->bhqk", q.float(), expand_kv(k, q.shape[2]).float()) * scale


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


def score_profile(
    model, prompts, window: int = 3, batch_size: int = 4, skip_first: int = 8, progress: bool = False
) -> torch.Tensor:
    """Mean centred raw score at key offset ``o = k - q`` for ``o`` in ``-window..+window``:
    ``[n_layers, n_heads, 2 * window + 1]`` (index ``window`` is the current token, ``window - 1`` the
    previous one, larger indices are future keys, which raw scores still have).

    For every query ``q`` with all ``2*window+1`` keys inside the prompt (and ``q >= skip_first``, to
    leave out the BOS-dominated start) the scores in the window are centred on their mean, then
    averaged over queries and prompts.
    """
    check_int_range("window", window, 1, 64)
    L, H, w = model.cfg.n_layers, model.cfg.n_heads, window
    sums = torch.zeros(L, H, 2 * w + 1, dtype=torch.float64)
    count = 0

    def make_hooks(layer):
        qk = QKCapture(model, layer)

        def then(hook_fn):  # the captures may arrive in any order: reduce once all are in
            def hook(x, hook):
                hook_fn(x, hook)
                if qk.ready():
                    reduce(qk.q, qk.k)
                    qk.box.clear()

            return hook

        def reduce(q, k):  # [batch, pos, head, d_head] each
            n = k.shape[1]
            qs = torch.arange(max(w, skip_first), n - w, device=k.device)
            offs = torch.arange(-w, w + 1, device=k.device)
            keys = qs[:, None] + offs[None, :]  # [n_q, 2w+1]
            kk = k[:, keys]  # [batch, n_q, 2w+1, head, d_head]
            s = torch.einsum("bqhd,bqohd->bhqo", q[:, qs].float(), kk.float()) * attn_scale(model.cfg, layer)
            s = s - s.mean(-1, keepdim=True)
            sums[layer] += s.sum((0, 2)).double().cpu()

        return [(name, then(fn)) for name, fn in qk.hooks()]

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
    return (sums / count).float()


def classify_prev_heads(profile: torch.Tensor, threshold: float = 0.5) -> pd.DataFrame:
    """Label heads from :func:`score_profile` ``[n_layers, n_heads, 2w+1]``.

    With ``s(o)`` the profile and ``spread`` its standard deviation over the window:

    * ``dip  = (s(-1) + s(+1)) / 2 - s(0)``: how far the current token falls below its neighbours' trend;
    * ``peak = s(-1) - max(s(-2), s(0))``: how far the previous token stands above both neighbours;
    * ``trend`` = least-squares slope of ``s`` over the offsets other than 0 and -1 (> 0: more advanced
      keys score higher, the tangent-to-the-helix reading of the post).

    ``prev_boosting`` when ``peak / spread > threshold`` (a bright previous diagonal, L4H11's taxon);
    else ``self_suppressing`` when ``dip / spread > threshold`` (a dark main diagonal, L2H2's taxon);
    else ``neither``.
    """
    L, H, n = profile.shape
    w = n // 2
    s = profile.double()
    offs = torch.arange(-w, w + 1, dtype=torch.float64)
    keep = (offs != 0) & (offs != -1)
    rows = []
    for l in range(L):
        for h in range(H):
            p = s[l, h]
            spread = float(p.std()) or 1e-12
            dip = float((p[w - 1] + p[w + 1]) / 2 - p[w])
            peak = float(p[w - 1] - torch.maximum(p[w - 2], p[w])) if w >= 2 else float(p[w - 1] - p[w])
            x, y = offs[keep], p[keep]
            trend = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
            label = (
                "prev_boosting"
                if peak / spread > threshold
                else "self_suppressing"
                if dip / spread > threshold
                else "neither"
            )
            rows.append(
                dict(
                    layer=l,
                    head=h,
                    name=head_name(l, h),
                    dip=dip / spread,
                    peak=peak / spread,
                    trend=trend / spread,
                    label=label,
                )
            )
    return pd.DataFrame(rows)
