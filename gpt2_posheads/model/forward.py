"""Forward passes that stop as soon as the activation they need has been seen.

``stop_at_layer`` differs between TransformerLens versions (the 4.x bridge drops hooks at the stop
layer and ignores ``stop_at_layer == n_layers``), so early exit is done here with an exception raised
from a hook: everything after the last needed activation — later blocks, the final LayerNorm and the
unembedding, which is the costliest matmul of a small model — is skipped, in TL 3.x and 4.x alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


class _Stop(Exception):
    pass


def _raise_stop(x, hook):
    raise _Stop


def resid_hook_name(model, layer: int) -> str:
    """The residual stream entering block ``layer``; ``layer == n_layers`` is the final residual."""
    n = model.cfg.n_layers
    return f"blocks.{layer}.hook_resid_pre" if layer < n else f"blocks.{n - 1}.hook_resid_post"


def run_until(model, tokens: torch.Tensor, fwd_hooks: Sequence[tuple[str, Callable]], stop_at: str) -> None:
    """Run ``model`` on ``tokens`` with ``fwd_hooks`` and abandon the pass right after hook ``stop_at``."""
    try:
        model.run_with_hooks(tokens, fwd_hooks=list(fwd_hooks) + [(stop_at, _raise_stop)], return_type=None)
    except _Stop:
        return
    raise RuntimeError(f"hook {stop_at!r} never ran: is it a valid hook name for this model?")
