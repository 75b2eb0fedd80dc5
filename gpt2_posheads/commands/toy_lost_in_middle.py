"""Sparse attention 7 (002): stacked causal attention without positional embeddings retrieves the
first and last tokens but loses the middle ("lost in the middle").

V 10, C 10, one head, no positional embeddings; target = the k-th token. Final loss against k for
1 layer (only k = C-1 retrievable) and 2 layers (U shape), n_embd {2, 10} x n_layers {2, 3}, and
with residual connections + MLPs (plateau replaced by spikes). Every k and seed of a setting trains
as one batched computation.

    gpt2-posheads toy_lost_in_middle            # 800 steps; 3 plain layers 5,000 (times: docs/posts/002-*.md)
    gpt2-posheads toy_lost_in_middle --three-layer-steps 800   # shorter; the 3-layer stacks stay at chance
    gpt2-posheads toy_lost_in_middle --quick

The claim as a function: gpt2_posheads.posts.lost_in_middle.lost_in_middle
(gpt2_posheads/posts/lost_in_middle/retrieval.py).
"""

from gpt2_posheads.cli import positive
from gpt2_posheads.cli.toy import run_toy, toy_parser
from gpt2_posheads.posts.lost_in_middle import retrieval as claim


def main(argv=None):
    p = toy_parser(__doc__, steps=claim.STEPS, quick_steps=claim.QUICK_STEPS)
    p.add_argument(
        "--three-layer-steps",
        type=int,
        default=claim.THREE_LAYER_STEPS,
        help="training steps of the plain "
        f"3-layer stacks (default {claim.THREE_LAYER_STEPS}: converged; they are still at chance after 800)",
    )
    p.set_defaults(seeds=claim.SEEDS)
    args = p.parse_args(argv)
    positive("--three-layer-steps", args.three_layer_steps, 1)
    run_toy(args, __file__, claim.lost_in_middle, three_layer_steps=args.three_layer_steps)
