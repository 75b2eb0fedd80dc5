"""The organism report: its options and help are the report's declaration
(gpt2_posheads.posts.gpt2_prev_heads.organism_report); here, its run (every claim script on the model first, unless
--skip-scripts)."""

from ..claims.catalogue import model_scripts
from ..claims.verdicts import claims_table
from ..cli.checks import check_model_dir
from ..cli.declared import parse
from ..cli.experiment import model_slug, setup
from ..cli.output import results_root
from ..posts.gpt2_prev_heads import organism_report as claim
from . import run_experiment


def main(argv=None):
    args = parse(claim.mini_gpt2_report.script, argv)
    check_model_dir(args.compare)
    exp = setup(args, __file__, prompts=False, ranking=False)
    if not args.skip_scripts:  # every claim command on this model first: the story is read from their results
        model = ["--model-dir", args.model_dir] if args.model_dir else ["--model", args.model]
        margs = model + (["--device", args.device] if args.device else []) + (["--no-png"] if args.no_png else [])
        for i, name in enumerate(model_scripts(), 1):
            print(f"\n=== [{i}/{len(model_scripts())}] {name}", flush=True)
            if run_experiment(name, margs) == 130:
                raise KeyboardInterrupt
    own = {o.keyword: getattr(args, o.dest) for o in claim.mini_gpt2_report.script.options if o.keyword}
    result = claim.mini_gpt2_report(
        exp.model, results=results_root(), name=model_slug(args), seed=args.seed, label=exp.label, **own
    )
    print("\nthe post's causal story on this model:\n" + claims_table(result.numbers["story"]))
    route = result.numbers["route"]
    on = f" ({route['head']})" if route["head"] else ""
    print(f"\nroute conclusion: {route['words']}{on}: {route['why']}")
    result.write(exp.out, exp.describe())
