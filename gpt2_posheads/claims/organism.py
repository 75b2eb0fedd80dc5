"""A model organism's behaviour targets, measured and judged: does it have the mechanism the GPT-2 post studies?

Each target is a rule fixed here before anything is measured. "The sharp head" is the model's aggregator
(:func:`~gpt2_posheads.analysis.diagonals.choose_aggregator`: its sharpest previous-token head on held-out text).

* a sharp previous-token head: ratio <= 0.10 on held-out natural text (the post's rule) and <= 0.20 on random
  tokens (GPT-2's L4H11: 0.01);
* an induction head: score >= 0.4 (the post's rule); loss on the second copy of ``BOS r r`` <= 1.0 nat (its first
  token left out: nothing predicts it) against >= 7 on the first copy; the same without BOS is reported;
* copying on the post's repeat-string prompt: P(second word | first word) >= 0.5;
* held-out loss no worse than the reference model on the same text and tokenizer.

Whether the organism takes the post's *route* is not decided here: the post's own claims decide it, measured by the
claim scripts (:data:`gpt2_posheads.claims.gpt2_post.ROUTE_CLAIMS`), one rule each, in one place.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..analysis.diagonals import choose_aggregator, diagonal_attention, rank_from_diagonals
from ..analysis.geometry import neighbour_cosines
from ..analysis.induction import induction_scores
from ..analysis.measures import next_token_probs
from ..analysis.posembed import load_w_pos
from ..analysis.prompts import encode_stream
from ..analysis.repeat_prompt import repeat_string_prompt, single_token_target
from ..model.identity import has_learned_positions
from ..model.tokens import model_device
from ..model.validation import head_name
from .gpt2_post import CLAIMS as POST_CLAIMS
from .gpt2_post import COPY_THRESHOLD, SHARP_RATIO
from .verdicts import Claim, at_least, at_most, judge, predicate

# The reference language model: the same architecture and tokenizer trained on WikiText-2 alone for 1,600 steps
# (no synthetic phase), evaluated by :func:`heldout_loss` on the WikiText-2 held-out split
# (``split_docs(wikitext, 0.05, seed 0)``). An organism must model text at least as well as a plain LM of its size.
REFERENCE_HELDOUT = {"model": "a plain 4-layer LM, WikiText-2 alone, 1,600 steps", "loss": 4.29413}


def _copy_loss(v) -> tuple[bool, str]:
    first, second = v
    return second <= 1.0 and first >= 7.0, f"first copy {first:.2f} nats, second {second:.2f}"


def _heldout(v) -> tuple[bool, str]:
    loss, ref = v
    return loss <= ref + 5e-5, (
        f"held-out loss {loss:.4f} vs reference {ref:.4f} nats (perplexity "
        f"{torch.tensor(loss).exp():.1f} vs {torch.tensor(ref).exp():.1f})"
    )


RULES = {
    "prev_text": POST_CLAIMS["sharp_prev_head"].rule,
    "prev_random": at_most(2 * SHARP_RATIO, "sharpest previous-token ratio on random tokens"),
    "induction": POST_CLAIMS["induction_heads_exist"].rule,
    "copy_loss": predicate(
        "held if the loss on the second copy (its first token left out) is <= 1.0 nat and on the first >= 7 nats",
        _copy_loss,
    ),
    "copies": at_least(COPY_THRESHOLD, "P(second word | first word) on the repeat-string prompt"),
    "heldout": predicate("held if the held-out loss is <= the reference model's", _heldout),
}


def random_prompts(model, n: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """``[n, seq_len]`` prompts of uniform random tokens after BOS, special tokens excluded."""
    gen = torch.Generator().manual_seed(seed)
    special = set(getattr(model.tokenizer, "all_special_ids", []) or [])
    allowed = torch.tensor([t for t in range(model.cfg.d_vocab) if t not in special])
    t = allowed[torch.randint(0, len(allowed), (n, seq_len), generator=gen)]
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
            total += float(
                F.cross_entropy(
                    logits.float().flatten(0, 1), tgt[i : i + 8].flatten().to(logits.device), reduction="sum"
                )
            )
    return total / tgt.numel()


def heldout_stream(model, docs) -> torch.Tensor:
    """Held-out documents as one stream, each after ``<|endoftext|>``, exactly as the organism's training evaluates."""
    return encode_stream(model.tokenizer, docs)


