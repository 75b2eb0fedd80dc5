"""What the four toy posts' claim functions share (:mod:`gpt2_posheads.posts.sticky_plateau`, ``similar_content``,
``prev_token_toy``, ``lost_in_middle``).

Each post trains its own toy models, so each claim function takes the same training options (steps, learning rate,
initialisation scale, batch size, the attention output matrix, seeds, worker processes, the folder of resumable
runs) besides its own: they are one :class:`ToyRun`, documented once, checked once (:meth:`ToyRun.of`), turned into
the post's base :class:`~gpt2_posheads.toy.train.ToyConfig` (:meth:`ToyRun.base`) and used to finish the post's
result, its headline claims over the ``--robustness`` grid of :mod:`.robustness` included (:meth:`ToyRun.finish`).
Each post's claims, on its default run and on the grid, live in the post's folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch

from ..claims.toy import COMPARE_SEEDS, grid_record
from ..model.validation import UsageError, positive
from .robustness import (
    UNSTATED,
    GridClaim,
    robustness_figure,
    robustness_records,
    robustness_table,
    robustness_totals,
    settings,
)
from .train import ToyConfig, train_sweep

MAX_DEFAULT_WORKERS = 8
# the training settings the posts do not state, as every toy post trains by default (nanoGPT's initialisation)
LR, INIT_STD, BATCH_SIZE = 0.01, 0.02, 128
ROBUSTNESS_SEEDS = 5  # seeds per setting of the --robustness grid


def default_workers() -> int:
    """Processes that train groups of models at once when none is given: one per thread, at most
    :data:`MAX_DEFAULT_WORKERS` (small batched models use one thread best, and each process holds its group's
    pre-drawn batches: up to ~1.8 GB for 64 models at batch 256)."""
    return min(torch.get_num_threads(), MAX_DEFAULT_WORKERS)


@dataclass(frozen=True)
class ToyRun:
    """The training options every toy post's claim function takes as keywords, besides the post's own.

    Attributes:
        steps: training steps (None: the post's default, or its shorter one for ``quick``).
        seed, seeds: the post's runs train at seeds ``seed .. seed + seeds - 1`` (:attr:`run_seeds`); every
            comparison claim at ``max(seeds, 3)`` seeds from ``seed`` (``quick``: 2; :attr:`comparison_seeds`).
        quick: a smoke run (fewer settings, short training): every claim ``not testable``.
        lr, init_std, batch_size, out_proj: the training settings the posts do not state (Adam's learning rate, the
            std of the N(0, s^2) initialisation, sequences per step, an attention output matrix W_O).
        robustness: also run the post's headline claims over the grid of those settings (its ``*_grid`` function)
            at ``robustness_seeds`` seeds (``quick``: 2).
        workers: processes that train groups of models at once (default: one per thread, at most 8).
        runs_dir: the folder of resumable runs (each finished run saved, and reused by the next call); None: none.
    """

    steps: int | None = None
    seed: int = 0
    seeds: int = 1
    quick: bool = False
    lr: float = LR
    init_std: float = INIT_STD
    batch_size: int = BATCH_SIZE
    out_proj: bool = False
    robustness: bool = False
    robustness_seeds: int = ROBUSTNESS_SEEDS
    workers: int | None = None
    runs_dir: str | Path | None = None

    @classmethod
    def of(cls, function: str, options: Mapping, steps: int, quick_steps: int, seeds: int = 1) -> ToyRun:
        """The options a claim function ``function`` was called with, checked (a ``TypeError`` for a keyword it
        does not take, as Python's own; a ``UsageError`` naming the argument for a value out of range, before
        anything trains), with the post's defaults filled in: ``steps`` (``quick_steps`` for ``quick``),
        ``seeds`` and the worker processes (:func:`default_workers`)."""
        known = {f.name for f in fields(cls)}
        for name in options:
            if name not in known:
                raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
        run = cls(**{"seeds": seeds, **options})
        cls.check(vars(run))
        return replace(
            run, steps=run.steps or (quick_steps if run.quick else steps), workers=run.workers or default_workers()
        )

    @staticmethod
    def check(values: Mapping, name: Callable[[str], str] = str) -> None:
        """A :class:`UsageError` naming the option (``name(field)``: the keyword, or the command's flag) for a value
        of ``values`` out of range, before anything trains: the counts (``steps``, ``seeds``, ``robustness_seeds``,
        ``batch_size``, ``workers``; ``None`` is the post's default) integers from 1 to int64's top, ``lr`` and
        ``init_std`` above 0."""
        for field in ("steps", "seeds", "robustness_seeds", "batch_size", "workers"):
            value = values.get(field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise UsageError(name(field), f"{value!r} is out of range", "allowed an integer >= 1")
            positive(name(field), value, 1)
        for field, hint in (("lr", "e.g. 0.01"), ("init_std", "e.g. 0.02")):
            value = values.get(field)
            if not (isinstance(value, (int, float)) and value > 0):
                raise UsageError(name(field), f"{value!r} is out of range", "allowed > 0", hint)

    @property
    def run_seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))

    @property
    def comparison_seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + max(self.seeds, 2 if self.quick else COMPARE_SEEDS)))

    def base(self, log_points: int = 100, **task) -> ToyConfig:
        """The post's base :class:`ToyConfig`: its task settings (``task``) plus these training options, logging
        ``log_points`` times per run."""
        training = {f: getattr(self, f) for f in ("steps", "lr", "init_std", "out_proj", "batch_size")}
        return ToyConfig(**training, log_every=max(self.steps // log_points, 1), **task)

    def train(self, configs: Iterable[ToyConfig]) -> dict[str, dict]:
        """``{config id: result}`` of ``configs``, trained by :func:`~.train.train_sweep` in :attr:`workers` processes
        (finished runs kept in and reused from :attr:`runs_dir`)."""
        configs = list(configs)
        return dict(zip([c.id() for c in configs], train_sweep(configs, self.runs_dir, workers=self.workers)))

    def finish(self, result, figures: Mapping, base: ToyConfig, grid: Sequence[GridClaim], title: str, **numbers):
        """``result`` (the post's :class:`~gpt2_posheads.posts.result.ClaimResult`) with ``figures``
        (``{stem: (figure, PNG size)}``) and, in its numbers, ``steps``, ``init_std``, ``lr`` and the post's own
        ``numbers``; with :attr:`robustness`, also the post's headline claims ``grid`` over the grid of
        :data:`~.robustness.UNSTATED` around ``base``, each at :attr:`robustness_seeds` seeds from :attr:`seed`
        (``quick``: 2, still every setting): the held counts (:func:`~.robustness.robustness_table`) as the table
        ``robustness``, their heatmap (``title`` names the post) as the figure ``robustness`` and the part of
        ``summary.json`` as ``numbers["robustness"]`` (the grid, the seeds, each claim's record with its totals
        (:func:`~gpt2_posheads.claims.toy.grid_record`) and the table)."""
        for stem, (fig, size) in figures.items():
            result.figure(fig, stem, **size)
        result.numbers.update(steps=self.steps, init_std=self.init_std, lr=self.lr, **numbers)
        if not self.robustness:
            return result
        seeds = list(range(self.seed, self.seed + (2 if self.quick else self.robustness_seeds)))
        print(f"robustness grid: {len(grid)} claims x {len(settings())} settings x {len(seeds)} seeds", flush=True)
        table = robustness_table(grid, base, seeds, self.runs_dir, workers=self.workers)
        result.table(table, "robustness")
        result.figure(robustness_figure(table, f"{title}: held in k of n seeds per setting"), "robustness")
        totals = robustness_totals(table)
        result.numbers["robustness"] = {
            "grid": {k: list(v) for k, v in UNSTATED.items()},
            "seeds": seeds,
            "base_lr": base.lr,
            "claims": [{**grid_record(c.spec), **totals[c.key]} for c in grid],
            "table": robustness_records(table),
        }
        return result


__all__ = ["BATCH_SIZE", "INIT_STD", "LR", "MAX_DEFAULT_WORKERS", "ROBUSTNESS_SEEDS", "ToyRun", "default_workers"]
