"""The lost-in-the-middle post's (002) claims as rules, written down before any run.

Each ``RULE_*`` is a claim's sentence; the function beside it applies it to the measured numbers and returns a
:data:`~gpt2_posheads.claims.verdicts.Decision` ``(held, why)`` (``held`` None: not testable), in the shared
vocabulary of :mod:`gpt2_posheads.claims.toy` (comparisons over seeds, margins). The post's default run
(:mod:`.retrieval`) and its ``--robustness`` grid call the same functions.
"""

from __future__ import annotations

import math

import numpy as np

from ...claims.toy import N_EVAL, SPREAD_SDS, compare_pair, margin_words, mean_sd, num, seeds_phrase, spread
from ...claims.verdicts import Decision

RULE_ONLY_LAST = "held if the final loss (mean over seeds) at k = C-1 is < 0.3 ln V and at every other k > 0.6 ln V"
U_MARGIN = 0.2  # x ln V: 0.46 nats at V = 10, well above the seed-to-seed noise of a model at chance
RULE_U = (
    "held if the final losses (mean over seeds) at k = 0 and at k = C-1 both lie below the mean over k = 2..C-3 by "
    f"more than {U_MARGIN:g} ln V (a margin well above the seed-to-seed noise of a model at chance) and by more than "
    f"{SPREAD_SDS:g} standard deviations across seeds (the larger of the end's and the middle mean's)"
)
RULE_SPIKIER = (
    "held if the spread (std over k = 2..C-3) of the final loss, mean over seeds, is larger with residual + MLP than "
    f"without (the plain stack of the same depth and width) {margin_words()}; not testable when both spreads sit at "
    "or below the floor ln V / sqrt(2048) (0.051 nats at V = 10: the standard error of one k's loss measured on "
    "2,048 evaluation sequences whose losses spread by up to ln V, so a flat profile shows that much spread from "
    "evaluation noise alone)"
)


def _by_k(losses) -> np.ndarray:
    """Final losses as ``[k, seed]`` (one seed: a column)."""
    a = np.asarray(losses, dtype=float)
    return a[:, None] if a.ndim == 1 else a


def only_last(losses, V: int) -> Decision:
    """:data:`RULE_ONLY_LAST` on the final loss at each k: ``[C]`` or ``[C, seed]``."""
    loss = _by_k(losses).mean(1)
    lo, hi = 0.3 * math.log(V), 0.6 * math.log(V)
    last, rest = loss[-1], loss[:-1]
    ok = bool(last < lo and rest.min() > hi)
    return ok, (
        f"loss at k = C-1 {num(last, 2)} nats (needs < {num(lo, 2)} = 0.3 ln V); at every other k "
        f"{num(rest.min(), 3)}–{num(rest.max(), 3)} nats (needs > {num(hi, 3)} = 0.6 ln V)"
    )


def u_shape(losses, V: int) -> Decision:
    """:data:`RULE_U` on the final loss at each k: ``[C]`` or ``[C, seed]``."""
    a = _by_k(losses)
    middle = a[2:-2].mean(0)  # per seed
    mm, ms, n = spread(middle)
    parts, ok_all = [], True
    for k, name in ((0, "k = 0"), (a.shape[0] - 1, "k = C-1")):
        m, s, _ = spread(a[k])
        need = max(U_MARGIN * math.log(V), SPREAD_SDS * max(s, ms))
        ok = mm - m > need
        ok_all &= ok
        parts.append(f"{name} {mean_sd(a[k], ' nats')}, {num(mm - m, 2)} below (needs > {num(need, 2)})")
    return ok_all, (
        f"middle k = 2..C-3 {mean_sd(middle, ' nats')} ({seeds_phrase([middle])}); {'; '.join(parts)}; each margin is "
        f"the larger of {U_MARGIN:g} ln V = {num(U_MARGIN * math.log(V), 2)} and {SPREAD_SDS:g} sd"
    )


def middle_spread(losses) -> np.ndarray:
    """Per seed: the std over k = 2..C-3 of the final loss (``[C]`` or ``[C, seed]``)."""
    return _by_k(losses)[2:-2].std(0)


def spread_floor(V: int, n_eval: int = N_EVAL) -> float:
    """:data:`RULE_SPIKIER`'s floor: ``ln V / sqrt(n_eval)`` nats."""
    return math.log(V) / math.sqrt(n_eval)


def spikier(with_res, plain, plain_label: str, V: int) -> Decision:
    """:data:`RULE_SPIKIER` on final losses ``[C, seed]`` with residual + MLP and of the plain stack."""
    return compare_pair(
        middle_spread(plain),
        middle_spread(with_res),
        plain_label,
        "residual + MLP",
        "spread of the middle's final loss",
        b_higher=True,
        unit=" nats",
        floor=spread_floor(V),
        floor_words=" (ln V / sqrt(2048): evaluation noise of a flat profile)",
    )
