"""Figure output shared by every experiment: self-contained HTML plus a PNG through kaleido."""

from __future__ import annotations

import atexit
import functools
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from ..model.paths import cannot_write, write_whole_text
from ..model.validation import note

PNG_ENV = "GPT2_POSHEADS_PNG"  # "off" (or a reason) makes every figure HTML only; set by the main job once for all
PNG_CHECK_TIMEOUT = 60  # seconds one tiny test export may take before PNGs are given up for the run


@functools.cache
def png_support() -> tuple[bool, str]:
    """``(can write PNGs, why not)``, decided once per process: kaleido must import, a browser must exist, and one
    tiny figure must export within :data:`PNG_CHECK_TIMEOUT` seconds in a child process (a browser that cannot start
    would otherwise hang the run). ``$GPT2_POSHEADS_PNG`` carries the main job's answer: ``ok``, or why not."""
    told = os.environ.get(PNG_ENV)
    if told:
        return (True, "") if told == "ok" else (False, told)
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False, "kaleido is not installed"
    import shutil

    # the Chromium kaleido would use: $BROWSER_PATH if it names an executable, else one on PATH
    if path := os.environ.get("BROWSER_PATH"):
        browser = path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    else:
        names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
        browser = next(filter(None, map(shutil.which, names)), None)
    if browser is None:
        where = f"$BROWSER_PATH ({os.environ['BROWSER_PATH']}) does not exist" if os.environ.get("BROWSER_PATH") else ""
        return False, where or "no Chromium found (apt-get install chromium)"
    import subprocess
    import sys
    import tempfile

    code = (
        "import plotly.graph_objects as go, sys; "
        "go.Figure(go.Scatter(x=[0, 1], y=[0, 1])).write_image(sys.argv[1], width=100, height=100)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "check.png"
        try:
            r = subprocess.run(
                [sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=PNG_CHECK_TIMEOUT
            )
            ok = r.returncode == 0 and out.exists() and out.stat().st_size > 0
            why = "" if ok else f"a test export with {browser} failed ({(r.stderr.strip().splitlines() or ['?'])[-1]})"
        except subprocess.TimeoutExpired:
            ok, why = False, f"a test export with {browser} did not finish in {PNG_CHECK_TIMEOUT} s"
    return ok, why


@functools.cache
def _start_kaleido() -> bool:
    """One Chromium for all PNGs of a run (kaleido otherwise starts one per image)."""
    try:
        import kaleido

        kaleido.start_sync_server(silence_warnings=True)
        atexit.register(kaleido.stop_sync_server, silence_warnings=True)
        return True
    except Exception:
        return False


def shared_plotlyjs(out_dir: Path) -> str:
    """``include_plotlyjs`` for a figure in ``out_dir``: a relative link to one ``plotly.min.js`` at the top of the
    ``results/`` tree (so each HTML is a few kB, not 4.8 MB), or beside the figure outside it ("directory")."""
    out_dir = Path(out_dir).resolve()
    root = next((p for p in [out_dir, *out_dir.parents] if p.name == "results"), None)
    if root is None:
        return "directory"
    js = root / "plotly.min.js"
    if not js.exists():  # written whole or not at all: a cut-short copy would break every figure that links it
        from plotly.offline import get_plotlyjs

        write_whole_text(js, get_plotlyjs())
    return os.path.relpath(js, out_dir).replace(os.sep, "/")


def save_figure(
    fig: go.Figure, out_dir: str | Path, stem: str, png: bool = True, width: int = 1000, height: int | None = None
) -> list[Path]:
    """Write ``stem.html`` and, where ``png`` and :func:`png_support` allow, ``stem.png``; a PNG failure is a warning:
    a machine without Chromium still runs every analysis."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html = out / f"{stem}.html"
    js = shared_plotlyjs(out)
    fig.write_html(html, include_plotlyjs=js)
    written = [html] + ([out / "plotly.min.js"] if js == "directory" else [])
    if png and png_support()[0]:
        p = write_png(fig, out / f"{stem}.png", width, height)
        if p is not None:
            written.append(p)
    return written


def write_png(fig: go.Figure, path: Path, width: int = 1000, height: int | None = None) -> Path | None:
    """``fig`` as a PNG at ``path`` (never half a file), or ``None`` with a warning when the export fails."""
    _start_kaleido()
    tmp = path.with_name(f".{path.name}.partial")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*kopts.*")
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            fig.write_image(tmp, format="png", width=width, height=height or fig.layout.height or 600)
        tmp.replace(path)
        return path
    except Exception as e:  # noqa: BLE001 - any renderer failure degrades to HTML only
        tmp.unlink(missing_ok=True)
        if cannot_write(e) is not None:
            raise  # a full disk or a file-size limit is not the renderer's failure: the run says so in one line
        warnings.warn(f"PNG export of {path.stem} failed ({type(e).__name__}: {e})", stacklevel=2)
        return None


def _array(x, dtype=float) -> np.ndarray:
    return np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=dtype)


def heatmap(
    z, x=None, y=None, title: str = "", colorscale: str = "Viridis", zmid=None, xlabel: str = "", ylabel: str = "", **kw
) -> go.Figure:
    """A single heat map; ``z`` ``[rows, cols]`` (tensor or array), row 0 at the top."""
    z = _array(z)
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, colorscale=colorscale, zmid=zmid, **kw))
    fig.update_layout(title=title, xaxis_title=xlabel, yaxis_title=ylabel)
    if max(z.shape) <= 48:  # layer x head grids: one tick per integer, never 0.5
        fig.update_xaxes(dtick=1)
        fig.update_yaxes(dtick=1)
    return fig.update_yaxes(autorange="reversed")


def heatmap_grid(
    mats: dict[str, np.ndarray],
    cols: int = 2,
    title: str = "",
    colorscale: str = "Viridis",
    shared_scale: bool = True,
    x0: int = 0,
    height_per_row: int = 380,
    zrange: tuple[float, float] | None = None,
    tokens: Sequence[str] | None = None,
    colorbar_title: str = "",
    mark_offset: int | None = None,
) -> go.Figure:
    """Side-by-side heat maps, one panel per entry. ``x0``: the first position of every panel; ``tokens`` show on
    hover; ``zrange`` fixes the colour range; ``mark_offset`` draws the diagonal ``k = q - mark_offset``."""
    names = list(mats)
    rows = (len(names) + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, horizontal_spacing=0.08, vertical_spacing=0.12)
    arrs = [_array(m) for m in mats.values()]
    finite = np.concatenate([a[np.isfinite(a)].ravel() for a in arrs]) if arrs else np.zeros(1)
    zmin, zmax = (float(finite.min()), float(finite.max())) if shared_scale and finite.size else (None, None)
    if zrange is not None:
        zmin, zmax = zrange
    for i, a in enumerate(arrs):
        r, c = divmod(i, cols)
        at = dict(row=r + 1, col=c + 1)
        xs, ys = np.arange(a.shape[1]) + x0, np.arange(a.shape[0]) + x0
        hover = None
        if tokens is not None:
            tk = lambda j: repr(tokens[j]) if 0 <= j < len(tokens) else ""  # noqa: E731
            hover = [[f"query {q} {tk(q)}<br>key {k} {tk(k)}" for k in xs] for q in ys]
        tip = "%{text}<br>value %{z:.3f}<extra></extra>" if hover else None
        bar = dict(title=colorbar_title) if colorbar_title else None
        scale = dict(colorscale=colorscale, zmin=zmin, zmax=zmax, showscale=(i == 0))
        fig.add_trace(go.Heatmap(z=a, x=xs, y=ys, text=hover, hovertemplate=tip, colorbar=bar, **scale), **at)
        if mark_offset is not None:
            lo, hi = max(xs[0], ys[0] - mark_offset), min(xs[-1], ys[-1] - mark_offset)
            if hi > lo:
                dots = dict(
                    mode="lines", line=dict(color="red", width=1, dash="dot"), showlegend=False, hoverinfo="skip"
                )
                fig.add_trace(go.Scatter(x=[lo, hi], y=[lo + mark_offset, hi + mark_offset], **dots), **at)
        fig.update_yaxes(autorange="reversed", title_text="query position", **at)
        fig.update_xaxes(title_text="key position", **at)
    fig.update_layout(title=title, height=height_per_row * rows + 80)
    return fig


def attention_panels(
    panels: dict[str, np.ndarray], tokens, start: int, label: str, what: str, source: str
) -> go.Figure:
    """Attention sub-matrices ``{panel title: [q, k]}`` two to a row on the scale 0..1, the previous-token diagonal
    dotted: every script's figure of a head clean vs intervened."""
    return heatmap_grid(
        panels,
        cols=2,
        zrange=(0, 1),
        tokens=tokens,
        x0=start,
        mark_offset=1,
        colorbar_title="attention",
        title=f"{label}: {what}<br><sup>prompt 0 ({source}); dotted: previous token</sup>",
    )


def scatter3d_positions(
    points: dict[str, np.ndarray],
    title: str = "",
    axis_titles=("PC1", "PC2", "PC3"),
    colorscales=("Viridis", "Reds", "Blues"),
) -> go.Figure:
    """3-D scatter of one or more ``[pos, 3]`` point sets, colour = position."""
    fig = go.Figure()
    for (name, p), cs in zip(points.items(), list(colorscales) * 4):
        p = _array(p, None)
        marker = dict(size=2.5, color=np.arange(len(p)), colorscale=cs, showscale=len(points) == 1)
        marker["colorbar"] = dict(title="position")
        fig.add_trace(go.Scatter3d(x=p[:, 0], y=p[:, 1], z=p[:, 2], mode="markers", name=name, marker=marker))
    scene = {**{f"{a}axis_title": t for a, t in zip("xyz", axis_titles)}, "aspectmode": "cube", "camera": SCENE_CAMERA}
    return fig.update_layout(title=title, scene=scene, height=700, margin=dict(l=10, r=10, t=60, b=10))


# the default camera (eye at 1.25, 1.25, 1.25) puts the cube's corners outside a scene's frame: the z-axis title and
# the nearest corner are cut; from a little further every axis and its title fit
SCENE_CAMERA = dict(eye=dict(x=1.55, y=1.55, z=1.1), center=dict(x=0, y=0, z=-0.08))


def line_figure(series: dict[str, tuple], title: str = "", xlabel: str = "", ylabel: str = "", mode: str = "lines"):
    """Lines ``{name: (x, y)}``."""
    fig = go.Figure(
        [go.Scatter(x=np.asarray(x), y=np.asarray(y), mode=mode, name=name) for name, (x, y) in series.items()]
    )
    return fig.update_layout(title=title, xaxis_title=xlabel, yaxis_title=ylabel)


def submatrix(m: torch.Tensor, start: int, size: int) -> tuple[torch.Tensor, int]:
    """The ``size`` square of ``m`` ``[pos, pos]`` from ``start``, and its first position (moved to fit, and said)."""
    n = m.shape[0]
    first = max(0, min(start, n - size))
    if first != start or size > n:
        note(
            f"the {size}x{size} submatrix from position {start} does not fit a {n}-token prompt: showing "
            f"{min(size, n)}x{min(size, n)} from position {first}"
        )
    e = min(first + size, n)
    return m[first:e, first:e], first
