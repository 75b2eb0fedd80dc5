"""Raw attention scores: early previous-token heads suppress the current token, the aggregator boosts
the previous one (GPT-2 post, "Early previous-token heads: how do they work?").

    gpt2-posheads raw_scores_taxonomy --model mini-gpt2

Figures: 50x50 raw-score submatrices (before the causal mask, so the upper triangle shows the scores the
mask removes) of the chosen heads, and every head's score profile summarised as dip (the current key below the
trend of older keys: a dark main diagonal) vs spike (the previous key above that trend: a bright previous
diagonal), in logits. CSV: the classification of all heads. Post: six self-suppressing early heads, L4H11
prev-boosting. The aggregator is the model's sharpest previous-token head; "early" heads are the clear
previous-token heads (ratio <= 0.6) in layers below it.
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.raw_scores_taxonomy
(gpt2_posheads/posts/gpt2_prev_heads/taxonomy.py).
"""

from gpt2_posheads.analysis.scores import LABEL_THRESHOLD
from gpt2_posheads.cli import add_heads_arg, add_prompt_args, add_submatrix_args, experiment_parser, positive, setup
from gpt2_posheads.posts.gpt2_prev_heads import taxonomy as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, claim.HEADS)
    p.add_argument(
        "--window",
        type=int,
        default=3,
        help="offsets -w..+w in the score profile (>= 3: the trend needs two older keys)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=LABEL_THRESHOLD,
        help="logits a spike or dip needs to label a head (default ln 2: attention odds changed 2x)",
    )
    add_submatrix_args(p)
    args = p.parse_args(argv)
    positive("--window", args.window, 3, 32)
    positive("--threshold", args.threshold, 0, kind="a number")
    exp = setup(args, __file__, heads=claim.HEADS)
    if (exp.prompts.shape[1] - 9) // 2 >= 3:  # else no window fits: the claims are not testable, and say why
        positive("--window", args.window, 3, (exp.prompts.shape[1] - 9) // 2)
    result = claim.raw_scores_taxonomy(
        heads=exp.heads,
        window=args.window,
        threshold=args.threshold,
        start=args.start,
        size=args.size,
        progress=True,
        run=ModelRun.of(exp),
    )
    print(result.numbers["chosen_heads"].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    result.write(exp.out, exp.describe())
