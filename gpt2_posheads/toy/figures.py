"""Figure pieces the toy scripts share: log axes whose labels read as numbers (20, 30, not "2", "3"), the spread of
seeds as bands (curves) or ± sd error bars (points)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from .analysis import perplexity_curve

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")


DENSER = ((1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 5, 6, 8), tuple(x / 10 for x in range(10, 100, 5)))


def log_ticks(values) -> dict:
    """``range``, ``tickvals`` and ``ticktext`` for a log axis showing every value of ``values`` (with a little room):
    round values (1-2-3-5 per decade up to two decades, 1-2-5 up to four, one per decade beyond; denser where fewer
    than 3 fall in range), each labelled with its full value, so 20 and 30 read "20" and "30"."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, dtype=float)) if np.isfinite(x) and x > 0])
    if not len(v):
        return {}
    lo_r, hi_r = math.log10(v.min()), math.log10(v.max())
    pad = max(0.05, 0.05 * (hi_r - lo_r))
    lo_r, hi_r = lo_r - pad, hi_r + pad
    decades = range(math.floor(lo_r), math.ceil(hi_r) + 1)
    span = hi_r - lo_r
    sets = ((1,),) if span > 4 else DENSER[1:] if span <= 2.2 else DENSER
    for per_decade in sets:
        ticks = [m * 10.0**e for e in decades for m in per_decade]
        ticks = [float(f"{t:.3g}") for t in ticks if lo_r <= math.log10(t) <= hi_r]
        if len(ticks) >= 3:
            break
    text = [f"{t:g}" if t >= 1e-3 else f"{t:.0e}".replace("e-0", "e-") for t in ticks]  # 20, 0.5, 0.002, 1e-5
    return {"range": [lo_r, hi_r], "tickvals": ticks, "ticktext": text}


def log_axis(fig: go.Figure, axis: str, values, **where) -> None:
    """Make ``axis`` ("x" or "y") of ``fig`` (``row``/``col`` in ``where`` for a subplot) a log axis labelled by
    :func:`log_ticks` of ``values``."""
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="log", **log_ticks(values), **where)


def axis_titles(fig: go.Figure, *titles: tuple[str, str], col: int = 1) -> None:
    """Title the x and y axes of the subplots of row 1 from column ``col`` on, one ``(x, y)`` pair each."""
    for c, (x, y) in enumerate(titles, start=col):
        fig.update_xaxes(title_text=x, row=1, col=c)
        fig.update_yaxes(title_text=y, row=1, col=c)


def titled(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    """``fig`` with its title and its axes' titles."""
    return fig.update_layout(title=title, xaxis_title=x, yaxis_title=y)


def band(fig: go.Figure, x, runs, name: str, colour: str) -> None:
    """A line at the mean of ``runs`` ``[seed, x]`` and a shaded band from the lowest to the highest seed (a band
    that stays inside the values, so it is drawn on log axes and never leaves a bounded measure's range)."""
    a, x = np.atleast_2d(np.asarray(runs, dtype=float)), np.asarray(x)
    if len(a) > 1:
        shade = dict(fill="toself", fillcolor=colour, opacity=0.2, line=dict(width=0), hoverinfo="skip")
        edge = np.concatenate([a.max(0), a.min(0)[::-1]])
        fig.add_trace(go.Scatter(x=np.concatenate([x, x[::-1]]), y=edge, showlegend=False, legendgroup=name, **shade))
    label = name if len(a) == 1 else f"{name} (mean; band: lowest to highest of {len(a)} seeds)"
    mean = go.Scatter(x=x, y=a.mean(0), mode="lines", name=label, line=dict(color=colour), legendgroup=name)
    fig.add_trace(mean.update(showlegend=True))  # named in the legend even where it is the figure's only curve


def points_with_sd(x, runs, name: str, colour: str | None = None) -> go.Scatter:
    """Markers and lines at the mean over seeds of ``runs`` ``[seed, x]``, error bars ± sd (sample sd)."""
    a = np.atleast_2d(np.asarray(runs, dtype=float))
    sd = a.std(0, ddof=1) if len(a) > 1 else None
    return go.Scatter(
        x=list(x),
        y=a.mean(0),
        error_y=dict(type="data", array=sd, visible=True) if sd is not None else None,
        mode="lines+markers",
        name=name if len(a) == 1 else f"{name} (mean ± sd, {len(a)} seeds)",
        line=dict(color=colour) if colour else None,
    )


def perplexity_bands(runs: dict[str, list[dict]], V: int, title: str) -> go.Figure:
    """Eval perplexity against training step for named groups of toy runs (``train_sweep`` results, one per seed):
    a :func:`band` per group, on a log axis from 1 (solved) to ``V`` (chance)."""
    fig = go.Figure()
    for i, (name, rs) in enumerate(runs.items()):
        band(fig, rs[0]["steps"], [perplexity_curve(r) for r in rs], name, COLOURS[i % len(COLOURS)])
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="perplexity (eval)")
    log_axis(fig, "y", [1, V])
    return fig


def perplexity_by_vocab(runs, vocab, title: str) -> go.Figure:
    """Eval perplexity against training step for toy runs (``train_sweep`` results), one curve per run coloured by
    its vocabulary size V (the seed named where runs share a V), each V's plateau at V/2 dotted, on a log axis."""
    fig = go.Figure()
    vocab = list(vocab)
    seeds_per_v = {v: sum(r["config"]["V"] == v for r in runs) for v in vocab}
    shown = [1.0, float(max(vocab))]
    for r in runs:
        v, seed = r["config"]["V"], r["config"]["seed"]
        name = f"V={v}" + (f" seed {seed}" if seeds_per_v[v] > 1 else "")
        colour = COLOURS[vocab.index(v) % len(COLOURS)]
        ppl = perplexity_curve(r)
        shown.append(float(np.nanmax(ppl)))
        fig.add_trace(go.Scatter(x=r["steps"], y=ppl, name=name, line=dict(color=colour)))
    for i, v in enumerate(vocab):
        fig.add_hline(y=v / 2, line_dash="dot", opacity=0.5, line_color=COLOURS[i % len(COLOURS)])
    fig.update_layout(title=f"{title}: perplexity (dotted: V/2)", xaxis_title="step", yaxis_title="perplexity (eval)")
    log_axis(fig, "y", shown)  # the curves start above V/2: the axis holds them whole
    return fig
