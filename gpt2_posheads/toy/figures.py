"""Figure pieces the toy scripts share: log axes whose labels read as numbers (20, 30, not "2", "3"), mean ± sd
bands over seeds, integer ticks on count axes."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ..claims.toy import num

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")


def log_ticks(values, per_decade: Sequence[float] = (1, 2, 5)) -> dict:
    """``tickvals``/``ticktext`` for a log axis spanning ``values``: 1-2-5 per decade (1-2-3-5 when the range is
    under two decades), each labelled with its full value, so 20 and 30 read "20" and "30"."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, dtype=float)) if np.isfinite(x) and x > 0])
    if not len(v):
        return {}
    lo, hi = math.floor(math.log10(v.min())), math.ceil(math.log10(v.max()))
    if hi - lo <= 2:
        per_decade = (1, 2, 3, 5)
    ticks = [m * 10.0**e for e in range(lo, hi + 1) for m in per_decade]
    ticks = [t for t in ticks if v.min() / 1.5 <= t <= v.max() * 1.5] or [10.0**lo, 10.0**hi]
    return {"tickvals": ticks, "ticktext": [num(t) for t in ticks]}


def log_axis(fig: go.Figure, axis: str, values, **where) -> None:
    """Make ``axis`` ("x" or "y") of ``fig`` (``row``/``col`` in ``where`` for a subplot) a log axis labelled by
    :func:`log_ticks` of ``values``."""
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="log", **log_ticks(values), **where)


def band(
    fig: go.Figure,
    x,
    runs,
    name: str,
    colour: str,
    row: int | None = None,
    col: int | None = None,
    showlegend: bool = True,
) -> None:
    """A line at the mean of ``runs`` ``[seed, x]`` and a shaded band at mean ± sd (sample sd; none for one seed)."""
    a = np.asarray(runs, dtype=float)
    a = a[None] if a.ndim == 1 else a
    mean = a.mean(0)
    where = {"row": row, "col": col} if row is not None else {}
    if len(a) > 1:
        sd = a.std(0, ddof=1)
        lo, hi = mean - sd, mean + sd
        fig.add_trace(
            go.Scatter(
                x=np.concatenate([np.asarray(x), np.asarray(x)[::-1]]),
                y=np.concatenate([hi, lo[::-1]]),
                fill="toself",
                fillcolor=colour,
                opacity=0.2,
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
                legendgroup=name,
            ),
            **where,
        )
    label = name if len(a) == 1 else f"{name} (mean ± sd, {len(a)} seeds)"
    fig.add_trace(
        go.Scatter(
            x=np.asarray(x),
            y=mean,
            mode="lines",
            name=label,
            line=dict(color=colour),
            legendgroup=name,
            showlegend=showlegend,
        ),
        **where,
    )


def points_with_sd(x, runs, name: str, colour: str | None = None, dash: str | None = None) -> go.Scatter:
    """Markers and lines at the mean over seeds of ``runs`` ``[seed, x]``, error bars ± sd (sample sd)."""
    a = np.asarray(runs, dtype=float)
    a = a[None] if a.ndim == 1 else a
    sd = a.std(0, ddof=1) if len(a) > 1 else None
    return go.Scatter(
        x=list(x),
        y=a.mean(0),
        error_y=dict(type="data", array=sd, visible=True) if sd is not None else None,
        mode="lines+markers",
        name=name if len(a) == 1 else f"{name} (mean ± sd, {len(a)} seeds)",
        line=dict(color=colour, dash=dash) if colour or dash else None,
    )
