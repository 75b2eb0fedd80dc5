"""An offline attention explorer: one self-contained HTML file per model (JavaScript and data inlined, no network).

Choose a prompt, a layer and a head: the token-labelled attention pattern (hover: query token, key token,
weight), the raw pre-mask scores beside it (the upper triangle the causal mask removes included), and the
diagonal profile (mean attention per offset, key 0 left out: the toolkit's one definition). A toggle shows the
same head under each intervention of :mod:`gpt2_posheads.analysis.interventions`:

* ``W_pos averaged /10``: ``W_pos`` averaged in groups of 10 (models with learned absolute positions);
* ``p-1 masked below``: attention to the previous position masked at every 5th query in every layer below the
  head's own (nothing to mask for layer 0);
* ``ext. pos. averaged /10``: the extended positional embeddings averaged in groups of 10 just before the head's
  layer;
* ``aggregator edited``: the aggregator's pattern edited as in the post, output x2. On the repeat-string prompt
  this is the post's edit; on other prompts every query of the aggregator attends two tokens back instead of one.

Patterns are stored as bytes (weight x 255) and raw scores as bytes between each head's minimum and maximum,
base64-encoded, so a 4-layer, 4-head model with three 64-token prompts is about 2 MB. The page reads
``#prompt=P&layer=L&head=H&variant=V`` from its address, and writes what it draws into ``#summary`` (a
sentence and ``data-`` attributes), which a test in headless Chromium reads back.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np
import torch

from ..analysis.diagonals import choose_aggregator, diagonal_attention, rank_from_diagonals
from ..analysis.interventions import (
    average_ext_pos_embed,
    average_pos_embed,
    edit_head_pattern,
    hooks_for,
    mask_previous_attention,
    scale_head_output,
)
from ..analysis.posembed import extended_pos_embeddings_by_layer
from ..analysis.repeat_prompt import edit_mapping, repeat_string_prompt, single_token_target
from ..analysis.scores import raw_scores_from_qk
from ..model.attention import QKCapture, attn_scale
from ..model.identity import has_learned_positions
from ..model.tokens import model_device
from ..model.validation import UsageError, head_name

VARIANTS = {
    "clean": "clean",
    "wpos": "W_pos averaged /10",
    "mask": "p-1 masked below (every 5th query)",
    "extavg": "ext. pos. averaged /10 at the head's layer",
    "edit": "aggregator edited (post), output x2",
}


def _capture(model, tokens: torch.Tensor, hooks=()) -> tuple[torch.Tensor, torch.Tensor]:
    """Every head's pattern and raw (pre-mask) scores on one prompt ``[pos]``: two ``[layer, head, q, k]`` tensors."""
    L = model.cfg.n_layers
    box: dict[str, torch.Tensor] = {}

    def grab(name):
        def hook(x, hook):
            box[name] = x.detach()

        return hook

    caps = [QKCapture(model, l) for l in range(L)]
    extra = [h for c in caps for h in c.hooks()] + [(f"blocks.{l}.attn.hook_pattern", grab(l)) for l in range(L)]
    with torch.inference_mode():
        model.run_with_hooks(tokens[None].to(model_device(model)), fwd_hooks=list(hooks) + extra, return_type=None)
    pat = torch.stack([box[l][0].float().cpu() for l in range(L)])
    raw = torch.stack([raw_scores_from_qk(c.q, c.k, attn_scale(model.cfg, l))[0].cpu() for l, c in enumerate(caps)])
    return pat, raw


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=np.uint8).tobytes()).decode("ascii")


def _pack(pat: torch.Tensor, raw: torch.Tensor) -> dict:
    """Bytes: patterns x 255; raw scores scaled between each head's finite minimum and maximum."""
    r = raw.double()
    lo = torch.nan_to_num(r, nan=0.0).flatten(2).min(-1).values
    hi = torch.nan_to_num(r, nan=0.0).flatten(2).max(-1).values
    span = (hi - lo).clamp_min(1e-12)
    q = ((r - lo[..., None, None]) / span[..., None, None] * 255).round().clamp(0, 255)
    return {
        "pat": _b64((pat.clamp(0, 1) * 255).round().numpy()),
        "raw": _b64(q.numpy()),
        "rawmin": lo.flatten().tolist(),
        "rawmax": hi.flatten().tolist(),
    }


def _edit_hooks(model, agg: tuple[int, int], n: int, mapping: dict[int, int] | None):
    l, h = agg
    if mapping is None:  # a general prompt: every query attends two back instead of one (output x2)
        mapping = {q: q - 2 for q in range(2, n)}
    return hooks_for(model, edit_head_pattern(l, h, mapping), scale_head_output(l, h, 2.0))


