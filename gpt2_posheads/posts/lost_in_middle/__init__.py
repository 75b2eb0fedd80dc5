"""Post 002, "Sparse attention 7: lost in the middle": stacked causal attention without positional embeddings
retrieves the first and the last tokens of its context and loses the middle. :func:`lost_in_middle` trains the post's
toy models and judges its claims (:mod:`.retrieval`; ``lost_in_middle(quick=True)``: a smoke run)."""

from .retrieval import THREE_LAYER_STEPS, lost_in_middle, lost_in_middle_grid

__all__ = ["THREE_LAYER_STEPS", "lost_in_middle", "lost_in_middle_grid"]