def organism_targets(
    model,
    text_prompts: torch.Tensor,
    heldout: torch.Tensor | None = None,
    reference_loss: float | None = REFERENCE_HELDOUT["loss"],
    seed: int = 0,
    target: str = " ninja turtle pirate",
) -> tuple[list[Claim], dict]:
    """Judge the behaviour targets of the module doc on ``model``; returns the claims and the raw measurements.

    ``text_prompts`` ``[n, pos]``: held-out natural text; ``heldout``: a 1-D held-out token stream (the
    held-out loss is skipped when ``None``).
    """
    rank_text = rank_from_diagonals(diagonal_attention(model, text_prompts, progress=False))
    rand = random_prompts(model, len(text_prompts), text_prompts.shape[1], seed)
    rank_rand = rank_from_diagonals(diagonal_attention(model, rand, progress=False))
    prev_t, prev_r = rank_text[rank_text.is_prev_token], rank_rand[rank_rand.is_prev_token]
    r_text = float(prev_t.iloc[0].ratio) if len(prev_t) else float("inf")
    r_rand = float(prev_r.iloc[0].ratio) if len(prev_r) else float("inf")
    agg = head_name(*choose_aggregator(rank_text))
    m: dict = {
        "sharp_head": agg,
        "prev_text": {"head": agg if len(prev_t) else "none", "ratio": r_text},
        "prev_random": {"head": prev_r.iloc[0]["name"] if len(prev_r) else "none", "ratio": r_rand},
        "n_prev_heads_text": int(rank_text.is_prev_token.sum()),
    }
    if has_learned_positions(model):  # how smooth W_pos is (GPT-2: +0.99; the toy route's alternating: negative)
        m["w_pos_neighbour_cosine"] = dict(zip(("1-16", "16-64", "64-255"), neighbour_cosines(load_w_pos(model))))
    claims = [
        judge(
            "a sharp previous-token head on natural text",
            "GPT-2 L4H11: 0.01",
            RULES["prev_text"],
            m["prev_text"],
            r_text,
            key="prev_text",
            head=m["prev_text"]["head"],
            shown=f"ratio {r_text:.3g}" if len(prev_t) else "no previous-token head",
        ),
        judge(
            "... and on random tokens",
            "GPT-2 L4H11: sharp everywhere",
            RULES["prev_random"],
            m["prev_random"],
            r_rand,
            key="prev_random",
            head=m["prev_random"]["head"],
            shown=f"ratio {r_rand:.3g}" if len(prev_r) else "no previous-token head",
        ),
    ]

    # the repeat-string prompt: P(second | first)
    tok = model.tokenizer
    words = single_token_target(tok, target)
    rp = repeat_string_prompt(tok, words, n_given=1, seed=seed, max_len=model.cfg.n_ctx)
    p_copy = float(next_token_probs(model, rp.tokens)[0][rp.next_token_id(tok)])
    pair = f"P({rp.next_word.strip()} | {rp.words[0].strip()})"

    # induction and copying
    seg = min(50, (model.cfg.n_ctx - 1) // 2)
    ind = induction_scores(model, n_seqs=16, seg_len=seg, seed=seed)
    ind_nobos = induction_scores(model, n_seqs=16, seg_len=seg, seed=seed, bos=False)
    ind_head, ind_best = ind.best
    m.update(
        induction={"head": ind_head, "score": ind_best, "seg_len": seg},
        copy_loss={"first": ind.loss_first, "second": ind.loss_second},
        copy_loss_no_bos={"first": ind_nobos.loss_first, "second": ind_nobos.loss_second},
        copies={"target": words, pair: p_copy},
        induction_scores=ind.scores,
        ranking_text=rank_text,
    )
    claims += [
        judge(
            "an induction head",
            "GPT-2: several (L5H1, L6H9, ...)",
            RULES["induction"],
            m["induction"],
            ind_best,
            key="induction",
            head=ind_head,
            shown=f"score {ind_best:.3g}",
        ),
        judge(
            "it copies a repeated random sequence (after BOS)",
            "GPT-2: near-perfect second copy",
            RULES["copy_loss"],
            m["copy_loss"],
            (ind.loss_first, ind.loss_second),
            key="copy_loss",
            shown=f"{ind.loss_first:.3g} -> {ind.loss_second:.3g} nats (without BOS: {ind_nobos.loss_first:.3g} -> "
            f"{ind_nobos.loss_second:.3g})",
        ),
        judge(
            "it copies on the repeat-string prompt",
            "GPT-2: P(turtle) 0.99",
            RULES["copies"],
            m["copies"],
            p_copy,
            key="copies",
            shown=f"{pair} = {p_copy:.3g}",
        ),
    ]
    if heldout is not None and reference_loss is not None:
        loss = heldout_loss(model, heldout)
        m["heldout"] = {"loss": loss, "perplexity": float(torch.tensor(loss).exp()), "reference": REFERENCE_HELDOUT}
        claims.append(
            judge(
                "held-out loss no worse than the reference model",
                "-",
                RULES["heldout"],
                {"loss": loss, "reference": reference_loss},
                (loss, reference_loss),
                key="heldout",
                shown=f"{loss:.3f} nats (reference {reference_loss:.3f})",
            )
        )
    return claims, m
