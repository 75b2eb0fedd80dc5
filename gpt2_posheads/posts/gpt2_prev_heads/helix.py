"""The 3-D PCA helix of W_pos and of the extended positional embeddings at a layer (GPT-2 post).

    gpt2-posheads pos_embed_helix --w-pos ../shared/gpt2-small/W_pos.npy   # real GPT-2, offline
    gpt2-posheads pos_embed_helix --model mini-gpt2 --layer 2

The extended positional embeddings (the residual stream on repeated-token prompts after BOS, centred; the repeated
token's rows) exist for every model; W_pos's helix only for a model with learned absolute positions (else that claim is
not testable). A helix: the top three principal components explain >= 60% of the variance and the third carries >= twice
the fourth.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...analysis.geometry import pca
from ...analysis.posembed import centred_w_pos, default_bos, extended_pos_embeddings, load_w_pos, token_rows
from ...claims.catalogue import Option
from ...claims.gpt2_post import helix_evr_rule, post_claim
from ...claims.verdicts import Claim, Precondition
from ...model.loading import wpos_reason
from ...report.plotting import scatter3d_positions
from ..result import ClaimResult
from ._run import ModelRun, claim_script, repeated_token_run

SPECS = WPOS_HELIX, EXT_HELIX = (
    post_claim(
        "wpos_helix",
        "W_pos lies on a low-dimensional helix",
        "top-3 PCs: 33%, 32%, 25%",
        helix_evr_rule("centred W_pos"),
        why_kind="a property of W_pos, whoever reads it",
    ),
    post_claim(
        "ext_helix",
        "the extended positional embeddings also form a low-dimensional helix",
        "a helix at layer 2",
        helix_evr_rule("the extended embeddings", allow_quick=False),
        why_kind="geometry of the residual stream",
    ),
)


def helix(x: torch.Tensor) -> tuple[list[float], torch.Tensor]:
    """``(top-4 explained-variance ratios, the rows on the top three components [n, 3])`` of ``x`` ``[n, d_model]``."""
    _, evr, proj = pca(x, 4)
    return [float(v) for v in evr], proj[:, :3]


def shown(evr: list[float]) -> str:
    return ", ".join(f"{x:.0%}" for x in evr[:3]) + f" in the top 3 PCs (fourth {evr[3]:.1%})"


def judge(w_evr: list[float] | None, reason: str | None, ext_evr: list[float] | None, layer: int) -> list[Claim]:
    """``wpos_helix`` on ``W_pos``'s ratios (not testable for ``reason`` when there are none) and, with a model,
    ``ext_helix`` on the extended embeddings' at ``layer``."""
    if w_evr is not None:
        claims = [WPOS_HELIX.judge({"top4": w_evr}, w_evr, readout=shown(w_evr))]
    else:
        no_w = [Precondition("the model has W_pos", False, reason)]
        claims = [WPOS_HELIX.judge({"not_applicable": reason}, [float("nan")] * 4, no_w)]
    if ext_evr is not None:
        claims.append(
            EXT_HELIX.judge({"layer": layer, "top4": ext_evr}, ext_evr, readout=f"layer {layer}: {shown(ext_evr)}")
        )
    return claims


def figure(evr: list[float], points: torch.Tensor, title: str):
    """The points on their top three components, coloured by position, each axis titled with its share of variance."""
    labels = [f"PC{i + 1} ({100 * float(v):.0f}% of variance)" for i, v in enumerate(evr[:3])]
    return scatter3d_positions({"positions": points}, title=title, axis_titles=labels)


