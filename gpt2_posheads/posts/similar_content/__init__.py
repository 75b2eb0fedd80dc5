"""Post 001, "Sparse attention 3: inefficiency of extracting similar content": :func:`similar_content`."""

from .similarity import similar_content, similar_content_grid

__all__ = ["similar_content", "similar_content_grid"]
