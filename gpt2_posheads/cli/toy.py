"""The toy posts' commands: their shared options, the one-line checks, the output folder and its resumable runs, the
claim function's call."""

from __future__ import annotations

import argparse
import shutil
from dataclasses import fields

import torch

from ..model.validation import positive
from ..toy.posts import BATCH_SIZE, INIT_STD, LR, MAX_DEFAULT_WORKERS, ROBUSTNESS_SEEDS, ToyRun
from .args import experiment_parser
from .experiment import open_output


def toy_parser(description: str, steps: int, quick_steps: int) -> argparse.ArgumentParser:
    p = experiment_parser(description, model=False)
    p.add_argument("--steps", type=int, default=None, help=f"training steps (default {steps}; --quick: {quick_steps})")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a few hundred steps and fewer settings: a smoke test whose claims are 'not testable'",
    )
    p.add_argument(
        "--init-std", type=float, default=INIT_STD, help="std of the N(0, s^2) initialisation (nanoGPT: 0.02)"
    )
    p.add_argument("--lr", type=float, default=LR, help="Adam learning rate")
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="sequences per step")
    p.add_argument("--seeds", type=int, default=1, help="seeds per setting")
    p.add_argument("--threads", type=int, default=None, help="CPU threads in all (default: every core)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes that train groups of models at once "
        f"(default: one per thread, at most {MAX_DEFAULT_WORKERS}; 1 trains in this process)",
    )
    p.add_argument(
        "--out-proj",
        action="store_true",
        help="add an attention output matrix W_O (the posts' model "
        "has none: embedding, one attention layer, unembedding)",
    )
    p.add_argument("--fresh", action="store_true", help="ignore finished runs in <out>/runs and train everything again")
    p.add_argument(
        "--robustness",
        action="store_true",
        help="also run the headline claims over a grid of the settings "
        "the posts do not state (lr x {0.3, 1, 3}, batch {128, 256}, init std {0.02, 1.0}, W_O off/on) and "
        "--robustness-seeds seeds: a 'held in k of n' table and figure (much longer than the default run)",
    )
    p.add_argument("--robustness-seeds", type=int, default=ROBUSTNESS_SEEDS, help="seeds per setting of --robustness")
    return p


def check_toy_args(args) -> None:
    """One-line errors for the toy options (before anything trains): :meth:`ToyRun.check`, naming the flags."""
    ToyRun.check(vars(args), lambda field: "--" + field.replace("_", "-"))
    positive("--threads", args.threads, 1)


def run_toy(args, script_file: str, claim_function, **own) -> None:
    """Run a toy post's claim function from its command line: check the shared options, open the output folder and
    the folder where finished runs are kept (resume: the next run reuses them; kept if this run fails, emptied by
    ``--fresh``), call ``claim_function`` with the post's own options ``own`` and every option of
    :class:`~gpt2_posheads.toy.posts.ToyRun` (``steps`` and ``workers`` None: the post's defaults), and write what it
    returns."""
    check_toy_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = open_output(args, script_file, per_model=False, quick=args.quick)
    args.runs_dir = out.persistent_dir("runs")
    if args.fresh:
        shutil.rmtree(args.runs_dir)
        args.runs_dir.mkdir()
    claim_function(**own, **{f.name: getattr(args, f.name) for f in fields(ToyRun)}).write(out)
