"""Raw attention scores: early previous-token heads suppress the current token, the aggregator boosts
the previous one (GPT-2 post, "Early previous-token heads: how do they work?").

    python experiments/raw_scores_taxonomy.py --model-dir data/mini-gpt2

Figures: 50x50 raw-score submatrices (before the causal mask, so the upper triangle shows the scores the
mask removes) of the chosen heads, and every head's score profile summarised as dip (the current key below the
trend of older keys: a dark main diagonal) vs spike (the previous key above that trend: a bright previous
diagonal), in logits. CSV: the classification of all heads. Post: six self-suppressing early heads, L4H11
prev-boosting. The aggregator is the model's sharpest previous-token head; "early" heads are the clear
previous-token heads (ratio <= 0.6) in layers below it.
"""

import plotly.express as px

from gpt2_posheads.analysis.diagonals import CLEAR_PREV_RATIO, choose_aggregator, early_prev_heads
from gpt2_posheads.analysis.scores import LABEL_THRESHOLD, attention_scores, classify_prev_heads, score_profile
from gpt2_posheads.claims.gpt2_post import judge_claim, prev_head_precondition
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.cli import (
    HeadDefault,
    add_heads_arg,
    add_prompt_args,
    add_submatrix_args,
    experiment_parser,
    main_entry,
    positive,
    setup,
    submatrix,
)
from gpt2_posheads.model.validation import head_name
from gpt2_posheads.report.plotting import heatmap_grid

HEADS = HeadDefault(
    ("L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2", "L4H11"), "top", n=4, what="heads whose raw scores are shown"
)


def cluster_labels(df) -> list[str]:
    """One label per cluster of clear previous-token heads drawn at the same spot (within 2% of the axes' span):
    every name of the cluster on its first point, so overlapping labels never hide each other."""
    span = max(float(df.dip.max() - df.dip.min()), float(df.spike.max() - df.spike.min()), 1e-9)
    spots: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(df.itertuples()):
        if r.clear_prev_token:
            spots.setdefault((round(r.dip / (0.02 * span)), round(r.spike / (0.02 * span))), []).append(i)
    labels = [""] * len(df)
    for members in spots.values():
        labels[members[0]] = ", ".join(df.name.iloc[i] for i in members)
    return labels


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, HEADS)
    p.add_argument(
        "--window",
        type=int,
        default=3,
        help="offsets -w..+w in the score profile (>= 3: the trend needs two older keys)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=LABEL_THRESHOLD,
        help="logits a spike or dip needs to label a head (default ln 2: attention odds changed 2x)",
    )
    add_submatrix_args(p)
    args = p.parse_args(argv)
    positive("--window", args.window, 3, 32)
    positive("--threshold", args.threshold, 0, kind="a number")
    exp = setup(args, __file__, heads=HEADS)
    model, prompts, out = exp.model, exp.prompts, exp.out
    positive("--window", args.window, 3, (prompts.shape[1] - 9) // 2)
    tokens = [model.tokenizer.decode([int(t)]) for t in prompts[0]]
    panels, start = {}, 0
    for (l, h), name in zip(exp.heads, exp.head_names):
        panels[name], start = submatrix(attention_scores(model, prompts[0], l, h)["raw"], args.start, args.size)
    out.figure(
        heatmap_grid(
            panels,
            cols=4,
            colorscale="Greys_r",
            shared_scale=False,
            x0=start,
            tokens=tokens,
            mark_offset=1,
            colorbar_title="raw score",
            height_per_row=330,
            title=f"{exp.label}: raw attention scores before the causal mask<br><sup>prompt 0 "
            f"({exp.source}); dotted: previous token</sup>",
        ),
        "raw_scores",
        width=1500,
    )

    profile = score_profile(model, prompts, window=args.window, progress=True)
    df = classify_prev_heads(profile, threshold=args.threshold)
    w = args.window
    for i, o in enumerate(range(-w, w + 1)):
        df[f"s({o:+d})"] = profile.flatten(0, 1)[:, i].numpy()
    rank = exp.ranking
    clear = set(rank[rank.is_prev_token & (rank.ratio <= CLEAR_PREV_RATIO)].name)
    df["clear_prev_token"] = df.name.isin(clear)
    out.csv(df, "classification")
    shown = df.assign(
        kind=df.label.map({"self_suppressing": "self-suppressing", "prev_boosting": "prev-boosting"}).fillna("neither"),
        head_kind=df.clear_prev_token.map({True: "clear previous-token head", False: "other head"}),
    )
    fig = px.scatter(
        shown,
        x="dip",
        y="spike",
        color="kind",
        symbol="head_kind",
        hover_name="name",
        hover_data={"trend": ":.2f", "lead": ":.2f", "dip": ":.2f", "spike": ":.2f", "kind": False, "head_kind": False},
        text=cluster_labels(shown),
        labels={"kind": "label", "head_kind": "head"},
        title=f"{exp.label}: raw-score profile of every head<br><sup>dip: the current key below the trend of older "
        "keys (a dark main diagonal); spike: the previous key above it (a bright previous diagonal); logits; "
        "dotted: the threshold ln 2</sup>",
    )
    fig.update_traces(textposition="top center", textfont_size=9)
    for axis in ("x", "y"):
        getattr(fig, f"add_{'v' if axis == 'x' else 'h'}line")(args.threshold, line_dash="dot", line_color="grey")
    fig.update_layout(xaxis_title="dip at the current key (logits)", yaxis_title="spike at the previous key (logits)")
    out.figure(fig, "taxonomy")
    chosen = df[df.name.isin(exp.head_names)]
    cols = ["name", "trend", "spike", "dip", "lead", "label"]
    print(chosen[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}"))

    agg_l, agg_h = choose_aggregator(rank)
    agg = head_name(agg_l, agg_h)
    early_names = early_prev_heads(rank, agg_l).name.tolist()
    early = df[df.name.isin(early_names)]
    n_self = int((early.label == "self_suppressing").sum())
    agg_label = df.set_index("name").loc[agg, "label"]
    pre_agg = [prev_head_precondition(agg, exp.diag[agg_l, agg_h])]
    claims = [
        judge_claim(
            "early_self_suppressing",
            {
                "aggregator": agg,
                "early_prev_heads": early.name.tolist(),
                "self_suppressing": early[early.label == "self_suppressing"].name.tolist(),
                "prev_boosting": early[early.label == "prev_boosting"].name.tolist(),
            },
            value=(n_self, len(early)),
            head=",".join(early.name),
            shown=f"{n_self} of {len(early)} self-suppressing",
            preconditions=pre_agg
            + [
                Precondition(
                    "there are clear previous-token heads below the aggregator",
                    len(early) > 0,
                    f"no clear previous-token head sits below {agg} (layer {agg_l})",
                )
            ],
        ),
        judge_claim(
            "aggregator_prev_boosting",
            {"head": agg, "label": agg_label},
            value=(agg, agg_label),
            head=agg,
            shown=str(agg_label).replace("_", "-"),
            preconditions=pre_agg,
        ),
    ]
    out.summary(
        {
            **exp.describe(),
            "window": w,
            "threshold": args.threshold,
            "label_counts": df.label.value_counts().to_dict(),
            "aggregator": agg,
            "early_prev_heads": early[cols],
            "chosen_heads": chosen[cols],
        },
        claims,
    )
    out.commit()


if __name__ == "__main__":
    main_entry(main)
