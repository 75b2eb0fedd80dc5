"""Extended positional embeddings against W_pos, layer by layer (GPT-2 post: "Concept: extended positional embeddings").

    gpt2-posheads ext_pos_vs_wpe --model mini-gpt2

Figures: the three-panel comparison at --layer (both sets on W_pos's PCs, on the extended embeddings' PCs, on the PCs of
both concatenated), and per layer 0..n_layers the principal angles to W_pos, the large-entry fraction (sparsity) and the
token dependence. CSV + JSON of all numbers. On a model without learned absolute positions only the token dependence is
measured (the rest compares with W_pos).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from ...analysis.geometry import large_entry_fraction, pca, principal_angles, project, token_dependence
from ...analysis.posembed import centred_w_pos, default_bos, extended_pos_embeddings_by_layer, load_w_pos, token_rows
from ...claims.catalogue import Option
from ...claims.gpt2_post import helix_precondition, post_claim
from ...claims.verdicts import Claim, Precondition, at_least, at_most
from ...model.loading import position_kind, wpos_reason
from ...model.validation import UsageError, capped_seq_len
from ...report.plotting import line_figure
from ..result import ClaimResult
from ._run import ModelRun, claim_script, repeated_token_run

SPECS = SAME_SUBSPACE, SPARSER, TOKEN_INDEPENDENT = (
    post_claim(
        "ext_same_subspace",
        "extended embeddings at layer 2 span nearly W_pos's top-3 subspace",
        "angles 8°, 9°, 10°",
        at_most(20.0, "largest principal angle at layer 2 (degrees)"),
        why_kind="geometry of the residual stream",
    ),
    post_claim(
        "ext_sparser",
        "extended embeddings past layer 0 are sparser than W_pos",
        "about 3x fewer large entries",
        at_least(1.5, "layer-0 large-entry fraction / mean over later layers"),
        why_kind="geometry of the residual stream",
    ),
    post_claim(
        "ext_token_independent",
        "extended embeddings barely depend on the repeated token",
        "almost the same",
        at_most(0.25, "relative spread of the extended embeddings across repeated tokens (layer 2)"),
        why_kind="geometry of the residual stream",
    ),
)


def measure(
    model, seq_len: int, n_prompts: int, n_token_dependence: int, k: int, seed: int, label: str, progress: bool = True
) -> dict:
    """``{"per_layer", "ext", "w_pos", "wpos_reason", "after_bos"}``: the extended positional embeddings (the residual
    stream on repeated-token prompts, centred over the positions, averaged over tokens) at each block's input and the
    final residual, the repeated token's rows ``{layer: [seq_len - after_bos, d_model]}``; ``W_pos`` on the same rows
    (``None``, and why, without learned positions); the per-layer table (``token_dependence`` on
    ``n_token_dependence`` other tokens kept apart, seed ``seed + 1``; ``angle_<i>_deg`` with ``W_pos``)."""
    reason, layers, bos = wpos_reason(model, label), list(range(model.cfg.n_layers + 1)), default_bos(model)
    by_layer = partial(extended_pos_embeddings_by_layer, model, layers, seq_len=seq_len, bos=bos)
    ext = by_layer(n_prompts=n_prompts, seed=seed, progress=progress)
    _, per_tok = by_layer(n_prompts=n_token_dependence, seed=seed + 1, return_per_token=True)
    # geometry on the repeated token's rows (after BOS), and W_pos on the same positions
    ext = {l: token_rows(e, bos) for l, e in ext.items()}
    per_tok = {l: e[:, int(bos) :] for l, e in per_tok.items()}
    w = token_rows(centred_w_pos(load_w_pos(model), seq_len, bos=bos), bos) if reason is None else None
    rows = []
    for l in layers:
        row = {"layer": l, "large_entry_fraction": large_entry_fraction(ext[l]), "norm": float(ext[l].norm())}
        row["token_dependence"] = token_dependence(per_tok[l])
        if w is not None:
            row.update({f"angle_{i + 1}_deg": a for i, a in enumerate(principal_angles(w, ext[l], k=k).tolist())})
        rows.append(row)
    df = pd.DataFrame(rows)
    df["not_measured"] = ""
    if reason is not None:  # no W_pos: layer 0's residual holds no position (zeros up to rounding), nothing to compare
        df.loc[df.layer == 0, ["large_entry_fraction", "norm", "token_dependence"]] = float("nan")
        kind = position_kind(model)
        df.loc[df.layer == 0, "not_measured"] = f"no learned W_pos ({kind} positions): layer 0 holds no position"
    df["sparsity_vs_layer0"] = df["large_entry_fraction"][0] / df["large_entry_fraction"]
    return {"per_layer": df, "ext": ext, "w_pos": w, "wpos_reason": reason, "after_bos": bos}


def judge(m: dict, k: int, n_layers: int) -> tuple[list[Claim], list[float], float]:
    """``(claims, angles at the judged layer, mean sparsity ratio over layers > 0)`` of a :func:`measure`."""
    df, w, reason = m["per_layer"], m["w_pos"], m["wpos_reason"]
    l2 = min(2, n_layers)  # the post's layer 2, or the final residual of a shallower model
    a2 = df.set_index("layer").loc[l2]
    has_w = [Precondition("the model has learned absolute positions (W_pos)", w is not None, reason or "")]
    w_helix = [helix_precondition(pca(w, 4)[1].tolist(), "W_pos")] if w is not None else []
    ext_helix = helix_precondition(pca(m["ext"][l2], 4)[1].tolist(), f"the extended embeddings at layer {l2}")
    angles = [float(a2[f"angle_{i + 1}_deg"]) for i in range(k)] if w is not None else [float("nan")]
    sparsity = float(df.sparsity_vs_layer0[1:].mean())
    spread = float(a2.token_dependence)
    shown = f"layer {l2}: " + ", ".join(f"{a:.3g}°" for a in angles)
    sparse = {"ratio": sparsity, "per_layer": df.large_entry_fraction.tolist()}
    spread_shown = f"relative spread {spread:.3g}"
    claims = [
        SAME_SUBSPACE.judge({"layer": l2, "angles_deg": angles}, max(angles), has_w + w_helix, readout=shown),
        SPARSER.judge(sparse, sparsity, has_w, readout=f"{sparsity:.3g}x fewer large entries"),
        TOKEN_INDEPENDENT.judge({"layer": l2, "spread": spread}, spread, [ext_helix], readout=spread_shown),
    ]
    return claims, angles, sparsity


def three_panel(w: torch.Tensor, ext: torch.Tensor, layer: int, label: str) -> go.Figure:
    """Both point sets on three bases; each scene's axes span the 1st-99th percentile of its points, so one outlying
    position (GPT-2's W_pos[0] has norm 9.9) does not squash the rest."""
    bases = {"W_pos PCs": w, f"layer-{layer} extended PCs": ext, "concatenated PCs": torch.cat([w, ext])}
    bases = {name: pca(x, 3)[0] for name, x in bases.items()}
    fig = make_subplots(
        rows=1, cols=3, specs=[[{"type": "scene"}] * 3], subplot_titles=list(bases), horizontal_spacing=0.02
    )
    scenes, clipped = {}, 0
    camera = dict(eye=dict(x=1.9, y=1.9, z=1.3), center=dict(x=0, y=0, z=-0.1))  # a third of the width each
    for i, comps in enumerate(bases.values()):
        pts = []
        for lab, x, colour in ((f"extended L{layer}", ext, "red"), ("W_pos", w, "blue")):
            p = project(x, comps).numpy()
            pts.append(p)
            style = dict(mode="markers", name=lab, marker=dict(size=2, color=colour), showlegend=i == 0)
            fig.add_trace(go.Scatter3d(x=p[:, 0], y=p[:, 1], z=p[:, 2], **style), row=1, col=i + 1)
        allp = np.concatenate(pts)
        lo, hi = np.percentile(allp, 1, axis=0), np.percentile(allp, 99, axis=0)
        pad = 0.1 * (hi - lo)
        clipped = max(clipped, int((((allp < lo - pad) | (allp > hi + pad)).any(axis=1)).sum()))
        axes = {
            f"{a}axis": dict(title=f"PC{j + 1}", range=[lo[j] - pad[j], hi[j] + pad[j]]) for j, a in enumerate("xyz")
        }
        scenes["scene" if i == 0 else f"scene{i + 1}"] = dict(**axes, aspectmode="cube", camera=camera)
    fig.update_layout(
        title=f"{label}: extended positional embeddings at layer {layer} (red) and W_pos (blue)<br><sup>"
        f"axes cover the 1st-99th percentile of the points; {clipped} outlying position(s) lie off the axes</sup>",
        height=620,
        margin=dict(l=20, r=20, t=100, b=20),
        **scenes,
    )
    return fig


def figure(m: dict, layer: int, k: int, label: str) -> dict:
    """``{stem: figure}``: with ``W_pos``, the three-panel comparison at ``layer`` and the principal angles per layer;
    always the sparsity and the token dependence per layer."""
    df, w, figs, lines = m["per_layer"], m["w_pos"], {}, {}
    if w is not None:
        figs[f"three_panel_L{layer}"] = three_panel(w, m["ext"][layer], layer, label)
        angles = {f"angle {i + 1}": f"angle_{i + 1}_deg" for i in range(k)}
        what = "principal angles between W_pos and the extended positional embeddings"
        lines["principal_angles"] = (angles, what, "degrees")
    sparsity = "share of large entries (|x| > the matrix's RMS); lower = sparser"
    lines["sparsity"] = ({"large entry fraction": "large_entry_fraction"}, sparsity, "share of entries with |x| > RMS")
    what, spread = "token dependence of the extended positional embeddings", "relative spread across repeated tokens"
    lines["token_dependence"] = ({"token dependence": "token_dependence"}, what, spread)
    for name, (series, title, ylabel) in lines.items():
        xy = {n: (df.layer, df[c]) for n, c in series.items()}
        fig = line_figure(xy, f"{label}: {title}", "layer (input of the block)", ylabel, mode="lines+markers")
        figs[name] = fig.update_xaxes(dtick=1)
    return figs


def _prepare(model, kwargs: dict, args) -> None:
    if model is None:
        return
    kwargs["seq_len"] = seq_len = capped_seq_len(model, kwargs["seq_len"] or model.cfg.n_ctx)
    top = min(model.cfg.d_model, seq_len)
    if kwargs["k"] > top:
        raise UsageError("--k", f"{kwargs['k']} is out of range", f"allowed 1..{top}")


@claim_script(
    "ext_pos_vs_wpe",
    takes=("seed", "progress"),
    order=3,
    claims=SPECS,
    options=(
        Option(
            "--layer", 2, "layer of the three-panel comparison (0..n_layers; n_layers = the final residual stream)", int
        ),
        Option("--n-prompts", 16, "repeated-token prompts averaged", int, low=1),
        Option("--n-token-dependence", 4, "tokens kept separately for token dependence", int, low=2),
        Option("--seq-len", None, "positions (default n_ctx; capped at it, and said)", int, low=2),
        Option("--k", 3, "subspace dimension of the principal angles", int, low=1),
    ),
    ranking=False,
    layer_final=True,
    prepare=_prepare,
    console=lambda result, _: print(result.tables["per_layer"].to_string(index=False, float_format="{:.3f}".format)),
)
def ext_pos_vs_wpe(
    model=None,
    *,
    layer: int = 2,
    n_prompts: int = 16,
    n_token_dependence: int = 4,
    seq_len: int | None = None,
    k: int = 3,
    seed: int = 0,
    progress: bool = True,
    run: ModelRun | None = None,
) -> ClaimResult:
    """The extended positional embeddings against ``W_pos``, layer by layer, and the post's three claims on them.

    ``run``: its model and label (the claim makes its own repeated-token prompts). ``layer``: the three-panel figure's
    (``0..n_layers``, ``n_layers`` = the final residual); the claims are judged at layer 2 (or the final residual of a
    shallower model), as the post. ``k``: the subspaces' dimension, ``1..min(d_model, seq_len)``. ``seed``: the
    repeated tokens' (``seed + 1`` for those kept apart).
    """
    if n_token_dependence < 2:
        raise ValueError(f"n_token_dependence: {n_token_dependence} is out of range; allowed >= 2 (a spread)")
    run, seq_len = repeated_token_run(model, run, layer, n_prompts, seq_len)
    model, seq_len = run.model, seq_len or run.model.cfg.n_ctx
    if not 1 <= k <= min(model.cfg.d_model, seq_len):
        raise ValueError(f"k: {k} is out of range; allowed 1..{min(model.cfg.d_model, seq_len)} (d_model, seq_len)")
    m = measure(model, seq_len, n_prompts, n_token_dependence, k, seed, run.label, progress)
    result = ClaimResult("ext_pos_vs_wpe", run.label)
    result.claims, angles, sparsity = judge(m, k, model.cfg.n_layers)
    result.table(m["per_layer"], "per_layer")
    for stem, fig in figure(m, layer, k, run.label).items():
        result.figure(fig, stem, **({"width": 1500} if stem.startswith("three_panel") else {}))
    result.numbers.update(
        seq_len=seq_len,
        n_prompts=n_prompts,
        k=k,
        sparsity_rule="fraction of entries with |x| > 1 * RMS of the matrix (the repeated token's rows)",
        after_bos=m["after_bos"],
        per_layer=m["per_layer"],
        layer2_angles_deg=angles,
        post_layer2_angles_deg=[8, 9, 10],
        mean_sparsity_ratio_layers_gt0=sparsity,
        post_sparsity_ratio=3.0,
    )
    return result
