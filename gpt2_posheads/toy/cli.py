"""Options and output shared by the toy experiment scripts."""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..cli import Output, experiment_parser


def toy_parser(description: str, steps: int, quick_steps: int) -> argparse.ArgumentParser:
    p = experiment_parser(description, model=False)
    p.add_argument("--steps", type=int, default=None, help=f"training steps (default {steps}; --quick: {quick_steps})")
    p.add_argument("--quick", action="store_true", help="a few hundred steps and fewer settings: a smoke test")
    p.add_argument("--init-std", type=float, default=0.02, help="std of the N(0, s^2) initialisation (nanoGPT: 0.02)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seeds", type=int, default=1, help="seeds per setting")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(_steps=steps, _quick_steps=quick_steps)
    return p


def toy_setup(args, script_file: str) -> tuple[Output, int, Path]:
    """Output folder, number of steps, and the folder where per-model results are cached (resume)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Output.from_args(args, script_file)
    steps = args.steps or (args._quick_steps if args.quick else args._steps)
    return out, steps, out.out_dir / "runs"


def claim(post, measured, held: bool, **extra) -> dict:
    """One claim of a post next to what was measured."""
    return {"post": post, "measured": measured, "held": bool(held), **extra}
