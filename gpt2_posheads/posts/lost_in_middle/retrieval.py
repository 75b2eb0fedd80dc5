"""Post 002 ("Sparse attention 7"): stacked causal attention without positions loses the middle of its context
(what the post finds: the command's usage, below), judged on the final loss per (k, seed);
:func:`lost_in_middle_grid`: its claims on the ``--robustness`` grid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import plotly.graph_objects as go

from ...claims.catalogue import Option, declare
from ...claims.toy import (
    N_EVAL,
    SPREAD_SDS,
    margin_words,
    mean_sd,
    num,
    pair_rule,
    seeds_phrase,
    spread,
    toy_claim,
    toy_post,
)
from ...claims.verdicts import Rule
from ...toy import ToyConfig
from ...toy.posts import GridClaim, ToyRun
from ..result import ClaimResult

POST = toy_post(
    "002",
    "Sparse attention 7: stacked causal attention as implicit positions, and lost in the middle",
    "2026-01-31",
    "002_05fa633ad24e0e9c.txt",
    "lost_in_middle",
    4,
)


def _by_k(losses) -> np.ndarray:
    """Final losses as ``[k, seed]`` (one seed: a column)."""
    a = np.asarray(losses, dtype=float)
    return a[:, None] if a.ndim == 1 else a


@toy_claim(
    "1_layer_only_last", "only the current token (k = C-1) is retrieved", "only k = C-1 retrievable", last=0.3, rest=0.6
)
def ONLY_LAST(last: float, rest: float) -> Rule:
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


@toy_claim(
    "2_layers_U_shape", "first and last tokens easy, the middle hard (lost in the middle)", "U shape", margin=0.2
)
def U_SHAPE_2(margin: float) -> Rule:
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


U_SHAPE = toy_claim(
    "U_shape",
    "the same U shape (only the first and last tokens retrieved reliably; a long plateau across the middle)",
    "U shape for n_embd {2, 10} x n_layers {2, 3}",
    U_SHAPE_2.rule,
)
# The middle spikier with residual + MLP than the plain stack. Value: ``(final losses [C, seed] with residual + MLP, of
# the plain stack, the plain stack's label, V)``.
SPIKIER = toy_claim(
    "plateau_broken",
    "the middle plateau replaced by a spikier profile (than {layers} plain layers)",
    "spiky",
    pair_rule(
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
    ),
    layers=2,
)
SPECS = (ONLY_LAST, U_SHAPE_2, U_SHAPE, SPIKIER)


V, C = 10, 10
STEPS, QUICK_STEPS, SEEDS = 800, 200, 3
PLAIN = [(2, 2), (2, 10), (3, 2), (3, 10)]  # (n_layers, n_embd): the post's "embedding dimension and layers" grid
# Evaluations per run in the default run, which judges final losses only. Each evaluation (2,048 sequences
# per model) costs about 8 training steps (measured: 30 two-layer models, 200 steps, 50 evaluations 55 s,
# one 18 s); evaluating does not touch the training data, so how often changes no trajectory. The grid
# keeps the base's 50 (its runs are cached under that setting).
EVALS = 10
# Three stacked attention layers without residual connections escape the chance plateau much later than
# two (measured over seeds 0-2: at 800 steps every k but 0 was at chance; with n_embd 10, k = C-1 leaves
# chance by step 2,500; with n_embd 2, k = 0 leaves it between steps 3,000 and 4,000 and settles by 5,000);
# the post trains to convergence, so they get THREE_LAYER_STEPS (three_layer_steps; or the steps given, if longer).
THREE_LAYER_STEPS = 5000
THREE_LAYER_HELP = "training steps of the plain 3-layer stacks "
THREE_LAYER_HELP += f"(default {THREE_LAYER_STEPS}: converged; they are still at chance after 800)"


def configs(base: ToyConfig, seeds: Sequence[int], quick: bool, three_layer_steps: int) -> dict[str, list]:
    """``{setting: [k][seed] config}`` from ``base``: every k of the context at every seed, evaluated
    :data:`EVALS` times per run."""
    steps = base.steps

    def plain(layers: int, embd: int) -> dict:
        return dict(n_layers=layers, n_embd=embd, **({"steps": max(steps, three_layer_steps)} if layers == 3 else {}))

    named = [("1 layer, n_embd 10", dict(n_layers=1, n_embd=10)), ("2 layers, n_embd 10", plain(2, 10))]
    if not quick:
        named += [(f"{l} layers, n_embd {e}", plain(l, e)) for l, e in PLAIN if (l, e) != (2, 10)]
        res = dict(n_embd=10, residual=True, mlp=True)
        named += [(f"{l} layers, n_embd 10, residual + MLP", dict(n_layers=l, **res)) for l in (2, 3)]

    def every_k(kw: dict) -> list[list]:
        every = max(kw.get("steps", steps) // EVALS, 1)
        return [[replace(base, **kw, k=k, seed=s, log_every=every) for s in seeds] for k in range(base.C)]

    return {name: every_k(kw) for name, kw in named}


def judge(grid: dict, losses: dict[str, np.ndarray], table: dict[str, dict], n: int) -> list[tuple]:
    """The claims' rows (:meth:`~gpt2_posheads.toy.posts.ToyRun.finish`) from each setting's final losses ``[k, seed]``
    (``n`` seeds) and their ``table``; ``grid``: the settings' configs (:func:`configs`)."""

    def ends(name):
        mean = losses[name].mean(1)
        return (
            f"k = 0: {num(mean[0], 2)}, k = {C - 1}: {num(mean[-1], 2)}, middle k = 2..{C - 3}: "
            f"{num(mean[2:-2].mean(), 3)} nats (mean of {n} seeds)"
        )

    one, two = "1 layer, n_embd 10", "2 layers, n_embd 10"
    m1 = losses[one].mean(1)
    only = f"k = {C - 1}: {num(m1[-1], 2)} nats; k = 0..{C - 2}: {num(m1[:-1].min(), 3)}–{num(m1[:-1].max(), 3)} nats"
    rows = [
        (ONLY_LAST.at(setting=one), table[one], (losses[one], V), f"{only} (mean of {n} seeds)"),
        (U_SHAPE_2.at(setting=two), table[two], (losses[two], V), ends(two)),
    ]
    for l, e in PLAIN:
        name = f"{l} layers, n_embd {e}"
        if (l, e) != (2, 10) and name in table:
            at = U_SHAPE.at(name, f"{name} ({table[name]['steps']:,} steps)")
            rows.append((at, table[name], (losses[name], V), ends(name)))
    for name in table:
        layers = grid[name][0][0].n_layers
        plain = f"{layers} layers, n_embd 10"
        if "residual" not in name or plain not in losses:
            continue
        res, flat = middle_spread(losses[name]), middle_spread(losses[plain])
        shown = f"spread over the middle {num(spread(res)[0], 2)} nats vs {num(spread(flat)[0], 2)} without residual "
        measured = {"middle_std": res.tolist(), "middle_std_without": flat.tolist()}
        value = (losses[name], losses[plain], f"{layers} plain layers", V)
        rows.append((SPIKIER.at(name, name, layers=layers), measured, value, f"{shown}+ MLP (mean of {n} seeds)"))
    return rows


