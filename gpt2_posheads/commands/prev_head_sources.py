"""Which upstream heads make a head previous-token, and through query or key? (GPT-2 post: L4H11 aggregates
L1H0, L2H2, L3H3, L2H4, L3H7, L3H2; early heads like L2H2 compute position themselves.)

    gpt2-posheads prev_head_sources --model route-gpt2    # its aggregator and an early head
    gpt2-posheads prev_head_sources --heads L4H11,L2H2              # GPT-2 small (the default there)

For each target head: Q/K/V composition scores of every upstream head against a random baseline, and
direct-path ablation: one upstream head's output (mean-ablated by default) removed only from the
target's query input or only from its key input, and W_pos averaged in groups of 10 on that input alone;
the drop in the target's previous-token mass, one row per (source, side). For the aggregator also, from both
inputs at once: everything the layers below write (is it built from earlier layers?), the early clear
previous-token heads together (does it aggregate them?) and random groups of as many heads from below (chance).
Figures: layer x head maps of the drop, query and key side by side. Default heads on a model other than GPT-2
small: its sharpest previous-token head (the aggregator) and the sharpest clear previous-token head below it. A head
in layer 0 has nothing upstream: given with --heads it is an error; as the model's aggregator, it is built from the
embeddings alone.
The claim as a function: gpt2_posheads.posts.gpt2_prev_heads.prev_head_sources
(gpt2_posheads/posts/gpt2_prev_heads/sources.py).
"""

from gpt2_posheads.analysis.sources import ABLATIONS
from gpt2_posheads.cli import add_heads_arg, add_prompt_args, experiment_parser, positive, setup
from gpt2_posheads.model.validation import UsageError
from gpt2_posheads.posts.gpt2_prev_heads import sources as claim
from gpt2_posheads.posts.gpt2_prev_heads._run import ModelRun


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, claim.HEADS)
    p.add_argument("--ablation", default="mean", choices=ABLATIONS, help="what replaces a source's output")
    p.add_argument("--pos-group", type=int, default=10, help="W_pos group size of the positional route")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per forward")
    args = p.parse_args(argv)
    positive("--pos-group", args.pos_group, 2)
    positive("--batch-size", args.batch_size)
    exp = setup(args, __file__, heads=claim.HEADS, above_layer0=True)
    if exp.checked.heads is None:  # the role's heads, the aggregator first: the claims are about it
        exp.heads = claim.aggregator_first(exp.model, exp.heads)
    if args.ablation == "resample" and len(exp.prompts) < 2:
        raise UsageError("--ablation", "resample needs at least two prompts", "use mean or zero, or --n-prompts >= 2")
    result = claim.prev_head_sources(
        heads=exp.heads,
        ablation=args.ablation,
        pos_group=args.pos_group,
        batch_size=args.batch_size,
        seed=args.seed,
        progress=True,
        run=ModelRun.of(exp),
    )
    result.write(exp.out, exp.describe())
