"""Editing the aggregator's attention and scaling its output redirects induction (GPT-2 post, last section).

    gpt2-posheads l4h11_edit --model mini-gpt2          # the model's aggregator
    gpt2-posheads l4h11_edit --heads L4H11                        # GPT-2 small (the default there)

On the repeat-string prompt ending in `Reply: " ninja`, the model should say " turtle". The edit shifts
the head's attention in the request back by one position — " turtle" attends to the token before " ninja"
and " pirate" attends to " ninja" — so an induction head looking for "the token after ninja" finds
" pirate"; the head's output is multiplied by each factor. A word that is several tokens in the model's
vocabulary is replaced by a single-token word (single characters in a character vocabulary) and a short context
gets a shorter prompt, each said; where no prompt fits, the claim is not testable with the numbers.
Post: P(" turtle") 99% clean; with the edit and factor 2, P(" pirate") 65% and P(" turtle") 26%.
Not testable on a model that does not copy the clean prompt, or for a head that is not a previous-token head.
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.l4h11_edit (gpt2_posheads/posts/gpt2_prev_heads/edit.py).
"""

from gpt2_posheads.analysis.repeat_prompt import split_words
from gpt2_posheads.cli import add_heads_arg, add_prompt_args, experiment_parser, float_list, setup
from gpt2_posheads.model.validation import UsageError
from gpt2_posheads.posts.gpt2_prev_heads import edit as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=128)
    add_heads_arg(p, claim.HEADS)
    p.add_argument("--target", default=" ninja turtle pirate", help="three words to repeat")
    p.add_argument("--factors", default="1,2,3", help="output scale factors, each 0..1e6 (must include 2, the post's)")
    args = p.parse_args(argv)
    factors = claim.check_factors(float_list("--factors", args.factors), "--factors")
    if len(split_words(args.target)) != 3:
        raise UsageError(
            "--target",
            f"{args.target!r} has {len(split_words(args.target))} word(s)",
            "exactly three words",
            "e.g. ' ninja turtle pirate'",
        )
    exp = setup(args, __file__, heads=claim.HEADS)
    result = claim.l4h11_edit(
        heads=exp.heads, target=args.target, factors=factors, seed=args.seed, run=ModelRun.of(exp)
    )
    for r in result.numbers.get("rows", []):  # none where no repeat-string prompt fits the model
        print(
            f"{r['condition']:>20}: " + "  ".join(f"{k}={v:.3f}" for k, v in r.items() if k.startswith("P(")),
            "| top:",
            ", ".join(f"{t!r} {p:.2f}" for t, p in r["top5"][:3]),
        )
    result.write(exp.out, exp.describe())
