"""The toy posts' shared vocabulary for their rules: comparisons over seeds, the floor, plateaus, numbers for a
person. A rule's ``why`` says, with units, what it compared and what each side needed; the default run and the
``--robustness`` grid judge the same declarations.

Comparisons (which setting beats which, what rises or falls along a sweep) are judged on the mean over seeds, and a
difference counts only when it exceeds both

* :data:`SPREAD_SDS` = 2 sample standard deviations across seeds (the larger side's): with :data:`COMPARE_SEEDS` = 3
  seeds per side about 2.4 standard errors of the difference of means, close to a one-sided t-test at 95%;
* a relative margin of the value it moves from (:data:`REL_MARGIN` = 10% unless a claim states its own): seeds that
  agree closely have a tiny sd, and a 1% difference is not what "beats" or "rises" means.

Two models that have both learned the task differ by noise: once every answer is right with probability ~1, the loss
left measures how far the logits have grown. The floor is the loss of a model that answers one of the ``n_eval`` =
2,048 evaluation sequences at chance and the rest with certainty, ``ln V / n_eval`` nats; a step where both sides sit
at or below it is left out, and a claim with no step left is ``not testable``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .catalogue import Post, register_post
from .verdicts import ClaimSpec, Decision, Rule, declare_claim, fmt

# --- shared vocabulary ----------------------------------------------------------------------------------------


def toy_claim(key: str, claim: str, post, rule: Rule | Callable[..., Rule] | None = None, **params):
    """:func:`~gpt2_posheads.claims.verdicts.declare_claim` with role ``""`` (no route to tell apart); without
    ``rule``, a decorator: the function below it makes the rule from ``params``, and the name is the claim's."""
    if rule is None:
        return lambda make: declare_claim(key, claim, post, make, "", **params)
    return declare_claim(key, claim, post, rule, "", **params)


def toy_post(key: str, title: str, date: str, seed: str, subject: str, order: int) -> Post:
    """Register a toy post (by Ziming Liu, its scripts train toy models)."""
    return register_post(Post(key, title, "Ziming Liu", date, seed, subject, needs_model=False, order=order))


def num(x, digits: int = 3) -> str:
    """A number for a person: :func:`~gpt2_posheads.claims.verdicts.fmt` with a short exponent (``4.45e-5``)."""
    s = fmt(x, digits)
    if "e" in s:
        mant, exp = s.split("e")
        s = f"{mant}e{int(exp)}"
    return s


def nums(xs, digits: int = 3) -> str:
    return ", ".join(num(x, digits) for x in xs)


def labels(xs) -> str:
    return ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in xs)


def spearman(a, b) -> float:
    """Spearman rank correlation: Pearson on ranks, ties sharing their average rank (``scipy.stats.spearmanr``)."""
    return float(pd.Series(np.asarray(a, dtype=float)).rank().corr(pd.Series(np.asarray(b, dtype=float)).rank()))


# --- the --robustness grid's records in summary.json ----------------------------------------------------------


def grid_record(spec: ClaimSpec) -> dict:
    """A grid claim's record in ``summary.json``, as declared (its held counts go beside)."""
    return {"key": spec.key, "claim": spec.claim, "post": spec.post, "rule": spec.rule.text}


def grid_records(robustness: Mapping) -> list[dict]:
    """The grid claims' records of a summary's ``robustness`` (from ``totals``, ``rules`` by key: no claim, post)."""
    if "claims" in robustness:
        return list(robustness["claims"])
    rules = robustness.get("rules", {})
    return [{"key": k, "claim": "", "post": "", "rule": rules.get(k, ""), **t} for k, t in robustness["totals"].items()]


# --- comparisons over seeds -------------------------------------------------------------------------------------

SPREAD_SDS = 2.0
COMPARE_SEEDS = 3  # seeds per side of every comparison claim of a default run (--seeds raises it)
REL_MARGIN = 0.10
N_EVAL = 2048  # evaluation sequences per model (ToyConfig.eval_size)
# The --robustness grid runs one seed per test (its k of n counts are the spread), so only the relative margin applies.
ONE_SEED = "one seed per test, so only the relative margin applies: "


