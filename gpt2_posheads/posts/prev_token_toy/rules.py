"""Post 000 and its claims (previous-token toy), declared before any run, each rule made from its parameters; the
default run (:mod:`.copying`) and the ``--robustness`` grid judge the same declarations
(:mod:`gpt2_posheads.claims.toy`)."""

from __future__ import annotations

import numpy as np

from ...claims.catalogue import Post, register_post
from ...claims.toy import (
    FLOOR_WORDS,
    margin_words,
    num,
    pair_rule,
    rel_ppl_floor,
    seeds_words,
    sweep_trend,
    toy_claim,
)
from ...claims.verdicts import Rule

POST = register_post(
    Post(
        key="000",
        title="Sparse attention 4: previous token head",
        author="Ziming Liu",
        date="2026-01-13",
        seed="000_0f0fdff7da957e3e.txt",
        subject="prev_token_toy",
        needs_model=False,
        order=3,
    )
)


def learned_rule(max_ppl: float, max_rel: float) -> Rule:
    """Learned: final perplexity <= ``max_ppl``, or relative perplexity (ppl - 1) / V <= ``max_rel``. Value:
    ``(final perplexity, V)``."""

    def decide(value):
        ppl, V = value
        rel = (ppl - 1) / V
        return bool(ppl <= max_ppl or rel <= max_rel), (
            f"final perplexity {num(ppl, 4)} {'<=' if ppl <= max_ppl else '>'} {max_ppl:g}; relative perplexity "
            f"(ppl-1)/V {num(rel)} {'<=' if rel <= max_rel else '>'} {max_rel:g} (needs either)"
        )

    return Rule(
        f"held if the final perplexity with positional embeddings is <= {max_ppl:g} or its relative perplexity "
        f"(ppl-1)/V <= {max_rel:g}",
        decide,
    )


def fails_rule(min_rel: float) -> Rule:
    """Not learned: relative perplexity (ppl - 1) / V >= ``min_rel``. Value: ``(final perplexity, V)``."""

    def decide(value):
        ppl, V = value
        rel = (ppl - 1) / V
        ok = bool(rel >= min_rel)
        return ok, (
            f"relative perplexity (ppl-1)/V {num(rel)} {'>=' if ok else '<'} {min_rel:g} (needs >= {min_rel:g}; "
            f"final perplexity {num(ppl)} of V = {V})"
        )

    return Rule(
        f"held if the final relative perplexity (ppl-1)/V without positional embeddings is >= {min_rel:g}", decide
    )


def separation_rule() -> Rule:
    """Value: ``(each position's projection on s (positions 0..C-1), the previous token's position C-2)``."""

    def decide(value):
        proj, prev = value
        C = len(proj)
        others = {f"p_{i - C + 1}": proj[i] for i in range(C) if i != prev}
        ok = all(np.sign(o) != np.sign(proj[prev]) for o in others.values())
        return ok, (
            f"p_-1 projects to {num(proj[prev], 2)} on s; {', '.join(f'{k} {num(v, 2)}' for k, v in others.items())} "
            f"(each needs the opposite sign)"
        )

    return Rule("held if the projection of p_-1 on s has the opposite sign of every other position's", decide)


def sign_rule(learned: bool) -> Rule:
    """s^T W_Q W_K^T s < 0. Value: the number; with ``learned`` (the grid, where learning is part of the rule, not a
    precondition): ``(final perplexity, V, the number)``."""

    def negative(value):
        ok = bool(value < 0)
        return ok, f"s^T W_Q W_K^T s = {num(value)} {'<' if ok else '>='} 0 (needs < 0; the post: -1.1)"

    def decide(value):
        if not learned:
            return negative(value)
        ppl, V, value = value
        ok, why = LEARNED.rule.decide((ppl, V))
        return negative(value) if ok else (False, f"the task is not learned: {why}")

    return Rule(
        f"held if {'the model learned the task (rule above) and ' if learned else ''}s^T W_Q W_K^T s < 0", decide
    )


