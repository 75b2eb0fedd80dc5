"""Post 001, "Sparse attention 3: inefficiency of extracting similar content": one attention layer retrieving the
most similar token, and the distance kernels the post proposes. :func:`similar_content` trains the post's toy models
and judges its claims (:mod:`.similarity`; ``similar_content(quick=True)``: a smoke run)."""

from .similarity import similar_content, similar_content_grid

__all__ = ["similar_content", "similar_content_grid"]