def seeds_words(one_seed: bool) -> str:
    return ONE_SEED if one_seed else ""


def margin_words(rel: float = REL_MARGIN) -> str:
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
    """``(mean, sample sd, n)`` of one setting's values over seeds (sd 0 for one seed)."""
    v = np.asarray(values, dtype=float).ravel()
    return float(v.mean()), (float(v.std(ddof=1)) if len(v) > 1 else 0.0), len(v)


def rel_ppl_floor(V: int, n_eval: int = N_EVAL) -> float:
    """The floor ``ln V / n_eval`` nats as a relative perplexity ``(exp(loss) - 1) / V`` (V=30: 5.5e-5)."""
    return math.expm1(math.log(V) / n_eval) / V


def ppl_floor(V: int, n_eval: int = N_EVAL) -> float:
    """The floor as a perplexity ``exp(ln V / n_eval)`` (V=32: 1.0017)."""
    return math.exp(math.log(V) / n_eval)


def moved(a, b, up: bool, rel: float = REL_MARGIN, resolution: float = 0.0) -> tuple[bool, float, float]:
    """From ``a`` to ``b`` (values over seeds): ``(rose / fell by the margin, change of means, margin)``; the margin is
    the larger of 2 sd, ``rel`` of ``a``'s mean and ``resolution`` (e.g. the logging interval of a plateau length)."""
    (ma, sa, _), (mb, sb, _) = spread(a), spread(b)
    change = mb - ma
    need = max(SPREAD_SDS * max(sa, sb), rel * abs(ma), resolution)
    return (change > need if up else -change > need), change, need


def mean_sd(values, unit: str = "") -> str:
    """``mean ± sd`` over seeds (sd at 2 significant digits; one seed: the mean)."""
    m, s, n = spread(values)
    return f"{num(m)}{unit}" if n == 1 else f"{num(m)} ± {num(float(f'{s:.2g}'), 2)}{unit}"


def _finite(*sides) -> bool:
    return all(np.isfinite(np.asarray(v, dtype=float)).all() for v in sides)


def seeds_phrase(sides) -> str:
    """``mean ± sd of 3 seeds`` (``3/5`` when the sides differ), or ``1 seed, no spread``."""
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
    """Does ``what`` rise (``up``) or fall by :func:`moved`'s margin at every step? ``values[i]``: values over seeds
    at ``xs[i]``; a step with both means at or below ``floor`` (one per x, or one) is left out; none left: ``None``."""
    if not _finite(*values):
        return False, f"{what} at {x_name} = {labels(xs)} is not finite ({'; '.join(nums(v) for v in values)})"
    floors = [floor] * len(xs) if floor is None or np.isscalar(floor) else list(floor)
    means = [spread(v)[0] for v in values]
    at_floor = [f is not None and m <= f for m, f in zip(means, floors)]
    listed = ", ".join(mean_sd(v, unit) for v in values)
    head = f"{what} {listed} at {x_name} = {labels(xs)} ({seeds_phrase(values)})"
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
    """Is ``what`` at ``b`` higher (``b_higher``) or lower than at ``a`` (values over seeds) by :func:`moved`'s
    margin? Both means at or below ``floor``: ``None`` (``floor_words`` says what the floor is)."""
    if not _finite(a, b):
        return False, f"{what}: {b_label} {nums(np.ravel(b))}, {a_label} {nums(np.ravel(a))}: not finite"
    head = f"{what} {mean_sd(b, unit)} at {b_label} vs {mean_sd(a, unit)} at {a_label} ({seeds_phrase([a, b])})"
    if floor is not None and spread(a)[0] <= floor and spread(b)[0] <= floor:
        return None, f"not testable here: {head}: both at or below the floor {num(floor)}{unit}{floor_words}"
    ok, change, need = moved(a, b, b_higher, rel, resolution)
    moved_by = "no different" if change == 0 else f"{num(abs(change))}{unit} {'higher' if change > 0 else 'lower'}"
    parts = [f"{SPREAD_SDS:g} sd", f"{rel:.0%} of {a_label}'s"] + ([f"{num(resolution)}{unit}"] if resolution else [])
    return ok, (
        f"{head}: {moved_by} (needs {'higher' if b_higher else 'lower'} by > {num(need)}{unit}, the larger of "
        f"{', '.join(parts[:-1])} and {parts[-1]})"
    )


