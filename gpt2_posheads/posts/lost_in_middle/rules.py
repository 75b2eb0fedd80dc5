"""Post 002 and its claims (lost in the middle), declared before any run, each rule made from its parameters; the
default run (:mod:`.retrieval`) and the ``--robustness`` grid judge the same declarations
(:mod:`gpt2_posheads.claims.toy`)."""

from __future__ import annotations

import math

import numpy as np

from ...claims.catalogue import Post, register_post
from ...claims.toy import N_EVAL, SPREAD_SDS, margin_words, mean_sd, num, pair_rule, seeds_phrase, spread, toy_claim
from ...claims.verdicts import Rule

POST = register_post(
    Post(
        key="002",
        title="Sparse attention 7: stacked causal attention as implicit positions, and lost in the middle",
        author="Ziming Liu",
        date="2026-01-31",
        seed="002_05fa633ad24e0e9c.txt",
        subject="lost_in_middle",
        needs_model=False,
        order=4,
    )
)


def _by_k(losses) -> np.ndarray:
    """Final losses as ``[k, seed]`` (one seed: a column)."""
    a = np.asarray(losses, dtype=float)
    return a[:, None] if a.ndim == 1 else a


def only_last_rule(last: float, rest: float) -> Rule:
    """Only k = C-1 retrieved: its final loss < ``last`` ln V and every other k's > ``rest`` ln V. Value: ``(final
    loss at each k, [C] or [C, seed]; V)``."""

    def decide(value):
        losses, V = value
        loss = _by_k(losses).mean(1)
        lo, hi = last * math.log(V), rest * math.log(V)
        ok = bool(loss[-1] < lo and loss[:-1].min() > hi)
        return ok, (
            f"loss at k = C-1 {num(loss[-1], 2)} nats (needs < {num(lo, 2)} = {last:g} ln V); at every other k "
            f"{num(loss[:-1].min(), 3)}–{num(loss[:-1].max(), 3)} nats (needs > {num(hi, 3)} = {rest:g} ln V)"
        )

    return Rule(
        f"held if the final loss (mean over seeds) at k = C-1 is < {last:g} ln V and at every other k > {rest:g} ln V",
        decide,
    )


def u_rule(margin: float) -> Rule:
    """A U shape: k = 0 and k = C-1 both below the middle k = 2..C-3 by the larger of ``margin`` ln V (0.46 nats at
    V = 10, well above the seed-to-seed noise of a model at chance) and 2 sd. Value: ``(final loss at each k, [C] or
    [C, seed]; V)``."""

    def decide(value):
        losses, V = value
        a = _by_k(losses)
        middle = a[2:-2].mean(0)  # per seed
        mm, ms, n = spread(middle)
        parts, ok_all = [], True
        for k, name in ((0, "k = 0"), (a.shape[0] - 1, "k = C-1")):
            m, s, _ = spread(a[k])
            need = max(margin * math.log(V), SPREAD_SDS * max(s, ms))
            ok = mm - m > need
            ok_all &= ok
            parts.append(f"{name} {mean_sd(a[k], ' nats')}, {num(mm - m, 2)} below (needs > {num(need, 2)})")
        return ok_all, (
            f"middle k = 2..C-3 {mean_sd(middle, ' nats')} ({seeds_phrase([middle])}); {'; '.join(parts)}; each "
            f"margin is the larger of {margin:g} ln V = {num(margin * math.log(V), 2)} and {SPREAD_SDS:g} sd"
        )

    return Rule(
        "held if the final losses (mean over seeds) at k = 0 and at k = C-1 both lie below the mean over k = 2..C-3 "
        f"by more than {margin:g} ln V (a margin well above the seed-to-seed noise of a model at chance) and by more "
        f"than {SPREAD_SDS:g} standard deviations across seeds (the larger of the end's and the middle mean's)",
        decide,
    )


def middle_spread(losses) -> np.ndarray:
    """Per seed: the std over k = 2..C-3 of the final loss (``[C]`` or ``[C, seed]``)."""
    return _by_k(losses)[2:-2].std(0)


def spread_floor(V: int, n_eval: int = N_EVAL) -> float:
    """:data:`SPIKIER`'s floor: ``ln V / sqrt(n_eval)`` nats."""
    return math.log(V) / math.sqrt(n_eval)


def spikier_rule() -> Rule:
    """The middle spikier with residual + MLP than the plain stack. Value: ``(final losses [C, seed] with residual +
    MLP, of the plain stack, the plain stack's label, V)``."""
    return pair_rule(
        "held if the spread (std over k = 2..C-3) of the final loss, mean over seeds, is larger with residual + MLP "
        f"than without (the plain stack of the same depth and width) {margin_words()}; not testable when both spreads "
        "sit at or below the floor ln V / sqrt(2048) (0.051 nats at V = 10: the standard error of one k's loss "
        "measured on 2,048 evaluation sequences whose losses spread by up to ln V, so a flat profile shows that much "
        "spread from evaluation noise alone)",
        "spread of the middle's final loss",
        True,
        lambda v: (middle_spread(v[1]), middle_spread(v[0]), {"a_label": v[2], "floor": spread_floor(v[3])}),
        ("", "residual + MLP"),
        unit=" nats",
        floor_words=" (ln V / sqrt(2048): evaluation noise of a flat profile)",
    )


ONLY_LAST = toy_claim(
    "1_layer_only_last",
    "only the current token (k = C-1) is retrieved",
    "only k = C-1 retrievable",
    only_last_rule,
    last=0.3,
    rest=0.6,
)
U_SHAPE_2 = toy_claim(
    "2_layers_U_shape",
    "first and last tokens easy, the middle hard (lost in the middle)",
    "U shape",
    u_rule,
    margin=0.2,
)
U_SHAPE = toy_claim(
    "U_shape",
    "the same U shape (only the first and last tokens retrieved reliably; a long plateau across the middle)",
    "U shape for n_embd {2, 10} x n_layers {2, 3}",
    U_SHAPE_2.rule,
)
SPIKIER = toy_claim(
    "plateau_broken",
    "the middle plateau replaced by a spikier profile (than {layers} plain layers)",
    "spiky",
    spikier_rule(),
    layers=2,
)
SPECS = (ONLY_LAST, U_SHAPE_2, U_SHAPE, SPIKIER)
