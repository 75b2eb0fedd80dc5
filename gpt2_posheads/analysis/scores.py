"""Raw attention scores and the score profile that separates the two kinds of previous-token head.

The GPT-2 post looks at raw scores ``S[q, k] = q_q · k_k / sqrt(d_head)`` *before* the causal mask.
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

from ..model.attention import attn_scale
from ..model.forward import run_until
from ..model.tokens import as_token_batches, model_device, single_prompt
from ..model.validation import check_head, check_int_range, head_name


def raw_scores_from_qk(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``[batch, pos, head, d_head]`` queries and keys → pre-mask scores ``[batch, head, q, k]`` =
    ``(q . k) * scale`` (``scale`` from :func:`~gpt2_posheads.model.attention.attn_scale`)."""
    return torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) * scale


def attention_scores(model, prompt, layer: int, head: int, fwd_hooks=()) -> dict[str, torch.Tensor]:
    """One head on one prompt: ``raw`` (before the causal mask), ``masked`` (future = -inf) and
    ``pattern`` (softmax), each ``[pos, pos]``. ``fwd_hooks`` apply interventions upstream."""
    check_head(model, layer, head)
    toks = single_prompt(model, prompt)
    box: dict[str, torch.Tensor] = {}

    def grab(name):
        def hook(x, hook):
            box[name] = x.detach()
        return hook

    pre = f"blocks.{layer}.attn."
    with torch.inference_mode():
        run_until(model, toks, list(fwd_hooks) + [
            (pre + "hook_q", grab("q")), (pre + "hook_k", grab("k")), (pre + "hook_pattern", grab("pattern"))],
            stop_at=pre + "hook_pattern")
    raw = raw_scores_from_qk(box["q"], box["k"], attn_scale(model.cfg, layer))[0, head].cpu()
    n = raw.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return {"raw": raw, "masked": raw.masked_fill(future, float("-inf")), "pattern": box["pattern"][0, head].float().cpu()}


def score_profile(model, prompts, window: int = 3, batch_size: int = 4, skip_first: int = 8,
                  progress: bool = False) -> torch.Tensor:
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
    box: dict[str, torch.Tensor] = {}

    def make_hooks(layer):
        def grab_q(x, hook):
            box["q"] = x

        def reduce_k(k, hook):  # k: [batch, pos, head, d_head]
            q = box.pop("q")
            n = k.shape[1]
            qs = torch.arange(max(w, skip_first), n - w, device=k.device)
            offs = torch.arange(-w, w + 1, device=k.device)
            keys = qs[:, None] + offs[None, :]  # [n_q, 2w+1]
            kk = k[:, keys]  # [batch, n_q, 2w+1, head, d_head]
            s = torch.einsum("bqhd,bqohd->bhqo", q[:, qs].float(), kk.float()) * attn_scale(model.cfg, layer)
            s = s - s.mean(-1, keepdim=True)
            sums[layer] += s.sum((0, 2)).double().cpu()
        return [(f"blocks.{layer}.attn.hook_q", grab_q), (f"blocks.{layer}.attn.hook_k", reduce_k)]

    hooks = [h for l in range(L) for h in make_hooks(l)]
    device = model_device(model)
    with torch.inference_mode():
        for toks in tqdm(list(as_token_batches(model, prompts, batch_size)), desc="score profile", disable=not progress):
            n_q = max(0, toks.shape[1] - w - max(w, skip_first))
            if n_q == 0:
                continue
            count += toks.shape[0] * n_q
            run_until(model, toks.to(device), hooks, stop_at=f"blocks.{L - 1}.attn.hook_k")
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
            label = ("prev_boosting" if peak / spread > threshold
                     else "self_suppressing" if dip / spread > threshold else "neither")
            rows.append(dict(layer=l, head=h, name=head_name(l, h), dip=dip / spread, peak=peak / spread,
                             trend=trend / spread, label=label))
    return pd.DataFrame(rows)
