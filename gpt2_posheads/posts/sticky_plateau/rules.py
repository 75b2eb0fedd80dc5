"""Post 003 and its claims (sticky plateau), declared before any run, each rule made from its parameters; the default
run (:mod:`.plateau`) and the ``--robustness`` grid judge the same declarations (:mod:`gpt2_posheads.claims.toy`)."""

from __future__ import annotations

import numpy as np

from ...claims.catalogue import Post, register_post
from ...claims.toy import (
    margin_words,
    near_half_runs,
    num,
    nums,
    pair_rule,
    seeds_words,
    spread,
    toy_claim,
    v_half_plateau,
)
from ...claims.verdicts import Rule

POST = register_post(
    Post(
        key="003",
        title="Sparse attention 1: sticky plateau and rank collapse",
        author="Ziming Liu",
        date="2026-01-08",
        seed="003_6c0dc1ca34b13b48.txt",
        subject="sticky_plateau",
        needs_model=False,
        order=1,
    )
)

PLATEAU_WORDS = "the longest plateau (logged steps within ±10% of its first value, above perplexity 1.5)"
RESOLUTION_WORDS = "and more than one logging interval (the resolution of a plateau length)"


def plateau_rule(tol: float, min_points: int, below: float) -> Rule:
    """A plateau at V/2: after perplexity first falls below ``below`` V, >= ``min_points`` consecutive logged steps
    within ``±tol`` of V/2. Value: ``(steps, perplexity curve, V)``."""

    def decide(value):
        steps, ppl, V = value
        steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
        band = f"±{tol:.0%} of V/2 = {V / 2:g} (perplexity {num(V / 2 * (1 - tol))}–{num(V / 2 * (1 + tol))})"
        found = v_half_plateau(steps, ppl, V, tol=tol, min_points=min_points, below=below)
        if found:
            return True, (
                f"{found['n_points']} consecutive logged steps (steps {found['start_step']}–{found['end_step']}, "
                f"median perplexity {num(found['perplexity'])}) within {band}, needs >= {min_points}"
            )
        first, runs = near_half_runs(steps, ppl, V, tol, below)
        final, fall = f"final perplexity {num(ppl[-1])}", f"{below:g} V = {num(below * V)}"
        if first is None:
            return False, (
                f"perplexity never fell below {fall} ({final}), so no stay within {band} could count (needs >= "
                f"{min_points} consecutive logged steps there after falling below {below:g} V)"
            )
        longest = max((j - i + 1 for i, j in runs), default=0)
        return False, (
            f"after first falling below {fall} at step {int(steps[first])}, at most {longest} consecutive logged "
            f"steps within {band}, needs >= {min_points} ({final})"
        )

    return Rule(
        f"held if, after perplexity first falls below {below:g} V, at least {min_points} consecutive logged steps "
        f"lie within ±{tol:.0%} of V/2",
        decide,
    )


def branching_rule(first: int, then: int) -> Rule:
    """Two-stage branching. Value: ``(clusters mid-plateau or None without a plateau, clusters at the end, their
    steps)``."""

    def decide(value):
        mid, end, mid_step, end_step = value
        if mid is None:
            return None, "not testable here: the V=4 run has no plateau (no stretch within ±10% above perplexity 1.5)"
        return mid == first and end == then, (
            f"{mid} direction cluster(s) (cos > 0.95) at step {mid_step}, mid-plateau (needs {first}); "
            f"{end} at step {end_step}, the end (needs {then})"
        )

    return Rule(
        f"held if the embeddings form {first} direction clusters (cos > 0.95) mid-plateau and {then} at the end", decide
    )


