"""Does a model take the GPT-2 post's route? The model organism's targets, measured and judged.

Each target is a rule fixed here before anything is measured. "The sharp head" is the model's aggregator
(:func:`~gpt2_posheads.analysis.diagonals.choose_aggregator`: its sharpest previous-token head on held-out
text), "early heads" the previous-token heads in lower layers, as in every script.

Behaviour:

* a sharp previous-token head: ratio <= 0.10 on held-out natural text and <= 0.20 on random tokens
  (GPT-2's L4H11: 0.01);
* an induction head: score >= 0.4; loss on the second copy of ``BOS r r`` <= 1.0 nat (its first token left
  out: nothing predicts it) against >= 7 on the first copy; the same without BOS is reported;
* copying on the post's repeat-string prompt: P(second word | first word) >= 0.5;
* held-out loss no worse than the reference model on the same text and tokenizer.

The route (the post's causal story):

* the sharp head sits in a layer >= 1 (it can read earlier heads);
* ``W_pos`` averaged in groups of 10: the sharp head keeps >= 80% of its previous-token mass, and the copy on
  the repeat-string prompt keeps >= 80% of its probability;
* masking attention to the previous position at every fifth query in all layers below the sharp head lowers
  its previous-token mass by >= 10% and by >= 3x what the averaging does;
* raw-score taxonomy: >= 2 early previous-token heads are self-suppressing, the sharp head is prev-boosting;
* averaging the extended positional embeddings just before the early head's layer moves its pattern >= 2x as
  far (Jensen-Shannon) as averaging them just before the sharp head's layer moves the sharp head's;
* editing the sharp head's pattern as in the post with output x2 moves the copy to the third word (the
  post's rule, :data:`gpt2_posheads.claims.gpt2_post.CLAIMS` ``edit_moves_copy``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..analysis.diagonals import choose_aggregator, diagonal_attention, early_prev_heads, rank_from_diagonals
from ..analysis.geometry import neighbour_cosines
from ..analysis.induction import induction_scores
from ..analysis.interventions import (
    average_ext_pos_embed,
    average_pos_embed,
    edit_head_pattern,
    hooks_for,
    mask_previous_attention,
    scale_head_output,
)
from ..analysis.measures import compare_head_patterns, next_token_probs
from ..analysis.posembed import load_w_pos
from ..analysis.prompts import encode_stream
from ..analysis.repeat_prompt import edit_mapping, repeat_string_prompt, single_token_target
from ..analysis.scores import classify_prev_heads, score_profile
from ..model.identity import has_learned_positions
from ..model.tokens import model_device
from ..model.validation import head_name
from .gpt2_post import CLAIMS as POST_CLAIMS
from .gpt2_post import is_prev_token_head
from .verdicts import Claim, Precondition, at_least, at_most, judge, predicate

# The reference language model: the same architecture and tokenizer trained on WikiText-2 alone for 1,600 steps
# (no synthetic phase), evaluated by :func:`heldout_loss` on the WikiText-2 held-out split
# (``split_docs(wikitext, 0.05, seed 0)``). An organism must model text at least as well as a plain LM of its size.
REFERENCE_HELDOUT = {"model": "a plain 4-layer LM, WikiText-2 alone, 1,600 steps", "loss": 4.29413}


def _copy_loss(v) -> tuple[bool, str]:
    first, second = v
    return second <= 1.0 and first >= 7.0, f"first copy {first:.2f} nats, second {second:.2f}"


def _keeps(v) -> tuple[bool, str]:
    clean, new = v
    share = new / clean if clean > 0 else float("nan")
    return clean > 0 and new >= 0.8 * clean, f"{clean:.3g} -> {new:.3g} ({share:.0%} kept; needs >= 80%)"


def _mask_beats_avg(v) -> tuple[bool, str]:
    drop_mask, drop_avg = v
    ok = drop_mask >= 0.10 and drop_mask >= 3 * max(drop_avg, 0.0)
    return ok, (
        f"masking lowers it {drop_mask:.0%}, W_pos averaging {drop_avg:.0%} (needs >= 10% and >= 3x the averaging)"
    )


def _two_self_suppressing(v) -> tuple[bool, str]:
    n_self, names = v
    return (
        n_self >= 2,
        f"{n_self} early previous-token head(s) self-suppressing ({', '.join(names) or 'none'}; needs >= 2)",
    )


def _heldout(v) -> tuple[bool, str]:
    loss, ref = v
    return loss <= ref + 5e-5, (
        f"held-out loss {loss:.4f} vs reference {ref:.4f} nats (perplexity "
        f"{torch.tensor(loss).exp():.1f} vs {torch.tensor(ref).exp():.1f})"
    )


RULES = {
    "prev_text": at_most(0.10, "sharpest previous-token ratio on held-out text"),
    "prev_random": at_most(0.20, "sharpest previous-token ratio on random tokens"),
    "above_layer0": predicate(
        "held if the sharp head sits in a layer >= 1", lambda v: (v[1] >= 1, f"{v[0]} in layer {v[1]}")
    ),
    "avg_head": predicate(
        "held if the sharp head keeps >= 80% of its previous-token mass under W_pos averaged in groups of 10", _keeps
    ),
    "avg_copy": predicate(
        "held if P(second word | first word) on the repeat-string prompt keeps >= 80% under W_pos "
        "averaged in groups of 10",
        _keeps,
    ),
    "mask": predicate(
        "held if masking attention to p-1 at every 5th query in every layer below the sharp head lowers "
        "its previous-token mass by >= 10% and by >= 3x what W_pos averaging (groups of 10) does",
        _mask_beats_avg,
    ),
    "early_self": predicate(
        "held if at least two previous-token heads below the sharp head are self-suppressing", _two_self_suppressing
    ),
    "agg_boost": predicate(
        "held if the sharp head is labelled prev_boosting", lambda v: (v == "prev_boosting", f"labelled {v}")
    ),
    "ext_avg": predicate(
        "held if averaging extended positional embeddings (groups of 10) just before the early head's "
        "layer moves its pattern >= 2x as far (JS) as averaging just before the sharp head's layer "
        "moves the sharp head's",
        lambda v: (v[0] >= 2 * v[1], f"JS {v[0]:.3g} (early) vs {v[1]:.3g} (sharp head)"),
    ),
    "edit": POST_CLAIMS["edit_moves_copy"].rule,
    "induction": at_least(0.40, "best induction score"),
    "copy_loss": predicate(
        "held if the loss on the second copy (its first token left out) is <= 1.0 nat and on the first >= 7 nats",
        _copy_loss,
    ),
    "copies": at_least(0.50, "P(second word | first word) on the repeat-string prompt"),
    "heldout": predicate("held if the held-out loss is <= the reference model's", _heldout),
}
# the targets that say which route the sharp head takes (the contrast organism must fail these)
ROUTE_TARGETS = ("above_layer0", "avg_head", "avg_copy", "mask", "early_self", "agg_boost", "ext_avg", "edit")


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
    """Judge the targets of the module doc on ``model``; returns the claims and the raw measurements.

    ``text_prompts`` ``[n, pos]``: held-out natural text; ``heldout``: a 1-D held-out token stream (the
    held-out loss is skipped when ``None``).
    """
    diag = diagonal_attention(model, text_prompts, progress=False)
    rank_text = rank_from_diagonals(diag)
    rand = random_prompts(model, len(text_prompts), text_prompts.shape[1], seed)
    rank_rand = rank_from_diagonals(diagonal_attention(model, rand, progress=False))
    prev_t, prev_r = rank_text[rank_text.is_prev_token], rank_rand[rank_rand.is_prev_token]
    r_text = float(prev_t.iloc[0].ratio) if len(prev_t) else float("inf")
    r_rand = float(prev_r.iloc[0].ratio) if len(prev_r) else float("inf")
    agg_l, agg_h = choose_aggregator(rank_text)
    agg = head_name(agg_l, agg_h)
    agg_row = rank_text.set_index("name").loc[agg]
    is_prev = is_prev_token_head(agg, int(agg_row.top_offset), float(agg_row.ratio))
    early = early_prev_heads(rank_text, agg_l)
    m: dict = {
        "sharp_head": agg,
        "sharp_layer": agg_l,
        "prev_text": {"head": agg, "ratio": r_text},
        "prev_random": {"head": prev_r.iloc[0]["name"] if len(prev_r) else "none", "ratio": r_rand},
        "n_prev_heads_text": int(rank_text.is_prev_token.sum()),
        "early_prev_heads": early.name.tolist(),
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
            head=agg,
            shown=f"ratio {r_text:.3g}",
        ),
        judge(
            "... and on random tokens",
            "GPT-2 L4H11: sharp everywhere",
            RULES["prev_random"],
            m["prev_random"],
            r_rand,
            key="prev_random",
            head=m["prev_random"]["head"],
            shown=f"ratio {r_rand:.3g}",
        ),
        judge(
            "the sharp head sits above layer 0",
            "L4H11: layer 4",
            RULES["above_layer0"],
            {"head": agg, "layer": agg_l},
            (agg, agg_l),
            key="above_layer0",
            head=agg,
            shown=f"layer {agg_l}",
            preconditions=[is_prev],
        ),
    ]

    # the repeat-string prompt: P(second | first), clean and with W_pos averaged
    tok = model.tokenizer
    words = single_token_target(tok, target)
    rp = repeat_string_prompt(tok, words, n_given=1, seed=seed, max_len=model.cfg.n_ctx)
    second_id = rp.next_token_id(tok)
    p_copy = float(next_token_probs(model, rp.tokens)[0][second_id])
    pair = f"P({rp.next_word.strip()} | {rp.words[0].strip()})"
    learned = has_learned_positions(model)
    wpos_pre = Precondition(
        "the model has learned absolute positions (W_pos)",
        learned,
        "the model has no learned W_pos: the W_pos targets do not apply",
    )
    avg = average_pos_embed(10).hooks(model) if learned else []
    prev_clean = float(diag[agg_l, agg_h, 1])
    prev_avg = (
        float(diagonal_attention(model, text_prompts, fwd_hooks=avg, progress=False)[agg_l, agg_h, 1])
        if learned
        else float("nan")
    )
    p_copy_avg = float(next_token_probs(model, rp.tokens, avg)[0][second_id]) if learned else float("nan")
    m["wpos_avg10"] = {"head": agg, "prev_mass": [prev_clean, prev_avg], pair: [p_copy, p_copy_avg]}
    claims += [
        judge(
            "the sharp head survives W_pos averaged in groups of 10",
            "L4H11 unaffected",
            RULES["avg_head"],
            {"prev_mass": [prev_clean, prev_avg]},
            (prev_clean, prev_avg),
            key="avg_head",
            head=agg,
            preconditions=[wpos_pre, is_prev],
            shown=f"keeps {prev_avg / prev_clean:.0%}" if prev_clean > 0 else "",
        ),
        judge(
            "... and so does copying",
            "GPT-2: 99%+ kept",
            RULES["avg_copy"],
            {pair: [p_copy, p_copy_avg]},
            (p_copy, p_copy_avg),
            key="avg_copy",
            preconditions=[
                wpos_pre,
                Precondition(
                    "the model copies on the repeat-string prompt",
                    p_copy >= 0.5,
                    f"it does not copy ({pair} = {p_copy:.3g})",
                ),
            ],
            shown=f"keeps {p_copy_avg / p_copy:.0%}" if p_copy > 0 else "",
        ),
    ]

    # masking the previous position in every layer below the sharp head
    below = Precondition(
        "the sharp head sits above layer 0", agg_l > 0, f"{agg} sits in layer 0: no layer below to mask"
    )
    if agg_l > 0:
        masked = float(
            diagonal_attention(
                model, text_prompts, progress=False, fwd_hooks=mask_previous_attention(5, range(agg_l)).hooks(model)
            )[agg_l, agg_h, 1]
        )
    else:
        masked = float("nan")
    drop_mask = 1 - masked / prev_clean if prev_clean > 0 else float("nan")
    drop_avg = 1 - prev_avg / prev_clean if prev_clean > 0 and learned else 0.0
    m["mask_below"] = {"head": agg, "prev_mass": [prev_clean, masked], "drop": drop_mask, "wpos_avg_drop": drop_avg}
    claims.append(
        judge(
            "masking p-1 in the layers below disrupts it, far more than W_pos averaging",
            "L4H11 visibly disrupted; unaffected by W_pos averaging",
            RULES["mask"],
            m["mask_below"],
            (drop_mask, drop_avg),
            key="mask",
            head=agg,
            preconditions=[below, is_prev],
            shown=f"{drop_mask:.0%} lower (averaging {drop_avg:.0%})" if agg_l > 0 else "",
        )
    )

    # raw-score taxonomy
    labels = classify_prev_heads(score_profile(model, text_prompts)).set_index("name")["label"]
    self_sup = [n for n in early.name if labels[n] == "self_suppressing"]
    m["taxonomy"] = {"sharp_head": [agg, labels[agg]], "early": {n: labels[n] for n in early.name}}
    claims += [
        judge(
            "early previous-token heads are self-suppressing",
            "six of them in GPT-2",
            RULES["early_self"],
            m["taxonomy"]["early"],
            (len(self_sup), self_sup),
            key="early_self",
            head=",".join(early.name),
            preconditions=[below, is_prev],  # "below the sharp head" means nothing when it is no previous-token head
            shown=f"{len(self_sup)} of {len(early)}",
        ),
        judge(
            "the sharp head boosts the previous token",
            "L4H11: bright p-1 line",
            RULES["agg_boost"],
            {"head": agg, "label": labels[agg]},
            labels[agg],
            key="agg_boost",
            head=agg,
            preconditions=[below, is_prev],
            shown=str(labels[agg]).replace("_", "-"),
        ),
    ]

    # extended positional embeddings averaged just before the early head's layer vs the sharp head's
    has_early = Precondition(
        "a previous-token head sits below the sharp head",
        len(early) > 0,
        f"no previous-token head below {agg} (layer {agg_l})",
    )
    if len(early):
        el, eh = int(early.iloc[0]["layer"]), int(early.iloc[0]["head"])
        js_e = compare_head_patterns(
            model, text_prompts[:8], (el, eh), average_ext_pos_embed(el, 10, seed=seed).hooks(model)
        )["js_divergence"]
        js_a = compare_head_patterns(
            model, text_prompts[:8], (agg_l, agg_h), average_ext_pos_embed(agg_l, 10, seed=seed).hooks(model)
        )["js_divergence"]
        m["ext_avg10"] = {"early": head_name(el, eh), "js_early": js_e, "sharp": agg, "js_sharp": js_a}
    else:
        js_e = js_a = float("nan")
    claims.append(
        judge(
            "averaging extended embeddings hurts the early head far more than the sharp head",
            "L2H2 badly, L4H11 barely",
            RULES["ext_avg"],
            m.get("ext_avg10", {}),
            (js_e, js_a),
            key="ext_avg",
            head=",".join(filter(None, [m.get("ext_avg10", {}).get("early"), agg])),
            preconditions=[has_early],
            shown=f"JS {js_e:.3g} vs {js_a:.3g}" if len(early) else "",
        )
    )

    # the post's edit of the sharp head's pattern, output x2
    rp_edit = rp
    third_id = tok(rp_edit.words[2], add_special_tokens=False)["input_ids"][0]
    clean = next_token_probs(model, rp_edit.tokens)[0]
    edited = next_token_probs(
        model,
        rp_edit.tokens,
        hooks_for(model, edit_head_pattern(agg_l, agg_h, edit_mapping(rp_edit)), scale_head_output(agg_l, agg_h, 2.0)),
    )[0]
    v = (float(clean[third_id]), float(edited[second_id]), float(edited[third_id]))
    m["edit_x2"] = {"P(third) clean": v[0], "P(second) edited": v[1], "P(third) edited": v[2]}
    claims.append(
        judge(
            "editing the sharp head's pattern (output x2) moves the copy to the third word",
            "P(pirate) 65%, P(turtle) 26%",
            RULES["edit"],
            m["edit_x2"],
            v,
            key="edit",
            head=agg,
            preconditions=[
                Precondition(
                    "the model copies on the repeat-string prompt",
                    p_copy >= 0.5,
                    f"it does not copy ({pair} = {p_copy:.3g})",
                ),
                is_prev,
            ],
            shown=f"P(third) {v[0]:.3g} -> {v[2]:.3g}",
        )
    )

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
