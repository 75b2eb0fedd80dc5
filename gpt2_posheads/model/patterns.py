"""Editing an attention pattern inside the forward pass, on every model.

Where ``hook_pattern`` feeds the output (GPT-2, Pythia, Llama on the TransformerLens 4 bridge), an edit is a hook
on it. Where it fires only after the output is computed (GPT-Neo and OPT on that bridge: the edit would be
discarded, :func:`~gpt2_posheads.model.hooks.hook_status`), the edit goes through the head outputs instead:

    A = softmax(scale * q k^T + mask)      from this pass's queries and keys (rotated as the model rotates them)
    z' = edit(A) v                          replaces hook_z (the values per head, shared ones expanded)

The scale and the mask (causal, plus any attention window, such as GPT-Neo's local layers) are calibrated once per
model and layer on a clean pass (:func:`~gpt2_posheads.model.attention.scale_from_pattern`), and every pass checks
that ``A v`` reproduces the model's own ``z`` before replacing it: a mismatch is an error, never a silent change.
``hook_pattern``, which fires after the output there, then shows ``edit(A)`` to the hooks after it, so a reduction
of the patterns sees the pattern the head attended with on every model (and every engine).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from .attention import QKCapture, attn_scale, expand_kv, scale_from_pattern
from .engine import Reduction, keep_reads
from .engines import engine_for
from .hooks import hook_status
from .tokens import model_device
from .traced import attention_pattern
from .validation import UsageError

PatternEdit = Callable[[torch.Tensor], torch.Tensor]  # [batch, head, q, k] -> [batch, head, q, k]
_CALIBRATION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _calibrate(model, layer: int) -> tuple[float, int | None]:
    """``(scale, window)`` of ``layer`` from a clean pass on up to 256 random tokens: ``window`` is the smallest
    query-key distance the model never attends across (``None``: no window within the probe)."""
    per_model = _CALIBRATION.setdefault(model, {})
    if layer in per_model:
        return per_model[layer]
    n = min(model.cfg.n_ctx, 256)
    toks = torch.randint(0, model.cfg.d_vocab, (1, n), generator=torch.Generator().manual_seed(0)).to(
        model_device(model)
    )
    reads = {"q": [layer], "k": [layer], "pattern": [layer]}
    acts = engine_for(model, "hooks").activations([toks], reads, Reduction(keep_reads, dict))[layer]
    dot = torch.einsum("bqhd,bkhd->bhqk", acts["q"].float(), acts["k"].float()).cpu()
    scale, mask, err = scale_from_pattern(dot, acts["pattern"].float().cpu(), attn_scale(model.cfg, layer))
    if err > 1e-4:
        raise UsageError(
            "model",
            f"layer {layer}'s attention is not softmax(scale * q . k + mask) (off by {err:.1e})",
            "models whose pattern a hook can edit, or of that form",
            "pattern edits cannot be made exact",
        )
    q_idx, k_idx = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    inside = (k_idx <= q_idx)[None, None].expand_as(mask)
    far = (q_idx - k_idx)[None, None].expand_as(mask)[mask & inside]
    window = int(far.min()) if far.numel() else None
    per_model[layer] = (scale, window)
    return scale, window


def pattern_edit_hooks(model, layer: int, edit: PatternEdit) -> list[tuple[str, Callable]]:
    """TransformerLens ``fwd_hooks`` that make layer ``layer`` attend with ``edit(A)`` instead of its pattern ``A``
    ``[batch, head, q, k]`` (see the module doc). ``edit`` must not change ``A`` in place."""
    status = hook_status(model)
    pre = f"blocks.{layer}.attn."
    if status.get("attn.hook_pattern") == "live":
        return [(pre + "hook_pattern", lambda p, hook: edit(p))]
    if not (status.get("attn.hook_z") == "live" and status.get("attn.hook_v") in ("live", "dead")):
        raise UsageError(
            "model",
            "its attention pattern cannot be edited (hook_pattern does not feed the output and "
            "hook_z/hook_v are not available)",
            "a model whose hook_pattern or hook_z is live",
        )
    scale, window = _calibrate(model, layer)
    cap, box = QKCapture(model, layer), {}

    def grab_v(v, hook):  # fires before z in every pass: a new pass starts
        box["v"], box["z_done"] = v, False

    def replace_z(z, hook):  # z: [batch, pos, head, d_head]
        q, k = cap.q.float(), cap.k.float()
        v = expand_kv(box["v"], q.shape[2]).float()
        A = attention_pattern(q, k, scale, window)
        clean_z = torch.einsum("bhqk,bkhd->bqhd", A, v)
        gap = float((clean_z - z.float()).abs().max()) / (1.0 + float(z.abs().max()))
        if gap > 1e-3:
            raise RuntimeError(
                f"pattern edit on layer {layer}: the recomputed attention does not reproduce the model's "
                f"own output (relative gap {gap:.1e}); the edit was not applied"
            )
        box["z_done"] = True
        return torch.einsum("bhqk,bkhd->bqhd", edit(A), v).to(z.dtype)

    def show_edit(p, hook):  # [batch, head, q, k]
        # hook_pattern fires after the output here: the hooks after this one (a reduction of the patterns) see the
        # pattern the head attended with, edit(A), as on a model whose hook_pattern feeds the output
        return edit(p) if box.get("z_done") else p

    return cap.hooks() + [(pre + "hook_v", grab_v), (pre + "hook_z", replace_z), (pre + "hook_pattern", show_edit)]
