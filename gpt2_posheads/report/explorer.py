"""The attention explorer: every head of a model on a few prompts, under each intervention of the toolkit
(``docs/explorer.md`` is the reader's guide: what the page draws, its address as its state, data and size).

One self-contained HTML file (it opens from ``file://``), or served live by
:mod:`~gpt2_posheads.report.explorer_server` from the same :func:`explorer_data`. An intervention that cannot change a
head is shown as not applicable with the reason, never as the clean pattern. Patterns are bytes (weight x 255), raw
scores bytes between each head's minimum and maximum, both zlib-compressed and base64-encoded; the diagonal profile
and the previous-token statistics are the toolkit's one definition (:mod:`gpt2_posheads.analysis.diagonals`).
"""

from __future__ import annotations

import base64
import html
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..analysis.diagonals import (
    choose_aggregator,
    diagonal_attention,
    diagonal_counts,
    diagonal_sums,
    prev_token_stats,
    rank_from_diagonals,
)
from ..analysis.interventions import (
    MASK_EVERY,
    average_ext_pos_embed,
    average_pos_embed,
    edit_head_pattern,
    mask_previous_attention,
    scale_head_output,
)
from ..analysis.posembed import extended_pos_embeddings_by_layer
from ..analysis.repeat_prompt import edit_mapping, repeat_string_prompt, single_token_target
from ..claims.gpt2_post import POS_GROUP
from ..model.engine import Reduction, attn_scale, engine_for, raw_scores_from_qk, to_token_list
from ..model.loading import has_learned_positions, position_kind
from ..model.paths import write_whole_text
from ..model.state import measures_caller_model
from ..model.validation import UsageError, head_name

MIN_TOKENS = 3  # the profile's statistics need two offsets with entries (key 0 left out)

# key, short label (buttons, summary), what it does (the page's notes and tooltips)
VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("clean", "clean", "the model as it is"),
    ("wpos", f"W_pos averaged /{POS_GROUP}", f"W_pos averaged in groups of {POS_GROUP} consecutive positions"),
    (
        "extavg",
        f"ext. pos. averaged /{POS_GROUP}",
        f"the extended positional embeddings averaged in groups of {POS_GROUP} just before the head's layer",
    ),
    (
        "mask",
        "p-1 masked below",
        f"attention to the previous position masked at every {MASK_EVERY}th query in every layer below the head's",
    ),
    (
        "edit",
        "aggregator edited, x2",
        "the aggregator's pattern edited as in the post and its output doubled (on other prompts than the "
        "repeat-string one, every query of the aggregator attends two tokens back)",
    ),
)
VARIANT_KEYS = tuple(k for k, _, _ in VARIANTS)
Prompt = tuple[str, torch.Tensor, "dict | None"]  # (name, tokens [pos], the edit's mapping or None)


@dataclass
class ExplorerContext:
    """What every prompt's data shares: the aggregator, the extended positional embeddings per layer, and
    ``{variant: why it does not apply}`` for model-wide interventions."""

    aggregator: tuple[int, int]
    ext: dict[int, torch.Tensor] | None
    unavailable: dict[str, str] = field(default_factory=dict)


@measures_caller_model
def explorer_context(
    model, prompts: Sequence[Prompt] | None = None, aggregator: tuple[int, int] | None = None, ext_prompts: int = 8
) -> ExplorerContext:
    """The shared part of :func:`explorer_data`; ``aggregator`` defaults to the sharpest head on ``prompts``."""
    if aggregator is None:
        prompts = default_prompts(model) if prompts is None else prompts
        n_min = min(len(t) for _, t, _ in prompts)
        toks = torch.stack([t[:n_min] for _, t, _ in prompts])
        aggregator = choose_aggregator(rank_from_diagonals(diagonal_attention(model, toks, progress=False)))
    unavailable = {}
    if not has_learned_positions(model):
        unavailable["wpos"] = (
            f"this model has {position_kind(model)} positions: there is no learned W_pos to average "
            "(the intervention needs learned absolute positional embeddings)"
        )
    ext = extended_pos_embeddings_by_layer(model, range(model.cfg.n_layers), n_prompts=ext_prompts)
    return ExplorerContext((int(aggregator[0]), int(aggregator[1])), ext, unavailable)


