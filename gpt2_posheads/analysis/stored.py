"""Stored activations in place of a model: the interface the analyses read.

An analysis that can answer from stored numbers (the ranking from stored diagonals, the extended positional
embeddings from stored matrices) accepts any object with these members instead of a model: its engine is then
:class:`~gpt2_posheads.model.engines.StoredEngine`, which answers the reductions that say how to read their result
off a store. The storage layer (:class:`gpt2_posheads.store.cache.PosheadsCache`) implements it; the protocol is
defined with the engines, in the model layer, so the layers stay one-way.
"""

from ..model.engine import StoredActivations

__all__ = ["StoredActivations"]
