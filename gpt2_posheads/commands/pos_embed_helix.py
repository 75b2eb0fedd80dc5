"""The 3-D PCA helix of W_pos and of the extended positional embeddings at a layer (GPT-2 post).

    gpt2-posheads pos_embed_helix --w-pos ../shared/gpt2-small/W_pos.npy   # real GPT-2, offline
    gpt2-posheads pos_embed_helix --model mini-gpt2 --layer 2

The extended positional embeddings (the residual stream on repeated-token prompts after BOS, centred; the repeated
token's rows) exist for every model; W_pos's helix only for a model with learned absolute positions (else that claim
is not testable). A helix: the top three principal components explain >= 60% of the variance and the third carries
>= twice the fourth.
"""

from pathlib import Path

from gpt2_posheads.analysis.geometry import pca
from gpt2_posheads.analysis.posembed import (
    centred_w_pos,
    default_bos,
    extended_pos_embeddings,
    load_w_pos,
    token_rows,
)
from gpt2_posheads.claims.gpt2_post import judge_claim
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.cli import Output, experiment_parser, note, positive, setup
from gpt2_posheads.cli.experiment import wpos_reason
from gpt2_posheads.cli.output import default_target
from gpt2_posheads.report.plotting import scatter3d_positions


def helix_figure(x, title):
    """The points on their top-3 principal components, and the top-4 explained-variance ratios (the rule's input)."""
    _, evr, proj = pca(x, 4)
    labels = [f"PC{i + 1} ({100 * float(v):.0f}% of variance)" for i, v in enumerate(evr[:3])]
    return scatter3d_positions({"positions": proj[:, :3]}, title=title, axis_titles=labels), [float(v) for v in evr]


def shown(evr) -> str:
    e = [float(x) for x in evr]
    return ", ".join(f"{x:.0%}" for x in e[:3]) + f" in the top 3 PCs (fourth {e[3]:.1%})"


def main(argv=None):
    p = experiment_parser(__doc__)
    p.add_argument("--w-pos", default=None, help=".npy file of W_pos: plot it without loading a model")
    p.add_argument(
        "--layer",
        type=int,
        default=2,
        help="layer of the extended positional embeddings (0..n_layers; n_layers = the final residual stream)",
    )
    p.add_argument("--n-prompts", type=int, default=16, help="repeated-token prompts to average")
    p.add_argument("--seq-len", type=int, default=None, help="positions (default n_ctx; capped at it, and said)")
    args = p.parse_args(argv)
    positive("--n-prompts", args.n_prompts)
    positive("--seq-len", args.seq_len, 2)
    if args.w_pos:
        w = load_w_pos(args.w_pos)  # checks the file before any output is written
        target = Path(args.out) if args.out else default_target("pos_embed_helix", Path(args.w_pos).stem)
        out = Output.open(target, "pos_embed_helix", png=not args.no_png, force=args.force)
        fig, evr = helix_figure(centred_w_pos(w), f"W_pos from {args.w_pos}: top-3 PCA")
        out.figure(fig, "w_pos_helix")
        summary = {
            "model": Path(args.w_pos).stem,
            "w_pos": {
                "source": args.w_pos,
                "shape": list(w.shape),
                "explained_variance_top4": evr,
                "row0_norm": float(w[0].norm()),
                "last_row_norm": float(w[-1].norm()),
            },
        }
        claims = [judge_claim("wpos_helix", {"top4": evr}, value=evr, shown=shown(evr))]
    else:
        exp = setup(args, __file__, prompts=False, ranking=False, layer_final=True)
        model, out = exp.model, exp.out
        seq_len = args.seq_len
        if seq_len is not None and seq_len > model.cfg.n_ctx:
            note(f"--seq-len {seq_len} is capped at the model's context, {model.cfg.n_ctx}")
            seq_len = model.cfg.n_ctx
        reason = wpos_reason(model, exp.label)
        claims, summary = [], {**exp.describe(), "layer": args.layer, "n_prompts": args.n_prompts}
        if reason is None:
            fig, evr = helix_figure(centred_w_pos(load_w_pos(model), seq_len), f"{exp.label}: W_pos, top-3 PCA")
            out.figure(fig, "w_pos_helix")
            summary["w_pos"] = {"explained_variance_top4": evr}
            claims.append(judge_claim("wpos_helix", {"top4": evr}, value=evr, shown=shown(evr)))
        else:
            claims.append(
                judge_claim(
                    "wpos_helix",
                    {"not_applicable": reason},
                    value=[float("nan")] * 4,
                    preconditions=[Precondition("the model has W_pos", False, reason)],
                )
            )
        bos = default_bos(model)
        ext = extended_pos_embeddings(
            model, args.layer, n_prompts=args.n_prompts, seq_len=seq_len, seed=args.seed, progress=True, bos=bos
        )
        fig2, evr2 = helix_figure(
            token_rows(ext, bos), f"{exp.label}: extended positional embeddings at layer {args.layer}, top-3 PCA"
        )
        out.figure(fig2, f"ext_pos_helix_L{args.layer}")
        summary["ext"] = {"explained_variance_top4": evr2, "after_bos": bos}
        claims.append(
            judge_claim(
                "ext_helix",
                {"layer": args.layer, "top4": evr2},
                value=evr2,
                shown=f"layer {args.layer}: " + shown(evr2),
            )
        )
    for k, v in summary.items():
        if isinstance(v, dict) and "explained_variance_top4" in v:
            e = [round(float(x), 3) for x in v["explained_variance_top4"]]
            print(f"{k}: top-4 PCs explain {e}; GPT-2 W_pos: ~0.33, 0.32, 0.25, 0.035")
    out.summary(summary, claims)
    out.commit()
