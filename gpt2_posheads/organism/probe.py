"""The mechanism's vital signs during training, by the analysis layer's own definitions (the previous-token ratio,
the induction score, copy losses) through the engine, on a TransformerLens bridge over a copy of the model
(:func:`lens`)."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import torch.nn.functional as F

from ..analysis.diagonals import diagonal_attention, prev_token_stats
from ..analysis.induction import copy_losses, induction_from_patterns
from ..analysis.interventions import average_pos_embed
from ..model.engine import Reduction, engine_for
from ..model.validation import head_name
from .data import sample_batch


def lens(model, tokenizer_dir: str | Path):
    """A TransformerLens bridge over a copy of the Hugging Face ``model``, its weights processed as
    :func:`~gpt2_posheads.model.loading.load_model`'s, for the engine to run. The copy keeps the bridge's wrappers and
    its weight processing out of the module the optimiser steps."""
    from transformers import PreTrainedTokenizerFast

    from ..model.loading import boot_bridge

    tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    return boot_bridge("mini-gpt2", tokenizer, hf_model=copy.deepcopy(model).eval(), device="cpu")


@torch.no_grad()
def evaluate(model, stream: torch.Tensor, n_ctx: int, max_windows: int = 64) -> float:
    """Mean next-token loss over non-overlapping windows of ``stream`` (``model``: a TransformerLens model)."""
    n = min(max_windows, (len(stream) - 1) // n_ctx)
    x = stream[: n * n_ctx + 1]
    inp, tgt = x[:-1].view(n, n_ctx), x[1:].view(n, n_ctx)
    eng, losses = engine_for(model), []
    for i in range(0, n, 16):
        logits = eng.run(inp[i : i + 16])
        losses.append(F.cross_entropy(logits.flatten(0, 1), tgt[i : i + 16].flatten(), reduction="sum"))
    return float(torch.stack(losses).sum() / tgt.numel())


def _sharpest(mass: torch.Tensor, min_layer: int = 0) -> tuple[float, int, int]:
    """``(ratio, layer, head)`` of the sharpest previous-token head in layers ``>= min_layer`` (``inf`` if none)."""
    st = prev_token_stats(mass)
    heads = [(l, h) for l in range(min_layer, mass.shape[0]) for h in range(mass.shape[1])]
    return min(
        [(float("inf"), -1, -1)] + [(float(st["ratio"][l, h]), l, h) for l, h in heads if st["top_offset"][l, h] == 1]
    )


def _induction_step(state: dict, layer: int, pattern: torch.Tensor) -> None:
    state["ind"][layer] += induction_from_patterns(pattern, state["seg"]).cpu()


def _copy_step(state: dict, tokens: torch.Tensor, logits: torch.Tensor) -> None:
    state["first"], state["second"] = copy_losses(logits, tokens, state["seg"])


@torch.no_grad()
def probe(model, val_stream: torch.Tensor, n_ctx: int, vocab_hi: int, seed: int = 0, n: int = 8, seg: int = 50) -> dict:
    """The mechanism's vital signs on held-out text and on random tokens repeated twice (``model``: :func:`lens`):

    * ``prev_ratio_text`` / ``prev_ratio_random``: the sharpest previous-token head's ratio (the one definition,
      :func:`~gpt2_posheads.analysis.diagonals.prev_token_stats`) on ``n`` held-out text windows and ``n`` windows of
      random tokens; ``inf`` when no head has the previous diagonal greatest. ``prev_ratio_above0`` /
      ``prev_head_above0``: the same for the sharpest head above layer 0 on text.
    * ``prev_keep_avg10`` / ``prev_keep_avg10_above0``: the share of those heads' previous-token mass that survives
      averaging ``W_pos`` in groups of 10 (the post's L4H11 keeps nearly all of it; a head that reads the previous
      position off ``W_pos`` loses most of it: the toy route, seen early); NaN without positional embeddings.
    * ``induction``: the best head's score on ``BOS r r`` (``r`` of ``seg`` random tokens).
    * ``loss_first`` / ``loss_second``: next-token loss on each copy, its first token left out
      (:func:`~gpt2_posheads.analysis.induction.copy_losses`).
    """
    seg = min(seg, (n_ctx - 1) // 2)  # BOS r r must fit the context
    gen = torch.Generator().manual_seed(10_000 + seed)
    text = sample_batch(val_stream, n, n_ctx - 1, gen)[:, :n_ctx]
    mass = diagonal_attention(model, text, progress=False)
    mass_avg = None  # an all-zero W_pos (no positional embeddings): nothing to average
    if model.W_pos.abs().max() > 0:
        mass_avg = diagonal_attention(model, text, edits=[average_pos_embed(10)], progress=False)
    rand = torch.randint(1, vocab_hi, (n, n_ctx), generator=gen)
    rand[:, 0] = val_stream[0]
    r_rand = _sharpest(diagonal_attention(model, rand, progress=False))
    r = torch.randint(1, vocab_hi, (n, seg), generator=gen)
    rep = torch.cat([torch.full((n, 1), int(val_stream[0])), r, r], dim=1)
    state = {"ind": torch.zeros(model.cfg.n_layers, model.cfg.n_heads, dtype=torch.float64), "seg": seg}
    got = engine_for(model).patterns([rep], Reduction(_induction_step, dict, state, logits=_copy_step))
    ind = got["ind"] / (n * seg)  # [layer, head]
    il, ih = divmod(int(ind.argmax()), ind.shape[1])

    def keep(layer: int, head: int) -> float:
        if layer < 0 or mass_avg is None:
            return float("nan")
        return float(mass_avg[layer, head, 1] / mass[layer, head, 1])

    r_text, r_above = _sharpest(mass), _sharpest(mass, min_layer=1)
    name = lambda r: head_name(r[1], r[2]) if r[1] >= 0 else "none"  # noqa: E731
    return dict(
        prev_ratio_text=r_text[0],
        prev_head_text=name(r_text),
        prev_keep_avg10=keep(*r_text[1:]),
        prev_ratio_above0=r_above[0],
        prev_head_above0=name(r_above),
        prev_keep_avg10_above0=keep(*r_above[1:]),
        prev_ratio_random=r_rand[0],
        prev_head_random=name(r_rand),
        induction=float(ind.max()),
        induction_head=head_name(il, ih),
        loss_first=float(got["first"].mean()),
        loss_second=float(got["second"].mean()),
    )
