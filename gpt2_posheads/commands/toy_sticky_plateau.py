"""Sparse attention 1 (003): copying the current token with one attention layer (no positions)
gets stuck on a perplexity plateau near V/2; the embeddings branch in two stages; the plateau
disappears with more embedding dimensions and returns with a longer context; effective ranks.
The comparisons (plateau lengths, ranks) are judged on 3 seeds per setting.

    gpt2-posheads toy_sticky_plateau            # times: docs/posts/003-sticky-plateau.md
    gpt2-posheads toy_sticky_plateau --robustness  # + 480 grid runs: under 1 h (C=64 runs: 23 min on 2 cores)
    gpt2-posheads toy_sticky_plateau --quick    # smoke test

The claim as a function: gpt2_posheads.posts.sticky_plateau.sticky_plateau
(gpt2_posheads/posts/sticky_plateau/plateau.py).
"""

from gpt2_posheads.cli import int_list
from gpt2_posheads.cli.toy import run_toy, toy_parser
from gpt2_posheads.posts.sticky_plateau import plateau as claim


def main(argv=None):
    p = toy_parser(__doc__, steps=claim.STEPS, quick_steps=claim.QUICK_STEPS)
    p.add_argument("--vocab", default=",".join(map(str, claim.VOCAB)), help="comma-separated vocabulary sizes V")
    args = p.parse_args(argv)
    vocab = int_list("--vocab", args.vocab, 2)
    run_toy(args, __file__, claim.sticky_plateau, vocab=vocab)
