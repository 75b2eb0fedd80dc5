"""The sticky plateau post's (003) claims as rules, written down before any run.

Each ``RULE_*`` is a claim's sentence; the function beside it applies it to the measured numbers and returns a
:data:`~gpt2_posheads.claims.verdicts.Decision` ``(held, why)`` (``held`` None: not testable), in the shared
vocabulary of :mod:`gpt2_posheads.claims.toy` (comparisons over seeds, margins). The post's default run
(:mod:`.plateau`) and its ``--robustness`` grid call the same functions.
"""

from __future__ import annotations

import numpy as np

from ...claims.toy import compare_pair, margin_words, near_half_runs, num, nums, spread, v_half_plateau
from ...claims.verdicts import Decision

RULE_PLATEAU = (
    "held if, after perplexity first falls below 0.8 V, at least 5 consecutive logged steps lie within ±20% of V/2"
)
PLATEAU_WORDS = "the longest plateau (logged steps within ±10% of its first value, above perplexity 1.5)"
RESOLUTION_WORDS = "and more than one logging interval (the resolution of a plateau length)"
RULE_GONE = (
    f"held if {PLATEAU_WORDS}, mean over seeds, is shorter at n_embd={{big}} than at n_embd=2 (C=4) {margin_words()} "
    f"{RESOLUTION_WORDS}; not testable when n_embd=2 has no plateau (nothing to disappear)"
)
RULE_BACK = (
    f"held if {PLATEAU_WORDS}, mean over seeds, is longer at n_embd={{big}}, C={{C}} than at C=4 {margin_words()} "
    f"{RESOLUTION_WORDS}"
)
RULE_BRANCHING = "held if the embeddings form 2 direction clusters (cos > 0.95) mid-plateau and 4 at the end"
RULE_RANK = (
    f"held if W_Q's effective rank, mean over seeds, is higher at the end of training than mid-plateau {margin_words()}"
)


def plateau_at_half(steps, ppl, V: int, tol: float = 0.2, min_points: int = 5) -> Decision:
    """:data:`RULE_PLATEAU` as ``(held, why)``."""
    steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
    band = f"±{tol:.0%} of V/2 = {V / 2:g} (perplexity {num(V / 2 * (1 - tol))}–{num(V / 2 * (1 + tol))})"
    found = v_half_plateau(steps, ppl, V, tol, min_points)
    if found:
        return True, (
            f"{found['n_points']} consecutive logged steps (steps {found['start_step']}–{found['end_step']}, median "
            f"perplexity {num(found['perplexity'])}) within {band}, needs >= {min_points}"
        )
    first, runs = near_half_runs(steps, ppl, V, tol)
    final = f"final perplexity {num(ppl[-1])}"
    if first is None:
        return False, (
            f"perplexity never fell below 0.8 V = {num(0.8 * V)} ({final}), so no stay within {band} could count "
            f"(needs >= {min_points} consecutive logged steps there after falling below 0.8 V)"
        )
    longest = max((j - i + 1 for i, j in runs), default=0)
    return False, (
        f"after first falling below 0.8 V = {num(0.8 * V)} at step {int(steps[first])}, at most {longest} consecutive "
        f"logged steps within {band}, needs >= {min_points} ({final})"
    )


def plateau_shown(steps, ppl, V: int) -> str:
    """The V/2 plateau for a person: where and at what perplexity, or that there is none."""
    found = v_half_plateau(steps, ppl, V)
    if found:
        return (
            f"perplexity {num(found['perplexity'])} (V/2 = {V / 2:g}) for steps {found['start_step']}–"
            f"{found['end_step']}"
        )
    return f"no plateau at V/2 = {V / 2:g}; final perplexity {num(np.asarray(ppl)[-1])}"


def branching(clusters_mid: int | None, clusters_end: int, mid_step: int | None, end_step: int) -> Decision:
    """:data:`RULE_BRANCHING`; ``clusters_mid`` None: no plateau to look at (not testable)."""
    if clusters_mid is None:
        return None, "not testable here: the V=4 run has no plateau (no stretch within ±10% above perplexity 1.5)"
    ok = clusters_mid == 2 and clusters_end == 4
    return ok, (
        f"{clusters_mid} direction cluster(s) (cos > 0.95) at step {mid_step}, mid-plateau (needs 2); "
        f"{clusters_end} at step {end_step}, the end (needs 4)"
    )


def rank_rises(mid, end) -> Decision:
    """:data:`RULE_RANK` on W_Q's effective rank over seeds, mid-plateau (``mid``) and at the end."""
    return compare_pair(mid, end, "mid-plateau", "the end", "W_Q's effective rank", b_higher=True)


def plateau_gone(at_2, at_big, big: int, log_every: int) -> Decision:
    """:data:`RULE_GONE` on plateau lengths (steps) over seeds, logged every ``log_every`` steps."""
    if spread(at_2)[0] <= 0:
        return None, f"not testable here: no plateau at n_embd=2, C=4 either ({nums(np.ravel(at_2))} steps)"
    return compare_pair(
        at_2,
        at_big,
        "n_embd=2",
        f"n_embd={big}",
        "longest plateau",
        b_higher=False,
        unit=" steps",
        resolution=log_every,
    )


def plateau_back(at_c4, at_long, C: int, log_every: int) -> Decision:
    """:data:`RULE_BACK` on plateau lengths (steps) over seeds, logged every ``log_every`` steps."""
    return compare_pair(
        at_c4, at_long, "C=4", f"C={C}", "longest plateau", b_higher=True, unit=" steps", resolution=log_every
    )