def mono_rule(up: bool, name: str, values: tuple, one_seed: bool) -> Rule:
    """(ppl - 1) / V rises (``up``) or falls along the sweep of ``name``. Value: ``(relative perplexity of each seed
    at each x, the xs, the vocabulary at each x)``."""

    def decide(value):
        rel, xs, Vs = value
        return sweep_trend(rel, xs, up, "relative perplexity", name, floor=[rel_ppl_floor(V) for V in Vs])

    sweep = f"{name} ({', '.join(map(str, values))})" if values else name
    return Rule(
        f"{seeds_words(one_seed)}held if (ppl-1)/V, mean over seeds, {'rises' if up else 'falls'} at every step of "
        f"the {sweep} sweep {margin_words()}; {FLOOR_WORDS}",
        decide,
    )


def lr_rule(V: int, faster: bool) -> Rule:
    """Mean eval loss over training lower (``faster``) or higher at lr 0.1 than at 0.01. Value: ``(values at lr 0.1,
    values at lr 0.01)`` over seeds."""
    return pair_rule(
        f"held if the mean eval loss over training, mean over seeds, is {'lower' if faster else 'higher'} at lr 0.1 "
        f"than at 0.01 (V={V}) {margin_words()}",
        "mean eval loss over training",
        not faster,
        lambda v: (v[1], v[0], {}),
        ("lr 0.01", "lr 0.1"),
        unit=" nats",
    )


def spikes_rule(seed: int) -> Rule:
    """Value: ``{run label: (loss spikes, order swaps)}`` of the lr-0.1 runs of ``seed``."""

    def decide(stats):
        ok = any(s > 0 and w > 0 for s, w in stats.values())
        listed = "; ".join(f"{k}: {s} loss spike(s), {w} order swap(s)" for k, (s, w) in stats.items())
        return ok, f"{listed} (needs both in one run)"

    return Rule(
        f"held if some lr-0.1 run (seed {seed}) has both a loss spike and a token-order swap (swaps counted once "
        "tokens are separated)",
        decide,
    )


LEARNED = toy_claim(
    "learned_with_pos_emb",
    "the task can be reasonably learned with positional embeddings",
    "learned (plot: perplexity near 1)",
    learned_rule,
    max_ppl=1.5,
    max_rel=0.05,
)
FAILS = toy_claim(
    "fails_without_pos_emb",
    "it cannot be learned without positional embeddings",
    "not learned",
    fails_rule,
    min_rel=0.5,
)
SEPARATION = toy_claim(
    "separation_direction",
    "p_-1 lies on one side of a direction s, p_0, p_-2, p_-3 on the other",
    "s ~ (1, 1)",
    separation_rule(),
)
SIGN = toy_claim("sT_WQWKT_s_negative", "s^T W_Q W_K^T s < 0", -1.1, sign_rule, learned=False)
MONO = {
    name: toy_claim(
        f"rel_ppl_{'up' if up else 'down'}_with_{name}",
        f"relative perplexity {'rises' if up else 'falls'} with {name}",
        "increases" if up else "decreases",
        mono_rule,
        up=up,
        name=name,
        values=(),
        one_seed=False,
    )
    for name, up in (("V", True), ("C", True), ("n_embd", False))
}
LR = {
    v: toy_claim(
        f"lr0.1_{'faster' if faster else 'slower'}_at_V{v}",
        f"lr 0.1 learns {'faster' if faster else 'slower'} than 0.01",
        "faster" if faster else "slower",
        lr_rule,
        V=v,
        faster=faster,
    )
    for v, faster in ((30, True), (100, False))
}
SPIKES = toy_claim(
    "spikes_and_swaps_at_large_lr",
    "at lr 0.1 loss spikes come with token-order swaps",
    "a spike around step 6000 with a swap",
    spikes_rule,
    seed=0,
)
SPECS = (LEARNED, FAILS, SEPARATION, SIGN, *MONO.values(), *LR.values(), SPIKES)
