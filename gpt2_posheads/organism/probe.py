"""The mechanism's vital signs during training, measured with the analysis layer's own definitions (the one
previous-token ratio, the induction score and copy losses), on a Hugging Face ``GPT2LMHeadModel``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..analysis.diagonals import diagonal_counts, diagonal_sums, prev_token_stats
from ..analysis.induction import copy_losses, induction_from_patterns
from ..analysis.interventions import group_average_rows
from ..model.validation import head_name
from .data import sample_batch


@torch.no_grad()
def evaluate(model, stream: torch.Tensor, n_ctx: int, max_windows: int = 64) -> float:
    """Mean next-token loss over non-overlapping windows of ``stream``."""
    was_training = model.training
    model.eval()
    n = min(max_windows, (len(stream) - 1) // n_ctx)
    x = stream[: n * n_ctx + 1]
    inp = x[:-1].view(n, n_ctx)
    tgt = x[1:].view(n, n_ctx)
    losses = []
    for i in range(0, n, 16):
        logits = model(inp[i : i + 16]).logits
        losses.append(F.cross_entropy(logits.flatten(0, 1), tgt[i : i + 16].flatten(), reduction="sum"))
    model.train(was_training)
    return float(torch.stack(losses).sum() / tgt.numel())


def _diagonal_masses(patterns: Sequence[torch.Tensor]) -> torch.Tensor:
    """``[layer, head, n_offsets]`` mean attention per diagonal (every offset, key 0 left out) from Hugging Face
    patterns ``[batch, head, q, k]`` per layer: the numbers of
    :func:`~gpt2_posheads.analysis.diagonals.diagonal_attention`."""
    n = patterns[0].shape[-1]
    return torch.stack([diagonal_sums(p, n, True) / (p.shape[0] * diagonal_counts(n, n, True)) for p in patterns])


def _sharpest(mass: torch.Tensor, min_layer: int = 0) -> tuple[float, int, int]:
    """``(ratio, layer, head)`` of the sharpest previous-token head in layers ``>= min_layer`` (``inf`` if none)."""
    st = prev_token_stats(mass)
    best = (float("inf"), -1, -1)
    for layer in range(min_layer, mass.shape[0]):
        for h in range(mass.shape[1]):
            if int(st["top_offset"][layer, h]) == 1:
                best = min(best, (float(st["ratio"][layer, h]), layer, h))
    return best


@torch.no_grad()
def probe(model, val_stream: torch.Tensor, n_ctx: int, vocab_hi: int, seed: int = 0, n: int = 8, seg: int = 50) -> dict:
    """The mechanism's vital signs on held-out text and on random tokens repeated twice.

    * ``prev_ratio_text`` / ``prev_ratio_random``: the sharpest previous-token head's ratio (the one
      definition, :func:`~gpt2_posheads.analysis.diagonals.prev_token_stats`) on ``n`` held-out text windows and
      ``n`` windows of random tokens; ``inf`` when no head has the previous diagonal greatest.
      ``prev_ratio_above0`` / ``prev_head_above0``: the same for the sharpest head above layer 0 on text.
    * ``prev_keep_avg10`` / ``prev_keep_avg10_above0``: the share of those heads' previous-token mass that
      survives averaging ``W_pos`` in groups of 10 (the post's L4H11 keeps nearly all of it; a head that reads
      the previous position off ``W_pos`` loses most of it: the toy route, seen early); NaN without positional
      embeddings.
    * ``induction``: the best head's score on ``BOS r r`` (``r`` of ``seg`` random tokens).
    * ``loss_first`` / ``loss_second``: next-token loss on each copy, its first token left out
      (:func:`~gpt2_posheads.analysis.induction.copy_losses`).
    """
    seg = min(seg, (n_ctx - 1) // 2)  # BOS r r must fit the context
    was_training = model.training
    model.eval()
    impl = model.config._attn_implementation
    model.set_attn_implementation("eager")
    gen = torch.Generator().manual_seed(10_000 + seed)
    text = sample_batch(val_stream, n, n_ctx - 1, gen)[:, :n_ctx]
    mass = _diagonal_masses(model(text, output_attentions=True).attentions)
    wpe = model.transformer.wpe.weight
    clean_wpe = wpe.detach().clone()
    wpe.copy_(group_average_rows(clean_wpe, 10))
    mass_avg = _diagonal_masses(model(text, output_attentions=True).attentions)
    wpe.copy_(clean_wpe)
    rand = torch.randint(1, vocab_hi, (n, n_ctx), generator=gen)
    rand[:, 0] = val_stream[0]
    r_rand = _sharpest(_diagonal_masses(model(rand, output_attentions=True).attentions))
    r = torch.randint(1, vocab_hi, (n, seg), generator=gen)
    rep = torch.cat([torch.full((n, 1), int(val_stream[0])), r, r], dim=1)
    out = model(rep, output_attentions=True)
    ind = torch.stack([induction_from_patterns(a, seg) for a in out.attentions]) / (n * seg)  # [layer, head]
    first, second = copy_losses(out.logits, rep, seg)
    model.set_attn_implementation(impl)
    model.train(was_training)
    il, ih = divmod(int(ind.argmax()), ind.shape[1])

    has_positions = bool(clean_wpe.abs().max() > 0)  # an all-zero W_pos (no positional embeddings): nothing to average

    def keep(layer: int, head: int) -> float:
        if layer < 0 or not has_positions:
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
        loss_first=float(first.mean()),
        loss_second=float(second.mean()),
    )
