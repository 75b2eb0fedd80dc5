"""What the four toy posts share: their training options (:class:`ToyRun`), the judging of a default run
(:meth:`ToyRun.finish`) and the ``--robustness`` grid.

The posts give the task, V, C and n_embd, but not the learning rate, batch size, initialisation scale, or whether
attention has an output projection. :func:`robustness_table` re-runs each headline claim's test at every point of a
grid of those settings (:data:`UNSTATED`) over several seeds and counts, per setting s and claim,

    setting s = (lr x f, batch b, init std sigma, W_O on/off),   k(claim, s) = #{seeds : held(claim, s, seed)}

A :class:`GridClaim` is the post's declared claim at the grid's settings, judged into the same
:class:`~gpt2_posheads.claims.verdicts.Claim` record (numbers that cannot decide it: ``not testable``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from ..claims.catalogue import Option
from ..claims.toy import COMPARE_SEEDS, grid_record
from ..claims.verdicts import HELD, NOT_TESTABLE, Claim, ClaimSpec, Precondition
from ..model.validation import UsageError, positive
from .train import ToyConfig, train_sweep

# The posts' unstated settings and the values tried: learning rate as a factor of the script's default,
# batch size, std of the N(0, s^2) initialisation, attention output projection W_O.
UNSTATED = {"lr_factor": (0.3, 1.0, 3.0), "batch_size": (128, 256), "init_std": (0.02, 1.0), "out_proj": (False, True)}


@dataclass(frozen=True)
class GridClaim:
    """``spec`` at any setting: ``configs(base)`` the runs its test needs by name, from ``base`` (a setting's config
    and seed); ``value(results)`` what its rule reads off their results; ``preconditions(results)`` as by default."""

    spec: ClaimSpec
    configs: Callable[[ToyConfig], Mapping[str, ToyConfig]]
    value: Callable[[Mapping[str, dict]], Any]
    preconditions: Callable[[Mapping[str, dict]], Sequence[Precondition]] = lambda results: ()

    @property
    def key(self) -> str:
        return self.spec.key

    def judge(self, results: Mapping[str, dict]) -> Claim:
        value = self.value(results)
        return self.spec.judge(value, value, self.preconditions(results))


def settings(grid: Mapping[str, Sequence] = UNSTATED) -> list[dict]:
    """Every point of ``grid`` (the Cartesian product of its values), as dicts."""
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def at_setting(base: ToyConfig, setting: Mapping, seed: int) -> ToyConfig:
    """``base`` at a setting (``lr_factor`` scales ``base.lr``) and ``seed``, no snapshots (the grid reads none)."""
    changes = {k: v for k, v in setting.items() if k != "lr_factor"}
    return replace(base, lr=base.lr * setting.get("lr_factor", 1.0), seed=seed, snapshot_every=0, **changes)


LABELS = {"lr_factor": "lr x{:g}", "batch_size": "batch {}", "init_std": "init {:g}"}  # out_proj: W_O / no W_O


def setting_label(setting: Mapping) -> str:
    """``lr x0.3, batch 128, init 0.02, no W_O``."""
    return ", ".join(
        ("W_O" if v else "no W_O") if k == "out_proj" else LABELS.get(k, k + " {}").format(v)
        for k, v in setting.items()
    )


def robustness_table(
    claims: Sequence[GridClaim],
    base: ToyConfig,
    seeds: Sequence[int],
    runs_dir: str | Path | None = None,
    grid: Mapping[str, Sequence] = UNSTATED,
    progress: bool = True,
    workers: int = 1,
) -> pd.DataFrame:
    """Held count of every claim at every setting of ``grid`` over ``seeds``: one row per (setting, claim) with the
    setting's values, ``setting`` (a label), ``claim``, ``held`` (k), ``not_testable`` (seeds whose numbers could not
    decide it), ``n`` (seeds) and ``fraction`` = k / n. The posts' setting: ``lr_factor`` 1, ``out_proj`` False."""
    points = settings(grid)
    needs = [
        (i, c, dict(c.configs(at_setting(base, p, s)))) for i, p in enumerate(points) for s in seeds for c in claims
    ]
    flat = list({cfg.id(): cfg for _, _, named in needs for cfg in named.values()}.values())
    results = dict(zip([c.id() for c in flat], train_sweep(flat, runs_dir, progress=progress, workers=workers)))
    counts: dict[tuple[int, str], list[int]] = {}
    for i, c, named in needs:
        verdict = c.judge({name: results[cfg.id()] for name, cfg in named.items()}).verdict
        k = counts.setdefault((i, c.key), [0, 0])
        k[0] += verdict == HELD
        k[1] += verdict == NOT_TESTABLE
    rows = [{**p, "setting": setting_label(p), "claim": c.key} for p in points for c in claims]
    held, untestable = zip(*(counts[(i, c.key)] for i in range(len(points)) for c in claims))
    return pd.DataFrame(rows).assign(
        held=held, not_testable=untestable, n=len(seeds), fraction=[k / len(seeds) for k in held]
    )


def robustness_totals(table: pd.DataFrame) -> dict[str, dict]:
    """Per claim: runs held (and not testable) over the grid, settings held in every seed / in none."""

    def totals(g: pd.DataFrame) -> dict:
        runs = dict(held_runs=int(g.held.sum()), not_testable_runs=int(g.not_testable.sum()), runs=int(g.n.sum()))
        return {**runs, "settings_all_seeds": int((g.held == g.n).sum()), "settings_no_seed": int((g.held == 0).sum())}

    return {claim: {**totals(g), "settings": len(g)} for claim, g in table.groupby("claim", sort=False)}


