"""The TransformerLens engine: passes with hooks, the edits as hooks, and which hooks a model really fires.

**Passes** (:class:`HooksEngine`) stop right after the activation they need (:func:`run_hooked`'s ``stop_at``, an
exception raised from a hook: ``stop_at_layer`` differs between TransformerLens versions, the 4.x bridge dropping hooks
at the stop layer and ignoring ``stop_at_layer == n_layers``), skipping later blocks, the final norm and the
unembedding.

**Which hooks feed the model** (:func:`hook_status`). A hook name in ``model.hook_dict`` is no promise: on the 4.x
bridge (TL 4.3, random-weight models) Pythia and Llama never fire ``hook_pos_embed``, Pythia lists but never fires
``hook_rot_q``/``hook_rot_k``, and GPT-Neo and OPT fire ``hook_pattern`` only *after* the attention output is computed.
An intervention that silently does nothing would make a claim look "not held" when it was never tested, so every one
asks first. The probe runs once per model (cached until the weights change): one 8-token pass watching block
``min(1, n_layers - 1)`` and the embeddings, then one per hook with it edited, judged by the activation it feeds
(:data:`DOWNSTREAM`), a verdict on the plumbing, not the weights. A block hook that changes nothing there is probed in
the other blocks too (a hand-built model's inert layer hides the plumbing): it is ``live`` if it feeds in any block.

**Pattern edits** (:func:`pattern_edit_hooks`): a hook on ``hook_pattern`` where it feeds the output (GPT-2, Pythia,
Llama on the 4.x bridge); where it fires after the output (GPT-Neo, OPT) the edit goes through the head outputs:

    A = softmax(scale * q k^T + mask)      from this pass's queries and keys (rotated as the model rotates them)
    z' = edit(A) v                          replaces hook_z (the values per head, shared ones expanded)

with the scale and mask (causal, plus any attention window) calibrated once per model and layer
(:func:`~gpt2_posheads.model.engine.scale_from_pattern`), and every pass checking that ``A v`` reproduces the model's
own ``z`` before replacing it (a mismatch is an error). ``hook_pattern`` then shows ``edit(A)`` to the hooks after it,
so a reduction sees the pattern the head attended with on every model and engine."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal

import torch

from .engine import (
    SITES,
    Edit,
    Engine,
    Reduction,
    attention_pattern,
    attn_scale,
    expand_kv,
    keep_reads,
    layers_read,
    materialise,
    model_device,
    raw_scores_from_qk,
    read_kinds,
    replace_positions,
    rotate,
    scale_from_pattern,
    z_gap,
)
from .validation import UsageError


class _Stop(Exception):
    pass


def resid_hook_name(model, layer: int) -> str:
    """The residual stream entering block ``layer``; ``layer == n_layers`` is the final residual."""
    n = model.cfg.n_layers
    return f"blocks.{layer}.hook_resid_pre" if layer < n else f"blocks.{n - 1}.hook_resid_post"


def run_hooked(model, tokens: torch.Tensor, hooks: Sequence[tuple[str, Callable]], return_type="logits", stop_at=None):
    """``model`` on ``tokens`` with ``hooks`` ``[(hook_name, fn), ...]``, removed afterwards (the caller's stay); with
    ``stop_at``, the pass is abandoned right after that hook (``None`` returned)."""
    if stop_at is None:
        with model.hooks(list(hooks)):
            return model(tokens, return_type=return_type)

    def stop(x, hook):
        raise _Stop

    try:
        run_hooked(model, tokens, [*hooks, (stop_at, stop)], None)
    except _Stop:
        return None
    raise RuntimeError(f"hook {stop_at!r} never ran: is it a valid hook name for this model?")


HookState = Literal["live", "dead", "never fires", "absent"]
# each probed hook and the nearest activation that an edit of it must change
DOWNSTREAM = {
    "hook_pos_embed": "hook_resid_pre",
    "hook_embed": "hook_resid_pre",
    "hook_resid_pre": "hook_resid_post",
    "attn.hook_q": "attn.hook_pattern",
    "attn.hook_k": "attn.hook_pattern",
    "attn.hook_cos": "attn.hook_pattern",
    "attn.hook_v": "attn.hook_z",
    "attn.hook_attn_scores": "attn.hook_pattern",
    "attn.hook_pattern": "attn.hook_z",
    "attn.hook_z": "hook_attn_out",
}
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_EMBEDS = ("hook_pos_embed", "hook_embed")


def _name(model, suffix: str, layer: int | None = None) -> str:
    """Hook ``suffix`` in block ``layer`` (default: the probed block ``min(1, n_layers - 1)``); embeddings' as is."""
    if suffix in _EMBEDS:
        return suffix
    return f"blocks.{min(1, model.cfg.n_layers - 1) if layer is None else layer}.{suffix}"


def params_key(model) -> tuple:
    """What changes when a parameter is replaced, written in place, cast or moved: the key of per-model caches."""
    return tuple((p.data_ptr(), p._version, p.dtype, str(p.device)) for p in model.parameters())


def _watch(box: dict, name: str):
    return lambda x, hook: box.__setitem__(name, x.detach().clone())


def hook_status(model) -> dict[str, HookState]:
    """``{suffix: state}`` of the hooks in :data:`DOWNSTREAM` (block hooks as ``"attn.hook_pattern"``): ``live``
    (editing it changes the activation it feeds), ``dead`` (it fires, changing nothing after), ``never fires``,
    ``absent``."""
    key = params_key(model)
    entry = _CACHE.get(model)
    if entry is not None and entry[0] == key:
        return entry[1]
    toks = torch.arange(1, 9, device=model_device(model))[None] % model.cfg.d_vocab
    hooks = getattr(model, "hook_dict", {})
    present = {s: _name(model, s) for s in DOWNSTREAM if _name(model, s) in hooks}
    downstream = {s: _name(model, DOWNSTREAM[s], 0 if s in _EMBEDS else None) for s in present}
    fired: set[str] = set()
    clean: dict[str, torch.Tensor] = {}
    status: dict[str, HookState] = {}
    watch = [(n, lambda x, hook, s=s: fired.add(s)) for s, n in present.items()]
    watch += [(n, _watch(clean, n)) for n in sorted({n for n in downstream.values() if n in hooks})]
    with torch.inference_mode():
        run_hooked(model, toks, watch, None)
        for s in DOWNSTREAM:
            if s not in present:
                status[s] = "absent"
            elif s not in fired:
                status[s] = "never fires"
            elif downstream[s] not in clean:
                status[s] = "live"  # nothing downstream to watch on this model: trust the hook
            else:
                status[s] = "live" if _feeds(model, toks, present[s], downstream[s], clean[downstream[s]]) else "dead"
                if status[s] == "dead" and s.startswith("attn."):  # inert heads in the probed block hide the plumbing
                    others = (l for l in range(model.cfg.n_layers) if l != min(1, model.cfg.n_layers - 1))
                    pairs = ((_name(model, s, l), _name(model, DOWNSTREAM[s], l)) for l in others)
                    if any(a in hooks and b in hooks and _feeds(model, toks, a, b) for a, b in pairs):
                        status[s] = "live"
    _CACHE[model] = (key, status)
    return status


def _feeds(model, toks: torch.Tensor, name: str, downstream: str, clean: torch.Tensor | None = None) -> bool:
    """Whether scaling and shifting every entry of hook ``name`` (no plumbing that uses the value can ignore it)
    changes the activation at ``downstream`` (``clean``: its unedited value)."""
    if clean is None:
        box: dict[str, torch.Tensor] = {}
        run_hooked(model, toks, [(downstream, _watch(box, downstream))], None)
        clean = box[downstream]
    after: dict[str, torch.Tensor] = {}
    edit = lambda x, hook: x * 0.5 + 0.1 if x.is_floating_point() else x  # noqa: E731
    run_hooked(model, toks, [(name, edit), (downstream, _watch(after, downstream))], None)
    return float((after[downstream].float() - clean.float()).abs().max()) > 1e-6


def require_live(model, suffix: str, what: str) -> None:
    """A :class:`~.validation.UsageError` unless editing ``suffix`` changes what it feeds (``what``: the edit)."""
    state = hook_status(model).get(suffix, "absent")
    if state != "live":
        dead = "does not feed the activation after it (it fires after that is computed, or its weights ignore it)"
        words = {"dead": dead, "never fires": "never fires", "absent": "does not exist"}
        why = f"{what} has no effect on this model: its {suffix} {words[state]}"
        allowed = "a model whose hook feeds its computation"
        raise UsageError("model", why, allowed, "the intervention would change nothing")


PatternEdit = Callable[[torch.Tensor], torch.Tensor]  # [batch, head, q, k] -> [batch, head, q, k]
_CALIBRATION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _calibrate(model, layer: int) -> tuple[float, int | None]:
    """``(scale, window)`` of ``layer`` from a clean pass on up to 256 random tokens (``window``: the smallest
    query-key distance never attended across, ``None`` within the probe)."""
    per_model = _CALIBRATION.setdefault(model, {})
    if layer in per_model:
        return per_model[layer]
    n = min(model.cfg.n_ctx, 256)
    toks = torch.randint(0, model.cfg.d_vocab, (1, n), generator=torch.Generator().manual_seed(0))
    reads = {"q": [layer], "k": [layer], "pattern": [layer]}
    acts = HooksEngine(model).activations([toks.to(model_device(model))], reads, Reduction(keep_reads, dict))[layer]
    dot = raw_scores_from_qk(acts["q"], acts["k"], 1.0).cpu()
    scale, mask, err = scale_from_pattern(dot, acts["pattern"].float().cpu(), attn_scale(model.cfg, layer))
    if err > 1e-4:
        why = f"layer {layer}'s attention is not softmax(scale * q . k + mask) (off by {err:.1e})"
        allowed = "models whose pattern a hook can edit, or of that form"
        raise UsageError("model", why, allowed, "pattern edits cannot be made exact")
    q_idx, k_idx = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    inside = (k_idx <= q_idx)[None, None].expand_as(mask)
    far = (q_idx - k_idx)[None, None].expand_as(mask)[mask & inside]
    window = int(far.min()) if far.numel() else None
    per_model[layer] = (scale, window)
    return scale, window


def pattern_edit_hooks(model, layer: int, edit: PatternEdit) -> list[tuple[str, Callable]]:
    """TransformerLens hooks that make layer ``layer`` attend with ``edit(A)`` instead of its pattern ``A``
    ``[batch, head, q, k]`` (see the module doc). ``edit`` must not change ``A`` in place."""
    status = hook_status(model)
    pre = f"blocks.{layer}.attn."
    if status.get("attn.hook_pattern") == "live":
        return [(pre + "hook_pattern", lambda p, hook: edit(p))]
    if not (status.get("attn.hook_z") == "live" and status.get("attn.hook_v") in ("live", "dead")):
        why = "its attention pattern cannot be edited (hook_pattern does not feed the output and "
        why += "hook_z/hook_v are not available)"
        raise UsageError("model", why, "a model whose hook_pattern or hook_z is live")
    scale, window = _calibrate(model, layer)
    box: dict = {}
    cap = LayerRead(model, layer, {"q", "k"}, lambda layer, qk: box.update(qk))

    def grab_v(v, hook):  # fires before z in every pass: a new pass starts
        box["v"], box["z_done"] = v, False

    def replace_z(z, hook):  # z: [batch, pos, head, d_head]
        q, k = box["q"].float(), box["k"].float()
        v = expand_kv(box["v"], q.shape[2]).float()
        A = attention_pattern(q, k, scale, window)
        gap = float(z_gap(torch.einsum("bhqk,bkhd->bqhd", A, v), z))
        if gap > 1e-3:
            raise RuntimeError(
                f"pattern edit on layer {layer}: the recomputed attention does not reproduce the model's "
                f"own output (relative gap {gap:.1e}); the edit was not applied"
            )
        box["z_done"] = True
        return torch.einsum("bhqk,bkhd->bqhd", edit(A), v).to(z.dtype)

    def show_edit(p, hook):  # [batch, head, q, k]
        # hook_pattern fires after the output here: the hooks after this one (a reduction of the patterns) see the
        # pattern the head attended with, edit(A), as on a model whose hook_pattern feeds the output
        return edit(p) if box.get("z_done") else p

    return cap.hooks() + [(pre + "hook_v", grab_v), (pre + "hook_z", replace_z), (pre + "hook_pattern", show_edit)]


def hook_tuples(model, edits) -> list:
    """TransformerLens hooks ``[(hook_name, fn), ...]`` of ``edits`` (:class:`~gpt2_posheads.model.engine.Edit` s),
    in order, for ``model.run_with_hooks``."""
    return HooksEngine(model).bind(edits)


class HooksEngine(Engine):
    """TransformerLens hooks; edits become hooks (each bound once), run before the reduction's (a pattern edit on
    ``hook_pattern`` is what the reduction sees). A pass stops right after the last activation it needs
    (:func:`run_hooked`), unless the reduction takes logits. ``bf16``: under ``torch.autocast`` in bfloat16."""

    name = "hooks"
    sites = frozenset(SITES)

    def _bind(self, e: Edit) -> list:
        """The hooks of one checked edit; one whose hook may not feed the model first asks (:func:`require_live`)."""
        model = self.model
        if e.site == "pattern":  # exact on every model (through hook_z where hook_pattern does not feed the output)
            return [h for l in e.layers for h in pattern_edit_hooks(model, int(l), e.fn)]
        live = {"pos_embed": "hook_pos_embed", "resid_add": "hook_resid_pre", "z": "attn.hook_z"}.get(e.site)
        if live is not None:  # the hook each of these sites writes must feed the model's computation
            require_live(model, live, e.name)
        if e.site == "pos_embed":  # the rows W_pos becomes, from the model's own (float32, as load_w_pos reads it)
            table = e.fn(model.W_pos.detach().float().cpu()).to(model.W_pos.device)
            return [("hook_pos_embed", lambda x, hook: replace_positions(x, table))]
        if e.site == "z":
            return [(f"blocks.{int(l)}.attn.hook_z", lambda z, hook: e.fn(z)) for l in e.layers]
        value = e.fn(model).to(model_device(model))  # x: [batch, pos, d_model]

        def write(x: torch.Tensor, hook) -> torch.Tensor:
            return x + value[: x.shape[-2]].to(x.dtype) if e.site == "resid_add" else value.to(x.device, x.dtype)

        return [(resid_hook_name(model, int(l)), write) for l in e.layers]

    def _pass(self, batches, hooks, stop_at: str | None, progress, after=None) -> None:
        """Each batch with ``hooks``, abandoned after hook ``stop_at`` (``None``: the whole model), then ``after(index,
        tokens, logits)`` (logits ``None`` when abandoned)."""
        device = model_device(self.model)
        with torch.inference_mode():
            for i, toks in enumerate(self.batches(batches, progress)):
                toks = toks.to(device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
                    logits = run_hooked(self.model, toks, hooks, stop_at=stop_at)
                if after is not None:
                    after(i, toks, logits)

    def patterns(self, batches, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        layers, st = self.pattern_layers(reduction), reduction.state
        hooks = self.bind(edits) + [
            (f"blocks.{l}.attn.hook_pattern", lambda x, hook, l=l: reduction.step(st, l, x)) for l in layers
        ]
        if reduction.logits is not None:
            self._pass(batches, hooks, None, progress, lambda i, toks, logits: reduction.logits(st, toks, logits))
        else:
            self._pass(batches, hooks, f"blocks.{layers[-1]}.attn.hook_pattern", progress)
        return reduction.finish(st)

    def residuals(self, batches, layers, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        st, names = reduction.state, {l: resid_hook_name(self.model, l) for l in layers}
        hooks = self.bind(edits) + [(names[l], lambda x, hook, l=l: reduction.step(st, l, x)) for l in layers]
        self._pass(batches, hooks, names[max(layers)], progress)
        return reduction.finish(st)

    def activations(self, batches, reads, reduction, edits=(), progress=None) -> dict:
        batches = materialise(batches)
        st = reduction.state
        readers = [
            LayerRead(self.model, l, kinds, partial(reduction.step, st))
            for l, kinds in sorted(layers_read(self.model, reads).items())
        ]
        stop = max((r.stop for r in readers), key=lambda s: s[0])[1]

        def all_delivered(i: int, toks, logits) -> None:
            late = [r.layer for r in readers if r.delivered != i + 1]
            if late:  # a read that fires after the stop would be lost: say so instead of reducing less
                raise RuntimeError(f"layers {late}: not every read of {read_kinds(reads)} fired before {stop!r}")

        self._pass(batches, self.bind(edits) + [h for r in readers for h in r.hooks()], stop, progress, all_delivered)
        return reduction.finish(st)

    def run(self, tokens, edits=()) -> torch.Tensor:
        with torch.inference_mode():
            return run_hooked(self.model, tokens.to(model_device(self.model)), self.bind(edits))


class LayerRead:
    """One layer's reads (``kinds`` of :data:`~.engine.READS`), handed to ``deliver(layer, {kind: tensor})`` once all
    their hooks fired (bridges differ in the order), never half-read; queries and keys as the scores use them (rotated
    with the model's own ``hook_cos``/``hook_sin`` where it fires them, one key per query head). ``stop``: ``((layer,
    stage), hook)``, the latest hook it needs, in pass order."""

    def __init__(self, model, layer: int, kinds: set[str], deliver: Callable[[int, dict], None]):
        self.layer, self.kinds, self.deliver, self.delivered = layer, kinds, deliver, 0
        attn = f"blocks.{layer}.attn."
        self.names, self.box = {}, {}
        if kinds & {"q", "k"}:
            self.names.update(q=attn + "hook_q", k=attn + "hook_k")
            if hook_status(model).get("attn.hook_cos") in ("live", "dead"):
                self.names.update(cos=attn + "hook_cos", sin=attn + "hook_sin")
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
        if self.kinds & {"q", "k"}:
            q, k = self.box["q"], self.box["k"]
            if "cos" in self.box:
                q, k = (rotate(x, self.box["cos"], self.box["sin"]) for x in (q, k))
            acts.update((kind, x) for kind, x in zip("qk", (q, expand_kv(k, q.shape[2]))) if kind in self.kinds)
        self.box.clear()
        self.delivered += 1
        self.deliver(self.layer, acts)
