"""The toy posts' claims as rules (003, 001, 000, 002), written down before any run.

Each rule is a sentence (``RULE_*``) and a pure function of numbers (final perplexities, loss curves, values over
seeds) that returns ``(held, why)`` as the GPT-2 post's rules do (:class:`~gpt2_posheads.claims.verdicts.Rule`):
``why`` says, in words with units, the numbers the rule compared and what each needed. ``held`` is ``None`` when
the numbers cannot decide the claim (both sides of a comparison at the floor); the claim is then ``not testable``
and ``why`` says so. The default run of a toy script and its ``--robustness`` grid call the same functions, and
tests check every outcome on made-up numbers. :func:`toy_claim` turns a decision into the shared vocabulary
(``held`` / ``not held`` / ``not testable``).

Comparisons (which setting beats which, what rises or falls along a sweep) are judged on the mean over seeds, and a
difference counts only when it exceeds both

* :data:`SPREAD_SDS` = 2 standard deviations across seeds (sample sd, the larger of the two sides): with
  :data:`COMPARE_SEEDS` = 3 seeds per side that is about 2.4 standard errors of the difference of the two means,
  close to a one-sided t-test at 95%, so a difference that one lucky seed makes does not pass;
* a relative margin of the value it moves from (:data:`REL_MARGIN` = 10% unless a claim states its own): seeds that
  agree closely have a tiny sd, and a 1% difference is not what "beats" or "rises" means.

A comparison of two models that have both learned the task is decided by noise: once every answer is right with
probability ~1, what is left of the loss measures how far the logits have grown, not how hard the task is. The
floor (:func:`loss_floor`) is the loss a model has when it answers one of the ``n_eval`` = 2,048 evaluation
sequences at chance and every other one with certainty: ``ln V / n_eval`` nats. A model below it has learned the
task as well as the evaluation can show; a step where both sides sit at or below it is left out, and a claim with no
step left is ``not testable``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .verdicts import HELD, NOT_HELD, NOT_TESTABLE, Claim, fmt

Decision = tuple[bool | None, str]  # (held; None: not testable), why

# --- shared vocabulary ----------------------------------------------------------------------------------------


def toy_claim(
    key: str,
    claim_text: str,
    post,
    rule: str,
    measured,
    decided: Decision,
    quick: bool = False,
    precondition: tuple[bool, str] | None = None,
    shown: str = "",
    **extra,
) -> Claim:
    """One toy claim, the same :class:`~gpt2_posheads.claims.verdicts.Claim` record the GPT-2 post's claims are.

    ``rule`` states, in words, the test that ``decided = (held, why)`` applied (a rule function of this module);
    ``held`` None makes the claim ``not testable`` with that ``why``. ``--quick`` runs and failed preconditions give
    ``not testable``; ``precondition`` is ``(ok, what was found when it fails)``. ``shown``: the tested number(s) a
    person reads first; a claim that was not tested shows "not tested" instead (a number there would read as a
    result), except at the floor, where the numbers are the reason.
    """
    held, why = decided
    if precondition is not None and not precondition[0]:
        verdict, why, shown = NOT_TESTABLE, f"not testable here: {precondition[1]}", "not tested"
    elif quick:
        verdict = NOT_TESTABLE
        why = "--quick run: too short or too small to test this claim; run without --quick"
        shown = "not tested (--quick run)"
    elif held is None:
        verdict = NOT_TESTABLE
        why = why if why.startswith("not testable") else f"not testable here: {why}"
    else:
        verdict = HELD if held else NOT_HELD
    return Claim(claim_text, post, measured, rule, verdict, why, key=key, shown=shown, extra=extra)


def num(x, digits: int = 3) -> str:
    """A number for a person: :func:`~gpt2_posheads.claims.verdicts.fmt` with a short exponent (``4.45e-5``)."""
    s = fmt(x, digits)
    if "e" in s:
        mant, exp = s.split("e")
        s = f"{mant}e{int(exp)}"
    return s


def nums(xs, digits: int = 3) -> str:
    """``a, b, c`` (:func:`num` each)."""
    return ", ".join(num(x, digits) for x in xs)


def labels(xs) -> str:
    return ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in xs)


def spearman(a, b) -> float:
    """Spearman rank correlation: Pearson on ranks, tied values sharing their average rank (as
    ``scipy.stats.spearmanr``, without needing scipy)."""
    return float(pd.Series(np.asarray(a, dtype=float)).rank().corr(pd.Series(np.asarray(b, dtype=float)).rank()))


# --- comparisons over seeds -------------------------------------------------------------------------------------

SPREAD_SDS = 2.0
COMPARE_SEEDS = 3  # seeds per side of every comparison claim of a default run (--seeds raises it)
REL_MARGIN = 0.10
N_EVAL = 2048  # evaluation sequences per model (ToyConfig.eval_size)


def margin_words(rel: float = REL_MARGIN) -> str:
    """The comparison margin as the rules state it."""
    return (
        f"by more than {SPREAD_SDS:g} standard deviations across seeds (the larger side's) and more than {rel:.0%} "
        "of the value it moves from"
    )


FLOOR_WORDS = (
    "a step where both sides sit at or below the floor (the loss of a model that answers one of the 2,048 "
    "evaluation sequences at chance and the rest with certainty, ln V / 2048 nats: the task learned as well as the "
    "evaluation can show) is left out, and the claim is not testable when no step is left"
)


def spread(values) -> tuple[float, float, int]:
    """``(mean, sd, n)`` of one setting's values over seeds: sample sd (ddof 1), 0 for one seed."""
    v = np.asarray(values, dtype=float).ravel()
    return float(v.mean()), (float(v.std(ddof=1)) if len(v) > 1 else 0.0), len(v)