def explorer_data(
    model,
    prompts: Sequence[tuple[str, torch.Tensor, dict | None]],
    label: str,
    aggregator: tuple[int, int] | None = None,
    ext_prompts: int = 8,
) -> dict:
    """Everything the page draws. ``prompts``: ``(name, tokens [pos], edit mapping or None)``; ``aggregator``
    defaults to :func:`~gpt2_posheads.analysis.diagonals.choose_aggregator` on the prompts."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    if aggregator is None:
        n_min = min(len(t) for _, t, _ in prompts)
        aggregator = choose_aggregator(
            rank_from_diagonals(
                diagonal_attention(model, torch.stack([t[:n_min] for _, t, _ in prompts]), progress=False)
            )
        )
    learned = has_learned_positions(model)
    ext = extended_pos_embeddings_by_layer(model, range(L), n_prompts=ext_prompts)  # once, for every prompt
    out = {
        "model": label,
        "n_layers": L,
        "n_heads": H,
        "aggregator": head_name(*aggregator),
        "variants": {k: v for k, v in VARIANTS.items() if learned or k != "wpos"},
        "prompts": [],
    }
    unavailable: dict[str, str] = {}

    def attempt(key: str, tokens: torch.Tensor, make_hooks):
        """A variant's capture, or None (and why) where its intervention does not apply to this model."""
        if key in unavailable:
            return None
        try:
            return _capture(model, tokens, make_hooks())
        except UsageError as e:
            unavailable[key] = str(e)
            return None

    for name, tokens, mapping in prompts:
        n = len(tokens)
        variants = {"clean": _capture(model, tokens)}
        if learned:
            variants["wpos"] = attempt("wpos", tokens, partial(average_pos_embed(10).hooks, model))
        # masking below / averaging at the head's own layer differ per layer: one run per layer, keep that layer
        mask_p, mask_r, ext_p, ext_r = [], [], [], []
        for layer in range(L):
            hooks = mask_previous_attention(5, range(layer)).hooks(model) if layer > 0 else []
            p, r = _capture(model, tokens, hooks) if hooks else variants["clean"]
            mask_p.append(p[layer])
            mask_r.append(r[layer])
            p, r = _capture(model, tokens, average_ext_pos_embed(layer, 10, ext=ext[layer]).hooks(model))
            ext_p.append(p[layer])
            ext_r.append(r[layer])
        variants["mask"] = (torch.stack(mask_p), torch.stack(mask_r))
        variants["extavg"] = (torch.stack(ext_p), torch.stack(ext_r))
        variants["edit"] = attempt("edit", tokens, partial(_edit_hooks, model, aggregator, n, mapping))
        tok_strs = [model.tokenizer.decode([int(t)]) for t in tokens]
        out["prompts"].append(
            {
                "name": name,
                "n": n,
                "tokens": tok_strs,
                "variants": {k: _pack(*v) for k, v in variants.items() if v is not None},
            }
        )
    out["variants"] = {k: v for k, v in out["variants"].items() if k not in unavailable}
    out["unavailable"] = unavailable
    return out


def default_prompts(model, n_tokens: int = 64, seed: int = 0) -> list[tuple[str, torch.Tensor, dict | None]]:
    """Three prompts: held-out natural text, the post's repeat-string prompt (the edit is the post's there) and a
    random sequence repeated twice (induction)."""
    from ..analysis.induction import repeated_random_tokens
    from ..analysis.prompts import documents, make_prompts

    n_tokens = min(n_tokens, model.cfg.n_ctx)
    docs, _ = documents("wikitext")
    text = make_prompts(model.tokenizer, 1, n_tokens, seed=seed, docs=docs)[0]
    target = single_token_target(model.tokenizer, " ninja turtle pirate")
    rp = repeat_string_prompt(model.tokenizer, target, n_given=1, n_demos=1, seed=seed, max_len=model.cfg.n_ctx)
    seg = (n_tokens - 1) // 2
    rand = repeated_random_tokens(model, 1, seg, seed=seed)[0]
    return [
        ("natural text (WikiText-2)", text, None),
        ("repeat-string prompt (the post's, one demonstration)", rp.tokens, edit_mapping(rp)),
        (f"random tokens repeated ({seg} + {seg})", rand, None),
    ]


def write_explorer(
    model, path: str | Path, label: str, prompts=None, aggregator: tuple[int, int] | None = None
) -> Path:
    """Write the explorer of ``model`` to ``path`` (see the module doc); returns the path."""
    data = explorer_data(model, prompts if prompts is not None else default_prompts(model), label, aggregator)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(
        PAGE.replace("__TITLE__", html.escape(f"{label}: attention explorer")).replace(
            "__DATA__", json.dumps(data).replace("</", "<\\/")
        ),
        encoding="utf-8",
    )
    tmp.replace(path)
    return path


# the page itself; write_explorer fills in __TITLE__ and __DATA__
PAGE = (Path(__file__).with_name("explorer.html")).read_text(encoding="utf-8")
