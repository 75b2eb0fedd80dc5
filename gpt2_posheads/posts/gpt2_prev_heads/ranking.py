"""Rank every head by how previous-token-like it is (GPT-2 post: "a taxonomy of previous-token heads").

    gpt2-posheads rank_prev_heads                       # GPT-2 small from the hub
    gpt2-posheads rank_prev_heads --model mini-gpt2

For every head, the mean attention on each diagonal (every offset; key 0 left out) and the ratio of the second-greatest
diagonal to the greatest (L4H11: 0.01). Writes ranking.csv, summary.json, the diagonal masses (heads x offsets) and a
layer x head grid of ratios.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from ...analysis.diagonals import (
    choose_aggregator,
    count_prev_heads,
    diagonal_attention,
    rank_from_diagonals,
    sharpest_prev_ratio,
    traced_ranking,
)
from ...claims.catalogue import Option
from ...claims.gpt2_post import NO_PREV_HEAD, SHARP_RATIO, SHARPEST_RULE, post_claim
from ...claims.verdicts import Claim, Precondition, finite, predicate, within
from ...model.engine import model_device
from ...model.engine_fast import ENGINES
from ...model.engine_nnsight import ENGINE as NNSIGHT
from ...model.engine_nnsight import is_traced
from ...model.loading import is_gpt2_small
from ...model.state import reduced_precision, resolve_bf16
from ...model.validation import NothingMeasuredError, UsageError, head_name
from ..result import ClaimResult
from ._run import ModelRun, claim_script, prompted_run, ratio_grid


@partial(
    predicate,
    f"held if the sharpest previous-token ratio is <= {SHARP_RATIO:g} and the next previous-token head (if any) is not "
    f"sharp (> {SHARP_RATIO:g}) and >= 5x less sharp",
)
def _stands_alone(v) -> tuple[bool, str]:  # v: (sharpest ratio, the next previous-token head's or None)
    first, second = v
    if not finite(first):  # inf: no previous-token head (a NaN never reaches a rule)
        return False, NO_PREV_HEAD
    if first > SHARP_RATIO:
        return False, f"the sharpest ratio {first:.3g} is not sharp (> {SHARP_RATIO:g})"
    if second is None or not finite(second):
        return True, f"ratio {first:.3g}, and no other previous-token head"
    ok = second > SHARP_RATIO and second >= 5 * first
    times = f"{second / first:.3g}x" if first > 0 else "infinitely"
    return ok, (
        f"ratio {first:.3g}; the next previous-token head {second:.3g} ({times} less sharp"
        + ("" if second > SHARP_RATIO else f", itself sharp: <= {SHARP_RATIO:g}")
        + f"; needs > {SHARP_RATIO:g} and >= 5x)"
    )


SPECS = SHARP, ALONE, HALF_PREV = (
    post_claim(
        "sharp_prev_head",
        "a head attends almost only to the previous token",
        "L4H11: ratio 0.01",
        SHARPEST_RULE,
        why_kind="a head reading W_pos can be as sharp",
    ),
    post_claim(
        "sharpest_stands_alone",
        "the sharpest head is in a class of its own",
        "0.01 vs next 0.18",
        _stands_alone,
        why_kind="a ranking fact, on either route",
    ),
    post_claim(
        "half_prev_heads",
        "about half the heads have the previous diagonal greatest",
        "69 of 144 (48%)",
        within(0.30, 0.65, "fraction of heads whose greatest diagonal is the previous one"),
        why_kind="a count over the whole model",
    ),
)

PROMPTS = dict(n_prompts=64, seq_len=256)  # the natural-text prompts it measures on by default
# The post's ratios of its eleven sharpest previous-token heads (GPT-2 small; its count of previous-token heads: 69)
POST_TOP = dict(
    zip(
        ("L4H11", "L5H6", "L3H3", "L2H2", "L6H8", "L7H0", "L2H4", "L1H0", "L3H7", "L8H7", "L3H2"),
        (0.01, 0.18, 0.33, 0.33, 0.43, 0.45, 0.46, 0.47, 0.50, 0.51, 0.52),
    )
)
N_SHOWN_OFFSETS = 16  # the diagonals the masses figure shows (a traced ranking brings back as many)


def float32_masses(bf16_used: bool, model=None) -> Precondition:
    """The rules judge diagonal masses computed in float32: bfloat16 matmuls (8 bits of mantissa in every query and key)
    moved the shipped compiled models' sharp heads' masses by up to 0.5 and turned 4 of their 18 ranking verdicts
    (``benchmarks/bench_rank_heads.py --verdicts``), and so do bfloat16 or float16 weights
    (:func:`~gpt2_posheads.model.state.reduced_precision`)."""
    reduced = reduced_precision(bf16_used, model)
    cause, fix = reduced or ("", "")
    return Precondition(
        "diagonal masses computed in float32",
        reduced is None,
        f"the diagonal masses were {cause}, which moved sharp heads' masses by up to 0.5 on the shipped compiled "
        f"models and turned 4 of their 18 verdicts; {fix}",
    )


def judge(ranking: pd.DataFrame, preconditions: list[Precondition] = ()) -> list[Claim]:
    """The sharpest previous-token head's ratio, its gap to the next, and the share of previous-token heads."""
    prev = ranking[ranking.is_prev_token]
    ratios, n_prev, n_heads = prev.ratio.tolist(), count_prev_heads(ranking), len(ranking)
    agg = head_name(*choose_aggregator(ranking)) if ratios else ""
    # no previous-token head is a measured fact, judged (not held): inf
    sharpest, next_ratio = sharpest_prev_ratio(ranking), ratios[1] if len(ratios) >= 2 else None
    sharp = alone = "no previous-token head"
    if ratios:
        sharp = f"ratio {ratios[0]:.3g}"
        alone = f"{ratios[0]:.3g} vs next {next_ratio:.3g}" if next_ratio is not None else f"{ratios[0]:.3g}, alone"
    first = {"head": agg or None, "ratio": ratios[0] if ratios else None, "prev_token_heads": n_prev, "heads": n_heads}
    two = {"ratios": ratios[:2], "heads": prev.name.tolist()[:2], "prev_token_heads": n_prev}
    share = f"{n_prev} of {n_heads} heads ({n_prev / n_heads:.0%})"
    return [
        SHARP.judge(first, sharpest, preconditions, head=agg, readout=sharp),
        ALONE.judge(two, (sharpest, next_ratio), preconditions, head=agg, readout=alone),
        HALF_PREV.judge({"n_prev": n_prev, "n_heads": n_heads}, n_prev / n_heads, preconditions, readout=share),
    ]