def loss_floor(V: int, n_eval: int = N_EVAL) -> float:
    """The floor in nats: ``ln V / n_eval`` (see the module doc)."""
    return math.log(V) / n_eval


def rel_ppl_floor(V: int, n_eval: int = N_EVAL) -> float:
    """The floor as a relative perplexity ``(exp(loss) - 1) / V`` (V=30: 5.5e-5)."""
    return math.expm1(loss_floor(V, n_eval)) / V


def ppl_floor(V: int, n_eval: int = N_EVAL) -> float:
    """The floor as a perplexity ``exp(ln V / n_eval)`` (V=32: 1.0017)."""
    return math.exp(loss_floor(V, n_eval))


def moved(a, b, up: bool, rel: float = REL_MARGIN, resolution: float = 0.0) -> tuple[bool, float, float]:
    """From side ``a`` to side ``b`` (values over seeds): ``(rose / fell by the margin, change of the means, the
    margin it needed)``. The margin: the larger of 2 sd, ``rel`` of ``a``'s mean and ``resolution`` (the smallest
    difference the measure resolves, e.g. the logging interval of a plateau length)."""
    (ma, sa, _), (mb, sb, _) = spread(a), spread(b)
    change = mb - ma
    need = max(SPREAD_SDS * max(sa, sb), rel * abs(ma), resolution)
    return (change > need if up else -change > need), change, need


def _pm(values, unit: str = "") -> str:
    m, s, n = spread(values)
    return f"{num(m)}{unit}" if n == 1 else f"{num(m)} ± {num(float(f'{s:.2g}'), 2)}{unit}"


def _finite(*sides) -> bool:
    return all(np.isfinite(np.asarray(v, dtype=float)).all() for v in sides)


def _seeds_phrase(sides) -> str:
    ns = sorted({spread(v)[2] for v in sides})
    n = "/".join(str(x) for x in ns)
    return "1 seed, no spread" if ns == [1] else f"mean ± sd of {n} seeds"


def sweep_trend(
    values: Sequence,
    xs: Sequence,
    up: bool,
    what: str,
    x_name: str,
    unit: str = "",
    rel: float = REL_MARGIN,
    floor: Sequence[float] | float | None = None,
) -> Decision:
    """Does ``what`` rise (``up``) or fall at every step of a sweep? ``values[i]``: the values over seeds at
    ``xs[i]``; each step must move by the margin of :func:`moved`; a step with both means at or below ``floor``
    (one per x, or one for all) is left out, and with no step left the answer is ``None`` (not testable)."""
    if not _finite(*values):
        return False, f"{what} at {x_name} = {labels(xs)} is not finite ({'; '.join(nums(v) for v in values)})"
    floors = [floor] * len(xs) if floor is None or np.isscalar(floor) else list(floor)
    means = [spread(v)[0] for v in values]
    at_floor = [f is not None and m <= f for m, f in zip(means, floors)]
    listed = ", ".join(_pm(v, unit) for v in values)
    head = f"{what} {listed} at {x_name} = {labels(xs)} ({_seeds_phrase(values)})"
    floor_text = ""  # "5.54e-5" or "0.000112, 5.54e-5, 2.25e-5 at V = 10, 30, 100"
    if floor is not None:
        fl = list(dict.fromkeys(num(f) for f in floors))
        floor_text = f"{', '.join(fl)}{unit}" + (f" at {x_name} = {labels(xs)}" if len(fl) > 1 else "")
    parts, tested, ok_all = [], 0, True
    for i in range(len(xs) - 1):
        step = f"{x_name} {xs[i]} → {xs[i + 1]}"
        if at_floor[i] and at_floor[i + 1]:
            parts.append(f"{step}: both at the floor, left out")
            continue
        ok, change, need = moved(values[i], values[i + 1], up, rel)
        tested += 1
        ok_all &= ok
        sign = "+" if change >= 0 else "−"
        parts.append(f"{step} {sign}{num(abs(change))} (needs a {'rise' if up else 'fall'} > {num(need)})")
    if not tested:
        return None, (
            f"not testable here: {head}: every value is at or below the floor ({floor_text}), where "
            "differences are noise of a learned task"
        )
    rule = f"each step must {'rise' if up else 'fall'} by more than {SPREAD_SDS:g} sd and {rel:.0%}"
    return ok_all, f"{head}; {rule}: {'; '.join(parts)}" + (f"; the floor: {floor_text}" if floor_text else "")


