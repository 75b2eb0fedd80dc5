"""The toy posts' claims as rules (003, 001, 000, 002), written down before any run.

Each rule is a sentence and a pure function of numbers (final perplexities, loss curves), so the default run
of a toy script and its ``--robustness`` grid judge with the same words, and tests check every outcome on
made-up numbers. :func:`toy_claim` turns a decision into the shared vocabulary (``held`` / ``not held`` /
``not testable``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .verdicts import HELD, NOT_HELD, NOT_TESTABLE


def toy_claim(
    key: str,
    claim_text: str,
    post,
    rule: str,
    measured,
    held: bool,
    quick: bool = False,
    precondition: tuple[bool, str] | None = None,
    shown: str = "",
    **extra,
) -> dict:
    """One toy claim: ``{key, claim, post, measured, rule, verdict, why, shown}``.

    ``rule`` states, in words, the test that ``held`` computes. ``--quick`` runs and failed preconditions give
    ``not testable``; ``precondition`` is ``(ok, what was found when it fails)``.
    """
    if precondition is not None and not precondition[0]:
        verdict, why = NOT_TESTABLE, f"not testable here: {precondition[1]}"
    elif quick:
        verdict, why = NOT_TESTABLE, "--quick run: too short or too small to test this claim; run without --quick"
    else:
        verdict = HELD if held else NOT_HELD
        why = "the measured values meet the rule" if held else "the measured values do not meet the rule"
    return {
        "key": key,
        "claim": claim_text,
        "post": post,
        "measured": measured,
        "rule": rule,
        "verdict": verdict,
        "why": why,
        **({"shown": shown} if shown else {}),
        **extra,
    }


def spearman(a, b) -> float:
    """Spearman rank correlation: Pearson on ranks, tied values sharing their average rank (as
    ``scipy.stats.spearmanr``, without needing scipy)."""
    return float(pd.Series(np.asarray(a, dtype=float)).rank().corr(pd.Series(np.asarray(b, dtype=float)).rank()))


def monotone(values, up: bool) -> bool:
    """Strictly rising (``up``) or falling at every step."""
    return all((b > a) if up else (b < a) for a, b in zip(values, values[1:]))


# --- 003: sticky plateau ------------------------------------------------------------------------------------

RULE_PLATEAU = (
    "held if, after perplexity first falls below 0.8 V, at least 5 consecutive logged steps lie within ±20% of V/2"
)
RULE_GONE = "held if the longest plateau at n_embd={big}, C=4 is shorter than at n_embd=2, C=4"
RULE_BACK = "held if the longest plateau at n_embd={big}, C={C} is longer than at C=4"


def plateaus(steps, ppl, tol: float = 0.1, floor: float = 1.5, min_steps: int = 1) -> list[dict]:
    """Every stretch, in order, where perplexity stays within ``±tol`` (relative) of its value at the stretch's
    start while above ``floor`` (a solved task sitting at 1 does not count), lasting at least ``min_steps``.
    Each: ``{"length_steps", "start_step", "end_step", "perplexity"}`` (median)."""
    steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
    out, i = [], 0
    while i < len(ppl):
        j = i
        while j + 1 < len(ppl) and abs(ppl[j + 1] - ppl[i]) <= tol * ppl[i] and ppl[j + 1] > floor:
            j += 1
        length = int(steps[j] - steps[i])
        if ppl[i] > floor and length >= max(min_steps, 1):
            out.append(
                {
                    "length_steps": length,
                    "start_step": int(steps[i]),
                    "end_step": int(steps[j]),
                    "perplexity": float(np.median(ppl[i : j + 1])),
                }
            )
        i = j + 1
    return out


def plateau(steps, ppl, tol: float = 0.1, floor: float = 1.5) -> dict:
    """The longest of :func:`plateaus` (length 0 and NaN perplexity when there is none)."""
    found = plateaus(steps, ppl, tol, floor)
    if not found:
        return {"length_steps": 0, "start_step": None, "end_step": None, "perplexity": math.nan}
    return max(found, key=lambda p: p["length_steps"])


def v_half_plateau(steps, ppl, V: int, tol: float = 0.2, min_points: int = 5) -> dict | None:
    """:data:`RULE_PLATEAU`: the first run of >= ``min_points`` consecutive logged steps with perplexity within
    ``±tol`` of ``V/2``, counted only after perplexity first falls below ``0.8 V`` (so the initial phase at
    perplexity ~V is never taken for it). ``None`` when there is none."""
    steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
    below = np.nonzero(ppl < 0.8 * V)[0]
    if not len(below):
        return None
    near = np.abs(ppl - V / 2) <= tol * V / 2
    i = int(below[0])
    while i < len(ppl):
        if near[i]:
            j = i
            while j + 1 < len(ppl) and near[j + 1]:
                j += 1
            if j - i + 1 >= min_points:
                return {
                    "start_step": int(steps[i]),
                    "end_step": int(steps[j]),
                    "n_points": j - i + 1,
                    "length_steps": int(steps[j] - steps[i]),
                    "perplexity": float(np.median(ppl[i : j + 1])),
                }
            i = j + 1
        else:
            i += 1
    return None


# --- 001: most-similar token --------------------------------------------------------------------------------

RULE_NEAR_HALF = "held if the final perplexity (mean over seeds) lies in (1.5, 0.6 V]"
RULE_TREND = (
    "held if, at every V of {V}, the Spearman correlation over C of the final perplexity with (C-2)/(C-1) V is >= 0.8"
)
RULE_RISE = (
    "held if, at every V of {V}, the final perplexity at C=5 exceeds that at C=3 by at least 5% (the "
    "comparison of an independent implementation: 0.30 V at C=3, 0.41 V at C=5)"
)
RISE_MARGIN = 1.05  # one seed at V=20 gave 6.99 -> 7.03 (+0.6%): noise, not a rise
PRE_CONFUSED = "the model sits in the confused regime at C=3 and C=5 for every V (1.5 < perplexity <= 0.9 V)"
TREND_SEEDS = 3  # at least this many seeds per (V, C) of the trend (they batch with each other: little extra time)
TREND_V = (10, 20, 40)  # the vocabularies of the independent implementation's comparison
GRID_TREND_V = (20,)  # the --robustness grid tests the trend at one of them (3x fewer runs)


def near_half(ppl: float, V: int) -> bool:
    """:data:`RULE_NEAR_HALF`."""
    return 1.5 < ppl <= 0.6 * V


def follows_trend(ppl_by_v_c: dict[int, list[float]], cs) -> tuple[bool, dict[int, float]]:
    """``ppl_by_v_c``: ``{V: [final perplexity at each C of cs]}`` -> (held by :data:`RULE_TREND`, Spearman by V)."""
    rho = {V: spearman(ppl, [(C - 2) / (C - 1) * V for C in cs]) for V, ppl in ppl_by_v_c.items()}
    return all(r >= 0.8 for r in rho.values()), rho


def rises_3_to_5(ppl_by_v_c: dict[int, list[float]], cs) -> bool:
    """:data:`RULE_RISE`: perplexity at C=5 at least :data:`RISE_MARGIN` times that at C=3, at every V."""
    i3, i5 = list(cs).index(3), list(cs).index(5)
    return all(ppl[i5] >= RISE_MARGIN * ppl[i3] for ppl in ppl_by_v_c.values())


def confused(ppl_by_v_c: dict[int, list[float]], cs) -> bool:
    """:data:`PRE_CONFUSED`: neither learned nor at chance at C=3 and C=5, so a C trend means something."""
    i3, i5 = list(cs).index(3), list(cs).index(5)
    return all(1.5 < ppl[i] <= 0.9 * V for V, ppl in ppl_by_v_c.items() for i in (i3, i5))


# --- 000: previous-token head ---------------------------------------------------------------------------------

RULE_LEARNED = (
    "held if the final perplexity with positional embeddings is <= 1.5 or its relative perplexity (ppl-1)/V <= 0.05"
)
RULE_FAILS = "held if the final relative perplexity (ppl-1)/V without positional embeddings is >= 0.5"
RULE_SIGN = "held if s^T W_Q W_K^T s < 0"
RULE_SIGN_GRID = "held if the model learned the task (rule above) and s^T W_Q W_K^T s < 0"
RULE_MONO = "held if (ppl-1)/V {verb} at every step of the {name} sweep"


def learned(ppl: float, V: int) -> bool:
    """:data:`RULE_LEARNED`: final perplexity <= 1.5, or relative perplexity (ppl - 1) / V <= 0.05."""
    return bool(ppl <= 1.5 or (ppl - 1) / V <= 0.05)


def fails(ppl: float, V: int) -> bool:
    """:data:`RULE_FAILS`: relative perplexity (ppl - 1) / V >= 0.5."""
    return bool((ppl - 1) / V >= 0.5)


# --- 002: lost in the middle ----------------------------------------------------------------------------------

RULE_ONLY_LAST = "held if the final loss at k = C-1 is < 0.3 ln V and at every other k > 0.6 ln V"
RULE_U = (
    "held if the final losses at k = 0 and at k = C-1 are both at least 0.2 ln V below the mean over "
    "k = 2..C-3 (a margin well above the seed-to-seed noise of a model at chance)"
)


def only_last(loss_by_k, V: int) -> bool:
    """:data:`RULE_ONLY_LAST` on the final loss at each k ``[C]``."""
    loss_by_k = np.asarray(loss_by_k)
    return bool(loss_by_k[-1] < 0.3 * math.log(V) and loss_by_k[:-1].min() > 0.6 * math.log(V))


def u_shape(loss_by_k, V: int) -> bool:
    """:data:`RULE_U` on the final loss at each k ``[C]``."""
    loss_by_k = np.asarray(loss_by_k)
    bar = loss_by_k[2:-2].mean() - 0.2 * math.log(V)
    return bool(loss_by_k[0] < bar and loss_by_k[-1] < bar)