def pair_rule(
    text: str, what: str, b_higher: bool, read: Callable, labels=("", ""), guard: Callable | None = None, **fixed
) -> Rule:
    """Every toy claim that compares two settings: held if ``what`` at ``b`` is higher (``b_higher``) or lower than
    at ``a`` by :func:`compare_pair`'s margin. ``read(value) -> (a, b, keywords)``: the two sides' values over seeds
    and the :func:`compare_pair` keywords known only once measured (labels, a floor, a resolution), over ``labels``
    (``a``'s, ``b``'s) and ``fixed``; ``guard(value)``: a :data:`Decision` that comes first where the comparison
    cannot be made, else None."""

    def decide(value):
        early = guard(value) if guard else None
        if early:
            return early
        a, b, measured = read(value)
        kw = {"a_label": labels[0], "b_label": labels[1], **fixed, **measured}
        return compare_pair(a, b, what=what, b_higher=b_higher, **kw)

    return Rule(text, decide)


# --- reading training curves: plateaus -------------------------------------------------------------------


def plateaus(steps, ppl, tol: float = 0.1, floor: float = 1.5, min_steps: int = 1) -> list[dict]:
    """Every stretch, in order, of at least ``min_steps`` where perplexity stays within ``±tol`` (relative) of its
    value at the stretch's start and above ``floor`` (a solved task at 1 does not count): ``{"length_steps",
    "start_step", "end_step", "perplexity"}`` (median)."""
    steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
    out, i = [], 0
    while i < len(ppl):
        j = i
        while j + 1 < len(ppl) and abs(ppl[j + 1] - ppl[i]) <= tol * ppl[i] and ppl[j + 1] > floor:
            j += 1
        length = int(steps[j] - steps[i])
        if ppl[i] > floor and length >= max(min_steps, 1):
            median = float(np.median(ppl[i : j + 1]))
            out.append(dict(length_steps=length, start_step=int(steps[i]), end_step=int(steps[j]), perplexity=median))
        i = j + 1
    return out


def plateau(steps, ppl, tol: float = 0.1, floor: float = 1.5) -> dict:
    """The longest of :func:`plateaus` (length 0 and NaN perplexity when there is none)."""
    none = {"length_steps": 0, "start_step": None, "end_step": None, "perplexity": math.nan}
    return max(plateaus(steps, ppl, tol, floor), key=lambda p: p["length_steps"], default=none)


def near_half_runs(steps, ppl, V: int, tol: float, below: float):
    """``(index where perplexity first falls below ``below`` V or None, [(i, j) runs within ±tol of V/2 after it])``."""
    ppl = np.asarray(ppl, dtype=float)
    first = np.nonzero(ppl < below * V)[0]
    if not len(first):
        return None, []
    near = np.abs(ppl - V / 2) <= tol * V / 2
    groups = itertools.groupby(range(int(first[0]), len(ppl)), key=lambda i: bool(near[i]))
    runs = [(g[0], g[-1]) for g in (list(idx) for is_near, idx in groups if is_near)]
    return int(first[0]), runs


def v_half_plateau(steps, ppl, V: int, *, tol: float, min_points: int, below: float) -> dict | None:
    """A plateau at V/2 as ``plateau_near_V/2`` states it (:data:`gpt2_posheads.posts.sticky_plateau.plateau.PLATEAU`):
    the first run of >= ``min_points`` logged steps within ``±tol`` of ``V/2`` after perplexity first falls below
    ``below`` V (so the initial phase at ~V is never taken for it); ``None`` when there is none."""
    steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
    _, runs = near_half_runs(steps, ppl, V, tol, below)
    for i, j in runs:
        if j - i + 1 >= min_points:
            found = dict(start_step=int(steps[i]), end_step=int(steps[j]), n_points=j - i + 1)
            return {**found, "length_steps": int(steps[j] - steps[i]), "perplexity": float(np.median(ppl[i : j + 1]))}
    return None
