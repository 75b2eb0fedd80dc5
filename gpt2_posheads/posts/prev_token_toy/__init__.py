"""Post 000, "Sparse attention 4: previous token head": :func:`prev_token` (:mod:`.copying`)."""

from .copying import embedding_animation, prev_token, prev_token_grid

__all__ = ["embedding_animation", "prev_token", "prev_token_grid"]
