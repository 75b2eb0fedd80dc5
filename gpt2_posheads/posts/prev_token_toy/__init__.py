"""Post 000, "Sparse attention 4: previous token head": a previous-token head from positional embeddings in one
attention layer. :func:`prev_token` trains the post's toy models and judges its claims (:mod:`.copying`;
``prev_token(quick=True)``: a smoke run)."""

from .copying import embedding_animation, prev_token, prev_token_grid

__all__ = ["embedding_animation", "prev_token", "prev_token_grid"]
