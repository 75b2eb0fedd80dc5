"""Averaging extended positional embeddings in groups of 10 hurts early previous-token heads much more
than the aggregator (GPT-2 post: L4H11 aggregates earlier heads' signals rather than reading positions).

    gpt2-posheads ext_pos_averaging --model mini-gpt2
    gpt2-posheads ext_pos_averaging --heads L2H2,L4H11          # the post's pair

For each head, the extended positional embeddings at the head's own layer (measured after BOS, as the prompts
start with it; the BOS row is left alone) are group-averaged just before it, and its attention is compared with
the clean run. The post's claim has two parts, both tested: "tremendous damage" to the early head (its pattern
moves) and "minimal damage" to the aggregator (it keeps its previous-token attention). Default heads on a model
other than GPT-2 small: the sharpest clear previous-token head below the aggregator, then the aggregator (its
sharpest previous-token head). Not testable unless both are clear previous-token heads and the first sits below
the second.
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.ext_pos_averaging
(gpt2_posheads/posts/gpt2_prev_heads/ext_averaging.py).
"""

from gpt2_posheads.cli import add_heads_arg, add_prompt_args, add_submatrix_args, experiment_parser, positive, setup
from gpt2_posheads.posts.gpt2_prev_heads import ext_averaging as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=256)
    add_heads_arg(p, claim.HEADS)
    p.add_argument(
        "--group-size",
        type=int,
        default=10,
        help="rows averaged together (above the model's context: capped, and said)",
    )
    p.add_argument("--ext-prompts", type=int, default=16, help="repeated-token prompts for the extended embeddings")
    add_submatrix_args(p)
    args = p.parse_args(argv)
    positive("--group-size", args.group_size, 2)
    positive("--ext-prompts", args.ext_prompts)
    exp = setup(args, __file__, heads=claim.HEADS)
    result = claim.ext_pos_averaging(
        heads=exp.heads,
        group_size=args.group_size,
        ext_prompts=args.ext_prompts,
        seed=args.seed,
        start=args.start,
        size=args.size,
        run=ModelRun.of(exp),
    )
    for r in result.numbers["results"]:
        print(
            f"{r['head']}: previous-token mass {r['prev_score_clean']:.3f} -> {r['prev_score_intervened']:.3f}, "
            f"JS {r['js_divergence']:.4f}"
        )
    result.write(exp.out, exp.describe())
