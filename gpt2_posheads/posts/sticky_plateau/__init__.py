"""Post 003, "Sparse attention 1: sticky plateau and rank collapse": one attention layer copying the current token.
:func:`sticky_plateau` trains the post's toy models and judges its claims (:mod:`.plateau`;
``sticky_plateau(quick=True)``: a smoke run in seconds)."""

from .plateau import sticky_plateau, sticky_plateau_grid

__all__ = ["sticky_plateau", "sticky_plateau_grid"]
