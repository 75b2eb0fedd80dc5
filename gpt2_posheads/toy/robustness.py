"""Which toy claims survive the settings the posts do not state?

The posts give the task, V, C and n_embd, but not the learning rate, batch size, initialisation scale,
or whether attention has an output projection. :func:`robustness_table` re-runs each claim's test at
every point of a grid of those settings (:data:`UNSTATED`) and over several seeds, and counts
"held in k of n runs" per setting and claim:

    setting s = (lr x f, batch b, init std sigma, W_O on/off),   k(claim, s) = #{seeds : held(claim, s, seed)}

A claim is a :class:`GridClaim`: the post's declared claim at the grid's settings (the same declaration the default
run judges, :meth:`~gpt2_posheads.claims.verdicts.ClaimSpec.at`), the named runs its test needs (built from one
setting's base config and seed) and what its rule reads off their results. Each run is judged into the same
:class:`~gpt2_posheads.claims.verdicts.Claim` record as every claim (a run whose numbers cannot decide the claim is
``not testable``, not held). Every run of the grid goes through :func:`train_sweep`, so runs that share a shape train
as one batched computation and finished runs are reused.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..claims.verdicts import HELD, NOT_TESTABLE, Claim, ClaimSpec, Precondition
from .train import ToyConfig, train_sweep

# The posts' unstated settings and the values tried: learning rate as a factor of the script's default,
# batch size, std of the N(0, s^2) initialisation, attention output projection W_O.
UNSTATED: dict[str, tuple] = {
    "lr_factor": (0.3, 1.0, 3.0),
    "batch_size": (128, 256),
    "init_std": (0.02, 1.0),
    "out_proj": (False, True),
}


@dataclass(frozen=True)
class GridClaim:
    """One declared claim, runnable at any setting: ``spec`` (the post's declaration at the grid's settings),
    ``configs(base)`` the runs its test needs, by name, built from ``base`` (a setting's config with its seed), and
    ``value(results)`` what its rule reads off those runs' results (same names), ``preconditions(results)`` what
    must hold for the claim to be testable there (as on the default run)."""

    spec: ClaimSpec
    configs: Callable[[ToyConfig], Mapping[str, ToyConfig]]
    value: Callable[[Mapping[str, dict]], Any]
    preconditions: Callable[[Mapping[str, dict]], Sequence[Precondition]] = lambda results: ()

    @property
    def key(self) -> str:
        return self.spec.key

    def judge(self, results: Mapping[str, dict]) -> Claim:
        """The claim on one setting's runs: the record every claim is."""
        value = self.value(results)
        return self.spec.judge(value, value, self.preconditions(results))


def settings(grid: Mapping[str, Sequence] = UNSTATED) -> list[dict]:
    """Every point of ``grid`` (the Cartesian product of its values), as dicts."""
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]


def at_setting(base: ToyConfig, setting: Mapping, seed: int) -> ToyConfig:
    """``base`` with a setting of :data:`UNSTATED` applied (``lr_factor`` scales ``base.lr``) and ``seed``;
    no snapshots (grid tests read final parameters and logged losses only)."""
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
    """Held count of every claim at every setting of ``grid``, over ``seeds``.

    Returns one row per (setting, claim): the setting's values, ``setting`` (a label), ``claim``, ``held``
    (k), ``not_testable`` (seeds whose numbers could not decide it), ``n`` (number of seeds) and ``fraction`` = k / n.
    The posts' setting is the row with ``lr_factor`` 1, ``out_proj`` False (the scripts' defaults). ``workers``: as
    in :func:`train_sweep`.
    """
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
    """Per claim: runs held (and not testable) over the whole grid, and the settings where it held in every seed / in
    none."""
    out = {}
    for claim, g in table.groupby("claim", sort=False):
        out[claim] = {
            "held_runs": int(g.held.sum()),
            "not_testable_runs": int(g.not_testable.sum()),
            "runs": int(g.n.sum()),
            "settings_all_seeds": int((g.held == g.n).sum()),
            "settings_no_seed": int((g.held == 0).sum()),
            "settings": len(g),
        }
    return out


def robustness_figure(table: pd.DataFrame, title: str) -> go.Figure:
    """Heatmap: claims (rows) x settings (columns), colour = fraction of seeds where the claim held, text k/n (and
    how many seeds were not testable, where any)."""
    claims = list(dict.fromkeys(table.claim))
    labels = list(dict.fromkeys(table.setting))

    def grid(values) -> pd.DataFrame:  # claims x settings
        return table.assign(v=values).pivot(index="claim", columns="setting", values="v").loc[claims, labels]

    text = [f"{k}/{n}" + (f"<br>{u} n.t." if u else "") for k, n, u in zip(table.held, table.n, table.not_testable)]
    fig = go.Figure(
        go.Heatmap(
            z=grid(table.fraction).to_numpy(dtype=float),
            x=labels,
            y=claims,
            text=grid(text).to_numpy(),
            texttemplate="%{text}",
            zmin=0,
            zmax=1,
            colorscale="RdYlGn",
            colorbar=dict(title="held<br>fraction"),
        )
    )
    fig.update_layout(
        title=title,
        height=220 + 40 * len(claims),
        width=max(900, 70 * len(labels) + 300),
        xaxis=dict(title="setting (posts' default: lr x1, no W_O)", tickangle=-50),
        yaxis=dict(title="claim", autorange="reversed"),
    )
    return fig


def robustness_records(table: pd.DataFrame) -> list[dict]:
    """The table as JSON-ready rows for ``summary.json``."""
    return [
        {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
        for row in table.to_dict(orient="records")
    ]
