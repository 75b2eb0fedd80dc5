"""One page on a model organism: does it have the GPT-2 post's mechanism, and claim by claim, does the post's causal
story hold on it (does it take the post's route)?

    gpt2-posheads mini_gpt2_report --model route-gpt2 --compare <mini-gpt2 folder>
    gpt2-posheads mini_gpt2_report --model-dir my-organism --compare <route-gpt2 folder>
    gpt2-posheads mini_gpt2_report --model mini-gpt2 --skip-scripts   # targets only

Part 1, the behaviour targets (measured by gpt2_posheads.posts.gpt2_prev_heads.organism_targets, judged by
gpt2_posheads.claims.organism), each a rule fixed before any model was built or trained: a sharp previous-token head,
induction and copying, held-out loss. Part 2, the story: every GPT-2 claim script on this model
(results/<script>/<model>/), in three columns: this model, the --compare model (its latest results, when it has any)
and the post's GPT-2 numbers; the claims that tell the post's route from a head reading W_pos are marked "route", and
the route conclusion drawn from them (gpt2_posheads.claims.route) leads it.
Writes report.html and summary.json under results/mini_gpt2_report/<model>/. As a function:
posts.gpt2_prev_heads.mini_gpt2_report.
"""

from gpt2_posheads.claims.catalogue import model_scripts
from gpt2_posheads.claims.verdicts import claims_table
from gpt2_posheads.cli import experiment_parser, positive, results_root, setup
from gpt2_posheads.cli.checks import check_model_dir
from gpt2_posheads.cli.experiment import model_slug
from gpt2_posheads.commands import run_experiment
from gpt2_posheads.posts.gpt2_prev_heads import organism_report as claim


def main(argv=None):
    p = experiment_parser(__doc__)
    p.add_argument("--n-prompts", type=int, default=32, help="held-out text prompts (WikiText-2 held-out split)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per prompt (capped at n_ctx)")
    p.add_argument(
        "--compare",
        default=None,
        help="a second model folder whose latest claim results fill the middle "
        "column (default: the other shipped organism)",
    )
    p.add_argument(
        "--skip-scripts", action="store_true", help="only the targets; reuse the claim scripts' last results"
    )
    args = p.parse_args(argv)
    positive("--n-prompts", args.n_prompts)
    positive("--seq-len", args.seq_len)
    check_model_dir(args.compare)
    exp = setup(args, __file__, prompts=False, ranking=False)
    if not args.skip_scripts:  # every claim command on this model first: the story is read from their results
        model = ["--model-dir", args.model_dir] if args.model_dir else ["--model", args.model]
        margs = model + (["--device", args.device] if args.device else []) + (["--no-png"] if args.no_png else [])
        for i, name in enumerate(model_scripts(), 1):
            print(f"\n=== [{i}/{len(model_scripts())}] {name}", flush=True)
            if run_experiment(name, margs) == 130:
                raise KeyboardInterrupt
    result = claim.mini_gpt2_report(
        exp.model,
        results=results_root(),
        name=model_slug(args),
        compare=args.compare,
        n_prompts=args.n_prompts,
        seq_len=args.seq_len,
        seed=args.seed,
        label=exp.label,
    )
    print("\nthe post's causal story on this model:\n" + claims_table(result.numbers["story"]))
    route = result.numbers["route"]
    on = f" ({route['head']})" if route["head"] else ""
    print(f"\nroute conclusion: {route['words']}{on}: {route['why']}")
    result.write(exp.out, exp.describe())
