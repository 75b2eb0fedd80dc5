"""The one home of the attention-score scale: ``scores = (q . k) * attn_scale(cfg, layer)``."""
from __future__ import annotations

import math


def attn_scale(cfg, layer: int) -> float:
    """Multiplier of ``q . k`` in ``layer``: ``1 / attn_scale`` (TransformerLens's default ``attn_scale``
    is ``sqrt(d_head)``; the 4.x bridge stores ``-1`` for "default"), ``1`` when ``use_attn_scale`` is off,
    and a further ``1 / (layer + 1)`` with ``scale_attn_by_inverse_layer_idx`` (GPT-2's option, used by
    some checkpoints)."""
    if not getattr(cfg, "use_attn_scale", True):
        scale = 1.0
    else:
        given = float(getattr(cfg, "attn_scale", -1.0) or -1.0)
        scale = 1.0 / (given if given > 0 else math.sqrt(cfg.d_head))
    if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
        scale /= layer + 1
    return scale
