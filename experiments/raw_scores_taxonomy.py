"""Raw attention scores: early previous-token heads suppress the current token, the aggregator boosts
the previous one (GPT-2 post, "Early previous-token heads: how do they work?").

    python experiments/raw_scores_taxonomy.py --model-dir data/mini-gpt2

Figures: 50x50 raw-score submatrices (before the causal mask) of the chosen heads, and every head's
score profile summarised as dip (dark main diagonal) vs peak (bright previous diagonal).
CSV: the classification of all heads. Post: six self-suppressing early heads, L4H11 prev-boosting.
The aggregator is the model's sharpest previous-token head; "early" heads are the previous-token heads
in layers below it.
"""
import plotly.express as px

from gpt2_posheads.claims.gpt2_post import judge_claim, layer_above, prev_head_precondition
from gpt2_posheads.cli.common import (add_heads_arg, add_prompt_args, add_submatrix_args, experiment_parser, gpt2_experiment,
                               main_entry, model_label, positive, submatrix)
from gpt2_posheads.analysis.diagonals import diagonal_attention, rank_from_diagonals
from gpt2_posheads.report.plotting import heatmap_grid
from gpt2_posheads.analysis.scores import attention_scores, classify_prev_heads, score_profile
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.model.validation import head_name

SEED_SELF_SUPPRESSING = ["L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2"]


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, "L1H0,L2H2,L3H3,L2H4,L3H7,L3H2,L4H11", "heads whose raw scores are shown", auto_default=4)
    p.add_argument("--window", type=int, default=3, help="offsets -w..+w in the score profile")
    p.add_argument("--threshold", type=float, default=0.5, help="dip/peak (in profile std units) that labels a head")
    add_submatrix_args(p)
    args = p.parse_args(argv)
    positive("--window", args.window, 2, 32)
    out, model, prompts, source, heads = gpt2_experiment(args, __file__)
    tokens = [model.tokenizer.decode([int(t)]) for t in prompts[0]]
    panels, start = {}, 0
    for l, h in heads:
        panels[head_name(l, h)], start = submatrix(attention_scores(model, prompts[0], l, h)["raw"], args)
    out.figure(heatmap_grid(panels, cols=4, colorscale="Greys_r", shared_scale=False, x0=start, tokens=tokens,
                            mark_offset=1, colorbar_title="raw score", height_per_row=330,
                            title=f"{model_label(args)}: raw attention scores (before the causal mask) on prompt 0 "
                                  f"({source}); dotted: previous token"),
               "raw_scores", width=1500)

    profile = score_profile(model, prompts, window=args.window, progress=True)
    df = classify_prev_heads(profile, threshold=args.threshold)
    w = args.window
    for i, o in enumerate(range(-w, w + 1)):
        df[f"s({o:+d})"] = profile.flatten(0, 1)[:, i].numpy()
    diag = diagonal_attention(model, prompts, max_offset=16, progress=False)
    rank = rank_from_diagonals(diag)
    prev_names = set(rank[rank.is_prev_token].name)
    df["is_prev_token"] = df.name.isin(prev_names)
    out.csv(df, "classification")
    fig = px.scatter(df, x="dip", y="peak", color="label", text="name", symbol="is_prev_token", hover_data=["trend"],
                     title=f"{model_label(args)}: score profile, dip at the current token vs peak at the previous "
                           f"token (std units)")
    fig.update_traces(textposition="top center", textfont_size=8)
    out.figure(fig, "taxonomy")
    chosen = df[df.name.isin([head_name(l, h) for l, h in heads])]
    print(chosen[["name", "dip", "peak", "trend", "label"]].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    counts = df.label.value_counts().to_dict()

    agg = rank.iloc[0]
    early = df[df.is_prev_token & (df.layer < int(agg.layer))]
    n_self = int((early.label == "self_suppressing").sum())
    agg_label = df.set_index("name").loc[agg["name"], "label"]
    pre_agg = [prev_head_precondition(agg["name"], diag[int(agg["layer"]), int(agg["head"])])]
    claims = [
        judge_claim("early_self_suppressing", {"aggregator": agg["name"], "early_prev_heads": early.name.tolist(),
                                               "self_suppressing": early[early.label == "self_suppressing"].name.tolist()},
                    value=(n_self, len(early)),
                    preconditions=pre_agg + [Precondition("there are previous-token heads below the aggregator",
                                                          len(early) > 0, f"none below layer {int(agg.layer)}")]),
        judge_claim("aggregator_prev_boosting", {"head": agg["name"], "label": agg_label},
                    value=(agg["name"], agg_label), preconditions=pre_agg + [layer_above(agg["name"], int(agg.layer), 0)]),
    ]
    out.summary({
        "model": model_label(args), "prompt_source": source, "n_prompts": len(prompts), "window": w,
        "threshold": args.threshold, "label_counts": counts, "aggregator": agg["name"],
        "early_prev_heads": early[["name", "dip", "peak", "trend", "label"]],
        "chosen_heads": chosen[["name", "dip", "peak", "trend", "label"]],
    }, claims)
    out.report()


if __name__ == "__main__":
    main_entry(main)
