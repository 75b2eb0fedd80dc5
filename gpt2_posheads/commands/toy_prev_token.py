"""Sparse attention 4 (000): a previous-token head from positional embeddings.

V 30, C 4, n_embd 2: copying the previous token fails without positional embeddings and is learned
with them; the previous position separates from the others along a direction s, and
s^T W_Q W_K^T s < 0 (post: -1.1); relative perplexity (ppl-1)/V grows with V and C and falls with
n_embd; lr 0.1 beats 0.01 at V 30 but not at V 100, where loss spikes come with token-order swaps
(animation of the embeddings).

    gpt2-posheads toy_prev_token               # the default run (times: docs/posts/000-previous-token-head.md)
    gpt2-posheads toy_prev_token --robustness  # + 720 grid runs: ~30 min on one such core
    gpt2-posheads toy_prev_token --quick

The claim as a function: gpt2_posheads.posts.prev_token_toy.prev_token (gpt2_posheads/posts/prev_token_toy/copying.py).
"""

from gpt2_posheads.cli import positive
from gpt2_posheads.cli.toy import run_toy, toy_parser
from gpt2_posheads.posts.prev_token_toy import copying as claim


def main(argv=None):
    p = toy_parser(__doc__, steps=claim.STEPS, quick_steps=claim.QUICK_STEPS)
    p.add_argument(
        "--lr-steps", type=int, default=None, help="steps of the learning-rate comparison (default 2x --steps)"
    )
    args = p.parse_args(argv)
    positive("--lr-steps", args.lr_steps, 1)
    run_toy(args, __file__, claim.prev_token, lr_steps=args.lr_steps)
