"""Extended positional embeddings against W_pos, layer by layer (GPT-2 post: "Concept: extended
positional embeddings").

    gpt2-posheads ext_pos_vs_wpe --model mini-gpt2

Figures: the three-panel comparison at --layer (both sets on W_pos's PCs, on the extended embeddings' PCs,
on the PCs of both concatenated), and per layer 0..n_layers the principal angles to W_pos, the large-entry
fraction (sparsity) and the token dependence. CSV + JSON of all numbers. On a model without learned
absolute positions only the token dependence is measured (the rest compares with W_pos).
"""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from gpt2_posheads.analysis.geometry import large_entry_fraction, pca, principal_angles, project, token_dependence
from gpt2_posheads.analysis.posembed import (
    centred_w_pos,
    default_bos,
    extended_pos_embeddings_by_layer,
    load_w_pos,
    token_rows,
)
from gpt2_posheads.claims.gpt2_post import helix_precondition, judge_claim
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.cli import experiment_parser, note, positive, setup
from gpt2_posheads.cli.experiment import wpos_reason
from gpt2_posheads.report.plotting import line_figure


def three_panel(w, ext, layer, label):
    """Both point sets on three bases; each scene's axes span the 1st-99th percentile of its points, so one
    outlying position (GPT-2's W_pos[0] has norm 9.9) does not squash the rest."""
    both = torch.cat([w, ext])
    bases = {
        "W_pos PCs": pca(w, 3)[0],
        f"layer-{layer} extended PCs": pca(ext, 3)[0],
        "concatenated PCs": pca(both, 3)[0],
    }
    fig = make_subplots(
        rows=1, cols=3, specs=[[{"type": "scene"}] * 3], subplot_titles=list(bases), horizontal_spacing=0.02
    )
    scenes, clipped = {}, 0
    for i, (_name, comps) in enumerate(bases.items()):
        pts = []
        for lab, x, colour in ((f"extended L{layer}", ext, "red"), ("W_pos", w, "blue")):
            p = project(x, comps).numpy()
            pts.append(p)
            fig.add_trace(
                go.Scatter3d(
                    x=p[:, 0],
                    y=p[:, 1],
                    z=p[:, 2],
                    mode="markers",
                    name=lab,
                    marker=dict(size=2, color=colour),
                    showlegend=i == 0,
                ),
                row=1,
                col=i + 1,
            )
        allp = np.concatenate(pts)
        lo, hi = np.percentile(allp, 1, axis=0), np.percentile(allp, 99, axis=0)
        pad = 0.1 * (hi - lo)
        clipped = max(clipped, int((((allp < lo - pad) | (allp > hi + pad)).any(axis=1)).sum()))
        scenes["scene" if i == 0 else f"scene{i + 1}"] = dict(
            xaxis=dict(title="PC1", range=[lo[0] - pad[0], hi[0] + pad[0]]),
            yaxis=dict(title="PC2", range=[lo[1] - pad[1], hi[1] + pad[1]]),
            zaxis=dict(title="PC3", range=[lo[2] - pad[2], hi[2] + pad[2]]),
            aspectmode="cube",
            camera=dict(eye=dict(x=1.9, y=1.9, z=1.3), center=dict(x=0, y=0, z=-0.1)),  # a third of the width each
        )
    fig.update_layout(
        title=f"{label}: extended positional embeddings at layer {layer} (red) and W_pos (blue)<br><sup>"
        f"axes cover the 1st-99th percentile of the points; {clipped} outlying position(s) lie "
        f"off the axes</sup>",
        height=620,
        margin=dict(l=20, r=20, t=100, b=20),
        **scenes,
    )
    return fig


