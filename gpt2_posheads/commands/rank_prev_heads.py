"""Rank every head by how previous-token-like it is (GPT-2 post: "a taxonomy of previous-token heads").

    gpt2-posheads rank_prev_heads                       # GPT-2 small from the hub
    gpt2-posheads rank_prev_heads --model mini-gpt2

For every head, the mean attention on each diagonal (every offset; key 0 left out) and the ratio of the
second-greatest diagonal to the greatest (L4H11: 0.01). Writes ranking.csv, summary.json, the diagonal
masses (heads x offsets) and a layer x head grid of ratios.
"""

import numpy as np
import plotly.graph_objects as go

from gpt2_posheads.analysis.diagonals import (
    choose_aggregator,
    count_prev_heads,
    diagonal_attention,
    rank_from_diagonals,
    traced_ranking,
)
from gpt2_posheads.claims.gpt2_post import judge_claim
from gpt2_posheads.cli import add_prompt_args, experiment_parser, positive, setup
from gpt2_posheads.cli.engine import add_engine_args, check_engine_args
from gpt2_posheads.model.fastpath import ENGINES
from gpt2_posheads.model.identity import is_gpt2_small
from gpt2_posheads.model.traced import ENGINE as NNSIGHT
from gpt2_posheads.model.validation import UsageError, head_name
from gpt2_posheads.report.plotting import heatmap

POST_TOP = {
    "L4H11": 0.01,
    "L5H6": 0.18,
    "L3H3": 0.33,
    "L2H2": 0.33,
    "L6H8": 0.43,
    "L7H0": 0.45,
    "L2H4": 0.46,
    "L1H0": 0.47,
    "L3H7": 0.50,
    "L8H7": 0.51,
    "L3H2": 0.52,
}


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=64, seq_len=256)
    p.add_argument("--include-bos", action="store_true", help="count attention to key 0 in the diagonals")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per forward pass")
    p.add_argument("--top", type=int, default=15, help="rows of the ranking to print")
    p.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 matmuls (softmax, LayerNorm, residual in float32): ~3x faster on CPUs with "
        "AMX/AVX512-BF16, diagonal masses within ~1e-3; float32 elsewhere, with a note",
    )
    add_engine_args(
        p, ENGINES, help="auto: hook-free fast path when it reproduces the model (checked), else TransformerLens hooks"
    )
    args = p.parse_args(argv)
    positive("--batch-size", args.batch_size)
    positive("--top", args.top)
    check_engine_args(args)
    exp = setup(args, __file__, ranking=False)
    model, prompts, out = exp.model, exp.prompts, exp.out
    print(f"{exp.label}: {len(prompts)} prompts x {prompts.shape[1]} tokens from {exp.source}")
    if args.include_bos and args.engine == "fast":
        raise UsageError("--include-bos", "is not needed with --engine fast", "drop one of them")
    if args.engine == NNSIGHT:  # statistics computed where the model runs; the first 16 diagonals come back
        df, diag = traced_ranking(model, prompts, exclude_bos=not args.include_bos, batch_size=args.batch_size)
        n_offsets = int(prompts.shape[1])
    else:
        diag = diagonal_attention(
            model,
            prompts,
            exclude_bos=not args.include_bos,
            batch_size=args.batch_size,
            bf16=args.bf16,
            engine=args.engine,
        )
        df = rank_from_diagonals(diag)
        n_offsets = int(diag.shape[-1])
    n_prev, n_heads = count_prev_heads(df), len(df)
    print(
        df.head(args.top)[["rank", "name", "top_offset", "top_mass", "second_mass", "ratio"]].to_string(
            index=False, float_format=lambda x: f"{x:.3f}"
        )
    )
    print(f"\n{n_prev} of {n_heads} heads have the previous-token diagonal greatest (GPT-2 post: 69 of 144)")

    out.csv(df, "ranking")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    grid = np.full((L, H), np.nan)
    for r in df.itertuples():
        grid[r.layer, r.head] = r.ratio if r.is_prev_token else np.nan
    out.figure(
        heatmap(
            grid,
            x=list(range(H)),
            y=list(range(L)),
            colorscale="Viridis_r",
            xlabel="head",
            ylabel="layer",
            title=f"{exp.label}: previous-token ratio (second / greatest diagonal)<br><sup>previous-token "
            f"heads only; lower = sharper; blank = not a previous-token head</sup>",
            text=[[f"L{l}H{h}" for h in range(H)] for l in range(L)],
            hovertemplate="%{text}: %{z:.3f}",
            zmin=0,
            zmax=1,
            colorbar=dict(title="ratio"),
        ),
        "ratio_grid",
    )
    n_show = min(diag.shape[-1], 16)
    order = df["name"].tolist()
    z = np.stack([diag[r.layer, r.head, :n_show].numpy() for r in df.itertuples()])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(n_show)),
            y=order,
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            colorbar=dict(title="mean attention"),
        )
    )
    fig.update_layout(
        title=f"{exp.label}: mean attention per diagonal (heads in ranking order)",
        xaxis_title="offset q - k (1 = previous token)",
        yaxis_title="head",
        height=max(500, 12 * len(order)),
    )
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(autorange="reversed")
    out.figure(fig, "diagonal_masses", height=max(500, 12 * len(order)))

    gpt2 = is_gpt2_small(model)
    prev = df[df.is_prev_token]
    ratios = prev.ratio.tolist()
    agg_l, agg_h = choose_aggregator(df)
    agg = head_name(agg_l, agg_h)
    claims = [
        judge_claim(
            "sharp_prev_head",
            {"head": agg if ratios else None, "ratio": ratios[0] if ratios else None},
            value=ratios[0] if ratios else float("nan"),
            head=agg if ratios else "",
            shown=f"ratio {ratios[0]:.3g}" if ratios else "no previous-token head",
        ),
        judge_claim(
            "sharpest_stands_alone",
            {"ratios": ratios[:2], "heads": prev.name.tolist()[:2]},
            value=(ratios[0] if ratios else float("nan"), ratios[1] if len(ratios) >= 2 else None),
            head=agg if ratios else "",
            shown=(f"{ratios[0]:.3g} vs next {ratios[1]:.3g}" if len(ratios) >= 2 else f"{ratios[0]:.3g}, alone")
            if ratios
            else "no previous-token head",
        ),
        judge_claim(
            "half_prev_heads",
            {"n_prev": n_prev, "n_heads": n_heads},
            value=n_prev / n_heads,
            shown=f"{n_prev} of {n_heads} heads ({n_prev / n_heads:.0%})",
        ),
    ]
    top = df.head(11)
    out.summary(
        {
            **exp.describe(),
            "exclude_bos": not args.include_bos,
            "bf16": args.bf16,
            "n_offsets": n_offsets,
            "n_heads": n_heads,
            "n_prev_token_heads": n_prev,
            "post_n_prev_token_heads": 69,
            "aggregator": agg,
            # the post's per-head ratios belong to GPT-2 small's heads only, never to another model's head of that name
            "top": [
                {
                    "name": r.name,
                    "ratio": r.ratio,
                    "top_offset": r.top_offset,
                    **({"post_ratio": POST_TOP.get(r.name)} if gpt2 else {}),
                }
                for r in top.itertuples()
            ],
        },
        claims,
    )
    out.commit()
    return df
