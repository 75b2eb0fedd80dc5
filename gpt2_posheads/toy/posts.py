"""What the four toy posts' claim functions share (:mod:`gpt2_posheads.posts.sticky_plateau`, ``similar_content``,
``prev_token_toy``, ``lost_in_middle``).

Each post trains its own toy models, so each claim function takes the same training options (steps, learning rate,
initialisation scale, batch size, the attention output matrix, seeds, worker processes, the folder of resumable
runs) besides its own; this module checks them (:func:`check_options`), turns them into the post's base
:class:`~gpt2_posheads.toy.train.ToyConfig` (:func:`base_config`), and runs a post's headline claims over the
``--robustness`` grid of :mod:`.robustness` (:func:`robustness`). Each post's claims, on its default run and on the
grid, live in the post's folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ..model.validation import UsageError
from .robustness import GridClaim
from .train import ToyConfig

MAX_DEFAULT_WORKERS = 8
# the training settings the posts do not state, as every toy post trains by default (nanoGPT's initialisation)
LR, INIT_STD, BATCH_SIZE = 0.01, 0.02, 128
ROBUSTNESS_SEEDS = 5  # seeds per setting of the --robustness grid

# The grid runs one seed per test (its k of n counts are the spread across seeds), so a comparison there has no
# spread of its own: only the relative margin applies.
ONE_SEED = "one seed per test, so only the relative margin applies: "


def default_workers() -> int:
    """Processes that train groups of models at once when none is given: one per thread, at most
    :data:`MAX_DEFAULT_WORKERS` (small batched models use one thread best, and each process holds its group's
    pre-drawn batches: up to ~1.8 GB for 64 models at batch 256)."""
    return min(torch.get_num_threads(), MAX_DEFAULT_WORKERS)


def check_options(
    *,
    steps: int | None,
    seeds: int,
    robustness_seeds: int,
    batch_size: int,
    lr: float,
    init_std: float,
    workers: int | None,
) -> None:
    """A ``ValueError`` naming the argument for a training option out of range (before anything trains)."""
    for name, value in (
        ("steps", steps),
        ("seeds", seeds),
        ("robustness_seeds", robustness_seeds),
        ("batch_size", batch_size),
        ("workers", workers),
    ):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise UsageError(name, f"{value!r} is out of range", "allowed an integer >= 1")
    for name, value, hint in (("lr", lr, "e.g. 0.01"), ("init_std", init_std, "e.g. 0.02")):
        if not (isinstance(value, (int, float)) and value > 0):
            raise UsageError(name, f"{value!r} is out of range", "allowed > 0", hint)


def base_config(
    steps: int,
    *,
    lr: float,
    init_std: float,
    out_proj: bool,
    batch_size: int,
    log_points: int = 100,
    **task,
) -> ToyConfig:
    """A post's base :class:`ToyConfig`: its task settings (``task``) plus the training options every toy post
    takes, logging ``log_points`` times per run."""
    return ToyConfig(
        steps=steps,
        lr=lr,
        init_std=init_std,
        out_proj=out_proj,
        batch_size=batch_size,
        log_every=max(steps // log_points, 1),
        **task,
    )


def robustness(
    claims: Sequence[GridClaim],
    base: ToyConfig,
    seed: int,
    n_seeds: int,
    quick: bool,
    runs_dir: str | Path | None,
    workers: int,
    title: str,
    progress: bool = True,
) -> tuple:
    """A post's headline ``claims`` over the grid of :data:`~.robustness.UNSTATED` around ``base``, each at
    ``n_seeds`` seeds from ``seed`` (``quick``: 2, still every setting): ``(table, figure, record)`` — the held counts
    (:func:`~.robustness.robustness_table`), their heatmap and the part of ``summary.json`` (the grid, the seeds, the
    rules, the totals and the table)."""
    from .robustness import (
        UNSTATED,
        robustness_figure,
        robustness_records,
        robustness_table,
        robustness_totals,
        settings,
    )

    seeds = list(range(seed, seed + (2 if quick else n_seeds)))
    if progress:
        print(f"robustness grid: {len(claims)} claims x {len(settings())} settings x {len(seeds)} seeds", flush=True)
    table = robustness_table(claims, base, seeds, runs_dir, progress=progress, workers=workers)
    figure = robustness_figure(table, f"{title}: held in k of n seeds per setting")
    record = {
        "grid": {k: list(v) for k, v in UNSTATED.items()},
        "seeds": seeds,
        "base_lr": base.lr,
        "rules": {c.key: c.rule for c in claims},
        "totals": robustness_totals(table),
        "table": robustness_records(table),
    }
    return table, figure, record


__all__ = [
    "BATCH_SIZE",
    "INIT_STD",
    "LR",
    "MAX_DEFAULT_WORKERS",
    "ONE_SEED",
    "ROBUSTNESS_SEEDS",
    "base_config",
    "check_options",
    "default_workers",
    "robustness",
]
