"""One interface to every way this toolkit runs a model: TransformerLens hooks, the hook-free fast path, an nnsight
trace, and stored activations.

An analysis asks an :class:`Engine` for at most five things and never asks which engine it has:

* ``patterns(batches, reduction, edits)``: every layer's attention pattern ``[batch, head, q, k]`` (float32 rows
  that sum to 1, for every batch) handed to ``reduction.step(state, layer, pattern)``; returns
  ``reduction.finish(state)``. With ``reduction.logits`` the whole model runs and each batch's logits
  ``[batch, pos, d_vocab]`` go to ``reduction.logits(state, tokens, logits)`` in the same pass (patterns and what
  the model predicts from them, e.g. the induction score and the copying loss, without a second pass);
* ``residuals(batches, layers, reduction, edits)``: the residual stream entering each block of ``layers``
  ``[batch, pos, d_model]`` (``layer == n_layers``: the final residual, before the final norm) handed to
  ``reduction.step(state, layer, resid)``; returns ``reduction.finish(state)``. The residual is the one
  TransformerLens's processed model holds: on a LayerNorm model each row is centred over ``d_model``
  (TransformerLens centres every write to the stream), whichever engine ran;
* ``activations(batches, reads, reduction, edits)``: the activations ``reads`` names (``{kind: layers}``, kinds
  :data:`READS`: queries and keys as the scores use them, each head's output before ``W_O``, patterns, residuals)
  handed together, one dict per layer, to ``reduction.step(state, layer, {kind: tensor})``; returns
  ``reduction.finish(state)``. This is what an analysis that recomputes attention itself reads (raw pre-mask
  scores, a head's score profile, a path ablation); the residual entering a layer can be replaced first
  (:class:`ResidualWrite`, an edit like any other);
* ``run(tokens, edits)``: the logits ``[batch, pos, d_vocab]`` (to a constant per position: TransformerLens
  centres its unembedding, a Hugging Face model does not; softmax and KL see no difference);
* ``edits(intervention)``: an :class:`Intervened` intervention in the form this engine applies (TransformerLens
  ``fwd_hooks``, or nnsight :class:`~gpt2_posheads.model.traced.TracedEdit` s), for the ``edits`` argument above.

Why reductions, not activations: an nnsight trace may run on NDIF, far from here, and a pattern of a long prompt is
too big to bring back; so an analysis hands over a :class:`Reduction` (a small ``state`` dict and two pure functions)
that runs where the model runs, and only ``finish``'s small tensors come back. The local engines call the same two
functions on the same tensors, so an analysis is written once and gets the same numbers everywhere
(``tests/model/test_engines.py`` checks every analysis on every engine).

Why lazy inputs: ``batches`` may be a list of ``[batch, pos]`` token tensors or a function returning one. Stored
activations never run a model; they answer a reduction that says how to read its result off a store
(``Reduction.stored``), so the prompts (and the checks against the model's context that making them needs) are made
only by an engine that runs a model.

The implementations and :func:`~gpt2_posheads.model.engines.engine_for`, which picks one per call of an analysis,
are in :mod:`gpt2_posheads.model.engines`.

An operation that does not apply to an engine (running a store, editing it, bringing every token's residual back
from a trace, reading queries and keys off a trace or the fast path) raises :class:`EngineError` naming the engine
and the operation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, runtime_checkable

import torch
from tqdm.auto import tqdm

from .forward import resid_hook_name
from .traced import ENGINE as NNSIGHT
from .validation import check_int_range

STORED = "stored"
ENGINES = ("auto", "fast", "hooks", NNSIGHT, STORED)

Batches = Sequence[torch.Tensor] | Callable[[], Sequence[torch.Tensor]]
Step = Callable[[dict, int, Any], None]
LogitsStep = Callable[[dict, torch.Tensor, torch.Tensor], None]

# What ``activations`` reads at a layer (shapes per batch):
#   "resid"   [batch, pos, d_model]        the residual entering the block (layer n_layers: the final residual)
#   "q", "k"  [batch, pos, head, d_head]   queries and keys as the scores use them: q . k * attn_scale is the score
#                                          (rotated with the model's own cos/sin on a rotary model; one key per query
#                                          head under grouped-query attention)
#   "z"       [batch, pos, head, d_head]   each head's attention-weighted values; the head writes z W_O
#   "pattern" [batch, head, q, k]          the attention pattern
READS = ("resid", "q", "k", "z", "pattern")


class EngineError(ValueError):
    """An operation this engine cannot do (``engine``, ``operation``: what was asked)."""

    def __init__(self, engine: str, operation: str, why: str, hint: str = ""):
        self.engine, self.operation = engine, operation
        super().__init__(f"the {engine} engine cannot {operation}: {why}" + (f"; {hint}" if hint else ""))


@dataclass
class Reduction:
    """What a pass keeps of each layer's activation, as a small state and two pure functions.

    ``step(state, layer, x)`` folds one layer's activation of one batch into ``state`` (it must not keep ``x``
    itself: local engines reuse its buffer for the next layer); ``finish(state)`` turns the state into the
    ``{name: tensor}`` result. Under nnsight both run where the model runs (shipped by value) and only ``finish``'s
    tensors come back. ``stored(store)``: the same result read off stored activations (``None``: a store cannot
    answer it). ``bulk``: what the state keeps per token, if anything (e.g. every prompt's residual stream); an
    engine that would have to ship it back from where the model runs refuses it. ``layers``: the only layers whose
    patterns ``step`` reads (``None``: every layer); an engine may skip the others and stop after the last.
    ``logits(state, tokens, logits)``: for ``patterns``, each batch's logits ``[batch, pos, d_vocab]`` with its tokens
    ``[batch, pos]`` (both on the model's device), after that batch's patterns (``None``: the pass stops after the
    last pattern). Under ``activations``, ``step``'s third argument is the layer's ``{kind: tensor}`` reads.
    """

    step: Step
    finish: Callable[[dict], dict]
    state: dict = field(default_factory=dict)
    stored: Callable[[Any], dict] | None = None
    bulk: str = ""
    layers: Sequence[int] | None = None
    logits: LogitsStep | None = None


@runtime_checkable
class StoredActivations(Protocol):
    """Stored activations in place of a model: ``diagonals`` ``[n_layers, n_heads, n_offsets]`` (per-diagonal
    attention masses, key 0 left out) and ``ext_pos(layer)`` ``[n_ctx, d_model]`` (the extended positional embedding
    at ``layer``, centred over all ``n_ctx`` positions). :class:`~gpt2_posheads.store.cache.PosheadsCache` is one."""

    @property
    def diagonals(self) -> torch.Tensor: ...

    def ext_pos(self, layer: int) -> torch.Tensor: ...


class Intervened(Protocol):
    """An intervention as engines apply it (:class:`~gpt2_posheads.analysis.interventions.Intervention`): ``name``,
    ``bind(model)`` → TransformerLens ``fwd_hooks``, ``traced`` (``None``, or ``traced(model)`` → traced edits)."""

    name: str
    bind: Callable[[Any], list]
    traced: Callable[[Any], list] | None


def _write(value: torch.Tensor, resid: torch.Tensor, hook) -> torch.Tensor:
    return value.to(resid.device, resid.dtype)


@dataclass(eq=False)
class ResidualWrite:
    """An edit that replaces the residual stream entering block ``layer`` by ``value`` ``[batch, pos, d_model]``
    (the batch it runs on must have that shape): what a head would compute from a residual the model never made
    (a path ablation asks a head for its queries and keys with one upstream output taken out of its input). Blocks
    below ``layer`` still run; their result is discarded. An :class:`Intervened`, so ``engine.edits`` gives its
    form: TransformerLens hooks; it has no nnsight form (the trace's edits add to the stream, they do not replace
    it)."""

    layer: int
    value: torch.Tensor
    name: str = "a residual write"
    traced: Callable[[Any], list] | None = None

    def bind(self, model) -> list:
        check_int_range("layer", self.layer, 0, model.cfg.n_layers)
        return [(resid_hook_name(model, self.layer), partial(_write, self.value))]


class Engine(Protocol):
    """What an analysis may ask of a model (see the module doc for shapes and meaning)."""

    name: str
    model: Any

    def patterns(
        self, batches: Batches, reduction: Reduction, edits: Sequence = (), progress: str | None = None
    ) -> dict:
        """``reduction.finish`` after ``reduction.step(state, layer, pattern [batch, head, q, k])`` for every layer
        and batch (and ``reduction.logits(state, tokens, logits)`` after each batch, when set: the whole model runs);
        ``progress``: a bar with this label over the batches (where the batches run here)."""
        ...

    def residuals(
        self,
        batches: Batches,
        layers: Sequence[int],
        reduction: Reduction,
        edits: Sequence = (),
        progress: str | None = None,
    ) -> dict:
        """``reduction.finish`` after ``reduction.step(state, layer, resid [batch, pos, d_model])`` for each of
        ``layers`` (sorted, ``0..n_layers``) and batch; blocks after the last layer need not run."""
        ...

    def activations(
        self,
        batches: Batches,
        reads: Mapping[str, Iterable[int]],
        reduction: Reduction,
        edits: Sequence = (),
        progress: str | None = None,
    ) -> dict:
        """``reduction.finish`` after ``reduction.step(state, layer, {kind: tensor})`` for every layer ``reads``
        names (``{kind: layers}``, kinds :data:`READS`) and batch, the layer's reads together; the pass stops after
        the last read."""
        ...

    def run(self, tokens: torch.Tensor, edits: Sequence = ()) -> torch.Tensor:
        """Logits ``[batch, pos, d_vocab]`` of ``tokens`` ``[batch, pos]`` under ``edits``."""
        ...

    def edits(self, intervention: Intervened) -> list:
        """``intervention`` as this engine's edits."""
        ...


def materialise(batches: Batches) -> Sequence[torch.Tensor]:
    return batches() if callable(batches) else batches


def progress_bar(batches: Sequence[torch.Tensor], progress: str | None):
    return tqdm(batches, desc=progress, disable=progress is None)


def pattern_layers(model, reduction: Reduction) -> list[int]:
    return sorted(range(model.cfg.n_layers) if reduction.layers is None else set(reduction.layers))


def only_layers(layers: Sequence[int], step: Step, state: dict, layer: int, x: torch.Tensor) -> None:
    if layer in layers:
        step(state, layer, x)


def layers_read(model, reads: Mapping[str, Iterable[int]]) -> dict[int, set[str]]:
    """``{layer: kinds}`` of ``reads`` ``{kind: layers}``, checked: kinds of :data:`READS`, layers ``0..n_layers-1``
    (``0..n_layers`` for ``"resid"``), at least one read."""
    n, out = model.cfg.n_layers, {}
    for kind, layers in reads.items():
        if kind not in READS:
            raise ValueError(f"cannot read {kind!r}: the reads are {READS}")
        for l in layers:
            out.setdefault(check_int_range(f"{kind} layer", l, 0, n if kind == "resid" else n - 1), set()).add(kind)
    if not out:
        raise ValueError("no activation to read")
    return out


def keep_reads(state: dict, layer: int, acts: dict) -> None:
    """The ``step`` of an ``activations`` reduction that keeps each layer's reads as they come (one batch's worth): with
    ``finish=dict`` the result is ``{layer: {kind: tensor}}``."""
    state[layer] = acts


def read_kinds(reads: Mapping[str, Iterable[int]]) -> str:
    return "activations (" + ", ".join(sorted(reads)) + ")"
