"""The similar-content post's (001) claims as rules, written down before any run.

Each ``RULE_*`` is a claim's sentence; the function beside it applies it to the measured numbers and returns a
:data:`~gpt2_posheads.claims.verdicts.Decision` ``(held, why)`` (``held`` None: not testable), in the shared
vocabulary of :mod:`gpt2_posheads.claims.toy` (comparisons over seeds, margins, the floor). The post's default run
(:mod:`.similarity`) and its ``--robustness`` grid call the same functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...claims.toy import (
    COMPARE_SEEDS,
    FLOOR_WORDS,
    compare_pair,
    labels,
    margin_words,
    mean_sd,
    num,
    nums,
    ppl_floor,
    seeds_phrase,
    spearman,
    spread,
    sweep_trend,
)
from ...claims.verdicts import Decision

RULE_NEAR_HALF = "held if the final perplexity (mean over seeds) lies in (1.5, 0.6 V]"
RULE_TREND = (
    "held if, at every V of {V}, the Spearman correlation over C of the final perplexity (mean over seeds) with "
    "(C-2)/(C-1) V is >= 0.8"
)
RISE_MARGIN = 0.05  # the rise an independent implementation saw (0.30 V -> 0.41 V) is +37%; 5% keeps noise out
RULE_RISE = (
    "held if, at every V of {V}, the final perplexity (mean over seeds) at C=5 exceeds that at C=3 "
    f"{margin_words(RISE_MARGIN)} (the comparison of an independent implementation: 0.30 V at C=3, 0.41 V at C=5)"
)
PRE_CONFUSED = "the model sits in the confused regime at C=3 and C=5 for every V (1.5 < perplexity <= 0.9 V)"
TREND_SEEDS = COMPARE_SEEDS  # seeds per (V, C) of the C claims (they batch with each other: little extra time)
TREND_V = (10, 20, 40)  # the vocabularies of the independent implementation's comparison
GRID_TREND_V = (20,)  # the --robustness grid tests the trend at one of them (3x fewer runs)
RULE_FALLS_EMBD = (
    f"held if the best perplexity (mean over seeds) falls at every step of n_embd {{ds}} {margin_words()}, and ends "
    f"below V/n_embd at n_embd={{last}}; {FLOOR_WORDS}"
)
RULE_CLOSE = "held if Spearman(|i - j|, embedding distance) over token pairs > 0.3"
RULE_KERNEL = (
    "held if the best distance or harmonic kernel's final perplexity (mean over seeds; the best of n_embd 1 and 2) is "
    f"below the best inner product's {margin_words()}; not testable when both sit at or below the floor (perplexity "
    "exp(ln V / 2048): the task learned as well as the evaluation can show)"
)
RULE_ONE_D = "held if the best distance or harmonic kernel at n_embd=1 reaches a final perplexity (mean over seeds) < 2"


def near_half(ppl: float, V: int, n_seeds: int = 1) -> Decision:
    """:data:`RULE_NEAR_HALF` on the mean final perplexity of ``n_seeds`` seeds."""
    ok = bool(1.5 < ppl <= 0.6 * V)
    seeds = "1 seed" if n_seeds == 1 else f"mean of {n_seeds} seeds"
    return ok, (
        f"final perplexity {num(ppl)} = {num(ppl / V, 2)} V ({seeds}), {'inside' if ok else 'outside'} "
        f"(1.5, {num(0.6 * V)}] (needs 1.5 < perplexity <= 0.6 V; V/2 = {V / 2:g})"
    )


def trend_spearman(ppl_by_v_c: dict[int, list[float]], cs) -> dict[int, float]:
    """Spearman over ``cs`` of the final perplexity at each V with (C-2)/(C-1) V."""
    return {V: spearman(ppl, [(C - 2) / (C - 1) * V for C in cs]) for V, ppl in ppl_by_v_c.items()}


def follows_trend(ppl_by_v_c: dict[int, list[float]], cs) -> Decision:
    """:data:`RULE_TREND`; ``ppl_by_v_c``: ``{V: [final perplexity at each C of cs]}``."""
    rho = trend_spearman(ppl_by_v_c, cs)
    ok = all(r >= 0.8 for r in rho.values())
    ratios = "; ".join(f"V = {V}: {nums([p / V for p in ppl], 2)}" for V, ppl in ppl_by_v_c.items())
    return ok, (
        f"Spearman {nums(rho.values(), 2)} at V = {labels(rho)} (each needs >= 0.8), over C = {labels(cs)}; "
        f"perplexity / V there: {ratios} (the post's (C-2)/(C-1): {nums([(C - 2) / (C - 1) for C in cs], 2)})"
    )


def rises_3_to_5(ppl_seeds: dict[int, dict[int, Sequence[float]]]) -> Decision:
    """:data:`RULE_RISE`; ``ppl_seeds``: ``{V: {C: [final perplexity of each seed]}}`` (C 3 and 5 at least)."""
    parts, ok_all = [], True
    for V, by_c in ppl_seeds.items():
        ok, why = compare_pair(by_c[3], by_c[5], "C=3", "C=5", f"V = {V}:", b_higher=True, rel=RISE_MARGIN)
        ok_all &= bool(ok)
        parts.append(why)
    return ok_all, "final perplexity; " + "; ".join(parts)


def confused(ppl_by_v_c: dict[int, list[float]], cs) -> tuple[bool, str]:
    """:data:`PRE_CONFUSED` as ``(ok, what was found)``: neither learned nor at chance at C=3 and C=5, so a C trend
    means something."""
    i3, i5 = list(cs).index(3), list(cs).index(5)
    bad = [
        f"V = {V}, C = {cs[i]}: perplexity {num(ppl[i])} outside (1.5, {num(0.9 * V)}]"
        for V, ppl in ppl_by_v_c.items()
        for i in (i3, i5)
        if not 1.5 < ppl[i] <= 0.9 * V
    ]
    return not bad, "; ".join(bad) or PRE_CONFUSED


def best_falls_with_embd(best: Sequence[Sequence[float]], ds, V: int) -> Decision:
    """:data:`RULE_FALLS_EMBD`; ``best[i]``: the best perplexity of each seed at ``ds[i]``."""
    held, why = sweep_trend(best, ds, up=False, what="best perplexity", x_name="n_embd", floor=ppl_floor(V))
    if held is None:
        return held, why
    end = spread(best[-1])[0]
    below = end < V / ds[-1]
    return held and below, (
        f"{why}; at n_embd={ds[-1]} {num(end)} {'<' if below else '>='} V/n_embd = {num(V / ds[-1])} (needs <)"
    )


def close_tokens(rho: float) -> Decision:
    """:data:`RULE_CLOSE`."""
    ok = bool(rho > 0.3)
    return ok, f"Spearman(|i - j|, embedding distance) = {num(rho, 2)} {'>' if ok else '<='} 0.3 (needs > 0.3)"


def kernel_beats(kernel_ppl, kernel_label: str, dot_ppl, dot_label: str, V: int) -> Decision:
    """:data:`RULE_KERNEL` on the final perplexities over seeds of the best kernel and the best inner product."""
    return compare_pair(
        dot_ppl, kernel_ppl, dot_label, kernel_label, "final perplexity", b_higher=False, floor=ppl_floor(V)
    )


def one_d_suffices(ppl, label: str) -> Decision:
    """:data:`RULE_ONE_D`."""
    m = spread(ppl)[0]
    return bool(m < 2), (
        f"final perplexity {mean_sd(ppl)} ({label}, {seeds_phrase([ppl])}) {'<' if m < 2 else '>='} 2 (needs < 2)"
    )
