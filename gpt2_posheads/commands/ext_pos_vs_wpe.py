"""Extended positional embeddings against W_pos, layer by layer (GPT-2 post: "Concept: extended
positional embeddings").

    gpt2-posheads ext_pos_vs_wpe --model mini-gpt2

Figures: the three-panel comparison at --layer (both sets on W_pos's PCs, on the extended embeddings' PCs,
on the PCs of both concatenated), and per layer 0..n_layers the principal angles to W_pos, the large-entry
fraction (sparsity) and the token dependence. CSV + JSON of all numbers. On a model without learned
absolute positions only the token dependence is measured (the rest compares with W_pos).
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.ext_pos_vs_wpe
(gpt2_posheads/posts/gpt2_prev_heads/extended.py).
"""

from gpt2_posheads.cli import experiment_parser, positive, setup
from gpt2_posheads.cli.experiment import capped_seq_len
from gpt2_posheads.posts.gpt2_prev_heads import extended as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


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
    seq_len = capped_seq_len(exp.model, args.seq_len or exp.model.cfg.n_ctx)
    positive("--k", args.k, 1, min(exp.model.cfg.d_model, seq_len))
    result = claim.ext_pos_vs_wpe(
        layer=args.layer,
        n_prompts=args.n_prompts,
        n_token_dependence=args.n_token_dependence,
        seq_len=seq_len,
        k=args.k,
        seed=args.seed,
        run=ModelRun.of(exp),
    )
    print(result.tables["per_layer"].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    result.write(exp.out, exp.describe())
