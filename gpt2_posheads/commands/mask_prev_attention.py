"""Masking attention to the previous position in earlier layers disrupts the aggregator (GPT-2 post).

    gpt2-posheads mask_prev_attention --model mini-gpt2
    gpt2-posheads mask_prev_attention --heads L4H11 --layers 0,1,2,3      # the post's setting

Every query p with p % every == 0 loses its attention to p-1 in every head of --layers (post-softmax);
W_pos is untouched. Default --layers: every layer below the head's own (masking the head's own layer
would test the mask, not the mechanism). The claim is judged on the masked rows, the ones the post's figure shows
disrupted (the rows in between are reported too). Side by side: the head's 50x50 pattern clean vs masked.
Not testable for a head that is not a clear previous-token head or sits in layer 0.
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.mask_prev_attention
(gpt2_posheads/posts/gpt2_prev_heads/masking.py).
"""

from gpt2_posheads.cli import add_heads_arg, add_prompt_args, add_submatrix_args, experiment_parser, positive, setup
from gpt2_posheads.posts.gpt2_prev_heads import masking as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=256)
    add_heads_arg(p, claim.HEADS)
    p.add_argument(
        "--layers", default=None, help="comma-separated layers to mask (default: every layer below the head's)"
    )
    p.add_argument("--every", type=int, default=5, help="mask queries p with p %% every == 0")
    p.add_argument("--renormalize", action="store_true", help="renormalise masked rows to sum to 1")
    add_submatrix_args(p)
    args = p.parse_args(argv)
    positive("--every", args.every, 2)
    exp = setup(args, __file__, heads=claim.HEADS)
    result = claim.mask_prev_attention(
        heads=exp.heads,
        layers=list(exp.checked.layers) if exp.checked.layers is not None else None,
        every=args.every,
        renormalize=args.renormalize,
        start=args.start,
        size=args.size,
        run=ModelRun.of(exp),
    )
    result.write(exp.out, exp.describe())
