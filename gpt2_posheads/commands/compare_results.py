"""Two results folders claim by claim: which numbers and verdicts moved between them.

    gpt2-posheads compare_results results-before results          # every summary.json found in both
    gpt2-posheads compare_results a b --all --csv moved.csv        # every claim, and a CSV of the table

Checks that a change to the package moved no number (a refactor), or shows what a new setting changes against a
reference run. Numbers agree when equal, both NaN, or within --rtol/--atol. Exit status 1 when any number or verdict
moved (a field only one folder records is listed, not counted). Only results of one model are compared (the
summaries' model and the weights fingerprint their folders record): folders holding different models are refused in
one line (exit status 2), or, with --allow-different-models, said in that line first and compared.
"""

from pathlib import Path

import pandas as pd

from ..claims.catalogue import Command, Option
from ..cli.declared import parse
from ..model.validation import UsageError
from ..report.compare import compare_folders, different_models, differing_models_line

COMMAND = Command(
    "compare_results",
    usage=__doc__,
    options=(
        Option("before", None, "the reference results folder"),
        Option("after", None, "the results folder to compare with it"),
        Option("--rtol", 1e-6, "relative tolerance for numbers (default: 1e-6)", float, low=0),
        Option("--atol", 1e-9, "absolute tolerance for numbers (default: 1e-9)", float, low=0),
        Option("--all", False, "list every claim, not only those that moved"),
        Option("--csv", None, "also write the table to this CSV file"),
        Option(
            "--allow-different-models", False, "compare folders of different models (said first; refused without it)"
        ),
    ),
)


def main(argv=None):
    args = parse(COMMAND, argv)
    if args.csv and not Path(args.csv).resolve().parent.is_dir():
        raise UsageError("--csv", f"the folder of {args.csv} does not exist", "a file in an existing folder")
    for name in ("before", "after"):
        if not Path(getattr(args, name)).is_dir():
            raise UsageError(name, f"{getattr(args, name)} is not a folder", "a results folder", "e.g. results")
    before, after = Path(args.before), Path(args.after)
    differ = different_models(before, after) if args.allow_different_models else []  # refused below without it
    if differ:
        print(f"note: {differing_models_line(before, after, differ)}: compared as asked (--allow-different-models)")
    df = compare_folders(before, after, args.rtol, args.atol, allow_different_models=args.allow_different_models)
    if df.empty:
        raise UsageError("before", "no summary.json under either folder", "results folders of this toolkit")
    moved = df[(df.n_moved > 0) | (df.verdict_before != df.verdict_after)]
    shown = df if args.all else df[(df.n_moved > 0) | (df.n_added > 0) | (df.verdict_before != df.verdict_after)]
    with pd.option_context("display.max_colwidth", 90, "display.width", 200, "display.max_rows", None):
        print(shown.to_string(index=False) if len(shown) else "(nothing moved)")
    print(
        f"\n{len(df)} claims in {df.summary.nunique()} summaries; {int((df.n_moved > 0).sum())} with numbers moved, "
        f"{int((df.verdict_before != df.verdict_after).sum())} with verdicts moved; {int((df.n_added > 0).sum())} with "
        "fields only one side records (listed, not counted as moved)"
    )
    if args.csv:
        df.to_csv(args.csv, index=False)
    return 1 if len(moved) else 0