def rank_rule(min_seeds: int) -> Rule:
    """W_Q's effective rank rises from mid-plateau to the end. Value: ``(mid-plateau ranks, end ranks, seeds without
    a plateau)``, over the seeds that have one."""

    def few(value):
        mid, _, no_plateau = value
        if len(mid) < min_seeds:
            return None, f"not testable here: fewer than {min_seeds} seeds have a plateau (none in seeds {no_plateau})"

    return pair_rule(
        f"held if W_Q's effective rank, mean over seeds, is higher at the end of training than mid-plateau "
        f"{margin_words()}",
        "W_Q's effective rank",
        True,
        lambda v: (v[0], v[1], {}),
        ("mid-plateau", "the end"),
        few,
    )


def lengths(value) -> tuple:
    """A plateau comparison's value ``(lengths, lengths, log_every)`` (steps over seeds) as :func:`pair_rule` reads
    it: one logging interval is the resolution of a plateau length."""
    return value[0], value[1], {"resolution": value[2]}


def gone_rule(big: int, one_seed: bool) -> Rule:
    """The plateau shorter at n_embd ``big`` than at 2 (C = 4). Value: ``(lengths at 2, lengths at big, log_every)``."""

    def nothing_to_lose(value):
        if spread(value[0])[0] <= 0:
            return None, f"not testable here: no plateau at n_embd=2, C=4 either ({nums(np.ravel(value[0]))} steps)"

    return pair_rule(
        f"{seeds_words(one_seed)}held if {PLATEAU_WORDS}, mean over seeds, is shorter at n_embd={big} than at n_embd=2 "
        f"(C=4) {margin_words()} {RESOLUTION_WORDS}; not testable when n_embd=2 has no plateau (nothing to disappear)",
        "longest plateau",
        False,
        lengths,
        ("n_embd=2", f"n_embd={big}"),
        nothing_to_lose,
        unit=" steps",
    )


def back_rule(big: int, C: int, one_seed: bool) -> Rule:
    """The plateau longer at n_embd ``big``, context ``C`` than at C = 4. Value: ``(lengths at C = 4, lengths at C,
    log_every)``."""
    return pair_rule(
        f"{seeds_words(one_seed)}held if {PLATEAU_WORDS}, mean over seeds, is longer at n_embd={big}, C={C} than at "
        f"C=4 {margin_words()} {RESOLUTION_WORDS}",
        "longest plateau",
        True,
        lengths,
        ("C=4", f"C={C}"),
        unit=" steps",
    )


PLATEAU = toy_claim(
    "plateau_near_V/2",
    "a sticky plateau at perplexity V/2",
    "perplexity V/2",
    plateau_rule,
    tol=0.2,
    min_points=5,
    below=0.8,
)
BRANCHING = toy_claim(
    "two_stage_branching",
    "tokens split in two groups on the plateau, then all four separate",
    "2 groups of 2, then 4",
    branching_rule,
    first=2,
    then=4,
)
RANK = toy_claim(
    "rank_dynamics",
    "Q/K stay low-rank (sticky) during the plateau and grow after it",
    "sticky Q/K",
    rank_rule,
    min_seeds=2,
)
GONE = toy_claim(
    "plateau_gone_for_larger_n_embd",
    "the plateau disappears at n_embd {big} (vs 2)",
    "no plateau",
    gone_rule,
    big=8,
    one_seed=False,
)
BACK = toy_claim(
    "plateau_back_for_larger_C",
    "the plateau returns at C = {C} (vs 4)",
    "plateau returns",
    back_rule,
    big=8,
    C=64,
    one_seed=False,
)
SPECS = (PLATEAU, BRANCHING, RANK, GONE, BACK)


def plateau_shown(steps, ppl, V: int) -> str:
    """The V/2 plateau (:data:`PLATEAU`'s) for a person: where and at what perplexity, or that there is none."""
    found = v_half_plateau(steps, ppl, V, **dict(PLATEAU.params))
    if found:
        return (
            f"perplexity {num(found['perplexity'])} (V/2 = {V / 2:g}) for steps {found['start_step']}–"
            f"{found['end_step']}"
        )
    return f"no plateau at V/2 = {V / 2:g}; final perplexity {num(np.asarray(ppl)[-1])}"
