"""The 3-D PCA helix of W_pos and of the extended positional embeddings at a layer (GPT-2 post).

    python experiments/pos_embed_helix.py --w-pos ../shared/gpt2-small/W_pos.npy   # real GPT-2, offline
    python experiments/pos_embed_helix.py --model-dir data/mini-gpt2 --layer 2
"""
from gpt2_posheads.claims.gpt2_post import judge_claim
from gpt2_posheads.cli.common import (Output, experiment_parser, main_entry, model_from_args, model_label, positive, postcheck,
                               precheck)
from pathlib import Path

from gpt2_posheads.analysis.geometry import pca
from gpt2_posheads.report.plotting import scatter3d_positions
from gpt2_posheads.analysis.posembed import centred_w_pos, extended_pos_embeddings, load_w_pos


def helix_figure(x, title):
    comps, evr, proj = pca(x, 3)
    labels = [f"PC{i + 1} ({100 * float(v):.0f}% of variance)" for i, v in enumerate(evr)]
    return scatter3d_positions({"positions": proj}, title=title, axis_titles=labels), evr


def main(argv=None):
    p = experiment_parser(__doc__)
    p.add_argument("--w-pos", default=None, help=".npy file of W_pos: plot it without loading a model")
    p.add_argument("--layer", type=int, default=2, help="layer of the extended positional embeddings (0..n_layers; "
                   "n_layers = the final residual stream)")
    p.set_defaults(_layer_final=True)
    p.add_argument("--n-prompts", type=int, default=16, help="repeated-token prompts to average")
    p.add_argument("--seq-len", type=int, default=None, help="positions (default n_ctx)")
    args = p.parse_args(argv)
    positive("--n-prompts", args.n_prompts)
    positive("--seq-len", args.seq_len, 2)
    summary, claims = {}, []
    if args.w_pos:
        w = load_w_pos(args.w_pos)  # checks the file before any output is written
        args.model, args.model_dir = Path(args.w_pos).stem, None
        out = Output.from_args(args, __file__)
        fig, evr = helix_figure(centred_w_pos(w), f"W_pos from {args.w_pos}: top-3 PCA")
        out.figure(fig, "w_pos_helix")
        summary["w_pos"] = {"source": args.w_pos, "shape": list(w.shape), "explained_variance_top3": evr,
                            "row0_norm": float(w[0].norm()), "last_row_norm": float(w[-1].norm())}
        claims.append(judge_claim("wpos_helix", {"top3": evr}, value=[float(x) for x in evr]))
    else:
        precheck(args)
        out = Output.from_args(args, __file__)
        model = model_from_args(args)
        postcheck(args, model)
        w = load_w_pos(model)
        fig, evr = helix_figure(centred_w_pos(w, args.seq_len), f"{model_label(args)} W_pos: top-3 PCA")
        out.figure(fig, "w_pos_helix")
        ext = extended_pos_embeddings(model, args.layer, n_prompts=args.n_prompts, seq_len=args.seq_len,
                                      seed=args.seed, progress=True)
        fig2, evr2 = helix_figure(ext, f"{model_label(args)} extended positional embeddings at layer {args.layer}")
        out.figure(fig2, f"ext_pos_helix_L{args.layer}")
        summary = {"model": model_label(args), "layer": args.layer, "n_prompts": args.n_prompts,
                   "w_pos": {"explained_variance_top3": evr}, "ext": {"explained_variance_top3": evr2}}
        claims += [judge_claim("wpos_helix", {"top3": evr}, value=[float(x) for x in evr]),
                   judge_claim("ext_helix", {"layer": args.layer, "top3": evr2}, value=[float(x) for x in evr2])]
    for k, v in summary.items():
        if isinstance(v, dict) and "explained_variance_top3" in v:
            e = [round(float(x), 3) for x in v["explained_variance_top3"]]
            print(f"{k}: top-3 PCs explain {e} (sum {sum(e):.3f}); GPT-2 W_pos: ~0.33, 0.32, 0.25")
    out.summary(summary, claims)
    out.report()


if __name__ == "__main__":
    main_entry(main)
