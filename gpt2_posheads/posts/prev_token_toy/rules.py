"""The previous-token toy post's (000) claims as rules, written down before any run.

Each ``RULE_*`` is a claim's sentence; the function beside it applies it to the measured numbers and returns a
:data:`~gpt2_posheads.claims.verdicts.Decision` ``(held, why)`` (``held`` None: not testable), in the shared
vocabulary of :mod:`gpt2_posheads.claims.toy` (comparisons over seeds, margins, the floor). The post's default run
(:mod:`.copying`) and its ``--robustness`` grid call the same functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...claims.toy import FLOOR_WORDS, compare_pair, margin_words, num, rel_ppl_floor, sweep_trend
from ...claims.verdicts import Decision

RULE_LEARNED = (
    "held if the final perplexity with positional embeddings is <= 1.5 or its relative perplexity (ppl-1)/V <= 0.05"
)
RULE_FAILS = "held if the final relative perplexity (ppl-1)/V without positional embeddings is >= 0.5"
RULE_SEPARATION = "held if the projection of p_-1 on s has the opposite sign of every other position's"
RULE_SIGN = "held if s^T W_Q W_K^T s < 0"
RULE_SIGN_GRID = "held if the model learned the task (rule above) and s^T W_Q W_K^T s < 0"
RULE_MONO = (
    f"held if (ppl-1)/V, mean over seeds, {{verb}} at every step of the {{name}} sweep {margin_words()}; {FLOOR_WORDS}"
)
RULE_LR = (
    "held if the mean eval loss over training, mean over seeds, is {how} at lr 0.1 than at 0.01 (V={V}) "
    + margin_words()
)
RULE_SPIKES = (
    "held if some lr-0.1 run (seed {seed}) has both a loss spike and a token-order swap (swaps counted once tokens "
    "are separated)"
)


def learned(ppl: float, V: int) -> Decision:
    """:data:`RULE_LEARNED`: final perplexity <= 1.5, or relative perplexity (ppl - 1) / V <= 0.05."""
    rel = (ppl - 1) / V
    ok = bool(ppl <= 1.5 or rel <= 0.05)
    return ok, (
        f"final perplexity {num(ppl, 4)} {'<=' if ppl <= 1.5 else '>'} 1.5; relative perplexity (ppl-1)/V "
        f"{num(rel)} {'<=' if rel <= 0.05 else '>'} 0.05 (needs either)"
    )


def fails(ppl: float, V: int) -> Decision:
    """:data:`RULE_FAILS`: relative perplexity (ppl - 1) / V >= 0.5."""
    rel = (ppl - 1) / V
    ok = bool(rel >= 0.5)
    return ok, (
        f"relative perplexity (ppl-1)/V {num(rel)} {'>=' if ok else '<'} 0.5 (needs >= 0.5; final perplexity "
        f"{num(ppl)} of V = {V})"
    )


def separated(proj: Sequence[float], prev: int) -> Decision:
    """:data:`RULE_SEPARATION`; ``proj``: each position's projection on s (positions 0..C-1), ``prev`` = C-2."""
    C = len(proj)
    others = {f"p_{i - C + 1}": proj[i] for i in range(C) if i != prev}
    ok = all(np.sign(o) != np.sign(proj[prev]) for o in others.values())
    return ok, (
        f"p_-1 projects to {num(proj[prev], 2)} on s; {', '.join(f'{k} {num(v, 2)}' for k, v in others.items())} "
        f"(each needs the opposite sign)"
    )


def sign_negative(value: float) -> Decision:
    """:data:`RULE_SIGN`."""
    ok = bool(value < 0)
    return ok, f"s^T W_Q W_K^T s = {num(value)} {'<' if ok else '>='} 0 (needs < 0; the post: -1.1)"


def rel_ppl_trend(values: Sequence[Sequence[float]], xs, up: bool, name: str, Vs: Sequence[int]) -> Decision:
    """:data:`RULE_MONO`: ``values[i]`` the relative perplexity of each seed at ``xs[i]`` (vocabulary ``Vs[i]``)."""
    return sweep_trend(values, xs, up, what="relative perplexity", x_name=name, floor=[rel_ppl_floor(V) for V in Vs])


def lr_compare(loss_fast, loss_slow, V: int, faster: bool) -> Decision:
    """:data:`RULE_LR`: mean eval loss over training at lr 0.1 (``loss_fast``) vs 0.01, values over seeds."""
    return compare_pair(
        loss_slow, loss_fast, "lr 0.01", "lr 0.1", "mean eval loss over training", b_higher=not faster, unit=" nats"
    )


def spikes_and_swaps(stats: dict[str, tuple[int, int]]) -> Decision:
    """:data:`RULE_SPIKES`; ``stats``: ``{run label: (loss spikes, order swaps)}`` of the lr-0.1 runs."""
    ok = any(s > 0 and w > 0 for s, w in stats.values())
    listed = "; ".join(f"{k}: {s} loss spike(s), {w} order swap(s)" for k, (s, w) in stats.items())
    return ok, f"{listed} (needs both in one run)"
