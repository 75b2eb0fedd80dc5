"""Extended positional embeddings against W_pos, layer by layer (GPT-2 post: "Concept: extended
positional embeddings").

    python experiments/ext_pos_vs_wpe.py --model-dir data/mini-gpt2

Figures: the three-panel comparison at --layer (both sets on W_pos's PCs, on the extended
embeddings' PCs, on the PCs of both concatenated), and per layer 0..n_layers the principal angles
to W_pos, the large-entry fraction (sparsity) and the token dependence. CSV + JSON of all numbers.
"""
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from gpt2_posheads.claims.gpt2_post import judge_claim
from gpt2_posheads.cli.common import (Output, experiment_parser, main_entry, model_from_args, model_label, positive, postcheck,
                               precheck)
from gpt2_posheads.analysis.geometry import large_entry_fraction, pca, principal_angles, project, token_dependence
from gpt2_posheads.report.plotting import line_figure
from gpt2_posheads.analysis.posembed import centred_w_pos, extended_pos_embeddings_by_layer, load_w_pos


def three_panel(w, ext, layer):
    both = torch.cat([w, ext])
    bases = {"W_pos PCs": pca(w, 3)[0], f"layer-{layer} extended PCs": pca(ext, 3)[0], "concatenated PCs": pca(both, 3)[0]}
    fig = make_subplots(rows=1, cols=3, specs=[[{"type": "scene"}] * 3], subplot_titles=list(bases))
    for i, (name, comps) in enumerate(bases.items()):
        for label, x, colour in ((f"extended L{layer}", ext, "red"), ("W_pos", w, "blue")):
            p = project(x, comps)
            fig.add_trace(go.Scatter3d(x=p[:, 0], y=p[:, 1], z=p[:, 2], mode="markers", name=label,
                                       marker=dict(size=2, color=colour), showlegend=i == 0), row=1, col=i + 1)
    axes = dict(xaxis_title="PC1", yaxis_title="PC2", zaxis_title="PC3", aspectmode="cube")
    fig.update_layout(title=f"red: extended positional embeddings at layer {layer}; blue: W_pos", height=550,
                      margin=dict(l=0, r=0, t=70, b=0), scene=axes, scene2=axes, scene3=axes)
    return fig


def main(argv=None):
    p = experiment_parser(__doc__)
    p.add_argument("--layer", type=int, default=2, help="layer of the three-panel comparison (0..n_layers; "
                   "n_layers = the final residual stream)")
    p.set_defaults(_layer_final=True)
    p.add_argument("--n-prompts", type=int, default=16, help="repeated-token prompts averaged")
    p.add_argument("--n-token-dependence", type=int, default=4, help="tokens kept separately for token dependence")
    p.add_argument("--seq-len", type=int, default=None, help="positions (default n_ctx)")
    p.add_argument("--k", type=int, default=3, help="subspace dimension of the principal angles")
    args = p.parse_args(argv)
    precheck(args)
    positive("--n-prompts", args.n_prompts)
    positive("--n-token-dependence", args.n_token_dependence, 2)
    positive("--k", args.k, 1)
    out = Output.from_args(args, __file__)
    model = model_from_args(args)
    postcheck(args, model)
    positive("--seq-len", args.seq_len, 2, model.cfg.n_ctx)
    layers = list(range(model.cfg.n_layers + 1))
    seq_len = args.seq_len or model.cfg.n_ctx
    w = centred_w_pos(load_w_pos(model), seq_len)
    ext = extended_pos_embeddings_by_layer(model, layers, n_prompts=args.n_prompts, seq_len=seq_len,
                                           seed=args.seed, progress=True)
    _, per_tok = extended_pos_embeddings_by_layer(model, layers, n_prompts=args.n_token_dependence, seq_len=seq_len,
                                                  seed=args.seed + 1, return_per_token=True)
    rows = []
    for l in layers:
        ang = principal_angles(w, ext[l], k=args.k).tolist()
        rows.append({"layer": l, **{f"angle_{i + 1}_deg": a for i, a in enumerate(ang)},
                     "large_entry_fraction": large_entry_fraction(ext[l]),
                     "norm": float(ext[l].norm()), "token_dependence": token_dependence(per_tok[l])})
    df = pd.DataFrame(rows)
    df["sparsity_vs_layer0"] = df["large_entry_fraction"][0] / df["large_entry_fraction"]
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    out.csv(df, "per_layer")
    layer = args.layer
    out.figure(three_panel(w, ext[layer], layer), f"three_panel_L{layer}", width=1500)
    out.figure(line_figure({f"angle {i + 1}": (df.layer, df[f"angle_{i + 1}_deg"]) for i in range(args.k)},
                           title="principal angles between W_pos and the extended positional embeddings",
                           xlabel="layer", ylabel="degrees", mode="lines+markers"), "principal_angles")
    out.figure(line_figure({"fraction of entries > 1 RMS": (df.layer, df.large_entry_fraction)},
                           title="large-entry fraction (lower = sparser)", xlabel="layer", mode="lines+markers"), "sparsity")
    out.figure(line_figure({"relative spread across tokens": (df.layer, df.token_dependence)},
                           title="token dependence of the extended positional embeddings", xlabel="layer",
                           mode="lines+markers"), "token_dependence")
    l2 = min(2, model.cfg.n_layers)
    a2 = df.set_index("layer").loc[l2]
    angles = [a2[f"angle_{i + 1}_deg"] for i in range(args.k)]
    sparsity = float(df.sparsity_vs_layer0[1:].mean())
    claims = [
        judge_claim("ext_same_subspace", {"layer": l2, "angles_deg": angles}, value=max(angles)),
        judge_claim("ext_sparser", {"ratio": sparsity, "per_layer": df.large_entry_fraction.tolist()}, value=sparsity),
        judge_claim("ext_token_independent", {"layer": l2, "spread": float(a2.token_dependence)},
                    value=float(a2.token_dependence)),
    ]
    out.summary({
        "model": model_label(args), "seq_len": seq_len, "n_prompts": args.n_prompts, "k": args.k,
        "sparsity_rule": "fraction of entries with |x| > 1 * RMS of the matrix",
        "per_layer": df,
        "layer2_angles_deg": [a2[f"angle_{i + 1}_deg"] for i in range(args.k)], "seed_post_layer2_angles_deg": [8, 9, 10],
        "mean_sparsity_ratio_layers_gt0": sparsity, "seed_post_sparsity_ratio": 3.0,
    }, claims)
    out.report()


if __name__ == "__main__":
    main_entry(main)