def main(argv=None):
    p = experiment_parser(__doc__)
    p.add_argument(
        "--layer",
        type=int,
        default=2,
        help="layer of the three-panel comparison (0..n_layers; n_layers = the final residual stream)",
    )
    p.add_argument("--n-prompts", type=int, default=16, help="repeated-token prompts averaged")
    p.add_argument("--n-token-dependence", type=int, default=4, help="tokens kept separately for token dependence")
    p.add_argument("--seq-len", type=int, default=None, help="positions (default n_ctx; capped at it, and said)")
    p.add_argument("--k", type=int, default=3, help="subspace dimension of the principal angles")
    args = p.parse_args(argv)
    positive("--n-prompts", args.n_prompts)
    positive("--n-token-dependence", args.n_token_dependence, 2)
    positive("--k", args.k, 1)
    positive("--seq-len", args.seq_len, 2)
    exp = setup(args, __file__, prompts=False, ranking=False, layer_final=True)
    model, out = exp.model, exp.out
    seq_len = args.seq_len or model.cfg.n_ctx
    if seq_len > model.cfg.n_ctx:
        note(f"--seq-len {seq_len} is capped at the model's context, {model.cfg.n_ctx}")
        seq_len = model.cfg.n_ctx
    positive("--k", args.k, 1, min(model.cfg.d_model, seq_len))
    reason = wpos_reason(model, exp.label)
    layers = list(range(model.cfg.n_layers + 1))
    bos = default_bos(model)
    ext = extended_pos_embeddings_by_layer(
        model, layers, n_prompts=args.n_prompts, seq_len=seq_len, seed=args.seed, progress=True, bos=bos
    )
    _, per_tok = extended_pos_embeddings_by_layer(
        model,
        layers,
        n_prompts=args.n_token_dependence,
        seq_len=seq_len,
        seed=args.seed + 1,
        return_per_token=True,
        bos=bos,
    )
    # geometry on the repeated token's rows (after BOS), and W_pos on the same positions
    ext = {l: token_rows(e, bos) for l, e in ext.items()}
    per_tok = {l: e[:, int(bos) :] for l, e in per_tok.items()}
    w = token_rows(centred_w_pos(load_w_pos(model), seq_len, bos=bos), bos) if reason is None else None
    rows = []
    for l in layers:
        row = {
            "layer": l,
            "large_entry_fraction": large_entry_fraction(ext[l]),
            "norm": float(ext[l].norm()),
            "token_dependence": token_dependence(per_tok[l]),
        }
        if w is not None:
            row.update({f"angle_{i + 1}_deg": a for i, a in enumerate(principal_angles(w, ext[l], k=args.k).tolist())})
        rows.append(row)
    df = pd.DataFrame(rows)
    df["sparsity_vs_layer0"] = df["large_entry_fraction"][0] / df["large_entry_fraction"]
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    out.csv(df, "per_layer")
    layer = args.layer
    if w is not None:
        out.figure(three_panel(w, ext[layer], layer, exp.label), f"three_panel_L{layer}", width=1500)
        fig = line_figure(
            {f"angle {i + 1}": (df.layer, df[f"angle_{i + 1}_deg"]) for i in range(args.k)},
            title=f"{exp.label}: principal angles between W_pos and the extended positional embeddings",
            xlabel="layer (input of the block)",
            ylabel="degrees",
            mode="lines+markers",
        )
        fig.update_xaxes(dtick=1)
        out.figure(fig, "principal_angles")
    for col, title, ylabel, name in (
        (
            "large_entry_fraction",
            "share of large entries (|x| > the matrix's RMS); lower = sparser",
            "share of entries with |x| > RMS",
            "sparsity",
        ),
        (
            "token_dependence",
            "token dependence of the extended positional embeddings",
            "relative spread across repeated tokens",
            "token_dependence",
        ),
    ):
        fig = line_figure(
            {col.replace("_", " "): (df.layer, df[col])},
            title=f"{exp.label}: {title}",
            xlabel="layer (input of the block)",
            ylabel=ylabel,
            mode="lines+markers",
        )
        fig.update_xaxes(dtick=1)
        out.figure(fig, name)
    l2 = min(2, model.cfg.n_layers)
    a2 = df.set_index("layer").loc[l2]
    has_w = [Precondition("the model has learned absolute positions (W_pos)", w is not None, reason or "")]
    w_helix = [helix_precondition(pca(w, 4)[1].tolist(), "W_pos")] if w is not None else []
    ext_helix = helix_precondition(pca(ext[l2], 4)[1].tolist(), f"the extended embeddings at layer {l2}")
    angles = [float(a2[f"angle_{i + 1}_deg"]) for i in range(args.k)] if w is not None else [float("nan")]
    sparsity = float(df.sparsity_vs_layer0[1:].mean())
    claims = [
        judge_claim(
            "ext_same_subspace",
            {"layer": l2, "angles_deg": angles},
            value=max(angles),
            preconditions=has_w + w_helix,
            shown=f"layer {l2}: " + ", ".join(f"{a:.3g}°" for a in angles),
        ),
        judge_claim(
            "ext_sparser",
            {"ratio": sparsity, "per_layer": df.large_entry_fraction.tolist()},
            value=sparsity,
            preconditions=has_w,
            shown=f"{sparsity:.3g}x fewer large entries",
        ),
        judge_claim(
            "ext_token_independent",
            {"layer": l2, "spread": float(a2.token_dependence)},
            value=float(a2.token_dependence),
            preconditions=[ext_helix],
            shown=f"relative spread {float(a2.token_dependence):.3g}",
        ),
    ]
    out.summary(
        {
            **exp.describe(),
            "seq_len": seq_len,
            "n_prompts": args.n_prompts,
            "k": args.k,
            "sparsity_rule": "fraction of entries with |x| > 1 * RMS of the matrix (the repeated token's rows)",
            "after_bos": bos,
            "per_layer": df,
            "layer2_angles_deg": angles,
            "post_layer2_angles_deg": [8, 9, 10],
            "mean_sparsity_ratio_layers_gt0": sparsity,
            "post_sparsity_ratio": 3.0,
        },
        claims,
    )
    out.commit()
