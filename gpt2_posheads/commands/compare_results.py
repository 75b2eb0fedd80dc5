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

from gpt2_posheads.cli import Parser, positive
from gpt2_posheads.model.validation import UsageError
from gpt2_posheads.report.compare import compare_folders, different_models, differing_models_line


def main(argv=None):
    p = Parser(description=__doc__)
    p.add_argument("before", help="the reference results folder")
    p.add_argument("after", help="the results folder to compare with it")
    p.add_argument("--rtol", type=float, default=1e-6, help="relative tolerance for numbers (default: 1e-6)")
    p.add_argument("--atol", type=float, default=1e-9, help="absolute tolerance for numbers (default: 1e-9)")
    p.add_argument("--all", action="store_true", help="list every claim, not only those that moved")
    p.add_argument("--csv", default=None, help="also write the table to this CSV file")
    p.add_argument(
        "--allow-different-models",
        action="store_true",
        help="compare folders that hold results of different models (said first; refused without it)",
    )
    args = p.parse_args(argv)
    positive("--rtol", args.rtol, 0, kind="a number")
    positive("--atol", args.atol, 0, kind="a number")
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
