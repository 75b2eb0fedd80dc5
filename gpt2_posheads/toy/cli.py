"""The toy posts' commands: their shared options, the one-line checks, the output folder and its resumable runs."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch

from ..cli import Output, experiment_parser, open_output, positive
from ..model.validation import UsageError
from .posts import BATCH_SIZE, INIT_STD, LR, MAX_DEFAULT_WORKERS, ROBUSTNESS_SEEDS, default_workers
from .train import ToyConfig


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
    p.set_defaults(_steps=steps, _quick_steps=quick_steps)
    return p


def check_toy_args(args) -> None:
    """One-line errors for the toy options (before anything trains)."""
    if args.steps is not None:
        positive("--steps", args.steps, 1)
    positive("--seeds", args.seeds, 1)
    positive("--robustness-seeds", args.robustness_seeds, 1)
    positive("--batch-size", args.batch_size, 1)
    positive("--threads", args.threads, 1)
    positive("--workers", args.workers, 1)
    if not args.lr > 0:
        raise UsageError("--lr", f"{args.lr} is out of range", "allowed > 0", "e.g. 0.01")
    if not args.init_std > 0:
        raise UsageError("--init-std", f"{args.init_std} is out of range", "allowed > 0", "e.g. 0.02")


def toy_setup(args, script_file: str) -> tuple[Output, int, Path]:
    """Output folder, number of steps, and the folder where per-model results are cached (resume)."""
    check_toy_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.workers is None:
        args.workers = default_workers()
    out = open_output(args, script_file, per_model=False, quick=args.quick)
    steps = args.steps or (args._quick_steps if args.quick else args._steps)
    runs = out.persistent_dir("runs")  # finished runs, reused on the next run (resume); kept if this run fails
    if getattr(args, "fresh", False):
        shutil.rmtree(runs)
        runs.mkdir()
    return out, steps, runs


def toy_options(args, runs: Path) -> dict:
    """The options every toy post's claim function takes, from the command line (``steps`` None: the post's
    default for a full or a ``--quick`` run)."""
    return dict(
        steps=args.steps,
        seed=args.seed,
        seeds=args.seeds,
        quick=args.quick,
        lr=args.lr,
        init_std=args.init_std,
        batch_size=args.batch_size,
        out_proj=args.out_proj,
        workers=args.workers,
        robustness=args.robustness,
        robustness_seeds=args.robustness_seeds,
        runs_dir=runs,
    )


def base_config(args, steps: int, log_points: int = 100, **task) -> ToyConfig:
    """The script's base :class:`ToyConfig`: its task settings plus the training options every toy script takes
    (``--lr``, ``--init-std``, ``--out-proj``, ``--batch-size``), logging ``log_points`` times per run."""
    return ToyConfig(
        steps=steps,
        lr=args.lr,
        init_std=args.init_std,
        out_proj=args.out_proj,
        batch_size=args.batch_size,
        log_every=max(steps // log_points, 1),
        **task,
    )


def robustness_section(out: Output, claims, base, args, runs: Path, title: str) -> dict | None:
    """With ``--robustness``: the grid of :mod:`.robustness` for ``claims`` (a list of ``GridClaim``) around
    ``base``; writes ``robustness.csv`` and a heatmap, returns the part of ``summary.json`` (else None).
    ``--quick`` shrinks it to 2 seeds (still every setting)."""
    if not args.robustness:
        return None
    from .robustness import (
        UNSTATED,
        robustness_figure,
        robustness_records,
        robustness_table,
        robustness_totals,
        settings,
    )

    n_seeds = 2 if args.quick else args.robustness_seeds
    seeds = list(range(args.seed, args.seed + n_seeds))
    print(f"robustness grid: {len(claims)} claims x {len(settings())} settings x {n_seeds} seeds", flush=True)
    table = robustness_table(claims, base, seeds, runs, workers=args.workers)
    out.csv(table, "robustness")
    out.figure(robustness_figure(table, f"{title}: held in k of n seeds per setting"), "robustness")
    return {
        "grid": {k: list(v) for k, v in UNSTATED.items()},
        "seeds": seeds,
        "base_lr": base.lr,
        "rules": {c.key: c.rule for c in claims},
        "totals": robustness_totals(table),
        "table": robustness_records(table),
    }
