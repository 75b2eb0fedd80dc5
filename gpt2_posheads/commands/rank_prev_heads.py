"""Rank every head by how previous-token-like it is (GPT-2 post: "a taxonomy of previous-token heads").

    gpt2-posheads rank_prev_heads                       # GPT-2 small from the hub
    gpt2-posheads rank_prev_heads --model mini-gpt2

For every head, the mean attention on each diagonal (every offset; key 0 left out) and the ratio of the
second-greatest diagonal to the greatest (L4H11: 0.01). Writes ranking.csv, summary.json, the diagonal
masses (heads x offsets) and a layer x head grid of ratios.
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.rank_prev_heads
(gpt2_posheads/posts/gpt2_prev_heads/ranking.py).
"""

from gpt2_posheads.cli import add_prompt_args, experiment_parser, positive, setup
from gpt2_posheads.cli.engine import add_engine_args, check_engine_args
from gpt2_posheads.model.fastpath import ENGINES
from gpt2_posheads.model.validation import NothingMeasuredError, UsageError
from gpt2_posheads.posts.gpt2_prev_heads import ranking as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=64, seq_len=256)
    p.add_argument("--include-bos", action="store_true", help="count attention to key 0 in the diagonals")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per forward pass")
    p.add_argument("--top", type=int, default=15, help="rows of the ranking to print")
    p.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 matmuls (softmax, LayerNorm, residual in float32) for a faster look on large models where "
        "the CPU has AMX: the ranking is written, its claims are not testable (sharp heads' masses move by up to 0.5); "
        "float32 elsewhere, with a note",
    )
    add_engine_args(
        p, ENGINES, help="auto: hook-free fast path when it reproduces the model (checked), else TransformerLens hooks"
    )
    args = p.parse_args(argv)
    positive("--batch-size", args.batch_size)
    positive("--top", args.top)
    check_engine_args(args)
    if args.include_bos and args.engine == "fast":
        raise UsageError("--include-bos", "is not needed with --engine fast", "drop one of them")
    exp = setup(args, __file__, ranking=False)
    print(f"{exp.label}: {len(exp.prompts)} prompts x {exp.prompts.shape[1]} tokens from {exp.source}")
    try:
        result = claim.rank_prev_heads(
            include_bos=args.include_bos, batch_size=args.batch_size, bf16=args.bf16, engine=args.engine,
            run=ModelRun.of(exp),
        )  # fmt: skip
    except NothingMeasuredError as e:  # the ranking is written, every claim not testable (main_entry says why)
        exp.out.csv(e.result.tables["ranking"], "ranking")
        raise
    df = result.tables["ranking"]
    cols = ["rank", "name", "top_offset", "top_mass", "second_mass", "ratio"]
    print(df.head(args.top)[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    n_prev, n_heads = result.numbers["n_prev_token_heads"], result.numbers["n_heads"]
    print(f"\n{n_prev} of {n_heads} heads have the previous-token diagonal greatest (GPT-2 post: 69 of 144)")
    result.write(exp.out, exp.describe())
    return df
