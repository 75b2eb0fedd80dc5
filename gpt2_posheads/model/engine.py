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

:func:`engine_for` picks the implementation once per call of an analysis:

==============  ==========================================================================================
``"auto"``      the fast path for passes without edits when it reproduces the model (verified on first use,
                :func:`~gpt2_posheads.model.fastpath.fast_forward`) and the model carries no hooks of the
                caller's (it would skip them), else TransformerLens hooks
``"fast"``      the fast path or an error (it applies no edits and runs no hook)
``"hooks"``     TransformerLens hooks
``"nnsight"``   an nnsight-traced model (:class:`~gpt2_posheads.model.traced.TracedModel`), here or on NDIF;
                a traced model gets this engine whatever is asked for ``"auto"``
``"stored"``    stored activations (:class:`StoredActivations`); a store gets this engine under ``"auto"``
==============  ==========================================================================================

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

from .attention import QKCapture
from .fastpath import Workspace, fast_forward
from .forward import resid_hook_name, run_until
from .precision import resolve_bf16
from .tokens import model_device
from .traced import ENGINE as NNSIGHT
from .traced import TracedEdit, is_traced, run_traced
from .validation import UsageError, check_int_range, check_model

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


def _materialise(batches: Batches) -> Sequence[torch.Tensor]:
    return batches() if callable(batches) else batches


def _bar(batches: Sequence[torch.Tensor], progress: str | None):
    return tqdm(batches, desc=progress, disable=progress is None)


def _pattern_layers(model, reduction: Reduction) -> list[int]:
    return sorted(range(model.cfg.n_layers) if reduction.layers is None else set(reduction.layers))


def _only(layers: Sequence[int], step: Step, state: dict, layer: int, x: torch.Tensor) -> None:
    if layer in layers:
        step(state, layer, x)


def _layers_read(model, reads: Mapping[str, Iterable[int]]) -> dict[int, set[str]]:
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


def _kinds(reads: Mapping[str, Iterable[int]]) -> str:
    return "activations (" + ", ".join(sorted(reads)) + ")"


# ----------------------------------------------------------------------------------------------------------------
# TransformerLens hooks
# ----------------------------------------------------------------------------------------------------------------
def _hook_step(step: Step, state: dict, layer: int, x: torch.Tensor, hook) -> None:
    step(state, layer, x)