@claim_script(
    "pos_embed_helix",
    claims=SPECS,
    command=True,
    order=2,
    options=(
        Option("--w-pos", None, ".npy file of W_pos: plot it without loading a model"),
        Option(
            "--layer",
            2,
            "layer of the extended positional embeddings (0..n_layers; n_layers = the final residual stream)",
            int,
        ),
        Option("--n-prompts", 16, "repeated-token prompts to average", int, low=1),
        Option("--seq-len", None, "positions (default n_ctx; capped at it, and said)", int, low=2),
    ),
)
def pos_embed_helix(
    model=None,
    *,
    w_pos: str | Path | torch.Tensor | None = None,
    layer: int = 2,
    n_prompts: int = 16,
    seq_len: int | None = None,
    seed: int = 0,
    progress: bool = True,
    run: ModelRun | None = None,
) -> ClaimResult:
    """The top-3 PCA of ``W_pos`` and of the extended positional embeddings at ``layer``, judged as helices.

    ``run``: its model and label (the claim makes its own repeated-token prompts). ``w_pos``: instead of a model,
    ``W_pos`` ``[n_ctx, d_model]`` or a ``.npy``/``.pt`` file of it; only ``wpos_helix`` is then judged (GPT-2 small's
    own: ``gpt2_posheads.model.paths.GPT2_W_POS``). ``layer``: ``0..n_layers`` (``n_layers`` = the final residual).
    ``numbers``: ``w_pos`` and ``ext``, each with its ``explained_variance_top4``.
    """
    if w_pos is not None:
        if model is not None or run is not None:
            raise ValueError("w_pos: measured alone, without a model; pass either w_pos or model/run")
        return _w_pos_only(w_pos)
    run, seq_len = repeated_token_run(model, run, layer, n_prompts, seq_len)
    reason, bos, w_evr = wpos_reason(run.model, run.label), default_bos(run.model), None
    result = ClaimResult("pos_embed_helix", run.label)
    result.numbers.update(layer=layer, n_prompts=n_prompts)
    if reason is None:  # W_pos's first seq_len rows, centred
        w_evr, points = helix(centred_w_pos(load_w_pos(run.model), seq_len))
        result.figure(figure(w_evr, points, f"{run.label}: W_pos, top-3 PCA"), "w_pos_helix")
        result.numbers["w_pos"] = {"explained_variance_top4": w_evr}
    # the extended positional embeddings at layer: the repeated token's rows, [seq_len - bos, d_model]
    options = dict(n_prompts=n_prompts, seq_len=seq_len, seed=seed, progress=progress, bos=bos)
    ext_evr, ext_points = helix(token_rows(extended_pos_embeddings(run.model, layer, **options), bos))
    title = f"{run.label}: extended positional embeddings at layer {layer}, top-3 PCA"
    result.figure(figure(ext_evr, ext_points, title), f"ext_pos_helix_L{layer}")
    result.numbers["ext"] = {"explained_variance_top4": ext_evr, "after_bos": bos}
    result.claims = judge(w_evr, reason, ext_evr, layer)
    return result


def _w_pos_only(w_pos) -> ClaimResult:
    """``wpos_helix`` on a given ``W_pos`` (a tensor, or a file :func:`load_w_pos` reads)."""
    if isinstance(w_pos, torch.Tensor):
        if w_pos.ndim != 2:
            raise ValueError(f"w_pos: has shape {tuple(w_pos.shape)}; W_pos must be a [n_ctx, d_model] matrix")
        w, source, label = w_pos.detach().float().cpu(), "given tensor", "W_pos"
    elif isinstance(w_pos, (str, Path)):
        w, source, label = load_w_pos(w_pos), str(w_pos), Path(w_pos).stem
    else:
        raise TypeError(f"w_pos: a [n_ctx, d_model] tensor or a .npy/.pt file is needed, got {type(w_pos).__name__}")
    evr, points = helix(centred_w_pos(w))
    result = ClaimResult("pos_embed_helix", label)
    result.figure(figure(evr, points, f"W_pos from {source}: top-3 PCA"), "w_pos_helix")
    norms = {"row0_norm": float(w[0].norm()), "last_row_norm": float(w[-1].norm())}
    result.numbers["w_pos"] = {"source": source, "shape": list(w.shape), "explained_variance_top4": evr, **norms}
    result.claims = judge(evr, None, None, 0)
    return result
