"""The 3-D PCA helix of W_pos and of the extended positional embeddings at a layer (GPT-2 post).

    gpt2-posheads pos_embed_helix --w-pos ../shared/gpt2-small/W_pos.npy   # real GPT-2, offline
    gpt2-posheads pos_embed_helix --model mini-gpt2 --layer 2

The extended positional embeddings (the residual stream on repeated-token prompts after BOS, centred; the repeated
token's rows) exist for every model; W_pos's helix only for a model with learned absolute positions (else that claim
is not testable). A helix: the top three principal components explain >= 60% of the variance and the third carries
>= twice the fourth.
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.pos_embed_helix
(gpt2_posheads/posts/gpt2_prev_heads/helix.py).
"""

from pathlib import Path

from gpt2_posheads.cli import Output, experiment_parser, positive, setup
from gpt2_posheads.cli.experiment import capped_seq_len
from gpt2_posheads.cli.output import default_target
from gpt2_posheads.posts.gpt2_prev_heads import helix as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


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
        result = claim.pos_embed_helix(w_pos=args.w_pos)  # the file is read and checked before any output opens
        target = Path(args.out) if args.out else default_target("pos_embed_helix", result.model)
        out = Output.open(target, "pos_embed_helix", png=not args.no_png, force=args.force)
        context = {"model": result.model}
    else:
        exp = setup(args, __file__, prompts=False, ranking=False, layer_final=True)
        seq_len = capped_seq_len(exp.model, args.seq_len) if args.seq_len is not None else None
        result = claim.pos_embed_helix(
            layer=args.layer, n_prompts=args.n_prompts, seq_len=seq_len, seed=args.seed, run=ModelRun.of(exp)
        )
        out, context = exp.out, exp.describe()
    for k, v in result.numbers.items():
        if isinstance(v, dict) and "explained_variance_top4" in v:
            e = [round(float(x), 3) for x in v["explained_variance_top4"]]
            print(f"{k}: top-4 PCs explain {e}; GPT-2 W_pos: ~0.33, 0.32, 0.25, 0.035")
    result.write(out, context)
