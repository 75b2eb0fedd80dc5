"""Options, checks, claims and output shared by the toy experiment scripts."""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch

from ..cli import Output, experiment_parser, positive
from ..validation import UsageError
from ..verdicts import HELD, NOT_HELD, NOT_TESTABLE


def toy_parser(description: str, steps: int, quick_steps: int) -> argparse.ArgumentParser:
    p = experiment_parser(description, model=False)
    p.add_argument("--steps", type=int, default=None, help=f"training steps (default {steps}; --quick: {quick_steps})")
    p.add_argument("--quick", action="store_true", help="a few hundred steps and fewer settings: a smoke test whose "
                   "claims are 'not testable'")
    p.add_argument("--init-std", type=float, default=0.02, help="std of the N(0, s^2) initialisation (nanoGPT: 0.02)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    p.add_argument("--batch-size", type=int, default=128, help="sequences per step")
    p.add_argument("--seeds", type=int, default=1, help="seeds per setting")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--out-proj", action="store_true", help="add an attention output matrix W_O (the posts' model "
                   "has none: embedding, one attention layer, unembedding)")
    p.add_argument("--fresh", action="store_true", help="ignore finished runs in <out>/runs and train everything again")
    p.set_defaults(_steps=steps, _quick_steps=quick_steps)
    return p


def check_toy_args(args) -> None:
    """One-line errors for the toy options (before anything trains)."""
    if args.steps is not None:
        positive("--steps", args.steps, 1)
    positive("--seeds", args.seeds, 1)
    positive("--batch-size", args.batch_size, 1)
    positive("--threads", args.threads, 1)
    if not args.lr > 0:
        raise UsageError("--lr", f"{args.lr} is out of range", "allowed > 0", "e.g. 0.01")
    if not args.init_std > 0:
        raise UsageError("--init-std", f"{args.init_std} is out of range", "allowed > 0", "e.g. 0.02")


def toy_setup(args, script_file: str) -> tuple[Output, int, Path]:
    """Output folder, number of steps, and the folder where per-model results are cached (resume)."""
    check_toy_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Output.from_args(args, script_file)
    steps = args.steps or (args._quick_steps if args.quick else args._steps)
    runs = out.out_dir / "runs"
    if getattr(args, "fresh", False) and runs.exists():
        shutil.rmtree(runs)
    return out, steps, runs


def claim(key: str, claim_text: str, post, rule: str, measured, held: bool, quick: bool = False,
          precondition: tuple[bool, str] | None = None, **extra) -> dict:
    """One toy claim in the shared vocabulary: ``{key, claim, post, measured, rule, verdict, why}``.

    ``rule`` states, in words, the test that ``held`` computes; scripts write it as a literal next to the
    expression, before the runs. ``--quick`` runs and failed preconditions give ``not testable``.
    """
    if precondition is not None and not precondition[0]:
        verdict, why = NOT_TESTABLE, f"precondition failed: {precondition[1]}"
    elif quick:
        verdict, why = NOT_TESTABLE, "--quick run: too short or too small to test this claim; run without --quick"
    else:
        verdict = HELD if held else NOT_HELD
        why = "the measured values meet the rule" if held else "the measured values do not meet the rule"
    return {"key": key, "claim": claim_text, "post": post, "measured": measured, "rule": rule, "verdict": verdict,
            "why": why, **extra}
