"""Does a model have the GPT-2 post's mechanism? The model organism's targets, measured and judged.

Each target is a rule fixed here before anything is measured (see :func:`organism_targets`):

* a sharp previous-token head: ratio (second-greatest / previous diagonal) <= 0.10 on held-out natural
  text and <= 0.20 on random tokens (GPT-2's L4H11: 0.01);
* an induction head: score >= 0.4 (mean attention from the second copy of a random sequence to the
  token after the first occurrence), loss on the second copy <= 1.0 nat against >= 7 on the first;
* copying on the post's repeat-string prompt: P(second word | first word) >= 0.5;
* held-out loss no worse than a reference (the previous shipped model on the same text and tokenizer).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..analysis.diagonals import diagonal_attention, rank_from_diagonals
from ..analysis.induction import induction_scores
from ..analysis.measures import next_token_probs
from ..analysis.repeat_prompt import repeat_string_prompt, single_token_target
from ..model.tokens import model_device
from .verdicts import Claim, at_least, at_most, judge, predicate

# The model shipped before the organism (4 layers, WikiText-2 only, 1,600 steps), evaluated by
# :func:`heldout_loss` on the WikiText-2 held-out split (``split_docs(wikitext, 0.05, seed 0)``) with the
# same tokenizer: the bar the organism's held-out loss must not exceed.
REFERENCE_HELDOUT = {"model": "mini-gpt2 v1 (WikiText-2 only, 1,600 steps)", "loss": 4.29413}

RULES = {
    "prev_text": at_most(0.10, "sharpest previous-token ratio on held-out text"),
    "prev_random": at_most(0.20, "sharpest previous-token ratio on random tokens"),
    "induction": at_least(0.40, "best induction score"),
    "copy_loss": predicate("held if the loss on the second copy is <= 1.0 nat and on the first >= 7 nats",
                           lambda v: (v[1] <= 1.0 and v[0] >= 7.0, f"first copy {v[0]:.2f} nats, second {v[1]:.2f}")),
    "copies": at_least(0.50, "P(second word | first word) on the repeat-string prompt"),
    "heldout": predicate("held if the held-out loss is <= the reference model's",
                         lambda v: (v[0] <= v[1] + 5e-5, f"held-out loss {v[0]:.4f} vs reference {v[1]:.4f} nats "
                                                         f"(perplexity {torch.tensor(v[0]).exp():.1f} vs "
                                                         f"{torch.tensor(v[1]).exp():.1f})")),
}


def random_prompts(model, n: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """``[n, seq_len]`` prompts of uniform random non-special tokens after BOS."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.randint(1, model.cfg.d_vocab, (n, seq_len), generator=gen)
    t[:, 0] = model.tokenizer.bos_token_id
    return t


def heldout_loss(model, tokens: torch.Tensor, n_ctx: int | None = None, max_windows: int = 64) -> float:
    """Mean next-token loss (nats) over non-overlapping ``n_ctx`` windows of a 1-D token stream."""
    n_ctx = n_ctx or model.cfg.n_ctx
    n = min(max_windows, (len(tokens) - 1) // n_ctx)
    x = tokens[: n * n_ctx + 1]
    inp, tgt = x[:-1].view(n, n_ctx), x[1:].view(n, n_ctx)
    total = 0.0
    with torch.inference_mode():
        for i in range(0, n, 8):
            logits = model(inp[i : i + 8].to(model_device(model)))
            total += float(F.cross_entropy(logits.float().flatten(0, 1), tgt[i : i + 8].flatten().to(logits.device),
                                           reduction="sum"))
    return total / tgt.numel()


def heldout_stream(model, docs) -> torch.Tensor:
    """Held-out documents as one stream, each after ``<|endoftext|>``, exactly as :mod:`mini_gpt2` evaluates."""
    from ..organism.train import encode_stream

    return encode_stream(model.tokenizer, docs)


def organism_targets(model, text_prompts: torch.Tensor, heldout: torch.Tensor | None = None,
                     reference_loss: float | None = REFERENCE_HELDOUT["loss"], seed: int = 0,
                     target: str = " ninja turtle pirate") -> tuple[list[Claim], dict]:
    """Judge the targets of the module doc on ``model``; returns the claims and the raw measurements.

    ``text_prompts`` ``[n, pos]``: held-out natural text; ``heldout``: a 1-D held-out token stream
    (skipped when ``None``).
    """
    rank_text = rank_from_diagonals(diagonal_attention(model, text_prompts, max_offset=32, progress=False))
    rand = random_prompts(model, len(text_prompts), text_prompts.shape[1], seed)
    rank_rand = rank_from_diagonals(diagonal_attention(model, rand, max_offset=32, progress=False))

    def sharpest(rank):
        prev = rank[rank.is_prev_token]
        return (prev.iloc[0]["name"], float(prev.iloc[0].ratio)) if len(prev) else ("none", float("inf"))

    (h_text, r_text), (h_rand, r_rand) = sharpest(rank_text), sharpest(rank_rand)
    seg = min(50, (model.cfg.n_ctx - 1) // 2)
    ind = induction_scores(model, n_seqs=16, seg_len=seg, seed=seed)
    ind_head, ind_best = ind.best
    tgt = single_token_target(model.tokenizer, target)
    rp = repeat_string_prompt(model.tokenizer, tgt, n_given=1, seed=seed, max_len=model.cfg.n_ctx)
    p_copy = float(next_token_probs(model, rp.tokens)[0][rp.next_token_id(model.tokenizer)])
    m = {"prev_text": {"head": h_text, "ratio": r_text}, "prev_random": {"head": h_rand, "ratio": r_rand},
         "n_prev_heads_text": int(rank_text.is_prev_token.sum()),
         "induction": {"head": ind_head, "score": ind_best, "seg_len": seg},
         "copy_loss": {"first": ind.loss_first, "second": ind.loss_second},
         "copies": {"target": tgt, f"P({rp.next_word.strip()} | {rp.words[0].strip()})": p_copy},
         "induction_scores": ind.scores, "ranking_text": rank_text}
    claims = [
        judge("a sharp previous-token head on natural text", "GPT-2 L4H11: 0.01", RULES["prev_text"], m["prev_text"], r_text),
        judge("... and on random tokens", "GPT-2 L4H11: sharp everywhere", RULES["prev_random"], m["prev_random"], r_rand),
        judge("an induction head", "GPT-2: several (L5H1, L6H9, ...)", RULES["induction"], m["induction"], ind_best),
        judge("it copies a repeated random sequence", "GPT-2: near-perfect second copy", RULES["copy_loss"],
              m["copy_loss"], (ind.loss_first, ind.loss_second)),
        judge("it copies on the repeat-string prompt", "GPT-2: P(turtle) 0.99", RULES["copies"], m["copies"], p_copy),
    ]
    if heldout is not None and reference_loss is not None:
        loss = heldout_loss(model, heldout)
        m["heldout"] = {"loss": loss, "perplexity": float(torch.tensor(loss).exp()), "reference": REFERENCE_HELDOUT}
        claims.append(judge("held-out loss no worse than the previous shipped model", "-", RULES["heldout"],
                            {"loss": loss, "reference": reference_loss}, (loss, reference_loss)))
    return claims, m
