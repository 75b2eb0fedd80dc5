"""The engines behind the one interface of :mod:`gpt2_posheads.model.engine`, and the one place that picks one.

The engines are TransformerLens hooks (:class:`HooksEngine`), the hook-free fast path (:class:`FastEngine`), an
nnsight trace (:class:`TracedEngine`) and stored activations (:class:`StoredEngine`); :func:`engine_for` picks the
implementation once per call of an analysis:

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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from .attention import QKCapture
from .engine import (
    ENGINES,
    STORED,
    Engine,
    EngineError,
    LogitsStep,
    Reduction,
    Step,
    StoredActivations,
    layers_read,
    materialise,
    only_layers,
    pattern_layers,
    progress_bar,
    read_kinds,
)
from .fastpath import Workspace, fast_forward
from .forward import resid_hook_name, run_until
from .precision import resolve_bf16
from .tokens import model_device
from .traced import ENGINE as NNSIGHT
from .traced import TracedEdit, is_traced, run_traced
from .validation import UsageError, check_model


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

    def _pass(self, batches, hooks, stop_at: str | None, progress, after=None) -> None:
        """Each batch run with ``hooks`` (the edits first), abandoned right after hook ``stop_at``, or the whole model
        when ``stop_at`` is ``None``; then ``after(index, tokens, logits)`` (logits ``None`` when abandoned)."""
        device = model_device(self.model)
        with torch.inference_mode():
            for i, toks in enumerate(progress_bar(batches, progress)):
                toks = toks.to(device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
                    if stop_at is None:
                        logits = self.model.run_with_hooks(toks, fwd_hooks=hooks)
                    else:
                        logits = run_until(self.model, toks, hooks, stop_at=stop_at)
                if after is not None:
                    after(i, toks, logits)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        layers, st = pattern_layers(self.model, reduction), reduction.state
        hooks = list(edits) + [
            (f"blocks.{l}.attn.hook_pattern", partial(_hook_step, reduction.step, st, l)) for l in layers
        ]
        if reduction.logits is not None:
            self._pass(batches, hooks, None, progress, lambda i, toks, logits: reduction.logits(st, toks, logits))
        else:
            self._pass(batches, hooks, f"blocks.{layers[-1]}.attn.hook_pattern", progress)
        return reduction.finish(st)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        st, names = reduction.state, {l: resid_hook_name(self.model, l) for l in layers}
        hooks = list(edits) + [(names[l], partial(_hook_step, reduction.step, st, l)) for l in layers]
        self._pass(batches, hooks, names[max(layers)], progress)
        return reduction.finish(st)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        st = reduction.state
        readers = [
            _LayerRead(self.model, l, kinds, partial(reduction.step, st))
            for l, kinds in sorted(layers_read(self.model, reads).items())
        ]
        stop = max((r.stop for r in readers), key=lambda s: s[0])[1]

        def all_delivered(i: int, toks, logits) -> None:
            late = [r.layer for r in readers if r.delivered != i + 1]
            if late:  # a read that fires after the stop would be lost: say so instead of reducing less
                raise RuntimeError(f"layers {late}: not every read of {read_kinds(reads)} fired before {stop!r}")

        self._pass(batches, list(edits) + [h for r in readers for h in r.hooks()], stop, progress, all_delivered)
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
        batches = materialise(batches)
        if reduction.logits is not None:
            self._refuse("hand logits to a reduction", "the fast path has no unembedding")
            return self.hooks.patterns(batches, reduction, edits, progress)
        fast = self._fast(edits)
        if fast is None:
            return self.hooks.patterns(batches, reduction, edits, progress)
        device, ws, st = model_device(self.model), Workspace(), reduction.state
        layers = pattern_layers(self.model, reduction)
        on = (
            partial(reduction.step, st)
            if reduction.layers is None
            else partial(only_layers, layers, reduction.step, st)
        )
        with torch.inference_mode():
            for toks in progress_bar(batches, progress):
                fast.patterns(toks.to(device), on, ws, last=layers[-1])
        return reduction.finish(st)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        fast = self._fast(edits)
        if fast is None:
            return self.hooks.residuals(batches, layers, reduction, edits, progress)
        device, st = model_device(self.model), reduction.state
        with torch.inference_mode():
            for toks in progress_bar(batches, progress):
                for l, resid in fast.residuals(toks.to(device), layers).items():
                    reduction.step(st, l, resid)
        return reduction.finish(st)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        self._refuse(
            f"read {read_kinds(reads)}", "it computes patterns and residuals in its own fused way, nothing else"
        )
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
    :func:`~gpt2_posheads.model.traced.run_traced` trace per call, the reduction running inside the trace; edits
    are :class:`~gpt2_posheads.model.traced.TracedEdit` s. Patterns are computed from the model's own queries and
    keys (the pattern an edit leaves is the one the model attends with)."""

    name = NNSIGHT

    def __init__(self, model):
        self.model = model

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        batches = list(materialise(batches))
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
            list(materialise(batches)),
            reduction.state,
            reduction.finish,
            on_resid=reduction.step,
            resid_layers=list(layers),
            edits=list(edits),
        )

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        raise EngineError(
            self.name,
            f"read {read_kinds(reads)}",
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

    def _answer(self, reduction: Reduction, operation: str, edits) -> dict:
        self._no_edits(edits)
        if reduction.stored is None:
            raise EngineError(
                self.name,
                operation,
                "a store holds per-diagonal masses and extended positional embeddings, not activations of new inputs",
                "pass the model instead",
            )
        return reduction.stored(self.model)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, "reduce attention patterns", edits)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, "reduce residual streams", edits)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        return self._answer(reduction, f"read {read_kinds(reads)}", edits)

    def run(self, tokens, edits=()) -> torch.Tensor:
        raise EngineError(self.name, "run a model", "stored activations hold no model", "pass the model instead")

    def edits(self, intervention) -> list:
        self._no_edits([intervention], f"apply an intervention ({intervention.name})")

    def _no_edits(self, edits, operation: str = "apply edits") -> None:
        if edits:
            raise EngineError(
                self.name, operation, "stored activations were measured once, unedited", "pass the model instead"
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
