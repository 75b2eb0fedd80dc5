"""Post 002, "Sparse attention 7: lost in the middle": :func:`lost_in_middle` (:mod:`.retrieval`)."""

from .retrieval import THREE_LAYER_STEPS, lost_in_middle, lost_in_middle_grid

__all__ = ["THREE_LAYER_STEPS", "lost_in_middle", "lost_in_middle_grid"]