def figure(grid: dict, table: dict[str, dict], n: int, steps: int, three_layer_steps: int) -> go.Figure:
    """The final loss against k, mean ± sd over ``n`` seeds, one curve per setting; chance (ln V) dotted."""
    fig, points = go.Figure(), dict(x=list(range(C)), mode="lines+markers")
    for name, row in table.items():
        sd = dict(type="data", array=row["std"])
        fig.add_trace(go.Scatter(y=row["mean_final_loss"], error_y=sd, name=name, **points))
    fig.add_hline(y=math.log(V), line_dash="dot", annotation_text="ln V (chance)")
    three = any(r[0][0].n_layers == 3 and not r[0][0].residual for r in grid.values())
    three_steps = max(steps, three_layer_steps)
    step_note = f"{steps:,} steps" + (f" ({three_steps:,} for the plain 3-layer stacks)" if three else "")
    fig.update_layout(
        title=f"final loss of retrieving the k-th of {C} tokens (V={V}, no positional embeddings)"
        f"<br><sup>mean ± sd over {n} seeds; {step_note}</sup>",
        xaxis=dict(title="k (position of the target token)", dtick=1),
        yaxis_title="final loss (nats)",
    )
    return fig


@declare(
    POST,
    "toy_lost_in_middle",
    claims=SPECS,
    usage="""Sparse attention 7 (002): stacked causal attention without positional embeddings retrieves the
first and last tokens but loses the middle ("lost in the middle").

V 10, C 10, one head, no positional embeddings; target = the k-th token. Final loss against k for
1 layer (only k = C-1 retrievable) and 2 layers (U shape), n_embd {2, 10} x n_layers {2, 3}, and
with residual connections + MLPs (plateau replaced by spikes). Every k and seed of a setting trains
as one batched computation.

    gpt2-posheads toy_lost_in_middle            # 800 steps; 3 plain layers 5,000 (times: docs/posts/002-*.md)
    gpt2-posheads toy_lost_in_middle --three-layer-steps 800   # shorter; the 3-layer stacks stay at chance
    gpt2-posheads toy_lost_in_middle --quick

The claim as a function: gpt2_posheads.posts.lost_in_middle.lost_in_middle
(gpt2_posheads/posts/lost_in_middle/retrieval.py).
""",
    options=(
        ToyRun.steps_option(STEPS, QUICK_STEPS),
        Option("--seeds", SEEDS, "seeds per setting", int),
        Option("--three-layer-steps", THREE_LAYER_STEPS, THREE_LAYER_HELP, int, low=1),
    ),
)
def lost_in_middle(*, three_layer_steps: int = THREE_LAYER_STEPS, **options) -> ClaimResult:
    """Train post 002's toy models and judge its claims (``toy_lost_in_middle``'s defaults). ``three_layer_steps``:
    the plain 3-layer stacks' (or ``steps`` if longer). ``options``: :class:`~gpt2_posheads.toy.posts.ToyRun`'s
    (``quick``: also 1 and 2 layers only; every setting trains at ``seeds`` seeds, default 3); ``numbers`` also records
    the final losses per setting and k (``table``)."""
    run = ToyRun.of("lost_in_middle", options, STEPS, QUICK_STEPS, seeds=SEEDS)
    base = run.base(log_points=50, task="kth_token", V=V, C=C, n_heads=1, pos_emb=False)
    seeds = run.run_seeds
    grid = configs(base, seeds, run.quick, three_layer_steps)
    flat = [c for rows in grid.values() for row in rows for c in row]
    n_steps = sorted({c.steps for c in flat})
    print(
        f"toy_lost_in_middle: {len(flat)} models: {len(grid)} settings x {C} positions k x {len(seeds)} seeds "
        f"({', '.join(f'{s:,}' for s in n_steps)} steps); every k and seed of a setting trains as one group",
        flush=True,
    )
    res = run.train(flat)
    losses, table = {}, {}  # per setting: the final losses [k, seed]; them with their mean and sd over seeds
    for name, rows in grid.items():
        loss = losses[name] = np.array([[res[c.id()]["final_loss"] for c in row] for row in rows])  # [k, seed]
        sd = loss.std(1, ddof=1).tolist() if len(seeds) > 1 else [0.0] * len(rows)
        table[name] = dict(k=list(range(len(rows))), mean_final_loss=loss.mean(1).tolist(), std=sd)
        table[name] |= dict(final_loss_by_seed=loss.tolist(), steps=rows[0][0].steps)
    figures = {"lost_in_middle": (figure(grid, table, len(seeds), run.steps, three_layer_steps), {"width": 1100})}
    numbers = dict(three_layer_steps=three_layer_steps, seeds=seeds, table=table)
    rows, title = judge(grid, losses, table, len(seeds)), "002: lost in the middle"
    return run.finish(ClaimResult("lost_in_middle"), rows, figures, base, lost_in_middle_grid(C), title, **numbers)


# --- the --robustness grid --------------------------------------------------------------------------------------


def lost_in_middle_grid(C: int) -> list[GridClaim]:
    """002's headline claims (one seed: every k of one model shape)."""

    def every_k(**kw):
        return lambda b: {f"k={k}": replace(b, **kw, k=k) for k in range(C)}

    def losses(r):
        return [r[f"k={k}"]["final_loss"] for k in range(C)], r["k=0"]["config"]["V"]

    return [
        GridClaim(ONLY_LAST.at(), every_k(n_layers=1, n_embd=10), losses),
        GridClaim(U_SHAPE_2.at(), every_k(n_layers=2, n_embd=10), losses),
    ]
