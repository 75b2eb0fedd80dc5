"""Averaging W_pos rows in groups barely matters (GPT-2 post, first section).

    gpt2-posheads pos_embed_averaging --model mini-gpt2

For each group size: KL(clean || averaged) of next-token distributions over a corpus, the probability of
the right first word of the reply on the repeat-string prompt (" apple orange" and the swapped " orange
apple"; a word that is several tokens in the model's vocabulary is replaced by a single-token noun, and
said), and the previous-token mass (offset-1 diagonal) of the tracked heads.
Post: output unchanged up to groups of ~20, breaks down around 50-100; L2H2, L3H3, L4H11 unaffected.
A claim whose reference group size (10 or 20) was not measured is not testable; the output claims are not
testable on a model that does not copy the clean prompt (or whose context cannot hold it).
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.pos_embed_averaging
(gpt2_posheads/posts/gpt2_prev_heads/wpos_averaging.py).
"""

from gpt2_posheads.cli import add_heads_arg, add_prompt_args, experiment_parser, int_list, setup
from gpt2_posheads.model.identity import wpos_reason
from gpt2_posheads.model.validation import UsageError
from gpt2_posheads.posts.gpt2_prev_heads import wpos_averaging as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, claim.HEADS)
    p.add_argument(
        "--group-sizes",
        default="1,5,10,20,50,100",
        help="W_pos group sizes (1 = clean; sizes above the model's context are capped at it, and said)",
    )
    p.add_argument("--targets", default=" apple orange, orange apple", help="comma-separated repeat-string targets")
    args = p.parse_args(argv)
    asked = int_list("--group-sizes", args.group_sizes, 1)
    targets = [t if t.startswith(" ") else " " + t for t in args.targets.split(",") if t.strip()]
    if not targets:
        raise UsageError("--targets", "is empty", "comma-separated targets like ' apple orange, orange apple'")
    exp = setup(args, __file__, heads=claim.HEADS)
    if wpos_reason(exp.model, exp.label) is None:  # adjusted and said in the options' names; the function keeps them
        asked = claim.group_sizes_for(exp.model, asked, "--group-sizes")
    result = claim.pos_embed_averaging(
        heads=exp.heads, group_sizes=asked, targets=targets, seed=args.seed, run=ModelRun.of(exp)
    )
    if "not_applicable" in result.numbers:
        print(f"not applicable: {result.numbers['not_applicable']}")
    for row in result.numbers.get("rows", []):
        shown = " | ".join(f"{k} {v:.3f}" for k, v in row.items() if k.startswith(("P(", "prev_mass")))
        print(f"group {row['group_size']:>4}: KL {row['kl']:.4f} | {shown}")
    result.write(exp.out, exp.describe())