def compare_pair(
    a,
    b,
    a_label: str,
    b_label: str,
    what: str,
    b_higher: bool,
    unit: str = "",
    rel: float = REL_MARGIN,
    floor: float | None = None,
    resolution: float = 0.0,
    floor_words: str = "",
) -> Decision:
    """Is ``what`` at ``b`` higher (``b_higher``) or lower than at ``a`` by the margin of :func:`moved`? ``a``,
    ``b``: values over seeds. Both means at or below ``floor``: ``None`` (not testable; ``floor_words`` says what the
    floor is)."""
    if not _finite(a, b):
        return False, f"{what}: {b_label} {nums(np.ravel(b))}, {a_label} {nums(np.ravel(a))}: not finite"
    head = f"{what} {_pm(b, unit)} at {b_label} vs {_pm(a, unit)} at {a_label} ({_seeds_phrase([a, b])})"
    if floor is not None and spread(a)[0] <= floor and spread(b)[0] <= floor:
        return None, f"not testable here: {head}: both at or below the floor {num(floor)}{unit}{floor_words}"
    ok, change, need = moved(a, b, b_higher, rel, resolution)
    moved_by = "no different" if change == 0 else f"{num(abs(change))}{unit} {'higher' if change > 0 else 'lower'}"
    parts = [f"{SPREAD_SDS:g} sd", f"{rel:.0%} of {a_label}'s"] + ([f"{num(resolution)}{unit}"] if resolution else [])
    return ok, (
        f"{head}: {moved_by} (needs {'higher' if b_higher else 'lower'} by > {num(need)}{unit}, the larger of "
        f"{', '.join(parts[:-1])} and {parts[-1]})"
    )


# --- 003: sticky plateau ------------------------------------------------------------------------------------

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


def _near_half_runs(steps, ppl, V: int, tol: float):
    """``(index where perplexity first falls below 0.8 V or None, [(i, j) runs of consecutive logged steps within
    ±tol of V/2 from there on])``."""
    ppl = np.asarray(ppl, dtype=float)
    below = np.nonzero(ppl < 0.8 * V)[0]
    if not len(below):
        return None, []
    near = np.abs(ppl - V / 2) <= tol * V / 2
    runs, i = [], int(below[0])
    while i < len(ppl):
        if near[i]:
            j = i
            while j + 1 < len(ppl) and near[j + 1]:
                j += 1
            runs.append((i, j))
            i = j + 1
        else:
            i += 1
    return int(below[0]), runs


def v_half_plateau(steps, ppl, V: int, tol: float = 0.2, min_points: int = 5) -> dict | None:
    """:data:`RULE_PLATEAU`: the first run of >= ``min_points`` consecutive logged steps with perplexity within
    ``±tol`` of ``V/2``, counted only after perplexity first falls below ``0.8 V`` (so the initial phase at
    perplexity ~V is never taken for it). ``None`` when there is none."""
    steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
    _, runs = _near_half_runs(steps, ppl, V, tol)
    for i, j in runs:
        if j - i + 1 >= min_points:
            return {
                "start_step": int(steps[i]),
                "end_step": int(steps[j]),
                "n_points": j - i + 1,
                "length_steps": int(steps[j] - steps[i]),
                "perplexity": float(np.median(ppl[i : j + 1])),
            }
    return None


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
    first, runs = _near_half_runs(steps, ppl, V, tol)
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


# --- 001: most-similar token --------------------------------------------------------------------------------

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
        f"final perplexity {_pm(ppl)} ({label}, {_seeds_phrase([ppl])}) {'<' if m < 2 else '>='} 2 (needs < 2)"
    )


# --- 000: previous-token head ---------------------------------------------------------------------------------

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


# --- 002: lost in the middle ----------------------------------------------------------------------------------

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
        parts.append(f"{name} {_pm(a[k], ' nats')}, {num(mm - m, 2)} below (needs > {num(need, 2)})")
    return ok_all, (
        f"middle k = 2..C-3 {_pm(middle, ' nats')} ({_seeds_phrase([middle])}); {'; '.join(parts)}; each margin is "
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