def masses_figure(ranking: pd.DataFrame, diag: torch.Tensor, label: str) -> go.Figure:
    """The first :data:`N_SHOWN_OFFSETS` diagonal masses of every head, in ranking order."""
    n_show, order = min(diag.shape[-1], N_SHOWN_OFFSETS), ranking["name"].tolist()
    z = np.stack([diag[r.layer, r.head, :n_show].numpy() for r in ranking.itertuples()])
    scale = dict(colorscale="Viridis", zmin=0, zmax=1, colorbar=dict(title="mean attention"))
    fig = go.Figure(go.Heatmap(z=z, x=list(range(n_show)), y=order, **scale))
    fig.update_layout(
        title=f"{label}: mean attention per diagonal (heads in ranking order)", height=max(500, 12 * len(order))
    )
    fig.update_xaxes(title="offset q - k (1 = previous token)", dtick=1)
    return fig.update_yaxes(title="head", autorange="reversed")


def _prepare(model, kwargs: dict, args) -> None:
    if model is None and kwargs["include_bos"] and kwargs["engine"] == "fast":
        raise UsageError("--include-bos", "is not needed with --engine fast", "drop one of them")


def _console(result: ClaimResult, options: dict) -> None:
    df = result.tables["ranking"]
    cols = ["rank", "name", "top_offset", "top_mass", "second_mass", "ratio"]
    print(df.head(options["top"])[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    n_prev, n_heads = result.numbers["n_prev_token_heads"], result.numbers["n_heads"]
    print(f"\n{n_prev} of {n_heads} heads have the previous-token diagonal greatest (GPT-2 post: 69 of 144)")


@claim_script(
    "rank_prev_heads",
    takes=("progress",),
    order=1,
    claims=SPECS,
    **PROMPTS,
    options=(
        Option("--include-bos", False, "count attention to key 0 in the diagonals"),
        Option("--batch-size", 8, "prompts per forward pass", int, low=1),
        Option("--top", 15, "rows of the ranking to print", int, low=1, kwarg=None),
        Option(
            "--bf16",
            False,
            "bfloat16 matmuls (softmax, LayerNorm, residual in float32) for a faster look on large models where the "
            "CPU has AMX: the ranking is written, its claims are not testable (sharp heads' masses move by up to "
            "0.5); float32 elsewhere, with a note",
        ),
    ),
    engines=ENGINES,
    ranking=False,
    prepare=_prepare,
    console=_console,
)
def rank_prev_heads(
    model=None,
    prompts: torch.Tensor | None = None,
    *,
    include_bos: bool = False,
    batch_size: int = 8,
    bf16: bool = False,
    engine: str = "auto",
    progress: bool = True,
    run: ModelRun | None = None,
) -> ClaimResult:
    """Rank every head by how previous-token-like it is and judge the post's taxonomy claims on the ranking.

    ``model``: also an nnsight :class:`~gpt2_posheads.model.engine_nnsight.TracedModel` (``engine`` ``"nnsight"``); a
    ``run`` with the default options lends its ranking, or keeps this one. ``include_bos``: the post leaves key 0 out
    (heads park spare attention there). ``bf16``: the claims not testable (:func:`float32_masses`). ``numbers``: ``top``
    (the eleven first heads, with the post's ratio on GPT-2 small), ...; ``tables``: ``ranking``.
    """
    if engine not in (*ENGINES, NNSIGHT):
        raise ValueError(f"engine: {engine!r} is not an engine; allowed {', '.join((*ENGINES, NNSIGHT))}")
    if include_bos and engine == "fast":
        raise ValueError("include_bos: the fast engine leaves key 0 out; use engine='auto' or 'hooks' to include it")
    given = run.model if run is not None else model
    if (traced := is_traced(given)) and engine == "auto":
        engine = NNSIGHT  # the only engine of a traced model
    if traced != (engine == NNSIGHT):
        raise ValueError(
            f"engine: {engine!r} needs {'an nnsight traced model' if engine == NNSIGHT else 'a TransformerLens model'}"
            f", got {type(given).__name__}"
        )
    run = prompted_run(model, prompts, run, **PROMPTS, traced=traced)
    shared = not include_bos and not bf16 and engine == "auto" and batch_size == 8  # what ModelRun.ranked() computes
    options = dict(exclude_bos=not include_bos, batch_size=batch_size)
    if shared and run.diag is not None and run.ranking is not None:
        ranking, diag, n_offsets = run.ranking, run.diag, int(run.diag.shape[-1])
    elif engine == NNSIGHT:  # the statistics computed where the model runs, on every offset; N_SHOWN_OFFSETS come back
        ranking, diag = traced_ranking(run.model, run.prompts, **options)
        n_offsets = int(run.prompts.shape[1])
    else:  # diag [n_layers, n_heads, n_offsets], offset q - k
        diag = diagonal_attention(run.model, run.prompts, **options, progress=progress, bf16=bf16, engine=engine)
        ranking, n_offsets = rank_from_diagonals(diag), int(diag.shape[-1])
        if shared:
            run.diag, run.ranking = diag, ranking
    result = ClaimResult("rank_prev_heads", run.label)
    result.table(ranking, "ranking")  # kept even when nothing was measured: its not_measured column says why
    try:
        agg = head_name(*choose_aggregator(ranking))
    except NothingMeasuredError as e:
        e.result = result  # what was measured, for a caller that writes it before reporting the claims not testable
        raise
    # what the pass ran in: the engine's own resolution (native units, or forced by the environment)
    bf16_used = engine != NNSIGHT and resolve_bf16(bf16, model_device(run.model))
    result.claims = judge(ranking, [float32_masses(bf16_used, run.model)])
    # the post's per-head ratios belong to GPT-2 small's heads only, never to another model's head of that name
    top = [{"name": r.name, "ratio": r.ratio, "top_offset": r.top_offset} for r in ranking.head(11).itertuples()]
    for row in top if is_gpt2_small(run.model) else ():
        row["post_ratio"] = POST_TOP.get(row["name"])
    result.numbers.update(
        exclude_bos=not include_bos,
        bf16=bf16_used,
        n_offsets=n_offsets,
        n_heads=len(ranking),
        n_prev_token_heads=count_prev_heads(ranking),
        post_n_prev_token_heads=69,
        aggregator=agg,
        top=top,
    )
    title = f"{run.label}: previous-token ratio (second / greatest diagonal)<br><sup>previous-token heads only; "
    title += "lower = sharper; blank = not a previous-token head</sup>"
    L, H = run.model.cfg.n_layers, run.model.cfg.n_heads
    text = [[f"L{l}H{h}" for h in range(H)] for l in range(L)]
    result.figure(ratio_grid(ranking, L, H, title, text=text, hovertemplate="%{text}: %{z:.3f}"), "ratio_grid")
    result.figure(masses_figure(ranking, diag, run.label), "diagonal_masses", height=max(500, 12 * len(ranking)))
    return result
