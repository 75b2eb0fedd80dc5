"""A model organism's behaviour targets, measured (:func:`measure_targets`): the numbers
:func:`gpt2_posheads.claims.organism.judge_targets` judges (rules fixed there before any model was built or trained).

* the previous-token ranking on held-out natural text and on random tokens (the sharpest previous-token head and its
  ratio on each; the aggregator is the one on text, :func:`~gpt2_posheads.analysis.diagonals.choose_aggregator`);
* induction: the best induction score, and the loss on the first and second copy of repeated random segments, after BOS
  and without it (:func:`~gpt2_posheads.analysis.induction.induction_scores`);
* copying: P(second word | first word) on the post's repeat-string prompt;
* the held-out loss over non-overlapping windows of the held-out stream (:func:`heldout_loss`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...analysis.diagonals import choose_aggregator, diagonal_attention, rank_from_diagonals
from ...analysis.geometry import neighbour_cosines
from ...analysis.induction import induction_scores
from ...analysis.measures import next_token_probs
from ...analysis.posembed import load_w_pos
from ...analysis.repeat_prompt import repeat_string_prompt, single_token_target
from ...claims.organism import REFERENCE_HELDOUT, Measured, Sharpest
from ...model.engine import engine_for
from ...model.loading import has_learned_positions
from ...model.validation import head_name


def random_prompts(model, n: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """``[n, seq_len]`` uniform random tokens after BOS, special tokens excluded."""
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
    total, eng = 0.0, engine_for(model)
    for i in range(0, n, 8):
        logits = eng.run(inp[i : i + 8]).float().flatten(0, 1)
        total += float(F.cross_entropy(logits, tgt[i : i + 8].flatten().to(logits.device), reduction="sum"))
    return total / tgt.numel()


def _sharpest(ranking) -> Sharpest:
    prev = ranking[ranking.is_prev_token]
    return Sharpest(prev.iloc[0]["name"], float(prev.iloc[0].ratio)) if len(prev) else Sharpest(None, float("inf"))


def measure_targets(
    model,
    text_prompts: torch.Tensor,
    heldout: torch.Tensor | None = None,
    seed: int = 0,
    target: str = " ninja turtle pirate",
) -> tuple[Measured, dict]:
    """``(what the targets are judged on, every measurement for the report)`` on ``text_prompts`` ``[n, pos]`` of
    held-out text and ``heldout``, a 1-D held-out token stream (``None``: no loss). The report adds the aggregator
    (``sharp_head``), the previous-token heads on text, how smooth ``W_pos`` is, the induction scores, the ranking."""
    rand = random_prompts(model, len(text_prompts), text_prompts.shape[1], seed)
    rank_text, rank_rand = (
        rank_from_diagonals(diagonal_attention(model, p, progress=False)) for p in (text_prompts, rand)
    )
    # the repeat-string prompt: P(second | first)
    tok, words = model.tokenizer, single_token_target(model.tokenizer, target)
    rp = repeat_string_prompt(tok, words, n_given=1, seed=seed, max_len=model.cfg.n_ctx)
    p_copy = float(next_token_probs(model, rp.tokens)[0][rp.next_token_id(tok)])
    # induction and copying
    seg = min(50, (model.cfg.n_ctx - 1) // 2)
    ind = induction_scores(model, n_seqs=16, seg_len=seg, seed=seed)
    ind_nobos = induction_scores(model, n_seqs=16, seg_len=seg, seed=seed, bos=False)
    ind_head, ind_best = ind.best
    measured = Measured(
        prev_text=_sharpest(rank_text),  # on text: the aggregator, where there is one
        prev_random=_sharpest(rank_rand),
        induction_head=ind_head,
        induction_score=ind_best,
        seg_len=seg,
        copy_loss=(ind.loss_first, ind.loss_second),
        copy_loss_no_bos=(ind_nobos.loss_first, ind_nobos.loss_second),
        words=words,
        pair=f"P({rp.next_word.strip()} | {rp.words[0].strip()})",
        p_copy=p_copy,
        heldout_loss=heldout_loss(model, heldout) if heldout is not None else None,
    )
    n = measured.numbers()
    m: dict = {"sharp_head": head_name(*choose_aggregator(rank_text)), "prev_text": n["prev_text"]}
    m.update(prev_random=n["prev_random"], n_prev_heads_text=int(rank_text.is_prev_token.sum()))
    if has_learned_positions(model):  # how smooth W_pos is (GPT-2: +0.99; the toy route's alternating: negative)
        m["w_pos_neighbour_cosine"] = dict(zip(("1-16", "16-64", "64-255"), neighbour_cosines(load_w_pos(model))))
    m.update({k: n[k] for k in ("induction", "copy_loss", "copy_loss_no_bos", "copies")})
    m.update(induction_scores=ind.scores, ranking_text=rank_text)
    if measured.heldout_loss is not None:
        loss = measured.heldout_loss
        m["heldout"] = {"loss": loss, "perplexity": float(torch.tensor(loss).exp()), "reference": REFERENCE_HELDOUT}
    return measured, m