class HooksEngine:
    """TransformerLens hooks on ``blocks.{l}.attn.hook_pattern`` and ``hook_resid_pre`` (and, for ``activations``,
    ``hook_q``/``hook_k``/``hook_cos``/``hook_sin``/``hook_z``); edits are ``fwd_hooks``, run before the reduction's
    hooks (a pattern edit on ``hook_pattern`` is what the reduction sees). A pass stops right after the last
    activation it needs (:func:`~gpt2_posheads.model.forward.run_until`), unless the reduction takes logits.
    ``bf16``: under ``torch.autocast`` in bfloat16."""

    name = "hooks"

    def __init__(self, model, bf16: bool = False):
        self.model, self.bf16 = model, bf16

    def _pass(self, batches, named_steps, stop_at: str, edits, progress) -> None:
        device = model_device(self.model)
        hooks = list(edits) + named_steps
        with torch.inference_mode():
            for toks in _bar(batches, progress):
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
                    run_until(self.model, toks.to(device), hooks, stop_at=stop_at)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        batches = _materialise(batches)
        layers, st = _pattern_layers(self.model, reduction), reduction.state
        steps = [(f"blocks.{l}.attn.hook_pattern", partial(_hook_step, reduction.step, st, l)) for l in layers]
        if reduction.logits is not None:
            self._logits_pass(batches, steps, reduction, edits, progress)
        else:
            self._pass(batches, steps, f"blocks.{layers[-1]}.attn.hook_pattern", edits, progress)
        return reduction.finish(st)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        batches = _materialise(batches)
        st, names = reduction.state, {l: resid_hook_name(self.model, l) for l in layers}
        steps = [(names[l], partial(_hook_step, reduction.step, st, l)) for l in layers]
        self._pass(batches, steps, names[max(layers)], edits, progress)
        return reduction.finish(st)

    def _logits_pass(self, batches, named_steps, reduction, edits, progress) -> None:
        device = model_device(self.model)
        hooks = list(edits) + named_steps
        with torch.inference_mode():
            for toks in _bar(batches, progress):
                toks = toks.to(device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
                    logits = self.model.run_with_hooks(toks, fwd_hooks=hooks)
                reduction.logits(reduction.state, toks, logits)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        batches = _materialise(batches)
        st = reduction.state
        readers = [
            _LayerRead(self.model, l, kinds, partial(reduction.step, st))
            for l, kinds in sorted(_layers_read(self.model, reads).items())
        ]
        stop = max((r.stop for r in readers), key=lambda s: s[0])[1]
        hooks = list(edits) + [h for r in readers for h in r.hooks()]
        device = model_device(self.model)
        with torch.inference_mode():
            for i, toks in enumerate(_bar(batches, progress)):
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
                    run_until(self.model, toks.to(device), hooks, stop_at=stop)
                late = [r.layer for r in readers if r.delivered != i + 1]
                if late:  # a read that fires after the stop would be lost: say so instead of reducing less
                    raise RuntimeError(f"layers {late}: not every read of {_kinds(reads)} fired before {stop!r}")
        return reduction.finish(st)

    def run(self, tokens, edits=()) -> torch.Tensor:
        with torch.inference_mode():
            return self.model.run_with_hooks(tokens.to(model_device(self.model)), fwd_hooks=list(edits))

    def edits(self, intervention) -> list:
        return intervention.bind(self.model)


class _LayerRead:
    """One layer's reads in a hooked pass, handed to ``deliver(layer, {kind: tensor})`` once every hook they need
    has fired: the order differs between bridges (some fire ``hook_pattern`` after the block's output), so nothing
    is handed over half-read. Queries and keys come through :class:`~gpt2_posheads.model.attention.QKCapture`
    (rotated, one key per query head). ``stop``: ``((layer, stage), hook)``, the latest hook this layer needs, in
    the order the pass reaches them (the residual entering a block, its queries and keys, its head outputs, the end
    of the block for the pattern)."""

    def __init__(self, model, layer: int, kinds: set[str], deliver: Callable[[int, dict], None]):
        self.layer, self.kinds, self.deliver, self.delivered = layer, kinds, deliver, 0
        attn = f"blocks.{layer}.attn."
        self.qk = QKCapture(model, layer) if kinds & {"q", "k"} else None
        self.box = self.qk.box if self.qk is not None else {}  # one dict: QKCapture reads its q, k, cos, sin here
        self.names = dict(self.qk.names) if self.qk is not None else {}
        if "resid" in kinds:
            self.names["resid"] = resid_hook_name(model, layer)
        if "z" in kinds:
            self.names["z"] = attn + "hook_z"
        if "pattern" in kinds:  # to the end of the block: some bridges fire hook_pattern after the output
            self.names["pattern"] = attn + "hook_pattern"
            self.stop = ((layer, 3), f"blocks.{layer}.hook_resid_post")
        elif kinds & {"q", "k", "z"}:
            self.stop = ((layer, 2), attn + "hook_z")
        else:
            self.stop = ((layer, 0), self.names["resid"])

    def hooks(self) -> list:
        return [(name, partial(self._grab, key)) for key, name in self.names.items()]

    def _grab(self, key: str, x: torch.Tensor, hook) -> None:
        self.box[key] = x.detach()
        if len(self.box) < len(self.names):
            return
        acts = {k: self.box[k] for k in ("resid", "z", "pattern") if k in self.kinds}
        if "q" in self.kinds:
            acts["q"] = self.qk.q
        if "k" in self.kinds:
            acts["k"] = self.qk.k
        self.box.clear()
        self.delivered += 1
        self.deliver(self.layer, acts)


# ----------------------------------------------------------------------------------------------------------------
# The hook-free fast path
# ----------------------------------------------------------------------------------------------------------------
class FastEngine:
    """The verified hook-free GPT-2 pass (:mod:`~gpt2_posheads.model.fastpath`) for patterns and residuals without
    edits. It applies no edits, computes no logits and hands over no queries, keys or head outputs: with ``strict``
    (``engine="fast"``) a pass with edits, a reduction of logits or ``activations`` is an error; otherwise
    (``"auto"``) such a pass, ``run`` and a model the fast path does not reproduce go to TransformerLens hooks (the
    fast path says once why it stepped aside)."""

    name = "fast"

    def __init__(self, model, strict: bool = False, bf16: bool = False):
        self.model, self.strict, self.bf16 = model, strict, bf16
        self.hooks = HooksEngine(model, bf16)

    def _fast(self, edits):
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        return fast_forward(self.model, "fast" if self.strict else "auto", dtype, has_hooks=bool(edits))

    def _refuse(self, operation: str, why: str) -> None:
        if self.strict:
            raise EngineError(self.name, operation, why, "use engine='auto' or 'hooks'")

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        batches = _materialise(batches)
        if reduction.logits is not None:
            self._refuse("hand logits to a reduction", "the fast path has no unembedding")
            return self.hooks.patterns(batches, reduction, edits, progress)
        fast = self._fast(edits)
        if fast is None:
            return self.hooks.patterns(batches, reduction, edits, progress)
        device, ws, st = model_device(self.model), Workspace(), reduction.state
        layers = _pattern_layers(self.model, reduction)
        on = partial(reduction.step, st) if reduction.layers is None else partial(_only, layers, reduction.step, st)
        with torch.inference_mode():
            for toks in _bar(batches, progress):
                fast.patterns(toks.to(device), on, ws, last=layers[-1])
        return reduction.finish(st)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        batches = _materialise(batches)
        fast = self._fast(edits)
        if fast is None:
            return self.hooks.residuals(batches, layers, reduction, edits, progress)
        device, st = model_device(self.model), reduction.state
        with torch.inference_mode():
            for toks in _bar(batches, progress):
                for l, resid in fast.residuals(toks.to(device), layers).items():
                    reduction.step(st, l, resid)
        return reduction.finish(st)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        self._refuse(f"read {_kinds(reads)}", "it computes patterns and residuals in its own fused way, nothing else")
        return self.hooks.activations(batches, reads, reduction, edits, progress)

    def run(self, tokens, edits=()) -> torch.Tensor:
        return self.hooks.run(tokens, edits)  # the fast path has no unembedding

    def edits(self, intervention) -> list:
        return self.hooks.edits(intervention)  # applied by the hooked pass (under "fast": refused there)


# ----------------------------------------------------------------------------------------------------------------
# nnsight traces
# ----------------------------------------------------------------------------------------------------------------
def _keep_logits(state: dict, logits: torch.Tensor) -> None:
    state["logits"] = logits


def _finish_logits(state: dict) -> dict:
    return {"logits": state["logits"]}


@dataclass
class _WithTokens:
    """``on_logits(state, logits)`` of :func:`~gpt2_posheads.model.traced.run_traced` as ``step(state, tokens,
    logits)``: the trace hands over each batch's logits in the order of ``batches``, so a count finds the tokens
    (shipped with the request, where the model runs)."""

    step: LogitsStep
    batches: list
    seen: int = 0

    def __call__(self, state: dict, logits: torch.Tensor) -> None:
        toks = self.batches[self.seen]
        self.seen += 1
        self.step(state, toks.to(logits.device), logits)


class TracedEngine:
    """An nnsight-traced model (:class:`~gpt2_posheads.model.traced.TracedModel`), here or on NDIF: one
    :func:`~gpt2_posheads.model.traced.run_traced` session per call, the reduction running inside the trace; edits
    are :class:`~gpt2_posheads.model.traced.TracedEdit` s. Patterns are computed from the model's own queries and
    keys (the pattern an edit leaves is the one the model attends with)."""

    name = NNSIGHT

    def __init__(self, model):
        self.model = model

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        batches = list(_materialise(batches))
        on_logits = _WithTokens(reduction.logits, batches) if reduction.logits is not None else None
        return run_traced(
            self.model,
            batches,
            reduction.state,
            reduction.finish,
            on_pattern=reduction.step,
            edits=list(edits),
            on_logits=on_logits,
        )

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        if reduction.bulk:
            raise EngineError(
                self.name,
                f"keep {reduction.bulk}",
                "it would bring back every token's residual stream from where the model runs",
                "ask for the reduced result, or use the TransformerLens engine",
            )
        return run_traced(
            self.model,
            list(_materialise(batches)),
            reduction.state,
            reduction.finish,
            on_resid=reduction.step,
            resid_layers=list(layers),
            edits=list(edits),
        )

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        raise EngineError(
            self.name,
            f"read {_kinds(reads)}",
            "a trace hands a reduction each layer's pattern and residual only",
            "use the TransformerLens engine (gpt2_posheads.load_model)",
        )

    def run(self, tokens, edits=()) -> torch.Tensor:
        return run_traced(self.model, [tokens], {}, _finish_logits, on_logits=_keep_logits, edits=list(edits))["logits"]

    def edits(self, intervention) -> list[TracedEdit]:
        if intervention.traced is None:
            raise UsageError("engine", f"{intervention.name} has no nnsight form", "use the TransformerLens engine")
        return intervention.traced(self.model)


# ----------------------------------------------------------------------------------------------------------------
# Stored activations
# ----------------------------------------------------------------------------------------------------------------
class StoredEngine:
    """Stored activations (:class:`StoredActivations`): they answer the reductions that say how to read their
    result off a store (``Reduction.stored``) and nothing else: no pattern or residual of new inputs, no run, no
    edit."""

    name = STORED

    def __init__(self, store):
        self.model = store

    def _answer(self, reduction: Reduction, operation: str) -> dict:
        if reduction.stored is None:
            raise EngineError(
                self.name,
                operation,
                "a store holds per-diagonal masses and extended positional embeddings, not activations of new inputs",
                "pass the model instead",
            )
        return reduction.stored(self.model)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        self._no_edits(edits)
        return self._answer(reduction, "reduce attention patterns")

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        self._no_edits(edits)
        return self._answer(reduction, "reduce residual streams")

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        self._no_edits(edits)
        return self._answer(reduction, f"read {_kinds(reads)}")

    def run(self, tokens, edits=()) -> torch.Tensor:
        raise EngineError(self.name, "run a model", "stored activations hold no model", "pass the model instead")

    def edits(self, intervention) -> list:
        raise EngineError(
            self.name,
            f"apply an intervention ({intervention.name})",
            "stored activations were measured once, unedited",
            "pass the model instead",
        )

    def _no_edits(self, edits) -> None:
        if edits:
            raise EngineError(
                self.name, "apply edits", "stored activations were measured once, unedited", "pass the model instead"
            )


# ----------------------------------------------------------------------------------------------------------------
def engine_for(model, engine: str = "auto", bf16: bool = False, with_edits: bool = False) -> Engine:
    """The :class:`Engine` that runs ``model`` (a TransformerLens model, a traced model, or stored activations).

    ``engine``: one of :data:`ENGINES` (module doc). ``bf16``: matmuls in bfloat16 where the CPU or GPU has native
    support (else float32, said once: :func:`~gpt2_posheads.model.precision.resolve_bf16`); a trace runs the model
    in its own dtype. ``with_edits``: the analysis compares passes with and without edits, so under ``"auto"`` both
    run through the engine that applies the edits (TransformerLens hooks): their difference is then the edits' alone,
    with no difference between two ways of computing the clean pass in it.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not one of {ENGINES}")
    if isinstance(model, StoredActivations):
        if engine not in ("auto", STORED):
            raise ValueError(
                f"stored activations fix engine (they were measured once): engine={engine!r} needs the model itself"
            )
        return StoredEngine(model)
    if is_traced(model):
        if engine not in ("auto", NNSIGHT):
            raise ValueError(f"engine={engine!r} runs a TransformerLens model; this model is traced by nnsight")
        return TracedEngine(model)
    if engine in (NNSIGHT, STORED):
        raise ValueError(
            f"engine={engine!r} needs "
            + ("a traced model (gpt2_posheads.model.traced.load_traced)" if engine == NNSIGHT else "stored activations")
            + "; this is a TransformerLens model"
        )
    check_model(model)  # a plain transformers model (no ``cfg``) is named here, before any work
    bf16 = resolve_bf16(bf16, model_device(model))
    if engine == "hooks" or (engine == "auto" and with_edits):
        return HooksEngine(model, bf16)
    return FastEngine(model, strict=engine == "fast", bf16=bf16)