def not_applicable(variant: str, layer: int, head: int, aggregator: tuple[int, int], n_tokens: int) -> str | None:
    """Why ``variant`` cannot change head ``(layer, head)`` on an ``n_tokens`` prompt, or ``None``."""
    name = head_name(layer, head)
    if variant == "mask" and layer == 0:
        return (
            f"{name} is in layer 0: there is no layer below it whose attention to the previous position could be masked"
        )
    if variant == "mask" and n_tokens <= MASK_EVERY:
        return f"the prompt's {n_tokens} tokens hold no query to mask (the first is position {MASK_EVERY})"
    if variant == "edit" and layer <= aggregator[0] and (layer, head) != tuple(aggregator):
        agg = head_name(*aggregator)
        return (
            f"{name} is in layer {layer}, not above the edited aggregator {agg} (layer {aggregator[0]}): "
            "the edit cannot reach what it reads"
        )
    return None


def _capture(model, tokens: torch.Tensor, edits=(), upto: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Patterns and raw (pre-mask) scores ``[layer, head, q, k]`` of layers ``0..upto`` (default: all; the pass stops
    there) on one prompt ``[pos]`` under ``edits``, through the hooked engine."""
    upto = model.cfg.n_layers - 1 if upto is None else upto
    layers = list(range(upto + 1))

    def step(state: dict, layer: int, acts: dict) -> None:
        state[layer] = (
            acts["pattern"][0].float().cpu(),
            raw_scores_from_qk(acts["q"], acts["k"], attn_scale(model.cfg, layer))[0].cpu(),
        )

    reads = {"q": layers, "k": layers, "pattern": layers}
    got = engine_for(model, "hooks").activations([tokens[None]], reads, Reduction(step, dict), edits)
    return torch.stack([got[l][0] for l in layers]), torch.stack([got[l][1] for l in layers])


def _z64(a: np.ndarray) -> str:
    """An array's bytes, zlib-compressed (what the browser's ``DecompressionStream('deflate')`` reads), base64."""
    return base64.b64encode(zlib.compress(np.ascontiguousarray(a).tobytes(), 6)).decode("ascii")


def _profile(pat: torch.Tensor) -> torch.Tensor:
    """Mean attention per offset ``[layer, head, n - 1]`` of patterns ``[layer, head, n, n]``, key 0 left out (the
    last offset, whose only entry is key 0, is dropped)."""
    n = pat.shape[-1]
    sums = torch.stack([diagonal_sums(p[None], n, exclude_bos=True) for p in pat])
    return (sums / diagonal_counts(n, n, exclude_bos=True))[..., : n - 1].float()


def _pack(pat: torch.Tensor, raw: torch.Tensor, na: list[str | None]) -> dict:
    """One prompt under one intervention, for the page. Heads in ``na`` (their reason) carry no numbers."""
    L, H = pat.shape[:2]
    ok = torch.tensor([r is None for r in na]).view(L, H)
    pat = torch.where(ok[..., None, None], pat, torch.zeros(()))
    raw = torch.where(ok[..., None, None], raw.double(), torch.zeros((), dtype=torch.float64))
    r = torch.nan_to_num(raw, nan=0.0, posinf=0.0, neginf=0.0)
    lo, hi = r.flatten(2).min(-1).values, r.flatten(2).max(-1).values
    span = (hi - lo).clamp_min(1e-12)
    q = ((r - lo[..., None, None]) / span[..., None, None] * 255).round().clamp(0, 255)
    prof = _profile(pat)
    st = prev_token_stats(prof)

    def stat(key: str, cast, digits: int = 6):
        v = st[key].double().flatten().tolist()
        return [
            None if na[i] is not None or not math.isfinite(v[i]) else cast(round(v[i], digits)) for i in range(L * H)
        ]

    return {
        "pat": _z64((pat.clamp(0, 1) * 255).round().to(torch.uint8).numpy()),
        "raw": _z64(q.to(torch.uint8).numpy()),
        "rawmin": [round(x, 5) for x in lo.flatten().tolist()],
        "rawmax": [round(x, 5) for x in hi.flatten().tolist()],
        "prof": _z64(torch.where(ok[..., None], prof, torch.full((), float("nan"))).numpy().astype("<f4")),
        "top": stat("top_offset", int),
        "ratio": stat("ratio", float),
        "prev": stat("prev_mass", float),
        "na": na,
    }


def _variant(model, tokens, key: str, ctx: ExplorerContext, mapping: dict | None) -> dict:  # one prompt, one variant
    L, H = model.cfg.n_layers, model.cfg.n_heads
    n = len(tokens)
    if key in ctx.unavailable:
        return {"na": [ctx.unavailable[key]] * (L * H)}
    na = [not_applicable(key, l, h, ctx.aggregator, n) for l in range(L) for h in range(H)]
    pat, raw = torch.zeros(2, L, H, n, n)  # [layer, head, q, k] each
    try:
        if key == "clean":
            pat, raw = _capture(model, tokens)
        elif key == "wpos":
            pat, raw = _capture(model, tokens, [average_pos_embed(POS_GROUP)])
        elif key in ("mask", "extavg"):
            for layer in range(L):  # a run per layer: each layer's heads under the intervention at their own layer
                if all(na[layer * H + h] is not None for h in range(H)):
                    continue
                if key == "mask":
                    iv = mask_previous_attention(MASK_EVERY, range(layer))
                else:
                    iv = average_ext_pos_embed(layer, POS_GROUP, ext=None if ctx.ext is None else ctx.ext[layer])
                p, r = _capture(model, tokens, [iv], upto=layer)
                pat[layer], raw[layer] = p[layer], r[layer]
        elif key == "edit":
            al, ah = ctx.aggregator
            edit = mapping if mapping is not None else {q: q - 2 for q in range(2, n)}
            pat, raw = _capture(model, tokens, [edit_head_pattern(al, ah, edit), scale_head_output(al, ah, 2.0)])
            # the edited rows, as the model uses them (a bridge whose hook_pattern edits go through hook_z
            # reports the unedited pattern there)
            for q, k in edit.items():
                pat[al, ah, q] = 0.0
                pat[al, ah, q, k] = 1.0
    except UsageError as e:  # the intervention cannot act on this model (a hook that feeds nothing, ...)
        ctx.unavailable[key] = str(e)
        return {"na": [str(e)] * (L * H)}
    return _pack(pat, raw, na)


@measures_caller_model
def explorer_data(
    model,
    prompts: Sequence[Prompt],
    label: str,
    aggregator: tuple[int, int] | None = None,
    ext_prompts: int = 8,
    context: ExplorerContext | None = None,
) -> dict:
    """Everything the page draws, as JSON-ready data. ``prompts``: ``(name, tokens [pos], edit mapping or None)``;
    ``context``: :func:`explorer_context` (given, the live server computes it once)."""
    if not prompts:
        raise UsageError("prompts", "none given", "at least one prompt")
    ctx = context or explorer_context(model, prompts, aggregator, ext_prompts)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = {
        "model": label,
        "n_layers": L,
        "n_heads": H,
        "n_ctx": model.cfg.n_ctx,
        "aggregator": head_name(*ctx.aggregator),
        "variants": [{"key": k, "label": s, "about": a} for k, s, a in VARIANTS],
        "prompts": [],
    }
    for name, tokens, mapping in prompts:
        tokens = to_token_list(model, [tokens])[0]  # checked: integer ids in the vocabulary, within n_ctx
        if len(tokens) < MIN_TOKENS:
            raise UsageError(
                "prompt",
                f"{name!r} has {len(tokens)} tokens",
                f"allowed {MIN_TOKENS}..{model.cfg.n_ctx} tokens",
                "the diagonal profile needs two offsets past key 0",
            )
        out["prompts"].append(
            {
                "name": name,
                "n": len(tokens),
                "tokens": [model.tokenizer.decode([int(t)]) for t in tokens],
                "variants": {k: _variant(model, tokens, k, ctx, mapping) for k in VARIANT_KEYS},
            }
        )
    out["unavailable"] = dict(ctx.unavailable)
    return out


def default_prompts(model, n_tokens: int = 64, seed: int = 0) -> list[Prompt]:
    """Up to three prompts of at most ``n_tokens``: held-out natural text, the post's repeat-string prompt (where it
    fits the context) and a random sequence repeated twice after BOS (an induction stripe at offset ``seg - 1``)."""
    from ..analysis.induction import repeated_random_tokens
    from ..analysis.prompts import documents, make_prompts

    n_tokens = min(n_tokens, model.cfg.n_ctx)
    docs, _ = documents("wikitext")
    out: list[Prompt] = [
        ("natural text (WikiText-2)", make_prompts(model.tokenizer, 1, n_tokens, seed=seed, docs=docs)[0], None)
    ]
    target = single_token_target(model.tokenizer, " ninja turtle pirate")
    try:
        rp = repeat_string_prompt(model.tokenizer, target, n_given=1, n_demos=1, seed=seed, max_len=model.cfg.n_ctx)
        out.append(("repeat-string prompt (the post's, one demonstration)", rp.tokens, edit_mapping(rp)))
    except ValueError:  # longer than the context
        pass
    seg = (n_tokens - 1) // 2
    if seg >= 2:
        rand = repeated_random_tokens(model, 1, seg, seed=seed)[0]
        out.append((f"random tokens repeated ({seg} + {seg})", rand, None))
    return out


def page_html(data: dict, live: bool = False) -> str:
    """The page with ``data`` inlined (``live``: it also offers a prompt box that posts to its server)."""
    payload = json.dumps({**data, "live": bool(live)}, separators=(",", ":"), allow_nan=False)
    title = html.escape(f"{data['model']}: attention explorer")
    return PAGE.replace("__TITLE__", title).replace("__DATA__", payload.replace("</", "<\\/"))


@measures_caller_model
def write_explorer(
    model,
    path: str | Path,
    label: str,
    prompts=None,
    aggregator: tuple[int, int] | None = None,
    context: ExplorerContext | None = None,
) -> Path:
    """Write the explorer of ``model`` on ``prompts`` (default :func:`default_prompts`) to ``path``."""
    prompts = default_prompts(model) if prompts is None else prompts
    data = explorer_data(model, prompts, label, aggregator, context=context)
    return write_whole_text(path, page_html(data))


# the page itself; page_html fills in __TITLE__ and __DATA__
PAGE = (Path(__file__).with_name("explorer.html")).read_text(encoding="utf-8")


class Explorer:
    """The explorer as an object a notebook shows inline: the page :func:`write_explorer` writes, in an ``iframe`` of
    its own (``srcdoc``) so its script and style never touch the notebook's; ``.save(path)`` writes it."""

    @measures_caller_model
    def __init__(self, model, label: str = "", prompts=None, aggregator: tuple[int, int] | None = None, height=900):
        prompts = default_prompts(model) if prompts is None else prompts
        name = label or str(getattr(model.cfg, "model_name", "") or "model")
        self.html = page_html(explorer_data(model, prompts, name, aggregator))
        self.height = int(height)

    def save(self, path: str | Path) -> Path:
        return write_whole_text(path, self.html)

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" style="width:100%;height:{self.height}px;'
            'border:1px solid #d0d7de" sandbox="allow-scripts"></iframe>'
        )


explore = Explorer  # explore(model, label, prompts, aggregator): the explorer shown inline in Jupyter