def robustness_figure(table: pd.DataFrame, title: str) -> go.Figure:
    """Heatmap claims x settings: colour the fraction of seeds held, text k/n (and seeds not testable)."""
    claims = list(dict.fromkeys(table.claim))
    labels = list(dict.fromkeys(table.setting))

    def grid(values) -> pd.DataFrame:  # claims x settings
        return table.assign(v=values).pivot(index="claim", columns="setting", values="v").loc[claims, labels]

    text = [f"{k}/{n}" + (f"<br>{u} n.t." if u else "") for k, n, u in zip(table.held, table.n, table.not_testable)]
    cells = dict(texttemplate="%{text}", zmin=0, zmax=1, colorscale="RdYlGn", colorbar=dict(title="held<br>fraction"))
    z = grid(table.fraction).to_numpy(dtype=float)
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=claims, text=grid(text).to_numpy(), **cells))
    fig.update_layout(
        title=title,
        height=220 + 40 * len(claims),
        width=max(900, 70 * len(labels) + 300),
        xaxis=dict(title="setting (posts' default: lr x1, no W_O)", tickangle=-50),
        yaxis=dict(title="claim", autorange="reversed"),
    )
    return fig


MAX_DEFAULT_WORKERS = 8
# the training settings the posts do not state, as every toy post trains by default (nanoGPT's initialisation)
LR, INIT_STD, BATCH_SIZE = 0.01, 0.02, 128
ROBUSTNESS_SEEDS = 5  # seeds per setting of the --robustness grid


def default_workers() -> int:
    """One process per thread, at most :data:`MAX_DEFAULT_WORKERS` (small batched models use one thread best; each
    process holds its group's pre-drawn batches: up to ~1.8 GB for 64 models at batch 256)."""
    return min(torch.get_num_threads(), MAX_DEFAULT_WORKERS)


@dataclass(frozen=True)
class ToyRun:
    """The training options every toy post's claim function takes as keywords, besides the post's own (each the
    command's option of that name; ``steps`` None: the post's default). The post's runs train at :attr:`run_seeds`,
    every comparison at :attr:`comparison_seeds` (``max(seeds, 3)``, ``quick``: 2); the ``robustness`` grid at
    ``robustness_seeds`` seeds (``quick``: 2); ``runs_dir``: the folder of resumable runs (None: none)."""

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
        """``options`` of the claim function ``function``, checked (a ``TypeError`` for a keyword it does not take,
        as Python's own; :meth:`check`), with the post's ``steps`` (``quick_steps``), ``seeds``, workers filled in."""
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
        """A :class:`UsageError` naming the option (``name(field)``: keyword or flag) for a value out of range,
        before anything trains: the counts integers from 1 to int64's top (``None``: the post's default), ``lr`` and
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
        """The post's base :class:`ToyConfig`: ``task`` and these training options, logging ``log_points`` times."""
        training = {f: getattr(self, f) for f in ("steps", "lr", "init_std", "out_proj", "batch_size")}
        return ToyConfig(**training, log_every=max(self.steps // log_points, 1), **task)

    def train(self, configs: Iterable[ToyConfig]) -> dict[str, dict]:
        """``{config id: result}`` of ``configs`` (:func:`train_sweep` with :attr:`workers`, :attr:`runs_dir`)."""
        configs = list(configs)
        return dict(zip([c.id() for c in configs], train_sweep(configs, self.runs_dir, workers=self.workers)))

    @staticmethod
    def steps_option(steps: int, quick_steps: int) -> Option:
        """A toy post's ``--steps``, with its defaults in the help."""
        return Option("--steps", None, f"training steps (default {steps}; --quick: {quick_steps})", int)

    def finish(self, result, rows: Iterable[tuple], figures: Mapping, base: ToyConfig, grid, title: str, **numbers):
        """``result`` with its claims judged from ``rows``, each ``(spec, measured, value, readout[, preconditions])``
        as :meth:`~gpt2_posheads.claims.verdicts.ClaimSpec.judge` takes them, ``figures`` (``{stem: (figure, PNG
        size)}``), ``steps``, ``init_std``, ``lr`` and ``numbers``; with :attr:`robustness`, also the :class:`GridClaim`
        list ``grid`` over :data:`UNSTATED` around ``base`` (every setting, even ``quick``): the table, heatmap and
        ``numbers["robustness"]``."""
        result.claims = [
            spec.judge(measured, value, *pre, quick=self.quick, readout=readout)
            for spec, measured, value, readout, *pre in rows
        ]
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
        totals, rows = robustness_totals(table), table.to_dict(orient="records")
        result.numbers["robustness"] = {
            "grid": {k: list(v) for k, v in UNSTATED.items()},
            "seeds": seeds,
            "base_lr": base.lr,
            "claims": [{**grid_record(c.spec), **totals[c.key]} for c in grid],
            "table": [{k: v.item() if isinstance(v, np.generic) else v for k, v in row.items()} for row in rows],
        }
        return result


__all__ = ["BATCH_SIZE", "INIT_STD", "LR", "MAX_DEFAULT_WORKERS", "ROBUSTNESS_SEEDS", "ToyRun", "default_workers"]
