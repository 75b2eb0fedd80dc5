"""Stored activations in place of a model: the interface the analyses read, defined where they live.

An analysis that can answer from stored numbers (the ranking from stored diagonals, the extended
positional embeddings from stored matrices) accepts any object with these members instead of a model.
The storage layer (:class:`gpt2_posheads.store.cache.PosheadsCache`) implements it; nothing here imports
the storage layer, so the layers stay one-way.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class StoredActivations(Protocol):
    """What a store must offer: ``diagonals`` ``[n_layers, n_heads, n_offsets]`` (per-diagonal attention
    masses, key 0 left out) and ``ext_pos(layer)`` ``[n_ctx, d_model]`` (the extended positional
    embedding at ``layer``, centred over all ``n_ctx`` positions)."""

    @property
    def diagonals(self) -> torch.Tensor: ...

    def ext_pos(self, layer: int) -> torch.Tensor: ...
