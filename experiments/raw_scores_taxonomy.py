"""Raw attention scores: early previous-token heads suppress the current token, L4H11 boosts the
previous one (GPT-2 post, "Early previous-token heads: how do they work?").

    python experiments/raw_scores_taxonomy.py --model-dir data/mini-gpt2 --heads auto:4

Figures: 50x50 raw-score submatrices (before the causal mask) of the chosen heads, and every head's
score profile summarised as dip (dark main diagonal) vs peak (bright previous diagonal).
CSV: the classification of all heads. Post: six self-suppressing early heads, L4H11 prev-boosting.
"""
import plotly.express as px

from gpt2_posheads.cli import (add_heads_arg, add_prompt_args, add_submatrix_args, experiment_parser, gpt2_experiment,
                               model_label, submatrix)
from gpt2_posheads.plotting import heatmap_grid
from gpt2_posheads.scores import attention_scores, classify_prev_heads, score_profile
from gpt2_posheads.validation import head_name

SEED_SELF_SUPPRESSING = ["L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2"]


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, "L1H0,L2H2,L3H3,L2H4,L3H7,L3H2,L4H11", "heads whose raw scores are shown")
    p.add_argument("--window", type=int, default=3, help="offsets -w..+w in the score profile")
    p.add_argument("--threshold", type=float, default=0.5, help="dip/peak (in profile std units) that labels a head")
    add_submatrix_args(p)
    args = p.parse_args(argv)
    out, model, prompts, source, heads = gpt2_experiment(args, __file__)
    panels = {head_name(l, h): submatrix(attention_scores(model, prompts[0], l, h)["raw"], args) for l, h in heads}
    out.figure(heatmap_grid(panels, cols=4, title=f"{model_label(args)}: raw attention scores (before the causal mask)",
                            colorscale="Greys_r", shared_scale=False, x0=args.start, y0=args.start,
                            height_per_row=330),
               "raw_scores", width=1500)

    profile = score_profile(model, prompts, window=args.window, progress=True)
    df = classify_prev_heads(profile, threshold=args.threshold)
    w = args.window
    for i, o in enumerate(range(-w, w + 1)):
        df[f"s({o:+d})"] = profile.flatten(0, 1)[:, i].numpy()
    out.csv(df, "classification")
    fig = px.scatter(df, x="dip", y="peak", color="label", text="name", hover_data=["trend"],
                     title="score profile: dip at the current token vs peak at the previous token (std units)")
    fig.update_traces(textposition="top center", textfont_size=8)
    out.figure(fig, "taxonomy")
    chosen = df[df.name.isin([head_name(l, h) for l, h in heads])]
    print(chosen[["name", "dip", "peak", "trend", "label"]].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    early = df[df.layer < 4]
    counts = df.label.value_counts().to_dict()
    print(f"labels: {counts}")
    out.summary({
        "model": model_label(args), "prompt_source": source, "n_prompts": len(prompts), "window": w,
        "threshold": args.threshold, "label_counts": counts,
        "early_layers_self_suppressing": early[early.label == "self_suppressing"].name.tolist(),
        "prev_boosting": df[df.label == "prev_boosting"].name.tolist(),
        "chosen_heads": chosen[["name", "dip", "peak", "trend", "label"]],
        "post": {"self_suppressing": SEED_SELF_SUPPRESSING, "prev_boosting": ["L4H11"]},
    })
    out.report()


if __name__ == "__main__":
    main()
