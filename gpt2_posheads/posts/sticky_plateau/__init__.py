"""Post 003, "Sparse attention 1: sticky plateau and rank collapse": :func:`sticky_plateau` (:mod:`.plateau`)."""

from .plateau import sticky_plateau, sticky_plateau_grid

__all__ = ["sticky_plateau", "sticky_plateau_grid"]
